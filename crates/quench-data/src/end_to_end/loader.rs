//! The loader's guarantees: every sample once per epoch, an order fixed by seed and epoch
//! alone, members with their own shuffles, and threads joined on drop. They hold on every
//! device: each test runs on the tests' device (`quench_kernels::testing`).

use std::sync::Arc;

use crate::{DataError, Dataset, Loader, LoaderConfig, Mode};
use proptest::prelude::*;
use quench_kernels::QuenchOps;
use quench_kernels::readback::{to_host_f32, to_host_i64};

const SERIAL: Mode = Mode::Streaming {
    num_workers: 0,
    prefetch: 1,
    staging: false,
};

/// `n` samples of shape `[2]`; sample `i` has label `first + i` and features
/// `(label, -label)`, so every row of a batch says which sample it is.
fn numbered(n: usize, first: i64) -> Arc<Dataset> {
    let labels: Vec<i64> = (first..first + n as i64).collect();
    let features = labels.iter().flat_map(|&l| [l as f32, -l as f32]).collect();
    Arc::new(Dataset::new(features, labels, vec![2]).unwrap())
}

fn config(batch_size: usize, shuffle: bool, drop_last: bool, mode: Mode) -> LoaderConfig {
    LoaderConfig {
        batch_size,
        shuffle,
        drop_last,
        mode,
    }
}

fn loader<B: QuenchOps>(
    datasets: &[Arc<Dataset>],
    seeds: &[u64],
    config: &LoaderConfig,
    device: &B::Device,
) -> Loader<B> {
    Loader::new(datasets.to_vec(), seeds, config, device).unwrap()
}

/// The labels of every batch of `epoch`, `[batch][member][row]`, after checking that the
/// features travelled with them.
fn epoch_labels<B: QuenchOps>(loader: &mut Loader<B>, epoch: u64) -> Vec<Vec<Vec<i64>>> {
    let members = loader.members();
    let batches: Vec<_> = loader.epoch(epoch).collect();
    assert_eq!(batches.len(), loader.batches());
    batches
        .into_iter()
        .map(|batch| {
            let [m, rows, width] = batch.features.dims();
            assert_eq!((m, width), (members, 2));
            assert_eq!(batch.labels.dims(), [members, rows]);
            let labels = to_host_i64(batch.labels);
            let features = to_host_f32(batch.features);
            let expected: Vec<f32> = labels.iter().flat_map(|&l| [l as f32, -l as f32]).collect();
            assert_eq!(features, expected);
            labels.chunks(rows).map(<[i64]>::to_vec).collect()
        })
        .collect()
}

/// Member `member`'s labels over a whole epoch, in order.
fn member_stream(epoch: &[Vec<Vec<i64>>], member: usize) -> Vec<i64> {
    epoch
        .iter()
        .flat_map(|batch| batch[member].clone())
        .collect()
}

quench_kernels::device_test! {
    fn each_epoch_serves_every_sample_once_in_an_order_workers_cannot_change<B>(device) {
        proptest!(ProptestConfig::with_cases(48), |(
            n in 1usize..50,
            batch_size in 1usize..12,
            shuffle: bool,
            drop_last: bool,
            members in 1usize..4,
            num_workers in 0usize..4,
            prefetch in 1usize..4,
            staging: bool,
            abandon_after in 0usize..3,
            seed: u64,
            epoch in 0u64..1000,
        )| {
            prop_assume!(!drop_last || batch_size <= n);
            let data = [numbered(n, 0)];
            let seeds: Vec<u64> = (0..members as u64).map(|m| seed.wrapping_add(m)).collect();
            let load = |mode| {
                loader::<B::InnerBackend>(
                    &data,
                    &seeds,
                    &config(batch_size, shuffle, drop_last, mode),
                    device,
                )
            };
            let mut reference = load(SERIAL);
            let mut threaded = load(Mode::Streaming { num_workers, prefetch, staging });
            let mut resident = load(Mode::Resident);
            // An epoch abandoned part-way must leave nothing behind for the next one.
            threaded.epoch(epoch + 7).take(abandon_after).for_each(drop);
            for epoch in [epoch, epoch + 1] {
                let expected = epoch_labels(&mut reference, epoch);
                prop_assert_eq!(&epoch_labels(&mut threaded, epoch), &expected);
                prop_assert_eq!(&epoch_labels(&mut resident, epoch), &expected);
                let served = n - if drop_last { n % batch_size } else { 0 };
                for member in 0..members {
                    let mut seen = member_stream(&expected, member);
                    prop_assert_eq!(seen.len(), served);
                    if !shuffle {
                        prop_assert_eq!(&seen, &(0..served as i64).collect::<Vec<_>>());
                    }
                    seen.sort_unstable();
                    seen.dedup();
                    prop_assert_eq!(seen.len(), served, "a sample came twice");
                }
            }
        });
    }

    fn batches_have_a_member_axis_and_a_short_last_batch<B>(device) {
        let data = [numbered(10, 0)];
        let mut keeping =
            loader::<B::InnerBackend>(&data, &[1, 2, 3], &config(4, true, false, SERIAL), device);
        let shapes: Vec<_> = keeping.epoch(0).map(|b| b.features.dims()).collect();
        assert_eq!(shapes, vec![[3, 4, 2], [3, 4, 2], [3, 2, 2]]);
        let (features, labels) = keeping.epoch(0).next().unwrap().flatten();
        assert_eq!((features.dims(), labels.dims()), ([12, 2], [12]));
        let mut dropping =
            loader::<B::InnerBackend>(&data, &[1], &config(4, true, true, SERIAL), device);
        assert_eq!(dropping.batches(), 2);
        assert_eq!(dropping.epoch(0).count(), 2);
    }

    fn each_member_shuffles_as_a_lone_run_with_its_seed<B>(device) {
        let data = [numbered(40, 0)];
        let seeds = [11, 12, 13];
        let mut together = loader::<B::InnerBackend>(
            &data,
            &seeds,
            &config(8, true, false, Mode::Resident),
            device,
        );
        let epoch = epoch_labels(&mut together, 3);
        let streams: Vec<_> = (0..3).map(|m| member_stream(&epoch, m)).collect();
        assert_ne!(streams[0], streams[1]);
        assert_ne!(streams[1], streams[2]);
        for (member, &seed) in seeds.iter().enumerate() {
            let mut alone =
                loader::<B::InnerBackend>(&data, &[seed], &config(8, true, false, SERIAL), device);
            assert_eq!(
                member_stream(&epoch_labels(&mut alone, 3), 0),
                streams[member]
            );
        }
    }

    fn members_can_have_their_own_data_sets<B>(device) {
        let data: Vec<_> = (0..3).map(|m| numbered(20, 1000 * m)).collect();
        let modes = [SERIAL, Mode::Resident];
        for mode in modes {
            let mut loader =
                loader::<B::InnerBackend>(&data, &[5, 5, 5], &config(6, true, false, mode), device);
            let epoch = epoch_labels(&mut loader, 0);
            for member in 0..3 {
                let stream = member_stream(&epoch, member);
                let shifted: Vec<i64> = stream.iter().map(|l| l - 1000 * member as i64).collect();
                // Same seed, same shuffle; only the data differs.
                assert_eq!(shifted, member_stream(&epoch, 0), "{mode:?}");
            }
        }
    }

    fn the_order_changes_with_the_epoch_and_repeats_with_the_seed<B>(device) {
        let data = [numbered(64, 0)];
        let cfg = config(16, true, false, SERIAL);
        let mut a = loader::<B::InnerBackend>(&data, &[42], &cfg, device);
        let mut b = loader::<B::InnerBackend>(&data, &[42], &cfg, device);
        let mut c = loader::<B::InnerBackend>(&data, &[43], &cfg, device);
        let first = epoch_labels(&mut a, 0);
        assert_eq!(first, epoch_labels(&mut b, 0));
        assert_ne!(first, epoch_labels(&mut a, 1));
        assert_ne!(first, epoch_labels(&mut c, 0));
    }

    fn dropping_the_loader_mid_epoch_joins_its_threads<B>(device) {
        let data = numbered(100, 0);
        for staging in [false, true] {
            let mode = Mode::Streaming {
                num_workers: 3,
                prefetch: 2,
                staging,
            };
            let mut loader = loader::<B::InnerBackend>(
                std::slice::from_ref(&data),
                &[1, 2],
                &config(5, true, false, mode),
                device,
            );
            assert!(Arc::strong_count(&data) > 1);
            let mut epoch = loader.epoch(0);
            epoch.next().unwrap();
            drop(epoch);
            drop(loader);
            // The threads held the data set; joined, they have let go of it.
            assert_eq!(Arc::strong_count(&data), 1, "staging {staging}");
        }
    }

    fn staged_batches_are_the_callers_over_many_epochs_of_wide_samples<B>(device) {
        // Wide samples and many batches in flight: the staging thread's page-locked buffers
        // are reused often. Each batch is read as it arrives, as training does.
        const WIDTH: usize = 128;
        let n = 600;
        let labels: Vec<i64> = (0..n as i64).collect();
        let features = (0..n * WIDTH).map(|i| i as f32).collect();
        let data = [Arc::new(Dataset::new(features, labels, vec![WIDTH]).unwrap())];
        let staged = Mode::Streaming {
            num_workers: 2,
            prefetch: 2,
            staging: true,
        };
        let read = |loader: &mut Loader<B::InnerBackend>, epoch| -> Vec<f32> {
            loader
                .epoch(epoch)
                .flat_map(|batch| {
                    let mut values = to_host_f32(batch.features);
                    values.extend(to_host_i64(batch.labels).into_iter().map(|l| l as f32));
                    values
                })
                .collect()
        };
        let mut serial =
            loader::<B::InnerBackend>(&data, &[3, 4], &config(32, true, false, SERIAL), device);
        let mut threaded =
            loader::<B::InnerBackend>(&data, &[3, 4], &config(32, true, false, staged), device);
        for epoch in 0..8 {
            let expected = read(&mut serial, epoch);
            assert_eq!(expected.len(), 2 * n * (WIDTH + 1));
            assert!(read(&mut threaded, epoch) == expected, "epoch {epoch}");
        }
    }

    fn a_leaked_epoch_neither_blocks_nor_leaks_into_the_next<B>(device) {
        let data = [numbered(60, 0)];
        let mode = Mode::Streaming {
            num_workers: 2,
            prefetch: 1,
            staging: true,
        };
        let mut threaded =
            loader::<B::InnerBackend>(&data, &[9], &config(4, true, false, mode), device);
        let mut serial =
            loader::<B::InnerBackend>(&data, &[9], &config(4, true, false, SERIAL), device);
        let mut leaked = threaded.epoch(0);
        leaked.next().unwrap();
        std::mem::forget(leaked);
        assert_eq!(epoch_labels(&mut threaded, 1), epoch_labels(&mut serial, 1));
        std::mem::forget(threaded.epoch(2));
        drop(threaded);
        assert_eq!(
            Arc::strong_count(&data[0]),
            2,
            "only `data` and `serial` hold it"
        );
    }

    fn refuses_configurations_that_cannot_work<B>(device) {
        let data = numbered(10, 0);
        let try_new = |datasets: Vec<Arc<Dataset>>, seeds: &[u64], config: LoaderConfig| {
            Loader::<B::InnerBackend>::new(datasets, seeds, &config, device).err()
        };
        let streaming = |prefetch| Mode::Streaming {
            num_workers: 1,
            prefetch,
            staging: false,
        };
        let cases = [
            try_new(vec![data.clone()], &[1], config(0, true, false, SERIAL)),
            try_new(vec![data.clone()], &[1], config(11, true, true, SERIAL)),
            try_new(
                vec![data.clone()],
                &[1],
                config(2, true, false, streaming(0)),
            ),
            try_new(vec![data.clone()], &[], config(2, true, false, SERIAL)),
            try_new(vec![], &[1], config(2, true, false, SERIAL)),
            try_new(
                vec![data.clone(); 2],
                &[1, 2, 3],
                config(2, true, false, SERIAL),
            ),
            try_new(
                vec![data.clone(), numbered(9, 0)],
                &[1, 2],
                config(2, true, false, SERIAL),
            ),
            try_new(vec![numbered(0, 0)], &[1], config(2, true, false, SERIAL)),
        ];
        for (i, err) in cases.into_iter().enumerate() {
            assert!(
                matches!(err, Some(DataError::Invalid { .. })),
                "case {i}: {err:?}"
            );
        }
        assert!(try_new(vec![data], &[1], config(10, true, true, streaming(1))).is_none());
    }
}
