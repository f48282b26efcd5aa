//! A batch of SGLD chains of the workload's network (`in -> hidden -> 1`, ReLU, PyTorch
//! default initialisation): its training step, and its evaluation on whole data splits.

use quench_device::Precision;
use quench_kernels::reductions::Reduce;
use quench_kernels::{QuenchBackend, QuenchOps};
use std::sync::Arc;

use burn::tensor::{Tensor, TensorData};
use quench_data::Dataset;
use quench_kernels::ops::sgld::{SgldStep, gradients};

use super::loss::zero_one_error;
use super::{BoundedLoss, ChainSchedule, LossScale, Noise, Sgld, StepScales};
use quench_train::amp::MixedPrecision;
use quench_train::ensemble::{Activation, EnsembleLinear, EnsembleMlp, seeded_ensemble};
use quench_train::init::Init;
use quench_train::params::require_grad;

/// Values per evaluation chunk (`chains x samples x hidden`): keeps the hidden activations of
/// an MNIST evaluation near 64 MiB instead of gigabytes.
const EVAL_CHUNK_VALUES: usize = 1 << 24;

/// How a batch of chains takes its steps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StepOptions {
    /// The loss the posterior is of.
    pub scale: LossScale,
    /// Hand-derived gradients with the update fused in (`QuenchOps::sgld_step`, for networks
    /// with one hidden layer); else an autodiff graph per step (the original's way, and the
    /// one mixed precision needs).
    pub fused: bool,
    /// Arithmetic of the forward pass; the fused step is f32 only, so a lower precision takes
    /// the autodiff step.
    pub precision: Precision,
}

/// The state of `chains` chains sampled together: parameters `[chains, in, out]` and
/// `[chains, 1, out]` on the inner (non-autodiff) backend, schedule and sampler.
#[derive(Debug, Clone)]
pub struct ChainBatch<B: QuenchBackend> {
    /// `[chains, ...]`, weight then bias of each layer.
    params: Vec<Tensor<B::InnerBackend, 3>>,
    schedule: ChainSchedule,
    sgld: Sgld,
    loss: BoundedLoss,
    /// Nats to the training loss ([`BoundedLoss::training_factor`]).
    factor: f64,
    fused: bool,
    /// Arithmetic of the forward pass (parameters and the update stay f32) and, under f16,
    /// its loss scaler.
    amp: MixedPrecision,
    device: B::Device,
}

impl<B: QuenchBackend> ChainBatch<B> {
    /// Chains with layer widths `widths` (input first), chain `c` initialised from
    /// `init_seeds[c]` alone, so that its start does not depend on the other chains. There is
    /// one chain per seed (at least one), and `schedule` and `sgld`'s noise must cover them.
    pub fn new(
        widths: &[usize],
        init_seeds: &[u64],
        schedule: ChainSchedule,
        sgld: Sgld,
        loss: BoundedLoss,
        options: StepOptions,
        device: &B::Device,
    ) -> Self {
        let params = seeded_ensemble::<B::InnerBackend>(
            Init::TorchDefault,
            Activation::Relu,
            widths,
            init_seeds,
            device,
        )
        .params();
        Self {
            params,
            schedule,
            sgld,
            factor: loss.training_factor(options.scale),
            loss,
            // The hand-derived step is of one hidden layer and one logit.
            fused: options.fused
                && options.precision == Precision::F32
                && matches!(widths, [_, _, 1]),
            amp: MixedPrecision::new(options.precision),
            device: device.clone(),
        }
    }

    /// Chains in the batch.
    pub fn chains(&self) -> usize {
        self.schedule.chains()
    }

    /// The parameters, weight then bias of each layer, `[chains, ...]`.
    pub fn params(&self) -> Vec<Tensor<B::InnerBackend, 3>> {
        self.params.clone()
    }

    /// The step coefficients of epoch `epoch` (zero for chains that are done).
    pub fn scales(&self, epoch: usize) -> StepScales<B::InnerBackend> {
        self.schedule.scales(epoch, &self.device)
    }

    /// One SGLD step of every chain on its own minibatch: features `[chains, batch, in]` and
    /// labels 0/1 `[chains, batch, 1]`. The objective of a chain is its minibatch mean of the
    /// training loss; the chains' objectives are independent, so one backward pass (or the
    /// hand-derived gradients) gives every chain its own gradient.
    pub fn step(
        &mut self,
        features: Tensor<B::InnerBackend, 3>,
        labels: Tensor<B::InnerBackend, 3>,
        scales: &StepScales<B::InnerBackend>,
    ) {
        if self.fused {
            return self.fused_step(features, labels, scales);
        }
        let precision = self.amp.precision();
        let leaves = require_grad::<B>(self.params.clone());
        let compute = precision.to_compute_all(&leaves);
        let x = precision.to_compute(Tensor::<B, 3>::from_inner(features));
        let logits = precision.to_master(network(compute).forward(x));
        let objective = self
            .loss
            .per_sample(logits, Tensor::from_inner(labels))
            .mean_along(1)
            .sum_all()
            .mul_scalar(self.factor);
        // A step whose scaled f16 gradients overflowed is skipped, as by PyTorch's GradScaler.
        let Some(grads) = self.amp.gradients(objective, &leaves) else {
            return;
        };
        self.params = self
            .sgld
            .step(std::mem::take(&mut self.params), grads, scales);
    }

    /// The step with hand-derived gradients: one operation with counter noise, else (host
    /// noise, drawn apart) the gradients then [`Sgld::step`].
    fn fused_step(
        &mut self,
        features: Tensor<B::InnerBackend, 3>,
        labels: Tensor<B::InnerBackend, 3>,
        scales: &StepScales<B::InnerBackend>,
    ) {
        let params: [Tensor<B::InnerBackend, 3>; 4] = std::mem::take(&mut self.params)
            .try_into()
            .expect("the fused step is chosen for one hidden layer");
        let (floor, inv_var) = (self.loss.floor(), self.sgld.prior_precision());
        self.params = match &mut self.sgld.noise {
            Noise::Counter(streams) => {
                let step = SgldStep {
                    drift: scales.drift.clone(),
                    noise: scales.noise.clone(),
                    floor,
                    factor: self.factor,
                    inv_var,
                    keys: streams.keys(),
                    draw: streams.draws(),
                };
                let updated = B::InnerBackend::sgld_step(params, features, labels, &step);
                streams.skip();
                updated.to_vec()
            }
            Noise::Host(_) => {
                let grads = gradients(&params, features, labels, floor, self.factor);
                self.sgld.step(params.to_vec(), grads.to_vec(), scales)
            }
        };
    }

    /// Keeps the first `chains` chains and returns the parameters of the others, which have
    /// finished.
    pub fn retain(&mut self, chains: usize) -> Vec<Tensor<B::InnerBackend, 3>> {
        let total = self.chains();
        let tail = self
            .params
            .iter()
            .map(|p| p.clone().narrow(0, chains, total - chains))
            .collect();
        for p in self.params.iter_mut() {
            *p = p.clone().narrow(0, 0, chains);
        }
        self.schedule.retain(chains);
        self.sgld.noise.retain(chains);
        tail
    }
}

/// The network whose layers are `params` (weight then bias of each layer).
fn network<B: QuenchOps>(params: Vec<Tensor<B, 3>>) -> EnsembleMlp<B> {
    let mut it = params.into_iter();
    let mut layers = Vec::new();
    while let (Some(weight), Some(bias)) = (it.next(), it.next()) {
        layers.push(EnsembleLinear { weight, bias });
    }
    EnsembleMlp {
        layers,
        activation: Activation::Relu,
    }
}

/// Mean loss and 0-1 error of every chain on a whole split.
#[derive(Debug, Clone, PartialEq)]
pub struct SplitScores {
    /// Mean bounded cross-entropy of each chain, nats.
    pub loss: Vec<f64>,
    /// Fraction of misclassified samples of each chain.
    pub error: Vec<f64>,
}

/// Scores chains with parameters `params` (`[chains, ...]`, at least one layer) on `sets`: one
/// data set per chain or one shared by all, all of the same length. The split is processed in chunks of samples,
/// and the two sums are read back once at the end.
pub fn evaluate<B: QuenchOps>(
    params: &[Tensor<B, 3>],
    sets: &[Arc<Dataset>],
    loss: &BoundedLoss,
) -> SplitScores {
    let device = params[0].device();
    let chains = params[0].dims()[0];
    let hidden = params[0].dims()[2];
    let (len, width) = (sets[0].len(), sets[0].sample_len());
    let chunk = (EVAL_CHUNK_VALUES / (chains * hidden).max(1)).clamp(1, len.max(1));
    let model = network(params.to_vec());
    let mut loss_sum = Tensor::<B, 3>::zeros([chains, 1, 1], &device);
    let mut error_sum = Tensor::<B, 3>::zeros([chains, 1, 1], &device);
    for start in (0..len).step_by(chunk) {
        let end = (start + chunk).min(len);
        let rows = end - start;
        let features: Vec<f32> = sets
            .iter()
            .flat_map(|s| s.features()[start * width..end * width].iter().copied())
            .collect();
        let labels: Vec<f32> = sets
            .iter()
            .flat_map(|s| s.labels()[start..end].iter().map(|&y| y as f32))
            .collect();
        let x = Tensor::from_data(
            TensorData::new(features, [sets.len(), rows, width]),
            &device,
        );
        let y = Tensor::<B, 3>::from_data(TensorData::new(labels, [sets.len(), rows, 1]), &device);
        let logits = model.forward(x);
        loss_sum = loss_sum + loss.per_sample(logits.clone(), y.clone()).sum_along(1);
        error_sum = error_sum + zero_one_error(logits, y).sum_along(1);
    }
    let mean = |sum: Tensor<B, 3>| -> Vec<f64> {
        quench_kernels::readback::to_host_f64(sum)
            .into_iter()
            .map(|s| s / len as f64)
            .collect()
    };
    SplitScores {
        loss: mean(loss_sum),
        error: mean(error_sum),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::tensor::Distribution;
    use quench_kernels::SeededGenerator;
    use quench_kernels::readback::to_host_f32;
    use quench_support::stats::max_abs_difference;
    use quench_train::params::gradients as autodiff_gradients;

    quench_kernels::device_test! {
        fn the_hand_derived_gradients_are_autodiffs<B>(device) {
            let chains = 3;
            let (x, y, params) = {
                let _lease = SeededGenerator::acquire::<B::InnerBackend>(device, 3);
                let normal = |dims: [usize; 3], scale: f64| {
                    Tensor::<B::InnerBackend, 3>::random(
                        dims,
                        Distribution::Normal(0.0, scale),
                        device,
                    )
                };
                let params = [
                    normal([chains, 4, 24], 0.6),
                    normal([chains, 1, 24], 0.3),
                    normal([chains, 24, 1], 0.5),
                    normal([chains, 1, 1], 0.2),
                ];
                let y = Tensor::random([chains, 5, 1], Distribution::Bernoulli(0.5), device);
                (normal([chains, 5, 4], 1.0), y, params)
            };
            let loss = BoundedLoss { l_max: 4.0 };
            let factor = 0.25;
            let leaves = require_grad::<B>(params.to_vec());
            let logits = network(leaves.clone()).forward(Tensor::from_inner(x.clone()));
            let objective = loss
                .per_sample(logits, Tensor::from_inner(y.clone()))
                .mean_along(1)
                .sum_all()
                .mul_scalar(factor);
            let want = autodiff_gradients(&leaves, &objective.backward());
            let got = gradients(&params, x, y, loss.floor(), factor);
            for (k, (g, w)) in got.into_iter().zip(want).enumerate() {
                assert_eq!(g.dims(), w.dims(), "parameter {k}");
                let worst = max_abs_difference(&to_host_f32(g), &to_host_f32(w));
                assert!(worst < 1e-5, "parameter {k}: {worst}");
            }
        }
    }
}
