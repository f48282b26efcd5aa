//! A batch of SGLD chains of the workload's network (`in -> hidden -> 1`, ReLU, PyTorch
//! default initialisation): its training step, and its evaluation on whole data splits.

use std::sync::Arc;

use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{Tensor, TensorData};
use quench_data::Dataset;
use quench_device::Precision;

use super::loss::zero_one_error;
use super::{BoundedLoss, ChainSchedule, Sgld, StepScales};
use crate::amp::MixedPrecision;
use crate::ensemble::{Activation, EnsembleLinear, EnsembleMlp};
use crate::init::Init;
use crate::params::require_grad;

/// Values per evaluation chunk (`chains x samples x hidden`): keeps the hidden activations of
/// an MNIST evaluation near 64 MiB instead of gigabytes.
const EVAL_CHUNK_VALUES: usize = 1 << 24;

/// The state of `chains` chains sampled together: parameters `[chains, in, out]` and
/// `[chains, 1, out]` on the inner (non-autodiff) backend, schedule and sampler.
#[derive(Debug, Clone)]
pub struct ChainBatch<B: AutodiffBackend> {
    /// Weight then bias of each layer, `[chains, ...]`.
    params: Vec<Tensor<B::InnerBackend, 3>>,
    schedule: ChainSchedule<B::InnerBackend>,
    sgld: Sgld,
    loss: BoundedLoss,
    /// Arithmetic of the forward pass (parameters and the update stay f32) and, under f16,
    /// its loss scaler.
    amp: MixedPrecision,
}

impl<B: AutodiffBackend> ChainBatch<B> {
    /// Chains with layer widths `widths` (input first), chain `c` initialised from
    /// `init_seeds[c]` alone, so that its start does not depend on the other chains. There is
    /// one chain per seed (at least one), and `schedule` and `sgld`'s noise must cover them.
    pub fn new(
        widths: &[usize],
        init_seeds: &[u64],
        schedule: ChainSchedule<B::InnerBackend>,
        sgld: Sgld,
        loss: BoundedLoss,
        precision: Precision,
        device: &B::Device,
    ) -> Self {
        let per_chain: Vec<Vec<Tensor<B::InnerBackend, 3>>> = init_seeds
            .iter()
            .map(|&seed| {
                EnsembleMlp::<B::InnerBackend>::new(
                    Init::TorchDefault,
                    Activation::Relu,
                    1,
                    widths,
                    seed,
                    device,
                )
                .params()
            })
            .collect();
        let params = (0..per_chain[0].len())
            .map(|i| Tensor::cat(per_chain.iter().map(|p| p[i].clone()).collect(), 0))
            .collect();
        Self {
            params,
            schedule,
            sgld,
            loss,
            amp: MixedPrecision::new(precision),
        }
    }

    /// Chains in the batch.
    pub fn chains(&self) -> usize {
        self.params[0].dims()[0]
    }

    /// The parameters, weight then bias of each layer, `[chains, ...]`.
    pub fn params(&self) -> &[Tensor<B::InnerBackend, 3>] {
        &self.params
    }

    /// The step coefficients of epoch `epoch` (zero for chains that are done).
    pub fn scales(&self, epoch: usize) -> StepScales<B::InnerBackend> {
        self.schedule.scales(epoch)
    }

    /// One SGLD step of every chain on its own minibatch: features `[chains, batch, in]` and
    /// labels 0/1 `[chains, batch, 1]`. The loss of a chain is its minibatch mean; the chains'
    /// losses are summed so that one backward pass gives every chain its own gradient.
    pub fn step(
        &mut self,
        features: Tensor<B::InnerBackend, 3>,
        labels: Tensor<B::InnerBackend, 3>,
        scales: &StepScales<B::InnerBackend>,
    ) {
        let precision = self.amp.precision();
        let leaves = require_grad::<B>(self.params.clone());
        let compute = precision.to_compute_all(&leaves);
        let x = precision.to_compute(Tensor::<B, 3>::from_inner(features));
        let logits = precision.to_master(network(compute).forward(x));
        let loss = self
            .loss
            .per_sample(logits, Tensor::from_inner(labels))
            .mean_dim(1)
            .sum();
        // A step whose scaled f16 gradients overflowed is skipped, as by PyTorch's GradScaler.
        let Some(grads) = self.amp.gradients(loss, &leaves) else {
            return;
        };
        let params = std::mem::take(&mut self.params);
        self.params = self.sgld.step(params, grads, scales);
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
        for p in &mut self.params {
            *p = p.clone().narrow(0, 0, chains);
        }
        self.schedule.retain(chains);
        self.sgld.noise.retain(chains);
        tail
    }
}

/// The network whose layers are `params` (weight then bias of each layer).
fn network<B: Backend>(params: Vec<Tensor<B, 3>>) -> EnsembleMlp<B> {
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
pub fn evaluate<B: Backend>(
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
        loss_sum = loss_sum + loss.per_sample(logits.clone(), y.clone()).sum_dim(1);
        error_sum = error_sum + zero_one_error(logits, y).sum_dim(1);
    }
    let mean = |sum: Tensor<B, 3>| -> Vec<f64> {
        sum.into_data()
            .iter::<f64>()
            .map(|s| s / len as f64)
            .collect()
    };
    SplitScores {
        loss: mean(loss_sum),
        error: mean(error_sum),
    }
}
