//! CubeCL kernels of the member Adam update ([`crate::ops::adam`]) for every CubeCL runtime:
//! one launch per parameter where the composition takes about thirteen element-wise ops, and
//! one for the step's per-member coefficients (a unit per member) where it takes about sixty.
//!
//! Design: one unit per value, one-dimensional cubes sized by CubeCL for the device; each unit
//! reads the parameter, its gradient, its two moments and its member's coefficients (`[members]`
//! or one for all, served from cache) and writes the three results: seven floats of traffic per
//! value, the memory-bound minimum. A member MLP's step ([`crate::ops::mlp`]) also hands it each
//! member's clip coefficient, by which the gradient is scaled as it is read (the composition's
//! separate multiply).
#![allow(clippy::too_many_arguments)]

use burn_cubecl::tensor::CubeTensor;
use burn_cubecl::{BoolElement, CubeRuntime};
use cubecl::prelude::*;

use super::{AdamConfig, AdamStep, AdamUpdate};
use crate::ops::cube::{Cube, elementwise, empty_like, from_cube, to_cube};

/// A parameter-shaped tensor of the backend, `[members, rows, cols]`.
type Values<R, BT> = burn::tensor::Tensor<Cube<R, BT>, 3>;

/// The update of value `ABSOLUTE_POS` of member `position / per_member`. A coefficient
/// tensor of one value serves every member (`member % len`); `decay`, `active` and `scale` (the
/// gradient's factor) are read only where `has_decay`, `has_active` and `has_scale` are 1 (a
/// step may have none; the caller then passes another coefficient tensor in their place).
#[cube(launch)]
fn adam_kernel<F: Float>(
    param: &Tensor<F>,
    grad: &Tensor<F>,
    first: &Tensor<F>,
    second: &Tensor<F>,
    step_size: &Tensor<F>,
    root_correction: &Tensor<F>,
    decay: &Tensor<F>,
    active: &Tensor<F>,
    scale: &Tensor<F>,
    param_out: &mut Tensor<F>,
    first_out: &mut Tensor<F>,
    second_out: &mut Tensor<F>,
    beta1: f32,
    beta2: f32,
    rest1: f32,
    rest2: f32,
    eps: f32,
    coupled: f32,
    per_member: u32,
    has_decay: u32,
    has_active: u32,
    has_scale: u32,
    #[define(F)] _dtype: StorageType,
) {
    let position = ABSOLUTE_POS;
    if position >= param.len() {
        terminate!();
    }
    let member = position / per_member as usize;
    let p = param[position];
    let m = first[position];
    let v = second[position];
    let mut stepping = true;
    if has_active == 1 {
        stepping = active[member % active.len()] > F::new(0.5);
    }
    if stepping {
        let beta1 = F::cast_from(beta1);
        let beta2 = F::cast_from(beta2);
        let rest1 = F::cast_from(rest1);
        let rest2 = F::cast_from(rest2);
        let eps = F::cast_from(eps);
        let coupled = F::cast_from(coupled);
        let mut g = grad[position];
        if has_scale == 1 {
            g *= scale[member % scale.len()];
        }
        g += coupled * p;
        let m_new = m * beta1 + g * rest1;
        let v_new = v * beta2 + g * g * rest2;
        let denominator = F::sqrt(v_new) / root_correction[member % root_correction.len()] + eps;
        let mut kept = p;
        if has_decay == 1 {
            kept = p * decay[member % decay.len()];
        }
        param_out[position] = kept - m_new / denominator * step_size[member % step_size.len()];
        first_out[position] = m_new;
        second_out[position] = v_new;
    } else {
        param_out[position] = p;
        first_out[position] = m;
        second_out[position] = v;
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

/// [`crate::ops::QuenchOps::adam_step`] on a CubeCL backend: one launch.
pub(crate) fn adam_step<R: CubeRuntime, BT: BoolElement>(
    config: AdamConfig,
    param: Values<R, BT>,
    grad: Values<R, BT>,
    moments: [Values<R, BT>; 2],
    step: &AdamStep<Cube<R, BT>>,
) -> [Values<R, BT>; 3] {
    adam_step_scaled(config, param, grad, moments, step, None)
}

/// [`adam_step`] of the gradient times its member's `scale` `[members]` (`None`: 1), in the
/// same launch.
pub(crate) fn adam_step_scaled<R: CubeRuntime, BT: BoolElement>(
    config: AdamConfig,
    param: Values<R, BT>,
    grad: Values<R, BT>,
    [m, v]: [Values<R, BT>; 2],
    step: &AdamStep<Cube<R, BT>>,
    scale: Option<&CubeTensor<R>>,
) -> [Values<R, BT>; 3] {
    let [members, rows, cols] = param.dims();
    let per_member = (rows * cols).max(1) as u32;
    let active = step.active.as_ref().map(|a| a.clone().float());
    let [param, grad, m, v] = [param, grad, m, v].map(to_cube);
    let step_size = to_cube(step.step_size.clone());
    let root = to_cube(step.root_correction.clone());
    let decay = step.decay.clone().map(to_cube);
    let active = active.map(to_cube);
    let outputs = [(); 3].map(|_| empty_like(&param));
    // The host kernel's constants, folded from f64 once.
    let [beta1, beta2, rest1, rest2, eps, coupled] =
        AdamUpdate::with(config, 0.0, 1.0, 1.0).constants();
    let client = param.client.clone();
    let (count, dim) = elementwise(&client, members * rows * cols);
    let dtype = param.dtype;
    adam_kernel::launch::<R>(
        &client,
        count,
        dim,
        param.into_tensor_arg(),
        grad.into_tensor_arg(),
        m.into_tensor_arg(),
        v.into_tensor_arg(),
        step_size.clone().into_tensor_arg(),
        root.into_tensor_arg(),
        decay
            .clone()
            .unwrap_or_else(|| step_size.clone())
            .into_tensor_arg(),
        active
            .clone()
            .unwrap_or_else(|| step_size.clone())
            .into_tensor_arg(),
        scale
            .cloned()
            .unwrap_or_else(|| step_size.clone())
            .into_tensor_arg(),
        outputs[0].clone().into_tensor_arg(),
        outputs[1].clone().into_tensor_arg(),
        outputs[2].clone().into_tensor_arg(),
        beta1,
        beta2,
        rest1,
        rest2,
        eps,
        coupled,
        per_member,
        u32::from(decay.is_some()),
        u32::from(active.is_some()),
        u32::from(scale.is_some()),
        dtype.into(),
    );
    outputs.map(from_cube)
}
