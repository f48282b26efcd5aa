//! quench-qrng: the classifier's seeds batched with the product's step against each alone.

use super::Check;
use quench_data::Mode;
use quench_device::Precision;
use quench_kernels::QuenchBackend;
use quench_qrng::classifier::{ClassifierConfig, Execution as ClassifierExecution};
use quench_qrng::{Batching, synthetic_recording};
use quench_train::settings::Valid;

/// Three classifier seeds batched with the product's step (hand-derived on the CPU, autodiff
/// on other devices) against each alone the original's way (autodiff, streamed), without
/// dropout (whose masks come from different generators), for three epochs: every epoch's
/// training loss.
pub(super) fn classifier_seeds<B: QuenchBackend>(device: &B::Device) -> anyhow::Result<Check> {
    let data = synthetic_recording(200, 5)?.to_dataset();
    let config = Valid::new(ClassifierConfig {
        seeds: vec![89, 90, 91],
        dropout: 0.0,
        max_epochs: 3,
        batch_size: 16,
        ..ClassifierConfig::default()
    })?;
    let run = |batching, loader, fused| {
        let execution = ClassifierExecution {
            batching,
            loader,
            precision: Precision::F32,
            fused,
        };
        quench_qrng::classifier::train_classifier::<B>(&data, &config, &execution, device)
    };
    // The product's path (the hand-derived step on the CPU) against the original's.
    let batched = run(Batching::Members, Mode::Resident, true)?;
    let alone = run(Batching::OneAtATime, Mode::ON_CALLER, false)?;
    // Every epoch's training loss of every seed, relative to its size: continuous, unlike the
    // accuracies, which flip a sample near the decision boundary on rounding alone. The loss
    // must have moved, or equal runs would prove nothing.
    let moved = batched
        .seeds
        .iter()
        .all(|s| s.history.first().map(|h| h.train_loss) != s.history.last().map(|h| h.train_loss));
    let error = if moved {
        batched.max_train_loss_difference(&alone)
    } else {
        f64::INFINITY
    };
    // Batched and lone reductions round differently (1e-7), and Adam turns a rounding-sized
    // difference in a near-zero gradient component into a learning-rate-sized step: 2e-4
    // relative after three epochs on the CPU. A member given another's data or schedule
    // differs by order 1.
    Ok(Check::measured(
        "classifier: batched seeds, product's step = each seed alone, original's (training losses)",
        error,
        1e-3,
    ))
}
