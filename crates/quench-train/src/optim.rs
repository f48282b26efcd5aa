//! Adam with a member axis: per-member learning rate, per-member step count, and a mask of
//! the members that take a step (early-stopped members stay frozen). On the CPU backend the
//! update of each parameter is one fused pass over host memory; elsewhere it is tensor ops,
//! which the device's compiler fuses.

use burn::tensor::{Bool, Tensor};
use quench_device::lanes::in_lanes;
use quench_device::readback::{float_tensor, to_host_f32};
use quench_device::{QuenchOps, host_lanes};
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
pub struct MemberAdam<B: QuenchOps> {
    config: AdamConfig,
    state: State<B>,
}

/// Where the moments and step counts live.
#[derive(Debug, Clone)]
enum State<B: QuenchOps> {
    /// Tensors, updated op by op (about 13 passes over each parameter): the form for backends
    /// that queue work to a device and fuse it there.
    Tensors {
        /// First and second moments per parameter, created at the first step.
        moments: Vec<(Tensor<B, 3>, Tensor<B, 3>)>,
        /// Steps taken per member, `[members, 1, 1]`.
        steps: Tensor<B, 3>,
    },
    /// Host memory, for the CPU backend: each parameter's update is one fused pass (moments in
    /// place), with one copy of the parameter and its gradient out and one back.
    Host {
        /// First and second moments per parameter, row-major as the parameter.
        moments: Vec<(Vec<f32>, Vec<f32>)>,
        /// Steps taken per member.
        steps: Vec<u64>,
    },
}

/// Values below which a fused update runs on the calling thread only.
const THREADED_FROM: usize = 1 << 16;

impl<B: QuenchOps> MemberAdam<B> {
    /// Fresh state for `members` members: fused on the CPU backend, op by op elsewhere.
    pub fn new(config: AdamConfig, members: usize, device: &B::Device) -> Self {
        if B::host_kernels() {
            Self {
                config,
                state: State::Host {
                    moments: Vec::new(),
                    steps: vec![0; members],
                },
            }
        } else {
            Self::unfused(config, members, device)
        }
    }

    /// Fresh state updated op by op on any backend: the reference the fused update is tested
    /// and measured against.
    pub fn unfused(config: AdamConfig, members: usize, device: &B::Device) -> Self {
        Self {
            config,
            state: State::Tensors {
                moments: Vec::new(),
                steps: Tensor::zeros([members, 1, 1], device),
            },
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
        match &mut self.state {
            State::Tensors { moments, steps } => {
                tensor_step(self.config, moments, steps, params, grads, lr, active)
            }
            State::Host { moments, steps } => {
                host_step(self.config, moments, steps, params, grads, lr, active)
            }
        }
    }
}

/// Zero first and second moments for `params`, made at the first step (the parameter list is
/// not known before it).
fn zero_moments_once<B: QuenchOps, T: Clone>(
    moments: &mut Vec<(T, T)>,
    params: &[Tensor<B, 3>],
    zeros: impl Fn(&Tensor<B, 3>) -> T,
) {
    if moments.len() != params.len() {
        *moments = params
            .iter()
            .map(|p| {
                let zero = zeros(p);
                (zero.clone(), zero)
            })
            .collect();
    }
}

/// The op-by-op update.
fn tensor_step<B: QuenchOps>(
    c: AdamConfig,
    moments: &mut Vec<(Tensor<B, 3>, Tensor<B, 3>)>,
    steps: &mut Tensor<B, 3>,
    params: Vec<Tensor<B, 3>>,
    grads: Vec<Tensor<B, 3>>,
    lr: Tensor<B, 3>,
    active: Option<Tensor<B, 3, Bool>>,
) -> Vec<Tensor<B, 3>> {
    zero_moments_once(moments, &params, Tensor::zeros_like);
    let advance = match &active {
        Some(mask) => mask.clone().float(),
        None => steps.ones_like(),
    };
    *steps = steps.clone() + advance;
    // Bias corrections 1 - beta^t with a per-member t; inactive members with t = 0 get a
    // guarded denominator and are masked out below anyway.
    let correction = |beta: f64| {
        (steps.clone() * beta.ln())
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
    for ((p, g), (m, v)) in params.into_iter().zip(grads).zip(moments.iter_mut()) {
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

/// One member's Adam update at one step, its constants folded once: the fused form of the
/// op-by-op formulas, shared by every host update (this module's and
/// [`HostMlp::adam_step`](crate::host_mlp::HostMlp::adam_step)'s, which never materialises
/// the gradient).
#[derive(Debug, Clone, Copy)]
pub struct AdamUpdate {
    beta1: f32,
    beta2: f32,
    /// `1 - beta1` and `1 - beta2`, taken in f64 first: `1 - 0.999` in f32 is off by 1.3e-5
    /// relative.
    rest1: f32,
    rest2: f32,
    eps: f32,
    /// PyTorch's coupled L2 coefficient (0 for AdamW).
    coupled: f32,
    /// `lr / (1 - beta1^t)`.
    step_size: f32,
    /// `sqrt(1 - beta2^t)`.
    root_correction: f32,
    /// AdamW's `1 - lr wd` (1 without decoupled decay).
    decay: f32,
}

impl AdamUpdate {
    /// The update of step `step` (counted from 1) at learning rate `lr`.
    pub fn new(c: AdamConfig, lr: f64, step: u64) -> Self {
        let correction = |beta: f64| (1.0 - beta.powf(step as f64)).max(1e-12);
        Self {
            beta1: c.beta1 as f32,
            beta2: c.beta2 as f32,
            rest1: (1.0 - c.beta1) as f32,
            rest2: (1.0 - c.beta2) as f32,
            eps: c.eps as f32,
            coupled: if c.decoupled {
                0.0
            } else {
                c.weight_decay as f32
            },
            step_size: (lr / correction(c.beta1)) as f32,
            root_correction: correction(c.beta2).sqrt() as f32,
            decay: if c.decoupled {
                (1.0 - lr * c.weight_decay) as f32
            } else {
                1.0
            },
        }
    }

    /// Updates one value `p` with gradient `g` and its moments `m`, `v` in place.
    #[inline(always)]
    pub fn apply(&self, p: &mut f32, g: f32, m: &mut f32, v: &mut f32) {
        let g = g + self.coupled * *p;
        *m = *m * self.beta1 + g * self.rest1;
        *v = *v * self.beta2 + g * g * self.rest2;
        let denom = v.sqrt() / self.root_correction + self.eps;
        *p = *p * self.decay - *m / denom * self.step_size;
    }

    /// [`apply`](Self::apply) to every value of `p` with its gradient in `g` and its moments
    /// in `m`, `v` (all of one length).
    pub fn apply_all(&self, p: &mut [f32], g: &[f32], m: &mut [f32], v: &mut [f32]) {
        for (((p, &g), m), v) in p.iter_mut().zip(g).zip(m).zip(v) {
            self.apply(p, g, m, v);
        }
    }
}

/// The fused update on host memory.
fn host_step<B: QuenchOps>(
    c: AdamConfig,
    moments: &mut Vec<(Vec<f32>, Vec<f32>)>,
    steps: &mut [u64],
    params: Vec<Tensor<B, 3>>,
    grads: Vec<Tensor<B, 3>>,
    lr: Tensor<B, 3>,
    active: Option<Tensor<B, 3, Bool>>,
) -> Vec<Tensor<B, 3>> {
    zero_moments_once(moments, &params, |p| vec![0.0; p.shape().num_elements()]);
    let members = steps.len();
    let lr = to_host_f32(lr);
    let lr_of = |m: usize| f64::from(if lr.len() == 1 { lr[0] } else { lr[m] });
    let active: Vec<bool> = match active {
        Some(mask) => to_host_f32(mask.float()).iter().map(|&a| a > 0.5).collect(),
        None => vec![true; members],
    };
    let per_member: Vec<Option<AdamUpdate>> = (0..members)
        .map(|m| {
            active[m].then(|| {
                steps[m] += 1;
                AdamUpdate::new(c, lr_of(m), steps[m])
            })
        })
        .collect();
    let lanes = host_lanes::<B>();
    let mut updated = Vec::with_capacity(params.len());
    for ((p, g), (m, v)) in params.into_iter().zip(grads).zip(moments.iter_mut()) {
        let (dims, device) = (p.dims(), p.device());
        let mut values = to_host_f32(p);
        let grad = to_host_f32(g);
        let per = (values.len() / members.max(1)).max(1);
        // Each active member's slices, cut into pieces for the cores when the parameter is
        // large.
        let lanes = if values.len() >= THREADED_FROM {
            lanes
        } else {
            1
        };
        let piece = values.len().div_ceil(lanes).max(1);
        let mut jobs = Vec::new();
        for ((((p, g), m), v), step) in values
            .chunks_mut(per)
            .zip(grad.chunks(per))
            .zip(m.chunks_mut(per))
            .zip(v.chunks_mut(per))
            .zip(&per_member)
        {
            let Some(step) = *step else { continue };
            for (((p, g), m), v) in p
                .chunks_mut(piece)
                .zip(g.chunks(piece))
                .zip(m.chunks_mut(piece))
                .zip(v.chunks_mut(piece))
            {
                jobs.push(Job { p, g, m, v, step });
            }
        }
        in_lanes(jobs, lanes, |group| {
            group.into_iter().for_each(Job::run);
        });
        updated.push(float_tensor(values, dims, &device));
    }
    updated
}

/// One slice of one member's parameter, with its gradient and moments.
struct Job<'a> {
    p: &'a mut [f32],
    g: &'a [f32],
    m: &'a mut [f32],
    v: &'a mut [f32],
    step: AdamUpdate,
}

impl Job<'_> {
    /// The op-by-op formulas in one pass.
    fn run(self) {
        self.step.apply_all(self.p, self.g, self.m, self.v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::NdArray;
    use burn::tensor::TensorData;
    use quench_device::readback::to_host_f32;
    use quench_device::stats::max_abs_difference;

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
        let _lease = quench_device::SeededGenerator::acquire::<Cpu>(&device, 8);
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
                // The op-by-op form's bias corrections come from exp(t ln beta) in f32, off
                // by up to 1e-5 relative at small t; over 4 steps of lr <= 0.1 that is 4e-6.
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
