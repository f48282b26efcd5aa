//! Adam with a member axis: per-member learning rate, per-member step count, and a mask of
//! the members that take a step (early-stopped members stay frozen).

use burn::tensor::backend::Backend;
use burn::tensor::{Bool, Tensor};
use serde::{Deserialize, Serialize};

/// Adam's constants, as PyTorch names them; `weight_decay` is PyTorch's coupled L2 term for
/// Adam, or AdamW's decoupled decay when `decoupled` is set.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AdamConfig {
    /// Decay of the first moment.
    pub beta1: f64,
    /// Decay of the second moment.
    pub beta2: f64,
    /// Added to the root of the second moment.
    pub eps: f64,
    /// L2 coefficient added to the gradient (`g + wd p`), or with `decoupled` AdamW's decay
    /// (`p (1 - lr wd)` before the Adam update).
    pub weight_decay: f64,
    /// AdamW (Loshchilov and Hutter) instead of Adam's L2 term.
    pub decoupled: bool,
}

impl Default for AdamConfig {
    fn default() -> Self {
        Self {
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.0,
            decoupled: false,
        }
    }
}

/// Adam state for a parameter list whose tensors share the leading member axis.
#[derive(Debug, Clone)]
pub struct MemberAdam<B: Backend> {
    config: AdamConfig,
    /// First and second moments per parameter, created at the first step.
    moments: Vec<(Tensor<B, 3>, Tensor<B, 3>)>,
    /// Steps taken per member, `[members, 1, 1]`.
    steps: Tensor<B, 3>,
}

impl<B: Backend> MemberAdam<B> {
    /// Fresh state for `members` members.
    pub fn new(config: AdamConfig, members: usize, device: &B::Device) -> Self {
        Self {
            config,
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
        let c = self.config;
        if self.moments.len() != params.len() {
            self.moments = params
                .iter()
                .map(|p| (p.zeros_like(), p.zeros_like()))
                .collect();
        }
        let advance = match &active {
            Some(mask) => mask.clone().float(),
            None => self.steps.ones_like(),
        };
        self.steps = self.steps.clone() + advance;
        // Bias corrections 1 - beta^t with a per-member t; inactive members with t = 0 get a
        // guarded denominator and are masked out below anyway.
        let correction = |beta: f64| {
            (self.steps.clone() * beta.ln())
                .exp()
                .neg()
                .add_scalar(1.0)
                .clamp_min(1e-12)
        };
        let decay = (c.decoupled && c.weight_decay != 0.0)
            .then(|| (lr.clone() * c.weight_decay).neg().add_scalar(1.0));
        let step_size = lr / correction(c.beta1);
        let root_correction = correction(c.beta2).sqrt();

        let mut updated = Vec::with_capacity(params.len());
        for ((p, g), (m, v)) in params.into_iter().zip(grads).zip(self.moments.iter_mut()) {
            let g = if c.weight_decay != 0.0 && !c.decoupled {
                g + p.clone() * c.weight_decay
            } else {
                g
            };
            let decayed = match &decay {
                Some(factor) => p.clone() * factor.clone(),
                None => p.clone(),
            };
            let m_new = m.clone() * c.beta1 + g.clone() * (1.0 - c.beta1);
            let v_new = v.clone() * c.beta2 + g.powi_scalar(2) * (1.0 - c.beta2);
            let denom = v_new.clone().sqrt() / root_correction.clone() + c.eps;
            let p_new = decayed - m_new.clone() / denom * step_size.clone();
            match &active {
                Some(mask) => {
                    let mask = mask.clone().expand(p.dims());
                    *m = m.clone().mask_where(mask.clone(), m_new);
                    *v = v.clone().mask_where(mask.clone(), v_new);
                    updated.push(p.mask_where(mask, p_new));
                }
                None => {
                    *m = m_new;
                    *v = v_new;
                    updated.push(p_new);
                }
            }
        }
        updated
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::NdArray;
    use burn::tensor::TensorData;
    use quench_device::readback::to_host_f32;

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
