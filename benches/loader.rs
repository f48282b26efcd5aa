//! Loader throughput in samples per second: one epoch of a Fashion-MNIST-sized data set
//! (10,000 samples of 28 x 28) in batches of 128, streamed with 0, 1 or 2 workers, prefetch
//! 1-4 and staging off or on, against the device-resident mode. The data is generated in
//! memory, so no data file is needed.

// criterion_group! defines a public function that cannot carry a doc comment.
#![allow(missing_docs)]

quench_support::aligned_allocator!();

use std::hint::black_box;
use std::sync::Arc;

use burn::backend::NdArray;
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use quench_data::{Dataset, Loader, LoaderConfig, Mode};

type B = NdArray<f32>;

const SAMPLES: usize = 10_000;
const SIDE: usize = 28;
const BATCH: usize = 128;

/// `SAMPLES` images of `SIDE x SIDE` grey levels in [0, 1] and labels 0-9; the values only
/// need to be cheap to make and not all alike.
fn images() -> Arc<Dataset> {
    let pixels = SIDE * SIDE;
    let features = (0..SAMPLES * pixels)
        .map(|i: usize| (i.wrapping_mul(2_654_435_761) % 256) as f32 / 255.0)
        .collect();
    let labels = (0..SAMPLES).map(|i| (i % 10) as i64).collect();
    Arc::new(Dataset::new(features, labels, vec![SIDE, SIDE]).expect("consistent sizes"))
}

/// Times whole epochs of a loader in `mode`; threads are started once, outside the timing.
fn bench_mode(c: &mut Criterion, data: &Arc<Dataset>, id: BenchmarkId, mode: Mode) {
    let config = LoaderConfig {
        batch_size: BATCH,
        shuffle: true,
        drop_last: false,
        mode,
    };
    let mut loader = Loader::<B>::new(vec![Arc::clone(data)], &[0], &config, &Default::default())
        .expect("valid loader");
    let mut group = c.benchmark_group("loader_epoch_10k_28x28_b128");
    group.throughput(Throughput::Elements(SAMPLES as u64));
    group.sample_size(10);
    let mut epoch = 0;
    group.bench_function(id, |b| {
        b.iter(|| {
            epoch += 1;
            loader.epoch(epoch).for_each(|batch| {
                black_box(batch);
            });
        });
    });
    group.finish();
}

fn loader_throughput(c: &mut Criterion) {
    let data = images();
    for num_workers in 0..=2 {
        for prefetch in 1..=4 {
            for staging in [false, true] {
                // Without workers or staging there is no queue for `prefetch` to size.
                if num_workers == 0 && !staging && prefetch > 1 {
                    continue;
                }
                let name = if staging {
                    "streaming_staged"
                } else {
                    "streaming"
                };
                let id = BenchmarkId::new(name, format!("w{num_workers}_p{prefetch}"));
                let mode = Mode::Streaming {
                    num_workers,
                    prefetch,
                    staging,
                };
                bench_mode(c, &data, id, mode);
            }
        }
    }
    bench_mode(
        c,
        &data,
        BenchmarkId::new("resident", "gather"),
        Mode::Resident,
    );
}

criterion_group!(benches, loader_throughput);
criterion_main!(benches);
