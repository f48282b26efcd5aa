//! The classifier: batched seeds against one-at-a-time runs, data placement, per-member
//! early stopping with best weights, learning, and refusals, on the tests' device
//! (`quench_kernels::testing`).

use crate::classifier::{ClassifierConfig, ClassifierOutcome, Execution};
use crate::{Batching, QrngError};
use burn::tensor::DType;
use quench_data::{Dataset, Mode, SourceModel, synthetic_qrng};
use quench_device::Precision;
use quench_kernels::testing::on_cpu;
use quench_train::settings::Valid;

/// Three sources whose probabilities of a one are 1/2 - `bias`, 1/2 and 1/2 + `bias`; with
/// bias 0.25 a small network separates them well (the Bayes accuracy from the count of ones
/// is about 99 %).
fn separable(lines_per_source: usize, bias: f64) -> Dataset {
    let sources = [
        SourceModel {
            bias: -bias,
            correlation: 0.0,
            drift: 0.0,
        },
        SourceModel {
            bias: 0.0,
            correlation: 0.0,
            drift: 0.0,
        },
        SourceModel {
            bias,
            correlation: 0.0,
            drift: 0.0,
        },
    ];
    synthetic_qrng(&sources, lines_per_source, 100, 4)
        .unwrap()
        .to_dataset()
}

/// `config` checked, then trained: refused settings come back as the error.
fn train<B: quench_kernels::QuenchBackend>(
    data: &Dataset,
    config: &ClassifierConfig,
    execution: &Execution,
    device: &B::Device,
) -> Result<ClassifierOutcome, QrngError> {
    crate::classifier::train_classifier::<B>(data, &Valid::new(config.clone())?, execution, device)
}

fn execution(batching: Batching, loader: Mode, fused: bool) -> Execution {
    Execution {
        batching,
        loader,
        precision: Precision::F32,
        fused,
    }
}

const STREAMED: Mode = Mode::Streaming {
    num_workers: 0,
    prefetch: 1,
    staging: false,
};

quench_kernels::device_test! {
    fn batched_seeds_with_early_stopping_train_exactly_as_they_do_alone<B>(device) {
        let data = separable(100, 0.15);
        // Without dropout the runs are deterministic, so a batched member must follow its lone
        // run step for step, including learning-rate cuts and stopping at its own epoch.
        // Batched and lone reductions round differently (1e-7), and training amplifies that
        // over many epochs, so the runs are kept short by impatient schedules.
        let config = ClassifierConfig {
            seeds: vec![89, 90, 91, 92, 93, 94],
            dropout: 0.0,
            max_epochs: 12,
            early_stopping_patience: 2,
            plateau: crate::schedule::PlateauConfig {
                patience: 0,
                ..Default::default()
            },
            batch_size: 16,
            ..ClassifierConfig::default()
        };
        // The reference: the original's way, one seed at a time through autodiff. Batched, with
        // autodiff and with the hand-derived step, each must follow it. The hand-derived step is
        // the CPU's alone: elsewhere `fused` falls back to autodiff, which would only run twice.
        let alone = train::<B>(
            &data,
            &config,
            &execution(Batching::OneAtATime, STREAMED, false),
            device,
        )
        .unwrap();
        let forms: &[bool] = if on_cpu() { &[false, true] } else { &[false] };
        for &fused in forms {
            let batched = train::<B>(
                &data,
                &config,
                &execution(Batching::Members, Mode::Resident, fused),
                device,
            )
            .unwrap();
            follows(&batched, &alone, fused);
        }
    }
}

/// Checks that a batched run `batched` follows the lone runs `alone` member by member.
fn follows(batched: &ClassifierOutcome, alone: &ClassifierOutcome, fused: bool) {
    let mut epochs: Vec<usize> = batched.seeds.iter().map(|s| s.epochs).collect();
    let last = *epochs.iter().max().unwrap();
    let total: usize = epochs.iter().sum();
    epochs.sort_unstable();
    epochs.dedup();
    assert!(
        epochs.len() >= 3,
        "members stop at their own epochs: {epochs:?}"
    );
    assert!(
        batched
            .seeds
            .iter()
            .any(|s| s.history.iter().any(|h| h.lr < 1e-3))
    );
    assert_eq!(
        batched.member_epochs,
        6 * last,
        "a batched program runs until its last member stops"
    );
    assert_eq!(alone.member_epochs, total);
    let d = batched.max_train_loss_difference(alone);
    assert!(
        d < 1e-3,
        "fused {fused}: training losses differ by {d} (relative)"
    );
    for (b, a) in batched.seeds.iter().zip(&alone.seeds) {
        assert_eq!(
            (b.seed, b.epochs, b.best_epoch),
            (a.seed, a.epochs, a.best_epoch),
            "fused {fused}"
        );
        assert!(
            (b.test_accuracy - a.test_accuracy).abs() < 1e-6,
            "{b:?}\n{a:?}"
        );
        for (x, y) in b.history.iter().zip(&a.history) {
            // A validation sample on the decision boundary may flip with the rounding: one
            // of the 48 is allowed.
            let one_sample = 1.0 / 48.0 + 1e-6;
            assert!(
                (x.validation_accuracy - y.validation_accuracy).abs() <= one_sample,
                "{b:?}\n{a:?}"
            );
            assert_eq!(x.lr, y.lr);
        }
    }
}

quench_kernels::device_test! {
    /// The autodiff form (the original's way, and the tensor path a GPU runs) repeats bit for
    /// bit wherever the heap puts its buffers. burn-ndarray's in-place SIMD reciprocal (in the
    /// gradient of the loss's logarithm) splits a buffer at vector boundaries into estimated and
    /// exact elements; before Quench's aligned allocator (`quench_support::allocator`) the split,
    /// and so the gradients, followed the buffers' addresses from one run to the next (issue
    /// 19). On other devices the buffers are the device's, and the runs must repeat all the
    /// same.
    fn autodiff_runs_repeat_bit_for_bit_wherever_the_heap_puts_their_buffers<B>(device) {
        let data = separable(500, 0.1);
        let config = ClassifierConfig {
            seeds: vec![89, 90],
            max_epochs: 2,
            batch_size: 128,
            ..ClassifierConfig::default()
        };
        for batching in [Batching::OneAtATime, Batching::Members] {
            let run = || {
                train::<B>(
                    &data,
                    &config,
                    &execution(batching, STREAMED, false),
                    device,
                )
                .unwrap()
            };
            let first = run();
            // Blocks of odd sizes, held through the second run, move every later buffer.
            let shift: Vec<Vec<u8>> = (1..48).map(|n| vec![n; 16 * n as usize + 8]).collect();
            let second = run();
            assert_eq!(first, second, "{batching:?}");
            assert!(shift.iter().all(|b| b[0] > 0));
        }
    }

    fn the_fused_step_with_dropout_is_the_same_batched_alone_and_run_after_run<B>(device) {
        // The fused step is a host kernel, which only the CPU runs; elsewhere `fused` falls
        // back to autodiff, whose masks come from the backend's one generator and so differ
        // between batched and lone runs.
        if !on_cpu() {
            return;
        }
        let data = separable(60, 0.15);
        let config = ClassifierConfig {
            seeds: vec![89, 90, 91, 92],
            max_epochs: 4,
            batch_size: 8,
            ..ClassifierConfig::default()
        };
        assert!(config.dropout > 0.0);
        let run = |batching| {
            train::<B>(
                &data,
                &config,
                &execution(batching, Mode::Resident, true),
                device,
            )
            .unwrap()
        };
        let first = run(Batching::Members);
        // Each member's masks come from its own counter-based stream, and its arithmetic does
        // not depend on the other members: bit for bit.
        assert_eq!(first, run(Batching::Members), "run after run");
        assert_eq!(
            first.seeds,
            run(Batching::OneAtATime).seeds,
            "batched and alone"
        );
        let losses: Vec<f64> = first
            .seeds
            .iter()
            .map(|s| s.history[0].train_loss)
            .collect();
        assert!(
            losses.windows(2).any(|w| w[0] != w[1]),
            "seeds differ: {losses:?}"
        );
        // Dropout is in effect: without it the same seeds train differently.
        let plain = ClassifierConfig {
            dropout: 0.0,
            ..config.clone()
        };
        let without = train::<B>(
            &data,
            &plain,
            &execution(Batching::Members, Mode::Resident, true),
            device,
        )
        .unwrap();
        assert_ne!(first.seeds[0].history, without.seeds[0].history);
    }

    fn keeps_the_best_validation_epoch_and_stops_after_its_patience<B>(device) {
        let data = separable(100, 0.25);
        let config = ClassifierConfig {
            seeds: vec![7, 8],
            max_epochs: 60,
            early_stopping_patience: 5,
            batch_size: 32,
            ..ClassifierConfig::default()
        };
        let result = train::<B>(&data, &config, &Execution::default(), device).unwrap();
        for seed in &result.seeds {
            let accuracies: Vec<f64> = seed.history.iter().map(|h| h.validation_accuracy).collect();
            let best = accuracies.iter().copied().fold(0.0, f64::max);
            let first_best = accuracies.iter().position(|&a| a == best);
            assert_eq!(seed.best_validation_accuracy, best);
            assert_eq!(seed.best_epoch, first_best);
            if seed.epochs < 60 {
                assert_eq!(seed.epochs, first_best.unwrap() + 1 + 5, "{accuracies:?}");
            }
        }
    }

    fn learns_to_name_the_source<B>(device) {
        let data = separable(300, 0.25);
        let config = ClassifierConfig {
            seeds: vec![89, 90],
            max_epochs: 20,
            ..ClassifierConfig::default()
        };
        let result = train::<B>(&data, &config, &Execution::default(), device).unwrap();
        let (mean, _) = result.test_accuracy();
        assert!(mean > 0.88, "{result}");
        assert!(result.to_string().contains("test accuracy"));
    }

    fn refuses_what_it_cannot_do<B>(device) {
        let data = separable(20, 0.25);
        // One short run, should the device train the precision.
        let short = ClassifierConfig {
            seeds: vec![89],
            max_epochs: 1,
            ..ClassifierConfig::default()
        };
        for (precision, dtype) in [(Precision::Bf16, DType::BF16), (Precision::F16, DType::F16)] {
            let mixed = Execution {
                precision,
                ..Execution::default()
            };
            let result = train::<B>(&data, &short, &mixed, device);
            // ndarray has neither; f16 trains through the loss scaler where the device has it.
            if on_cpu() || !B::supports_dtype(device, dtype) {
                let err = result.unwrap_err();
                let named = err.to_string().contains(&precision.to_string());
                assert!(matches!(err, QrngError::Device(_)) && named, "{err}");
            } else {
                result.unwrap_or_else(|err| panic!("{precision} on {device:?}: {err}"));
            }
        }
        for config in [
            ClassifierConfig {
                seeds: vec![],
                ..ClassifierConfig::default()
            },
            ClassifierConfig {
                dropout: 1.0,
                ..ClassifierConfig::default()
            },
            ClassifierConfig {
                batch_size: 0,
                ..ClassifierConfig::default()
            },
        ] {
            assert!(
                train::<B>(&data, &config, &Execution::default(), device).is_err(),
                "{config:?}"
            );
        }
    }
}
