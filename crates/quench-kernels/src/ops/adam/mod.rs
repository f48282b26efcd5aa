//! The Adam and AdamW update over a member axis as an operation ([`QuenchOps::adam_step`]):
//! a parameter list, its gradients and their two moments in, the updated parameters and
//! moments out, each member with its own step size, bias correction and decay, members outside
//! the `active` mask left as they were.
//!
//! The coefficients are per-member tensors computed on the device from the step counts (no
//! read-back where a device queues work); the default composes Burn's element-wise ops per
//! parameter (about thirteen passes each, [`composed_step`]), the CPU backend's host kernel
//! does one pass per value ([`AdamUpdate`]), a CubeCL backend one launch for the whole list
//! (`adam::cube`).

use burn::tensor::{Bool, Tensor};
use serde::{Deserialize, Serialize};

use super::QuenchOps;

#[cfg(any(feature = "cuda", feature = "wgpu"))]
pub(crate) mod cube;
pub(crate) mod host;

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

/// One step's per-member coefficients, each `[members, 1, 1]`.
#[derive(Debug, Clone)]
pub struct AdamStep<B: QuenchOps> {
    /// `lr / (1 - beta1^t)`.
    pub step_size: Tensor<B, 3>,
    /// `sqrt(1 - beta2^t)`.
    pub root_correction: Tensor<B, 3>,
    /// AdamW's `1 - lr wd`; `None` without decoupled decay.
    pub decay: Option<Tensor<B, 3>>,
    /// The members that step (`None`: all).
    pub active: Option<Tensor<B, 3, Bool>>,
}

impl<B: QuenchOps> AdamStep<B> {
    /// The coefficients of the step after `steps` `[members, 1, 1]` (counted from 1; a member
    /// at 0 gets a guarded correction, for a member that has not stepped yet and is masked
    /// out) at learning rates `lr` (`[members, 1, 1]` or `[1, 1, 1]`), by the backend's
    /// [`QuenchOps::adam_coefficients`].
    pub fn new(
        config: AdamConfig,
        steps: Tensor<B, 3>,
        lr: Tensor<B, 3>,
        active: Option<Tensor<B, 3, Bool>>,
    ) -> Self {
        Self {
            active,
            ..B::adam_coefficients(config, steps, lr)
        }
    }
}

impl AdamConfig {
    /// Whether the step decays the parameter itself (AdamW with a weight decay).
    pub fn decays(&self) -> bool {
        self.decoupled && self.weight_decay != 0.0
    }
}

/// The default of [`QuenchOps::adam_coefficients`] in Burn's element-wise ops on `[members,
/// 1, 1]` tensors (about sixty; the decay's three only where the step decays).
pub fn composed_coefficients<B: QuenchOps>(
    config: AdamConfig,
    steps: Tensor<B, 3>,
    lr: Tensor<B, 3>,
) -> AdamStep<B> {
    let correction = |beta: f64| one_minus_power(steps.clone(), beta).clamp_min(1e-12);
    AdamStep {
        decay: config
            .decays()
            .then(|| (lr.clone() * config.weight_decay).neg().add_scalar(1.0)),
        step_size: lr / correction(config.beta1),
        root_correction: correction(config.beta2).sqrt(),
        active: None,
    }
}

/// `1 - beta^t` for the step counts `t` `[members, 1, 1]`, accurate to a few f32 roundings
/// for every `t`: as `-expm1(t ln beta)`, by its series where `|t ln beta| < 0.35` (early
/// steps, where `exp(x) - 1` would lose the leading digits: at `t = 1`, `beta = 0.999` the
/// correction is 1e-3 and `exp` alone carried it with 6e-5 relative error), else `1 - exp`.
/// PyTorch takes these corrections in f64; so, to f32 rounding, do we.
fn one_minus_power<B: QuenchOps>(steps: Tensor<B, 3>, beta: f64) -> Tensor<B, 3> {
    let x = steps * beta.ln();
    // expm1(x) = x (1 + x/2 (1 + x/3 (1 + x/4 (1 + x/5 (1 + x/6 (1 + x/7)))))); truncation
    // x^8/8! = 6e-9 at |x| = 0.35, against a value of 0.3.
    let mut series = x.ones_like();
    for k in (2..=7).rev() {
        series = series * x.clone() / f64::from(k) + 1.0;
    }
    let series = series * x.clone();
    let direct = x.clone().exp() - 1.0;
    let small = x.abs().lower_elem(0.35);
    direct.mask_where(small, series).neg()
}

/// The default of [`QuenchOps::adam_step`] in Burn's element-wise ops: the updated parameter
/// and moments.
pub fn composed_step<B: QuenchOps>(
    c: AdamConfig,
    param: Tensor<B, 3>,
    grad: Tensor<B, 3>,
    [m, v]: [Tensor<B, 3>; 2],
    step: &AdamStep<B>,
) -> [Tensor<B, 3>; 3] {
    let g = if c.weight_decay != 0.0 && !c.decoupled {
        grad + param.clone() * c.weight_decay
    } else {
        grad
    };
    let decayed = match &step.decay {
        Some(factor) => param.clone() * factor.clone(),
        None => param.clone(),
    };
    let m_new = m.clone() * c.beta1 + g.clone() * (1.0 - c.beta1);
    let v_new = v.clone() * c.beta2 + g.powi_scalar(2) * (1.0 - c.beta2);
    let denom = v_new.clone().sqrt() / step.root_correction.clone() + c.eps;
    let p_new = decayed - m_new.clone() / denom * step.step_size.clone();
    match &step.active {
        Some(mask) => {
            let mask = mask.clone().expand(param.dims());
            [
                param.mask_where(mask.clone(), p_new),
                m.mask_where(mask.clone(), m_new),
                v.mask_where(mask, v_new),
            ]
        }
        None => [p_new, m_new, v_new],
    }
}

/// One member's Adam update at one step, its constants folded once: the host form of
/// [`composed_step`]'s formulas, shared by every host update (the CPU backend's
/// [`QuenchOps::adam_step`] and quench-train's host MLP, which never materialises the
/// gradient).
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
    /// The update of step `step` (counted from 1) at learning rate `lr`, its corrections in
    /// f64.
    pub fn new(c: AdamConfig, lr: f64, step: u64) -> Self {
        let correction = |beta: f64| (1.0 - beta.powf(step as f64)).max(1e-12);
        let decay = if c.decoupled {
            (1.0 - lr * c.weight_decay) as f32
        } else {
            1.0
        };
        Self::with(
            c,
            (lr / correction(c.beta1)) as f32,
            correction(c.beta2).sqrt() as f32,
            decay,
        )
    }

    /// The update with its per-step coefficients given (those of an [`AdamStep`]).
    pub fn with(c: AdamConfig, step_size: f32, root_correction: f32, decay: f32) -> Self {
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
            step_size,
            root_correction,
            decay,
        }
    }

    /// The step's constants `[beta1, beta2, 1 - beta1, 1 - beta2, eps, coupled L2]` as f32,
    /// for a device kernel that takes them as scalars.
    pub fn constants(&self) -> [f32; 6] {
        [
            self.beta1,
            self.beta2,
            self.rest1,
            self.rest2,
            self.eps,
            self.coupled,
        ]
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
    /// in `m`, `v` (all of one length). Inlined so that a host kernel compiled for wider
    /// vectors ([`quench_host::simd_dispatch`]) compiles it at its width.
    #[inline(always)]
    pub fn apply_all(&self, p: &mut [f32], g: &[f32], m: &mut [f32], v: &mut [f32]) {
        for (((p, &g), m), v) in p.iter_mut().zip(g).zip(m).zip(v) {
            self.apply(p, g, m, v);
        }
    }
}

/// A parameter list after an Adam step: the parameters and their `[first, second]` moments,
/// in the order given.
pub type Stepped<B> = (Vec<Tensor<B, 3>>, Vec<[Tensor<B, 3>; 2]>);

/// One Adam step of every parameter of `params` with its gradient in `grads` and its moments
/// `[m, v]` in `moments` (all `[members, rows, cols]`, in the same order)
/// ([`QuenchOps::adam_step`]): the updated parameters and moments.
pub fn adam_step<B: QuenchOps>(
    config: AdamConfig,
    params: Vec<Tensor<B, 3>>,
    grads: Vec<Tensor<B, 3>>,
    moments: Vec<[Tensor<B, 3>; 2]>,
    step: &AdamStep<B>,
) -> Stepped<B> {
    B::adam_step(config, params, grads, moments, step)
}

/// The default of [`QuenchOps::adam_step`]: [`composed_step`] per parameter.
pub fn composed_steps<B: QuenchOps>(
    config: AdamConfig,
    params: Vec<Tensor<B, 3>>,
    grads: Vec<Tensor<B, 3>>,
    moments: Vec<[Tensor<B, 3>; 2]>,
    step: &AdamStep<B>,
) -> Stepped<B> {
    step_each(params, grads, moments, |p, g, moments| {
        composed_step(config, p, g, moments, step)
    })
}

/// Each parameter stepped by `adam` (parameter, gradient, moments -> parameter and moments),
/// one call per parameter in order, with the new moments beside.
pub(crate) fn step_each<T>(
    params: Vec<T>,
    grads: Vec<T>,
    moments: Vec<[T; 2]>,
    mut adam: impl FnMut(T, T, [T; 2]) -> [T; 3],
) -> (Vec<T>, Vec<[T; 2]>) {
    params
        .into_iter()
        .zip(grads)
        .zip(moments)
        .map(|((p, g), moments)| {
            let [p, m, v] = adam(p, g, moments);
            (p, [m, v])
        })
        .unzip()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::readback::{float_tensor, to_host_f32};
    use burn::backend::NdArray;

    /// The bias corrections against f64 over the first 20,000 steps (where `exp` alone was
    /// off by up to 6e-5 of the value).
    #[test]
    fn corrections_are_f64s_to_f32_rounding_at_every_step() {
        let steps: Vec<f32> = (1..=20_000).map(|t| t as f32).collect();
        let len = steps.len();
        let t = float_tensor::<NdArray<f32>, f32, 3>(steps, [len, 1, 1], &Default::default());
        for beta in [0.9, 0.99, 0.999, 0.9999] {
            let got = to_host_f32(one_minus_power(t.clone(), beta));
            let worst = got.iter().enumerate().map(|(i, &g)| {
                let want = 1.0 - beta.powi(i as i32 + 1);
                (f64::from(g) - want).abs() / want
            });
            let worst = quench_support::stats::max_or_nan(worst);
            assert!(worst < 5e-7, "beta {beta}: relative error {worst:e}");
        }
    }

    crate::device_test! {
        /// The operation on the tests' device (the host's f64 on the CPU, one CubeCL launch on
        /// lavapipe) against f64, per member with its own step count and rate, and the
        /// guarded count 0. A device's `exp` is accurate to `3 + 2|x|` ulp (WGSL's bound),
        /// which where `1 - e^x` is taken (`|x| >= 0.35`, a value of at least 0.3) stays
        /// under 2e-6 of it; the series and the host are at f32 rounding.
        fn the_coefficients_are_f64s_to_f32_rounding_on_every_backend<B>(device) {
            type D<B> = <B as burn::tensor::backend::AutodiffBackend>::InnerBackend;
            let config = AdamConfig {
                weight_decay: 0.01,
                decoupled: true,
                ..AdamConfig::default()
            };
            let counts: Vec<f32> = (0..2_000).chain([5_000, 20_000, 1_000_000]).map(|t| t as f32).collect();
            let members = counts.len();
            let rates: Vec<f32> = (0..members).map(|m| 1e-3 * (1 + m % 7) as f32).collect();
            let steps = float_tensor::<D<B>, f32, 3>(counts.clone(), [members, 1, 1], device);
            let lr = float_tensor::<D<B>, f32, 3>(rates.clone(), [members, 1, 1], device);
            let step = D::<B>::adam_coefficients(config, steps, lr);
            let decay = step.decay.map(to_host_f32).expect("AdamW with a weight decay decays");
            let [size, root] = [step.step_size, step.root_correction].map(to_host_f32);
            let correction = |t: f64, beta: f64| (1.0 - beta.powf(t)).max(1e-12);
            for m in 0..members {
                let (t, rate) = (f64::from(counts[m]), f64::from(rates[m]));
                let want = [
                    rate / correction(t, config.beta1),
                    correction(t, config.beta2).sqrt(),
                    1.0 - rate * config.weight_decay,
                ];
                for (name, got, want) in [("step size", size[m], want[0]), ("root", root[m], want[1]), ("decay", decay[m], want[2])] {
                    let error = (f64::from(got) - want).abs() / want.abs();
                    assert!(error < 2e-6, "{name} at t = {t}: {got} vs {want} ({error:e})");
                }
            }
        }
    }
}
