//! CubeCL kernels of the member Adam update ([`crate::ops::adam`]) for every CubeCL runtime:
//! one launch for a whole parameter list where the composition takes about thirteen
//! element-wise ops per parameter, and one for the step's per-member coefficients (a unit per
//! member) where it takes about sixty.
//!
//! Design: one unit per value of the list, one-dimensional cubes sized by CubeCL for the
//! device. The list's tensors are bound as sequences (one binding each); a unit finds its
//! parameter by walking the lengths (unrolled at compile time: one kernel per list length),
//! then reads the parameter, its gradient, its two moments and its member's coefficients
//! (`[members]` or one for all, served from cache) and writes the three results: seven floats
//! of traffic per value, the memory-bound minimum. A list longer than the device binds at
//! once (wgpu on Metal: about 30 buffers) goes in as many launches as it needs. A member
//! MLP's step ([`crate::ops::mlp`]) also hands it each member's clip coefficient, by which the
//! gradient is scaled as it is read (the composition's separate multiply).
#![allow(clippy::too_many_arguments)]

use burn_cubecl::tensor::CubeTensor;
use burn_cubecl::{BoolElement, CubeRuntime};
use cubecl::prelude::*;

use super::{AdamConfig, AdamStep, AdamUpdate, Stepped};
use crate::ops::cube::{
    Cube, elementwise, empty_like, from_cube, items_per_launch, sequence, to_cube,
};

/// A parameter-shaped tensor of the backend, `[members, rows, cols]`.
type Values<R, BT> = burn::tensor::Tensor<Cube<R, BT>, 3>;

/// Bindings of a launch besides the list's: the five coefficient tensors and a spare for the
/// runtime's own metadata buffer.
const FIXED_BINDINGS: u32 = 6;
/// Bindings per parameter: parameter, gradient, two moments and the three results.
const BINDINGS_PER_PARAMETER: u32 = 7;

/// The update of value `ABSOLUTE_POS` of the list `params` (the values of its parameters one
/// after another), member `i / (len / members)` of its parameter. A coefficient tensor of one
/// value serves every member (`member % len`); `decay`, `active` and `scale` (the gradient's
/// factor) are read only where `has_decay`, `has_active` and `has_scale` are 1 (a step may
/// have none; the caller then passes another coefficient tensor in their place).
#[cube(launch)]
fn adam_kernel<F: Float>(
    params: &Sequence<Tensor<F>>,
    grads: &Sequence<Tensor<F>>,
    firsts: &Sequence<Tensor<F>>,
    seconds: &Sequence<Tensor<F>>,
    step_size: &Tensor<F>,
    root_correction: &Tensor<F>,
    decay: &Tensor<F>,
    active: &Tensor<F>,
    scale: &Tensor<F>,
    params_out: &mut Sequence<Tensor<F>>,
    firsts_out: &mut Sequence<Tensor<F>>,
    seconds_out: &mut Sequence<Tensor<F>>,
    beta1: f32,
    beta2: f32,
    rest1: f32,
    rest2: f32,
    eps: f32,
    coupled: f32,
    members: u32,
    has_decay: u32,
    has_active: u32,
    has_scale: u32,
    #[define(F)] _dtype: StorageType,
) {
    let position = ABSOLUTE_POS;
    let mut start = 0usize;
    #[unroll]
    for t in 0..params.len() {
        let param = params.index(t);
        let end = start + param.len();
        if position >= start && position < end {
            let i = position - start;
            let member = i / (param.len() / members as usize);
            let p = param[i];
            let m = firsts.index(t)[i];
            let v = seconds.index(t)[i];
            let mut stepping = true;
            if has_active == 1 {
                stepping = active[member % active.len()] > F::new(0.5);
            }
            let mut p_new = p;
            let mut m_new = m;
            let mut v_new = v;
            if stepping {
                let mut g = grads.index(t)[i];
                if has_scale == 1 {
                    g *= scale[member % scale.len()];
                }
                g += F::cast_from(coupled) * p;
                m_new = m * F::cast_from(beta1) + g * F::cast_from(rest1);
                v_new = v * F::cast_from(beta2) + g * g * F::cast_from(rest2);
                let denominator = F::sqrt(v_new) / root_correction[member % root_correction.len()]
                    + F::cast_from(eps);
                let mut kept = p;
                if has_decay == 1 {
                    kept = p * decay[member % decay.len()];
                }
                p_new = kept - m_new / denominator * step_size[member % step_size.len()];
            }
            params_out.index_mut(t)[i] = p_new;
            firsts_out.index_mut(t)[i] = m_new;
            seconds_out.index_mut(t)[i] = v_new;
        }
        start = end;
    }
}

/// `1 - beta^t = -expm1(x)`, `x = t ln beta`, as the composition takes it: the series to `x^7`
/// where `|x| < 0.35` (where `exp(x) - 1` would lose the leading digits), else `1 - exp(x)`;
/// at least 1e-12.
#[cube]
fn one_minus_power<F: Float>(t: F, ln_beta: f32) -> F {
    let x = t * F::cast_from(ln_beta);
    let mut series = F::new(1.0);
    series = series * x / F::new(7.0) + F::new(1.0);
    series = series * x / F::new(6.0) + F::new(1.0);
    series = series * x / F::new(5.0) + F::new(1.0);
    series = series * x / F::new(4.0) + F::new(1.0);
    series = series * x / F::new(3.0) + F::new(1.0);
    series = series * x / F::new(2.0) + F::new(1.0);
    let mut value = -(series * x);
    if F::abs(x) >= F::new(0.35) {
        value = F::new(1.0) - F::exp(x);
    }
    F::max(value, F::new(1e-12))
}

/// Member `ABSOLUTE_POS`'s coefficients from its step count and rate (a rate tensor of one
/// value serves every member): `lr / (1 - beta1^t)`, `sqrt(1 - beta2^t)`, `1 - lr wd`.
#[cube(launch)]
fn coefficients_kernel<F: Float>(
    steps: &Tensor<F>,
    lr: &Tensor<F>,
    step_size: &mut Tensor<F>,
    root_correction: &mut Tensor<F>,
    decay: &mut Tensor<F>,
    ln_beta1: f32,
    ln_beta2: f32,
    weight_decay: f32,
    #[define(F)] _dtype: StorageType,
) {
    let member = ABSOLUTE_POS;
    if member >= step_size.len() {
        terminate!();
    }
    let t = steps[member % steps.len()];
    let rate = lr[member % lr.len()];
    step_size[member] = rate / one_minus_power::<F>(t, ln_beta1);
    root_correction[member] = F::sqrt(one_minus_power::<F>(t, ln_beta2));
    decay[member] = F::new(1.0) - rate * F::cast_from(weight_decay);
}

/// [`crate::ops::QuenchOps::adam_coefficients`] on a CubeCL backend: one launch where the
/// composition takes about sixty (the decay, written in the same launch, kept where the step
/// decays).
pub(crate) fn coefficients<R: CubeRuntime, BT: BoolElement>(
    config: AdamConfig,
    steps: Values<R, BT>,
    lr: Values<R, BT>,
) -> AdamStep<Cube<R, BT>> {
    let members = steps.dims()[0].max(lr.dims()[0]);
    let [steps, lr] = [steps, lr].map(to_cube);
    let outputs = [(); 3].map(|_| crate::ops::cube::empty_shaped(&steps, [members, 1, 1]));
    let client = steps.client.clone();
    let (count, dim) = elementwise(&client, members);
    let dtype = steps.dtype;
    coefficients_kernel::launch::<R>(
        &client,
        count,
        dim,
        steps.into_tensor_arg(),
        lr.into_tensor_arg(),
        outputs[0].clone().into_tensor_arg(),
        outputs[1].clone().into_tensor_arg(),
        outputs[2].clone().into_tensor_arg(),
        config.beta1.ln() as f32,
        config.beta2.ln() as f32,
        config.weight_decay as f32,
        dtype.into(),
    );
    let [step_size, root_correction, decay] = outputs.map(from_cube);
    AdamStep {
        step_size,
        root_correction,
        decay: config.decays().then_some(decay),
        active: None,
    }
}

/// [`crate::ops::QuenchOps::adam_step`] on a CubeCL backend, with each gradient times its
/// member's `scale` `[members]` (`None`: 1): one launch for the list (more only where it has
/// more tensors than the device binds at once).
pub(crate) fn adam_step<R: CubeRuntime, BT: BoolElement>(
    config: AdamConfig,
    params: Vec<Values<R, BT>>,
    grads: Vec<Values<R, BT>>,
    moments: Vec<[Values<R, BT>; 2]>,
    step: &AdamStep<Cube<R, BT>>,
    scale: Option<&CubeTensor<R>>,
) -> Stepped<Cube<R, BT>> {
    let Some(first) = params.first() else {
        return (Vec::new(), Vec::new());
    };
    let members = first.dims()[0];
    let active = step.active.as_ref().map(|a| to_cube(a.clone().float()));
    let step_size = to_cube(step.step_size.clone());
    let root = to_cube(step.root_correction.clone());
    let decay = step.decay.clone().map(to_cube);
    // The host kernel's constants, folded from f64 once.
    let [beta1, beta2, rest1, rest2, eps, coupled] =
        AdamUpdate::with(config, 0.0, 1.0, 1.0).constants();
    let client = step_size.client.clone();
    let per_launch = items_per_launch(&client, FIXED_BINDINGS, BINDINGS_PER_PARAMETER);
    let lists: Vec<[CubeTensor<R>; 4]> = params
        .into_iter()
        .zip(grads)
        .zip(moments)
        .map(|((p, g), [m, v])| [p, g, m, v].map(to_cube))
        .collect();
    let mut stepped = (
        Vec::with_capacity(lists.len()),
        Vec::with_capacity(lists.len()),
    );
    for chunk in lists.chunks(per_launch) {
        let outputs: Vec<[CubeTensor<R>; 3]> = chunk
            .iter()
            .map(|[p, ..]| [(); 3].map(|_| empty_like(p)))
            .collect();
        let values = chunk.iter().map(|[p, ..]| p.meta.num_elements()).sum();
        let (count, dim) = elementwise(&client, values);
        let dtype = chunk[0][0].dtype;
        let input = |k: usize| sequence(chunk.iter().map(|tensors| &tensors[k]));
        let output = |k: usize| sequence(outputs.iter().map(|tensors| &tensors[k]));
        let or_step_size = |t: Option<&CubeTensor<R>>| t.unwrap_or(&step_size).clone();
        adam_kernel::launch::<R>(
            &client,
            count,
            dim,
            input(0),
            input(1),
            input(2),
            input(3),
            step_size.clone().into_tensor_arg(),
            root.clone().into_tensor_arg(),
            or_step_size(decay.as_ref()).into_tensor_arg(),
            or_step_size(active.as_ref()).into_tensor_arg(),
            or_step_size(scale).into_tensor_arg(),
            output(0),
            output(1),
            output(2),
            beta1,
            beta2,
            rest1,
            rest2,
            eps,
            coupled,
            members as u32,
            u32::from(decay.is_some()),
            u32::from(active.is_some()),
            u32::from(scale.is_some()),
            dtype.into(),
        );
        for [p, m, v] in outputs {
            stepped.0.push(from_cube(p));
            stepped.1.push([m, v].map(from_cube));
        }
    }
    stepped
}
