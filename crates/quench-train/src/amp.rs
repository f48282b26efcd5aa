//! Mixed-precision training steps: the forward pass in the policy's dtype from f32 master
//! weights ([`Precision::to_compute`] / [`Precision::to_master`]), and for f16 the dynamic loss
//! scaler. Every workload that its guide runs with AMP takes its gradients through
//! [`MixedPrecision::gradients`], so the policy means the same thing everywhere.

use burn::tensor::Tensor;
use quench_device::precision::all_finite;
use quench_device::{LossScaler, LossScalerConfig, Precision, StepDecision};
use quench_kernels::QuenchBackend;
use quench_kernels::reductions::Reduce;

use crate::params::gradients;

/// A precision policy with its loss scaler, carried through a training run.
#[derive(Debug, Clone, PartialEq)]
pub struct MixedPrecision {
    precision: Precision,
    scaler: LossScaler,
}

impl MixedPrecision {
    /// The policy `precision`, with the usual dynamic loss scaling where it needs it (f16).
    pub fn new(precision: Precision) -> Self {
        Self::with_scaler(precision, LossScalerConfig::default())
    }

    /// The policy `precision` with a loss scaler configured by `config` (used under f16).
    pub fn with_scaler(precision: Precision, config: LossScalerConfig) -> Self {
        Self {
            precision,
            scaler: LossScaler::for_precision(precision, config),
        }
    }

    /// The policy.
    pub fn precision(&self) -> Precision {
        self.precision
    }

    /// The factor the loss is multiplied by before the backward pass (1 without scaling).
    pub fn scale(&self) -> f32 {
        self.scaler.scale()
    }

    /// Steps skipped so far because their scaled gradients were not finite.
    pub fn skipped_steps(&self) -> u64 {
        self.scaler.skipped_steps()
    }

    /// The gradients of the scalar `loss` with respect to `leaves` (each `[members, a, b]`),
    /// unscaled, or `None` when the step must be skipped.
    ///
    /// Under f16 the loss is multiplied by the scale before the backward pass, so that small
    /// gradients survive f16's range; a non-finite gradient anywhere then skips the step and
    /// backs the scale off, which costs one read-back per step (as PyTorch's `GradScaler`
    /// does). The other policies take the gradients as they are, with no read-back: bf16 has
    /// f32's exponent range.
    pub fn gradients<B: QuenchBackend>(
        &mut self,
        loss: Tensor<B, 1>,
        leaves: &[Tensor<B, 3>],
    ) -> Option<Vec<Tensor<B::InnerBackend, 3>>> {
        if !self.precision.needs_loss_scaling() {
            return Some(gradients(leaves, &loss.backward()));
        }
        let scaled = gradients(leaves, &loss.mul_scalar(self.scaler.scale()).backward());
        // A sum is finite exactly when its terms are (or when finite terms overflow it, a
        // step worth skipping too), so one read-back of the sums decides the step.
        let sums: Vec<Tensor<B::InnerBackend, 1>> =
            scaled.iter().map(|g| g.clone().sum_all()).collect();
        let finite = sums.is_empty() || all_finite(Tensor::cat(sums, 0));
        match self.scaler.update(finite) {
            StepDecision::Apply { unscale } => {
                Some(scaled.into_iter().map(|g| g.mul_scalar(unscale)).collect())
            }
            StepDecision::Skip => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::params::require_grad;
    use burn::backend::{Autodiff, NdArray};
    use burn::tensor::TensorData;

    type Train = Autodiff<NdArray<f32>>;

    /// `[1, 1, 2]` weights and the loss `sum(w * factors)`, whose gradient is `factors`.
    fn loss_of(weights: [f32; 2], factors: [f32; 2]) -> (Tensor<Train, 1>, Vec<Tensor<Train, 3>>) {
        let device = Default::default();
        let w = Tensor::from_data(TensorData::new(weights.to_vec(), [1, 1, 2]), &device);
        let leaves = require_grad::<Train>(vec![w]);
        let f =
            Tensor::<Train, 3>::from_data(TensorData::new(factors.to_vec(), [1, 1, 2]), &device);
        ((leaves[0].clone() * f).sum_all(), leaves)
    }

    /// The first gradient's values.
    fn values(grads: Vec<Tensor<NdArray<f32>, 3>>) -> Vec<f32> {
        quench_kernels::readback::to_host_f32(grads[0].clone())
    }

    #[test]
    fn f16_scales_the_loss_and_hands_back_unscaled_gradients() {
        let mut amp = MixedPrecision::new(Precision::F16);
        assert_eq!(amp.scale(), 65_536.0);
        let (loss, leaves) = loss_of([1.0, 2.0], [3e-6, -0.5]);
        let grads = values(amp.gradients(loss, &leaves).unwrap());
        assert!(
            (grads[0] - 3e-6).abs() < 1e-11 && (grads[1] + 0.5).abs() < 1e-6,
            "{grads:?}"
        );
        assert_eq!(amp.skipped_steps(), 0);
    }

    #[test]
    fn an_overflowing_step_is_skipped_and_the_scale_backs_off() {
        let mut amp = MixedPrecision::new(Precision::F16);
        // 1e34 times the scale 65,536 overflows f32: the step must not be taken.
        let (loss, leaves) = loss_of([1.0, 1.0], [1e34, 1.0]);
        assert!(amp.gradients(loss, &leaves).is_none());
        assert_eq!((amp.skipped_steps(), amp.scale()), (1, 32_768.0));
        // Backing off until the scaled gradient fits, then the step goes through unscaled.
        let mut skipped = 1;
        let grads = loop {
            let (loss, leaves) = loss_of([1.0, 1.0], [1e34, 1.0]);
            match amp.gradients(loss, &leaves) {
                Some(grads) => break values(grads),
                None => skipped += 1,
            }
        };
        assert_eq!(amp.skipped_steps(), skipped);
        assert!(amp.scale() * 1e34 < f32::MAX);
        assert!((grads[0] / 1e34 - 1.0).abs() < 1e-5, "{grads:?}");
    }

    #[test]
    fn other_policies_take_the_gradients_as_they_are() {
        for precision in [Precision::F32, Precision::Bf16] {
            let mut amp = MixedPrecision::new(precision);
            assert_eq!(amp.scale(), 1.0);
            let (loss, leaves) = loss_of([1.0, 1.0], [f32::INFINITY, 1.0]);
            let grads = values(amp.gradients(loss, &leaves).unwrap());
            assert!(grads[0].is_infinite(), "no read-back, no skip: {grads:?}");
        }
    }
}
