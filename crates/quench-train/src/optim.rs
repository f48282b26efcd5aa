//! Adam with a member axis: per-member learning rate, per-member step count, and a mask of
//! the members that take a step (early-stopped members stay frozen). A step of the parameter
//! list is one [`QuenchOps::adam_step`]: one fused pass per parameter over host memory on the
//! CPU backend, one launch for the list on a CubeCL backend.

use burn::tensor::{Bool, Tensor};
use quench_kernels::QuenchOps;
use quench_kernels::ops::adam::{AdamStep, adam_step, composed_steps};
use quench_kernels::ops::dense::Activation;
use quench_kernels::ops::mlp::{MlpObjective, MlpStep, MlpTape, composed_train_step, train_step};
use quench_kernels::ops::zeros::zeros_like;

pub use quench_kernels::ops::adam::{AdamConfig, AdamUpdate};

/// Adam state for a parameter list whose tensors share the leading member axis.
#[derive(Debug, Clone)]
pub struct MemberAdam<B: QuenchOps> {
    config: AdamConfig,
    /// Through the backend's operation (false: its default composition on every backend).
    fused: bool,
    /// `[first, second]` moments per parameter, created at the first step.
    moments: Vec<[Tensor<B, 3>; 2]>,
    /// Steps taken per member, `[members, 1, 1]`.
    steps: Tensor<B, 3>,
}

impl<B: QuenchOps> MemberAdam<B> {
    /// Fresh state for `members` members, updated by the backend's operation.
    pub fn new(config: AdamConfig, members: usize, device: &B::Device) -> Self {
        Self {
            fused: true,
            ..Self::unfused(config, members, device)
        }
    }

    /// Fresh state updated op by op on any backend (the operation's default composition):
    /// the reference the fused update is tested and measured against.
    pub fn unfused(config: AdamConfig, members: usize, device: &B::Device) -> Self {
        Self {
            config,
            fused: false,
            moments: Vec::new(),
            steps: Tensor::zeros([members, 1, 1], device),
        }
    }

    /// One Adam step. `lr` is `[members, 1, 1]` (or `[1, 1, 1]` for all); where `active` is
    /// false a member's parameters and state are left as they were.
    pub fn step(
        &mut self,
        params: Vec<Tensor<B, 3>>,
        grads: Vec<Tensor<B, 3>>,
        lr: Tensor<B, 3>,
        active: Option<Tensor<B, 3, Bool>>,
    ) -> Vec<Tensor<B, 3>> {
        let step = self.advance(&params, lr, active);
        let moments = std::mem::take(&mut self.moments);
        let (updated, moments) = if self.fused {
            adam_step(self.config, params, grads, moments, &step)
        } else {
            composed_steps(self.config, params, grads, moments, &step)
        };
        self.moments = moments;
        updated
    }

    /// One training step of the member MLP `params` (weight then bias per layer, as
    /// [`EnsembleMlp::params`](crate::ensemble::EnsembleMlp::params) lists them) for the
    /// pass that made `tape` ([`quench_kernels::ops::mlp::forward`]), descending `objective`
    /// with the L1 coefficient `l1` and each member's gradient clipped to `clip_norm`: the
    /// backend's [`QuenchOps::mlp_train_step`]. Returns the updated parameters and, for a
    /// cross-entropy objective, each member's loss `[members]` before the step. `lr` and
    /// `active` as [`Self::step`].
    #[allow(clippy::too_many_arguments)]
    pub fn step_mlp(
        &mut self,
        params: Vec<Tensor<B, 3>>,
        activation: Activation,
        tape: MlpTape<B>,
        objective: MlpObjective<B>,
        regularisation: Regularisation,
        lr: Tensor<B, 3>,
        active: Option<Tensor<B, 3, Bool>>,
    ) -> (Vec<Tensor<B, 3>>, Option<Tensor<B, 1>>) {
        let coefficients = self.advance(&params, lr, active);
        let step = MlpStep {
            adam: self.config,
            coefficients: &coefficients,
            activation,
            l1: regularisation.l1,
            clip_norm: regularisation.clip_norm,
        };
        let moments = std::mem::take(&mut self.moments);
        let stepped = if self.fused {
            train_step(&step, params, moments, tape, objective)
        } else {
            composed_train_step(&step, params, moments, tape, objective)
        };
        self.moments = stepped.moments;
        (stepped.params, stepped.losses)
    }

    /// Counts a step for every member that takes it and returns the step's coefficients;
    /// zero moments for `params` at the first step (the parameter list is not known before
    /// it).
    fn advance(
        &mut self,
        params: &[Tensor<B, 3>],
        lr: Tensor<B, 3>,
        active: Option<Tensor<B, 3, Bool>>,
    ) -> AdamStep<B> {
        if self.moments.len() != params.len() {
            self.moments = params
                .iter()
                .map(|p| [zeros_like(p), zeros_like(p)])
                .collect();
        }
        // Without a mask every member steps: a scalar sum, one launch on a GPU where a tensor
        // of ones and a sum were two.
        self.steps = match &active {
            Some(mask) => self.steps.clone() + mask.clone().float(),
            None => self.steps.clone().add_scalar(1.0),
        };
        AdamStep::new(self.config, self.steps.clone(), lr, active)
    }
}

/// The regularisation of a member MLP's training step ([`MemberAdam::step_mlp`]).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Regularisation {
    /// The L1 coefficient on every parameter (0: none).
    pub l1: f64,
    /// Each member's whole gradient clipped to this norm (`None`: no clip).
    pub clip_norm: Option<f64>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::NdArray;
    use burn::tensor::TensorData;
    use quench_kernels::readback::to_host_f32;
    use quench_support::stats::max_abs_difference;

    type Cpu = NdArray<f32>;

    /// A scalar Adam written out longhand, the reference the member-axis version must match.
    fn reference(p0: f64, grads: &[f64], lr: f64, c: AdamConfig) -> f64 {
        let (mut p, mut m, mut v) = (p0, 0.0, 0.0);
        for (t, &g0) in grads.iter().enumerate() {
            let g = g0 + c.weight_decay * p;
            m = c.beta1 * m + (1.0 - c.beta1) * g;
            v = c.beta2 * v + (1.0 - c.beta2) * g * g;
            let t = (t + 1) as i32;
            let mh = m / (1.0 - c.beta1.powi(t));
            let vh = v / (1.0 - c.beta2.powi(t));
            p -= lr * mh / (vh.sqrt() + c.eps);
        }
        p
    }

    #[test]
    fn matches_scalar_adam_per_member_with_its_own_rate() {
        let device = Default::default();
        let config = AdamConfig {
            weight_decay: 0.005,
            beta1: 0.7,
            ..AdamConfig::default()
        };
        let mut adam = MemberAdam::<Cpu>::new(config, 2, &device);
        let lr = Tensor::from_data(TensorData::new(vec![0.1f32, 0.01], [2, 1, 1]), &device);
        let mut p = vec![Tensor::<Cpu, 3>::from_data(
            TensorData::new(vec![1.0f32, -2.0], [2, 1, 1]),
            &device,
        )];
        let grads = [[0.5, -1.0], [0.2, 3.0], [-0.7, 0.1]];
        for g in grads {
            let g = Tensor::from_data(
                TensorData::new(vec![g[0] as f32, g[1] as f32], [2, 1, 1]),
                &device,
            );
            p = adam.step(p, vec![g], lr.clone(), None);
        }
        let got = to_host_f32(p[0].clone());
        let want0 = reference(1.0, &grads.map(|g| g[0]), 0.1, config);
        let want1 = reference(-2.0, &grads.map(|g| g[1]), 0.01, config);
        assert!((got[0] as f64 - want0).abs() < 1e-5, "{got:?} vs {want0}");
        assert!((got[1] as f64 - want1).abs() < 1e-5, "{got:?} vs {want1}");
    }

    #[test]
    fn decoupled_decay_is_adamw() {
        let device = Default::default();
        let config = AdamConfig {
            weight_decay: 0.1,
            decoupled: true,
            ..AdamConfig::default()
        };
        let mut adam = MemberAdam::<Cpu>::new(config, 1, &device);
        let lr = Tensor::<Cpu, 3>::full([1, 1, 1], 0.01, &device);
        let mut p = vec![Tensor::<Cpu, 3>::full([1, 1, 1], 2.0, &device)];
        let (mut q, mut m, mut v) = (2.0f64, 0.0, 0.0);
        for (t, g) in [0.3f64, -0.5, 0.8].into_iter().enumerate() {
            let grad = Tensor::<Cpu, 3>::full([1, 1, 1], g, &device);
            p = adam.step(p, vec![grad], lr.clone(), None);
            // torch.optim.AdamW: decay first, then the Adam step on the raw gradient.
            q *= 1.0 - 0.01 * 0.1;
            m = 0.9 * m + 0.1 * g;
            v = 0.999 * v + 0.001 * g * g;
            let t = (t + 1) as i32;
            q -= 0.01 * (m / (1.0 - 0.9f64.powi(t)))
                / ((v / (1.0 - 0.999f64.powi(t))).sqrt() + 1e-8);
        }
        let got = f64::from(to_host_f32(p[0].clone())[0]);
        assert!((got - q).abs() < 1e-6, "{got} vs {q}");
    }

    #[test]
    fn the_fused_update_is_the_op_by_op_one() {
        use burn::tensor::Distribution;
        let device = Default::default();
        let _lease = quench_kernels::SeededGenerator::acquire::<Cpu>(&device, 8);
        let random = |dims: [usize; 3]| {
            Tensor::<Cpu, 3>::random(dims, Distribution::Normal(0.0, 1.0), &device)
        };
        for config in [
            AdamConfig::default(),
            AdamConfig {
                weight_decay: 0.01,
                ..AdamConfig::default()
            },
            AdamConfig {
                weight_decay: 0.05,
                decoupled: true,
                beta1: 0.8,
                ..AdamConfig::default()
            },
        ] {
            // 3 members, one parameter large enough to be split over threads.
            let dims = [[3, 200, 150], [3, 1, 7]];
            let mut fused = MemberAdam::<Cpu>::new(config, 3, &device);
            let mut reference = MemberAdam::<Cpu>::unfused(config, 3, &device);
            let lr = Tensor::from_data(
                TensorData::new(vec![0.01f32, 0.003, 0.1], [3, 1, 1]),
                &device,
            );
            let mut p: Vec<_> = dims.iter().map(|&d| random(d)).collect();
            let mut q = p.clone();
            for t in 0..4 {
                let grads: Vec<_> = dims.iter().map(|&d| random(d)).collect();
                let mask = (t == 1).then(|| {
                    Tensor::<Cpu, 3, Bool>::from_data(
                        TensorData::new(vec![true, false, true], [3, 1, 1]),
                        &device,
                    )
                });
                p = fused.step(p, grads.clone(), lr.clone(), mask.clone());
                q = reference.step(q, grads, lr.clone(), mask);
            }
            for (a, b) in p.iter().zip(&q) {
                let (a, b) = (to_host_f32(a.clone()), to_host_f32(b.clone()));
                let worst = max_abs_difference(&a, &b);
                // Both take the same coefficients; the forms differ in f32 rounding of the
                // element-wise chain, well inside 5e-6 over 4 steps of lr <= 0.1.
                assert!(worst < 5e-6, "{config:?}: {worst}");
            }
        }
    }

    #[test]
    fn inactive_members_stay_frozen_and_resume_with_their_own_count() {
        let device = Default::default();
        let config = AdamConfig::default();
        let mut adam = MemberAdam::<Cpu>::new(config, 2, &device);
        let lr = Tensor::<Cpu, 3>::full([1, 1, 1], 0.1, &device);
        let mut p = vec![Tensor::<Cpu, 3>::ones([2, 1, 1], &device)];
        let g = || vec![Tensor::<Cpu, 3>::ones([2, 1, 1], &device)];
        let only_first = Tensor::<Cpu, 3, Bool>::from_data(
            TensorData::new(vec![true, false], [2, 1, 1]),
            &device,
        );
        p = adam.step(p, g(), lr.clone(), Some(only_first));
        assert_eq!(to_host_f32(p[0].clone())[1], 1.0);
        p = adam.step(p, g(), lr.clone(), None);
        let got = to_host_f32(p[0].clone());
        assert!((got[0] as f64 - reference(1.0, &[1.0, 1.0], 0.1, config)).abs() < 1e-6);
        assert!((got[1] as f64 - reference(1.0, &[1.0], 0.1, config)).abs() < 1e-6);
    }
}
