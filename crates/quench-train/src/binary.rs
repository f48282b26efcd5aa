//! Binary classification by plain SGD with member MLPs whose output is one logit: the model of
//! the benchmark's `loader` workload (guide 002's 784-500-1 network on two MNIST classes),
//! trained one epoch at a time from quench-data's loader batches.

use burn::tensor::Tensor;
use quench_data::Batch;
use quench_kernels::reductions::Reduce;
use quench_kernels::views::ReshapeTo;
use quench_kernels::{QuenchBackend, QuenchOps};

use crate::amp::MixedPrecision;
use crate::ensemble::EnsembleMlp;
use crate::params::require_grad;

/// Mean binary cross-entropy of logits `[members, batch, 1]` against labels 0/1 of the same
/// shape, in the form that stays finite for large logits.
pub fn binary_cross_entropy<B: QuenchOps>(
    logits: Tensor<B, 3>,
    labels: Tensor<B, 3>,
) -> Tensor<B, 1> {
    (logits.clone().clamp_min(0.0) - logits.clone() * labels
        + (logits.abs().neg().exp() + 1.0).log())
    .mean_all()
}

/// One epoch of SGD with learning rate `lr` over `batches` (features `[members, batch, in]`,
/// labels `[members, batch]`), starting from `params` (the layers of `model`, weight then bias
/// each); the forward pass runs in `amp`'s precision. Returns the trained parameters.
pub fn sgd_epoch<B: QuenchBackend>(
    model: &EnsembleMlp<B::InnerBackend>,
    mut params: Vec<Tensor<B::InnerBackend, 3>>,
    batches: impl Iterator<Item = Batch<B>>,
    lr: f64,
    amp: &mut MixedPrecision,
) -> Vec<Tensor<B::InnerBackend, 3>> {
    let precision = amp.precision();
    for batch in batches {
        let leaves = require_grad::<B>(params.clone());
        let compute = precision.to_compute_all(&leaves);
        let network = EnsembleMlp::from_params(compute, model.activation);
        let logits = precision.to_master(network.forward(precision.to_compute(batch.features)));
        let labels = batch.labels.float().unsqueeze_to::<3>(2);
        let loss = binary_cross_entropy(logits, labels);
        if let Some(grads) = amp.gradients(loss, &leaves) {
            params = params
                .into_iter()
                .zip(grads)
                .map(|(w, g)| w - g * lr)
                .collect();
        }
    }
    params
}

/// The fraction of `labels` (0/1, `[samples]`) that `model` with `params` predicts for
/// `features` `[1, samples, in]` (logit > 0); reads the logits back once. A logit that is not
/// finite is an error, the count of them: the training diverged (NaN compares as neither
/// class, so its accuracy would be the share of one class, a number that looks like a result).
pub fn accuracy<B: QuenchOps>(
    model: &EnsembleMlp<B>,
    params: Vec<Tensor<B, 3>>,
    features: Tensor<B, 3>,
    labels: &[i64],
) -> Result<f64, String> {
    let logits = quench_kernels::readback::to_host_f32(model.with_params(params).forward(features));
    let diverged = logits.iter().filter(|l| !l.is_finite()).count();
    if diverged > 0 {
        return Err(format!(
            "the training diverged: {diverged} of {} test logits are not finite (lower the \
             learning rate)",
            logits.len()
        ));
    }
    let correct = logits
        .iter()
        .zip(labels)
        .filter(|&(&logit, &y)| i64::from(logit > 0.0) == y)
        .count();
    Ok(correct as f64 / labels.len().max(1) as f64)
}
