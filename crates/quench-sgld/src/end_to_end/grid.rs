//! The SGLD grid end to end: the configurations, the equivalence of its execution paths
//! (batched, masked, compacted, one chain at a time), and what the chains learn.

use quench_device::Precision;
use quench_kernels::QuenchBackend;
use std::path::PathBuf;

use crate::{
    DatasetKind, Execution, GridConfig, GridData, GridResult, LossScale, NoiseSource, SgldError,
    run_grid, run_grid_shard, shard_chains,
};
use quench_scale::Shard;
use quench_train::settings::Valid;

fn config_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../configs/sgld")
        .join(name)
}

fn run<B: QuenchBackend>(
    config: &GridConfig,
    execution: Execution,
    device: &B::Device,
) -> GridResult {
    let data = GridData::load(config).unwrap();
    run_grid::<B>(
        &Valid::new(config.clone()).unwrap(),
        &data,
        &execution,
        device,
    )
    .unwrap()
}

#[test]
fn configs_hold_the_documented_grids() {
    let full = GridConfig::load(&config_path("synth-full.toml")).unwrap();
    assert_eq!(*full, GridConfig::default());
    let test = GridConfig::load(&config_path("synth-test.toml")).unwrap();
    assert_eq!(
        (test.betas.as_slice(), test.repetitions),
        (&[0.0, 1.0, 10.0][..], 2)
    );
    assert_eq!(test.max_epochs(), 50);
    let mnist = GridConfig::load(&config_path("mnist-full.toml")).unwrap();
    assert_eq!(mnist.dataset, DatasetKind::Mnist);
    assert_eq!(
        mnist.betas,
        vec![0.0, 1_000.0, 3_000.0, 5_000.0, 10_000.0, 20_000.0]
    );
    assert_eq!(mnist.epochs, vec![1, 500, 500, 500, 1_000, 1_000]);
    assert_eq!(
        (mnist.repetitions, mnist.batch_size, mnist.mnist.per_class),
        (5, 128, 5_000)
    );
    let mnist_test = GridConfig::load(&config_path("mnist-test.toml")).unwrap();
    assert_eq!((mnist_test.repetitions, mnist_test.max_epochs()), (2, 50));

    let bad = std::env::temp_dir().join(format!("sgld-bad-{}.toml", std::process::id()));
    std::fs::write(
        &bad,
        "betas = [0, 1]\nepochs = [1, 2]\na0 = [0.1, 0.1]\nbatch = 3\n",
    )
    .unwrap();
    let err = GridConfig::load(&bad).unwrap_err().to_string();
    assert!(err.contains("sgld-bad") && err.contains("batch"), "{err}");
    assert_eq!(full.loss, LossScale::Unit);
    std::fs::write(&bad, "loss = \"raw\"\n").unwrap();
    assert_eq!(GridConfig::load(&bad).unwrap().loss, LossScale::Raw);
    std::fs::write(&bad, "loss = \"nats\"\n").unwrap();
    let err = GridConfig::load(&bad).unwrap_err().to_string();
    assert!(err.contains("nats") && err.contains("raw"), "{err}");
    std::fs::write(&bad, "betas = [0, 1]\nepochs = [1]\na0 = [0.1, 0.1]\n").unwrap();
    let err = GridConfig::load(&bad).unwrap_err().to_string();
    assert!(
        err.contains("sgld-bad") && err.contains("`epochs`"),
        "{err}"
    );
    std::fs::remove_file(bad).unwrap();
}

fn assert_same_chains(a: &GridResult, b: &GridResult, what: &str) {
    let d = a.max_chain_difference(b);
    assert!(d < 1e-5, "{what}: chains differ by {d}\n{a}\n{b}");
}

quench_kernels::device_test! {
    fn every_execution_path_runs_the_same_chains<B>(device) {
        let grid = GridConfig::mixed_lengths();
        let run_with = |execution| run::<B>(&grid, execution, device);
        // With host noise every chain draws from its own stream, so the paths must agree
        // exactly (up to float reassociation): a masked chain must stop at its own epoch
        // count, a compacted program must keep each chain's data, order and noise, and
        // resident and streamed data must give the same batches.
        let alone = run_with(Execution::ORIGINAL);
        let host = Execution {
            noise: NoiseSource::Host,
            ..Execution::BATCHED
        };
        let masked = Execution {
            compact: false,
            resident_data: false,
            ..host
        };
        assert_same_chains(&alone, &run_with(host), "batched, compacted, resident");
        assert_same_chains(&alone, &run_with(masked), "batched, masked, streamed");
        // Counter-based noise is per chain too: the fused step (on the CPU the host kernel,
        // which draws the noise itself; elsewhere the hand-derived gradients as tensor ops)
        // follows the autodiff step of each chain alone.
        let counter_alone = Execution {
            noise: NoiseSource::Device,
            ..Execution::ORIGINAL
        };
        assert_same_chains(
            &run_with(counter_alone),
            &run_with(Execution::BATCHED),
            "fused step, batched",
        );
        // The hot chains moved away from their initialisation; the cold ones barely.
        let [cold, _, hot] = [0, 1, 2].map(|k| &alone.betas[k]);
        assert!(hot.train_loss.mean < cold.train_loss.mean - 0.02, "{alone}");
    }

    fn hot_chains_learn_synth_and_the_bound_covers_the_gap<B>(device) {
        // The test-mode grid's hottest beta, 10, was hot on the loss in nats; on the unit loss
        // (4x smaller at l_max = 4) the same chains need beta 40.
        let grid = GridConfig {
            repetitions: 4,
            betas: vec![0.0, 1.0, 40.0],
            ..GridConfig::load(&config_path("synth-test.toml"))
                .unwrap()
                .into_inner()
        };
        let result = run::<B>(&grid, Execution::BATCHED, device);
        assert_eq!(result.chains.len(), 12);
        assert!(result.data.starts_with("SYNTH"), "{}", result.data);
        let [cold, tepid, hot] = [0, 1, 2].map(|k| &result.betas[k]);
        // beta 0 and 1 run at a0 = 1e-7: the network is its random initialisation, a coin
        // flip on labels balanced by the teacher's symmetry.
        for b in [cold, tepid] {
            assert!(b.test_error.mean > 0.3, "{result}");
        }
        // 50 epochs at beta 40 learn the separable teacher.
        assert!(
            hot.test_error.mean < 0.3 && hot.train_error.mean < 0.2,
            "{result}"
        );
        assert_eq!(cold.bound.kl, 0.0);
        assert!(hot.bound.kl > 0.0);
        for b in &result.betas {
            assert!(b.bound.gap > b.loss_gap.mean, "beta {}: {result}", b.beta);
        }
    }

    fn a_precision_the_device_cannot_run_is_refused<B>(device) {
        let grid = Valid::new(GridConfig::mixed_lengths()).unwrap();
        let data = GridData::load(&grid).unwrap();
        let bf16 = Execution {
            precision: Precision::Bf16,
            ..Execution::BATCHED
        };
        let err = run_grid::<B>(&grid, &data, &bf16, device).unwrap_err();
        assert!(matches!(err, SgldError::Device(_)), "{err}");
    }

    fn the_shards_of_every_rank_together_are_the_grid_chain_for_chain<B>(device) {
        let grid = Valid::new(GridConfig::mixed_lengths()).unwrap();
        let data = GridData::load(&grid).unwrap();
        let whole = run::<B>(&grid, Execution::BATCHED, device);
        for ranks in [2, 3, 7] {
            let mut chains = Vec::new();
            let mut dealt = Vec::new();
            for rank in 0..ranks {
                let shard = Shard { rank, ranks };
                dealt.extend(shard_chains(&grid, shard));
                chains.extend(
                    run_grid_shard::<B>(&grid, &data, &Execution::BATCHED, shard, device)
                        .unwrap(),
                );
            }
            assert_eq!(dealt.len(), grid.chains(), "{ranks} ranks");
            let sharded = GridResult::new(&grid, &data, chains);
            // Each chain's seeds, data order and noise are its own, and each member is computed
            // alone (by the host kernels on the CPU, by batched tensor ops whose kernels do
            // not mix members elsewhere): bit for bit, not merely close.
            assert_eq!(sharded.chains, whole.chains, "{ranks} ranks");
        }
    }
}
