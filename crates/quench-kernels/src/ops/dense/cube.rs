//! CubeCL kernels of the dense layer's epilogue and of layer normalisation
//! ([`crate::ops::dense`]) for every CubeCL runtime. The products stay cubek's matmuls.
//!
//! Design:
//! - the dense epilogue: one unit per output value, `activation(z + b)` and what the backward
//!   pass keeps in one pass (the composition takes a bias add and an activation, two or three
//!   launches); its backward pass's `dz = dy f'` likewise one pass, `f'` from the output or,
//!   for leaky ReLU and GELU, the derivative the epilogue kept (no second `erf` backward);
//! - layer normalisation: one unit per row (the widths here are 16 to 512), which reads its
//!   row twice (mean, then variance) and writes the normalised row, the output and `1 / std`:
//!   one launch where the composition takes nine. The backward pass is two launches: one unit
//!   per row for `dx` (two passes over the row), one unit per member and column for the gain's
//!   and shift's sums over rows (the composition: about twelve).
#![allow(clippy::too_many_arguments)]

use burn_cubecl::tensor::CubeTensor;
use burn_cubecl::{BoolElement, CubeRuntime};
use cubecl::prelude::*;

use super::{Activation, DenseOutput, NormGradients, NormTape, Normed};
use crate::ops::cube::{Cube, elementwise, empty_like, empty_shaped, from_cube, to_cube};

/// A `[members, rows, width]` tensor of the backend.
type Values<R, BT> = burn::tensor::Tensor<Cube<R, BT>, 3>;

/// The activation's code in the kernels: 0 none, 1 ReLU, 2 tanh, 3 leaky ReLU, 4 GELU.
fn code(activation: Option<Activation>) -> (u32, f32) {
    match activation {
        None => (0, 0.0),
        Some(Activation::Relu) => (1, 0.0),
        Some(Activation::Tanh) => (2, 0.0),
        Some(Activation::LeakyRelu(slope)) => (3, slope as f32),
        Some(Activation::Gelu) => (4, 0.0),
    }
}

/// The standard normal distribution function `Phi(z) = (1 + erf(z / sqrt 2)) / 2`.
#[cube]
fn normal_cdf<F: Float>(z: F) -> F {
    (F::new(1.0) + F::erf(z * F::new(std::f32::consts::FRAC_1_SQRT_2))) * F::new(0.5)
}

/// `activation(z + bias)` per value, and what the backward pass keeps (the derivative where the
/// activation keeps it, else the output). `slope` is a leaky ReLU's below zero, `width` the
/// output's last axis, `per_member` its values per member.
#[cube(launch)]
fn dense_epilogue_kernel<F: Float>(
    z: &Tensor<F>,
    bias: &Tensor<F>,
    output: &mut Tensor<F>,
    kept: &mut Tensor<F>,
    width: u32,
    per_member: u32,
    activation: u32,
    slope: f32,
    #[define(F)] _dtype: StorageType,
) {
    let position = ABSOLUTE_POS;
    if position >= z.len() {
        terminate!();
    }
    let member = position / per_member as usize;
    let column = position % width as usize;
    // A bias of one member serves every member.
    let row = member % (bias.len() / width as usize);
    let value = z[position] + bias[row * width as usize + column];
    let mut out = value;
    // Tanh and ReLU find their derivative from the output; leaky ReLU and GELU keep theirs.
    let mut derivative = F::new(1.0);
    if activation == 1 {
        out = F::max(value, F::new(0.0));
    } else if activation == 2 {
        out = F::tanh(value);
    } else if activation == 3 {
        if value < F::new(0.0) {
            out = value * F::cast_from(slope);
            derivative = F::cast_from(slope);
        }
    } else if activation == 4 {
        // Phi(z) + z phi(z), phi the standard normal density.
        let cdf = normal_cdf::<F>(value);
        let density = F::exp(value * value * F::new(-0.5)) * F::new(0.398_942_3);
        out = value * cdf;
        derivative = cdf + value * density;
    }
    output[position] = out;
    if activation >= 3 {
        kept[position] = derivative;
    } else {
        kept[position] = out;
    }
}

/// `dz = dy f'` per value from `kept` as [`dense_epilogue_kernel`] wrote it: `f'` from the
/// output (ReLU, tanh) or the kept derivative itself (leaky ReLU, GELU).
#[cube(launch)]
fn activation_gradient_kernel<F: Float>(
    dy: &Tensor<F>,
    kept: &Tensor<F>,
    dz: &mut Tensor<F>,
    activation: u32,
    #[define(F)] _dtype: StorageType,
) {
    let position = ABSOLUTE_POS;
    if position >= dy.len() {
        terminate!();
    }
    let g = dy[position];
    let k = kept[position];
    let mut d = g;
    if activation == 1 {
        if k <= F::new(0.0) {
            d = F::new(0.0);
        }
    } else if activation == 2 {
        d = g * (F::new(1.0) - k * k);
    } else if activation >= 3 {
        // The derivative itself.
        d = g * k;
    }
    dz[position] = d;
}

/// [`crate::ops::QuenchOps::dense_forward`] on a CubeCL backend: cubek's product, then one
/// epilogue launch. A weight or bias shared by every member takes the composition
/// (`dense::dense` routes those there already).
pub(crate) fn dense_forward<R: CubeRuntime, BT: BoolElement>(
    x: Values<R, BT>,
    weight: &Values<R, BT>,
    bias: &Values<R, BT>,
    activation: Option<Activation>,
) -> DenseOutput<Cube<R, BT>> {
    let [members, rows, _] = x.dims();
    let fan_out = weight.dims()[2];
    let z = to_cube(x.matmul(weight.clone()));
    let bias = to_cube(bias.clone());
    let (output, kept) = (empty_like(&z), empty_like(&z));
    let (activation, slope) = code(activation);
    let client = z.client.clone();
    let (count, dim) = elementwise(&client, members * rows * fan_out);
    let dtype = z.dtype;
    dense_epilogue_kernel::launch::<R>(
        &client,
        count,
        dim,
        z.into_tensor_arg(),
        bias.into_tensor_arg(),
        output.clone().into_tensor_arg(),
        kept.clone().into_tensor_arg(),
        fan_out as u32,
        (rows * fan_out).max(1) as u32,
        activation,
        slope,
        dtype.into(),
    );
    DenseOutput {
        output: from_cube(output),
        kept: from_cube(kept),
    }
}

/// `dz = dy f'` in one launch from what the epilogue kept (`dy` itself without an
/// activation).
fn pre_activation_gradient<R: CubeRuntime>(
    dy: CubeTensor<R>,
    kept: CubeTensor<R>,
    activation: Option<Activation>,
) -> CubeTensor<R> {
    if activation.is_none() {
        return dy;
    }
    let (activation, _) = code(activation);
    let dz = empty_like(&dy);
    let client = dy.client.clone();
    let values = dy.meta.shape().num_elements();
    let (count, dim) = elementwise(&client, values);
    let dtype = dy.dtype;
    activation_gradient_kernel::launch::<R>(
        &client,
        count,
        dim,
        dy.into_tensor_arg(),
        kept.into_tensor_arg(),
        dz.clone().into_tensor_arg(),
        activation,
        dtype.into(),
    );
    dz
}

/// [`crate::ops::QuenchOps::dense_backward`] on a CubeCL backend: one launch for `dz`, then
/// cubek's products and one reduction for the bias.
pub(crate) fn dense_backward<R: CubeRuntime, BT: BoolElement>(
    x: Values<R, BT>,
    weight: &Values<R, BT>,
    kept: Values<R, BT>,
    dy: Values<R, BT>,
    activation: Option<Activation>,
) -> super::DenseGradients<Cube<R, BT>> {
    use crate::reductions::Reduce;
    let dz: Values<R, BT> = from_cube(pre_activation_gradient(
        to_cube(dy),
        to_cube(kept),
        activation,
    ));
    super::DenseGradients {
        x: dz.clone().matmul(weight.clone().swap_dims(1, 2)),
        weight: x.swap_dims(1, 2).matmul(dz.clone()),
        bias: dz.sum_along(1),
    }
}

/// Layer normalisation of row `ABSOLUTE_POS` (of `rows` per member, `width` wide): the
/// output, the normalised row and `1 / sqrt(variance + eps)`.
#[cube(launch)]
fn layer_norm_kernel<F: Float>(
    x: &Tensor<F>,
    gamma: &Tensor<F>,
    beta: &Tensor<F>,
    y: &mut Tensor<F>,
    normed: &mut Tensor<F>,
    inv_std: &mut Tensor<F>,
    width: u32,
    rows: u32,
    eps: f32,
    #[define(F)] _dtype: StorageType,
) {
    let row = ABSOLUTE_POS;
    if row >= inv_std.len() {
        terminate!();
    }
    let width = width as usize;
    let start = row * width;
    let member = row / rows as usize;
    // A gain or shift of one member serves every member.
    let g0 = (member % (gamma.len() / width)) * width;
    let b0 = (member % (beta.len() / width)) * width;
    let count = F::cast_from(width as u32);
    let mut sum = F::new(0.0);
    for c in 0..width {
        sum += x[start + c];
    }
    let mean = sum / count;
    let mut squares = F::new(0.0);
    for c in 0..width {
        let d = x[start + c] - mean;
        squares += d * d;
    }
    let inv = F::new(1.0) / F::sqrt(squares / count + F::cast_from(eps));
    inv_std[row] = inv;
    for c in 0..width {
        let n = (x[start + c] - mean) * inv;
        normed[start + c] = n;
        y[start + c] = n * gamma[g0 + c] + beta[b0 + c];
    }
}

/// `dx = inv_std (g - mean(g) - normed mean(g normed))`, `g = dy gamma`, for row
/// `ABSOLUTE_POS`.
#[cube(launch)]
fn layer_norm_dx_kernel<F: Float>(
    normed: &Tensor<F>,
    inv_std: &Tensor<F>,
    gamma: &Tensor<F>,
    dy: &Tensor<F>,
    dx: &mut Tensor<F>,
    width: u32,
    rows: u32,
    #[define(F)] _dtype: StorageType,
) {
    let row = ABSOLUTE_POS;
    if row >= inv_std.len() {
        terminate!();
    }
    let width = width as usize;
    let start = row * width;
    let member = row / rows as usize;
    let g0 = (member % (gamma.len() / width)) * width;
    let count = F::cast_from(width as u32);
    let mut sum_g = F::new(0.0);
    let mut sum_gn = F::new(0.0);
    for c in 0..width {
        let g = dy[start + c] * gamma[g0 + c];
        sum_g += g;
        sum_gn += g * normed[start + c];
    }
    let mean_g = sum_g / count;
    let mean_gn = sum_gn / count;
    let inv = inv_std[row];
    for c in 0..width {
        let g = dy[start + c] * gamma[g0 + c];
        dx[start + c] = (g - mean_g - normed[start + c] * mean_gn) * inv;
    }
}

/// The gain's and shift's gradients of member `ABSOLUTE_POS / width`, column `ABSOLUTE_POS %
/// width`: `sum_rows dy normed` and `sum_rows dy`.
#[cube(launch)]
fn layer_norm_affine_kernel<F: Float>(
    normed: &Tensor<F>,
    dy: &Tensor<F>,
    d_gamma: &mut Tensor<F>,
    d_beta: &mut Tensor<F>,
    width: u32,
    rows: u32,
    #[define(F)] _dtype: StorageType,
) {
    let position = ABSOLUTE_POS;
    if position >= d_gamma.len() {
        terminate!();
    }
    let width = width as usize;
    let member = position / width;
    let column = position % width;
    let mut gain = F::new(0.0);
    let mut shift = F::new(0.0);
    for r in 0..rows as usize {
        let at = (member * rows as usize + r) * width + column;
        gain += dy[at] * normed[at];
        shift += dy[at];
    }
    d_gamma[position] = gain;
    d_beta[position] = shift;
}

/// [`crate::ops::QuenchOps::layer_norm_forward`] on a CubeCL backend: one launch.
pub(crate) fn layer_norm_forward<R: CubeRuntime, BT: BoolElement>(
    x: Values<R, BT>,
    gamma: &Values<R, BT>,
    beta: &Values<R, BT>,
    eps: f64,
) -> Normed<Cube<R, BT>> {
    let [members, rows, width] = x.dims();
    let x = to_cube(x);
    let (gamma, beta) = (to_cube(gamma.clone()), to_cube(beta.clone()));
    let (y, normed) = (empty_like(&x), empty_like(&x));
    let inv_std = empty_shaped(&x, [members, rows, 1]);
    let client = x.client.clone();
    let (count, dim) = elementwise(&client, members * rows);
    let dtype = x.dtype;
    layer_norm_kernel::launch::<R>(
        &client,
        count,
        dim,
        x.into_tensor_arg(),
        gamma.into_tensor_arg(),
        beta.into_tensor_arg(),
        y.clone().into_tensor_arg(),
        normed.clone().into_tensor_arg(),
        inv_std.clone().into_tensor_arg(),
        width as u32,
        rows.max(1) as u32,
        eps as f32,
        dtype.into(),
    );
    (
        from_cube(y),
        NormTape {
            normed: from_cube(normed),
            inv_std: from_cube(inv_std),
        },
    )
}

/// [`crate::ops::QuenchOps::layer_norm_backward`] on a CubeCL backend: two launches.
pub(crate) fn layer_norm_backward<R: CubeRuntime, BT: BoolElement>(
    tape: NormTape<Cube<R, BT>>,
    gamma: &Values<R, BT>,
    dy: Values<R, BT>,
) -> NormGradients<Cube<R, BT>> {
    let [members, rows, width] = dy.dims();
    let (normed, inv_std) = (to_cube(tape.normed), to_cube(tape.inv_std));
    let (gamma, dy) = (to_cube(gamma.clone()), to_cube(dy));
    let dx = empty_like(&dy);
    let d_gamma = empty_shaped(&dy, [members, 1, width]);
    let d_beta = empty_shaped(&dy, [members, 1, width]);
    let client = dy.client.clone();
    let dtype = dy.dtype;
    let (count, dim) = elementwise(&client, members * rows);
    layer_norm_dx_kernel::launch::<R>(
        &client,
        count,
        dim,
        normed.clone().into_tensor_arg(),
        inv_std.into_tensor_arg(),
        gamma.into_tensor_arg(),
        dy.clone().into_tensor_arg(),
        dx.clone().into_tensor_arg(),
        width as u32,
        rows.max(1) as u32,
        dtype.into(),
    );
    let (count, dim) = elementwise(&client, members * width);
    layer_norm_affine_kernel::launch::<R>(
        &client,
        count,
        dim,
        normed.into_tensor_arg(),
        dy.into_tensor_arg(),
        d_gamma.clone().into_tensor_arg(),
        d_beta.clone().into_tensor_arg(),
        width as u32,
        rows as u32,
        dtype.into(),
    );
    NormGradients {
        x: from_cube(dx),
        gamma: from_cube(d_gamma),
        beta: from_cube(d_beta),
    }
}
