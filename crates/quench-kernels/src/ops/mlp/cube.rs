//! CubeCL kernels of the member MLP's training step ([`crate::ops::mlp`]) for every CubeCL
//! runtime. The backward pass is the dense operation's (its own kernels); what this adds is
//! the step around it. The softmax cross-entropy at the output takes two launches where the
//! composition takes about twenty; the L1 penalty and the per-member clip take one launch per
//! parameter and one for all, and the clip's factor is applied inside Adam's launch: for a
//! three-layer network the composition's seventy-odd element-wise ops and reductions around
//! Adam become seven launches.
//!
//! Design. Cross-entropy: one unit per row (its `classes` logits: the maximum, the sum of the
//! shifted exponentials, the row's loss and gradient), then one unit per member averaging its
//! rows in order. Penalty: one cube of [`LANES`] units per member and parameter; unit `u`
//! walks the member's values `u, u + LANES, ...`, writes the penalised gradient
//! `g + l1 sign(p)` and its partial sums of `g^2` and `|p|` into a slot of its own (no shared
//! memory and no atomics, which f32 lacks on wgpu); then one unit per member adds every
//! parameter's partials in a fixed order into the norm, the clip's factor
//! `min(1, max / (norm + 1e-6))` and the penalty `l1 sum |p|`. Each value is read twice (the
//! penalty, Adam) and the gradient written once more than by Adam alone.
#![allow(clippy::too_many_arguments)]

use burn::tensor::Int;
use burn_cubecl::kernel::into_contiguous;
use burn_cubecl::tensor::CubeTensor;
use burn_cubecl::{BoolElement, CubeRuntime};
use cubecl::prelude::*;

use super::{MlpStep, Updated};
use crate::ops::adam::cube::adam_step_scaled;
use crate::ops::cube::{Cube, elementwise, empty_like, empty_shaped, from_cube, to_cube};

/// A tensor of the backend.
type Values<R, BT, const D: usize> = burn::tensor::Tensor<Cube<R, BT>, D>;

/// Units per member and parameter in the penalty's pass: enough to keep a member's values
/// streaming on a GPU, few enough that the per-member sum of their partials stays short.
const LANES: u32 = 64;

/// Row `ABSOLUTE_POS` of `logits` (`classes` wide): its loss `log sum exp - logit[label]` and
/// its gradient `(softmax - one_hot) / rows`. Labels lie in `0..classes` (the data's check).
#[cube(launch)]
fn cross_entropy_rows_kernel<F: Float, I: Numeric>(
    logits: &Tensor<F>,
    labels: &Tensor<I>,
    row_loss: &mut Tensor<F>,
    gradient: &mut Tensor<F>,
    classes: u32,
    rows: u32,
    #[define(F, I)] _dtypes: [StorageType; 2],
) {
    let row = ABSOLUTE_POS;
    if row >= row_loss.len() {
        terminate!();
    }
    let classes = classes as usize;
    let start = row * classes;
    let mut top = logits[start];
    for c in 1..classes {
        top = F::max(top, logits[start + c]);
    }
    let mut sum = F::new(0.0);
    for c in 0..classes {
        sum += F::exp(logits[start + c] - top);
    }
    let label = u32::cast_from(labels[row]) as usize;
    row_loss[row] = F::ln(sum) + top - logits[start + label];
    let count = F::cast_from(rows);
    for c in 0..classes {
        let mut g = F::exp(logits[start + c] - top) / sum;
        if c == label {
            g -= F::new(1.0);
        }
        gradient[start + c] = g / count;
    }
}

/// Member `ABSOLUTE_POS`'s mean of its `rows` row losses, summed in row order.
#[cube(launch)]
fn member_mean_kernel<F: Float>(
    row_loss: &Tensor<F>,
    loss: &mut Tensor<F>,
    rows: u32,
    #[define(F)] _dtype: StorageType,
) {
    let member = ABSOLUTE_POS;
    if member >= loss.len() {
        terminate!();
    }
    let rows = rows as usize;
    let mut sum = F::new(0.0);
    for r in 0..rows {
        sum += row_loss[member * rows + r];
    }
    loss[member] = sum / F::cast_from(rows as u32);
}

/// Member `CUBE_POS_X`'s values of one parameter, unit `UNIT_POS_X` every `CUBE_DIM_X`-th:
/// the penalised gradient `g + l1 sign(p)` and the unit's partial sums of its square and of
/// `|p|`, at `partials[((slot * members + member) * lanes + unit) * 2 ..]`.
#[cube(launch)]
fn penalty_kernel<F: Float>(
    param: &Tensor<F>,
    grad: &Tensor<F>,
    grad_out: &mut Tensor<F>,
    partials: &mut Tensor<F>,
    per_member: u32,
    l1: f32,
    slot: u32,
    #[define(F)] _dtype: StorageType,
) {
    let member = CUBE_POS_X as usize;
    let members = CUBE_COUNT_X as usize;
    let unit = UNIT_POS_X as usize;
    let lanes = CUBE_DIM_X as usize;
    let per_member = per_member as usize;
    let start = member * per_member;
    let l1 = F::cast_from(l1);
    let zero = F::new(0.0);
    let mut squares = F::new(0.0);
    let mut magnitudes = F::new(0.0);
    let mut i = unit;
    while i < per_member {
        let p = param[start + i];
        let mut g = grad[start + i];
        // `sign(0) = 0`, as the composition's `sign` and autodiff's subgradient.
        if p > zero {
            g += l1;
        } else if p < zero {
            g -= l1;
        }
        grad_out[start + i] = g;
        squares += g * g;
        magnitudes += F::abs(p);
        i += lanes;
    }
    let at = ((slot as usize * members + member) * lanes + unit) * 2;
    partials[at] = squares;
    partials[at + 1] = magnitudes;
}

/// Member `ABSOLUTE_POS`'s clip factor (1 where `clip` is 0) and L1 penalty from the partial
/// sums of every parameter, added in slot then unit order.
#[cube(launch)]
fn clip_kernel<F: Float>(
    partials: &Tensor<F>,
    scale: &mut Tensor<F>,
    penalty: &mut Tensor<F>,
    slots: u32,
    lanes: u32,
    max_norm: f32,
    clip: u32,
    l1: f32,
    #[define(F)] _dtype: StorageType,
) {
    let member = ABSOLUTE_POS;
    if member >= scale.len() {
        terminate!();
    }
    let members = scale.len();
    let lanes = lanes as usize;
    let mut squares = F::new(0.0);
    let mut magnitudes = F::new(0.0);
    for slot in 0..slots as usize {
        for unit in 0..lanes {
            let at = ((slot * members + member) * lanes + unit) * 2;
            squares += partials[at];
            magnitudes += partials[at + 1];
        }
    }
    let mut factor = F::new(1.0);
    if clip == 1 {
        let bound = F::cast_from(max_norm) / (F::sqrt(squares) + F::new(1e-6));
        factor = F::min(bound, F::new(1.0));
    }
    scale[member] = factor;
    penalty[member] = magnitudes * F::cast_from(l1);
}

/// [`super::cross_entropy`] in two launches: each member's loss `[members]` and the gradient
/// at the logits `[members, rows, classes]`.
pub(crate) fn cross_entropy<R: CubeRuntime, BT: BoolElement>(
    logits: Values<R, BT, 3>,
    labels: burn::tensor::Tensor<Cube<R, BT>, 2, Int>,
) -> (Values<R, BT, 1>, Values<R, BT, 3>) {
    let [members, rows, classes] = logits.dims();
    let logits = to_cube(logits);
    let labels: CubeTensor<R> = into_contiguous(labels.into_primitive());
    let gradient = empty_like(&logits);
    let row_loss = empty_shaped(&logits, [members * rows]);
    let loss = empty_shaped(&logits, [members]);
    let client = logits.client.clone();
    let (dtype, label_dtype) = (logits.dtype, labels.dtype);
    let (count, dim) = elementwise(&client, members * rows);
    cross_entropy_rows_kernel::launch::<R>(
        &client,
        count,
        dim,
        logits.into_tensor_arg(),
        labels.into_tensor_arg(),
        row_loss.clone().into_tensor_arg(),
        gradient.clone().into_tensor_arg(),
        classes as u32,
        rows as u32,
        [dtype.into(), label_dtype.into()],
    );
    let (count, dim) = elementwise(&client, members);
    member_mean_kernel::launch::<R>(
        &client,
        count,
        dim,
        row_loss.into_tensor_arg(),
        loss.clone().into_tensor_arg(),
        rows as u32,
        dtype.into(),
    );
    (from_cube(loss), from_cube(gradient))
}

/// [`super::composed_update`] in one launch per parameter for the penalty, one for the clip
/// factors and the penalties, and Adam's launch per parameter with the factor folded in.
pub(crate) fn update<R: CubeRuntime, BT: BoolElement>(
    step: &MlpStep<'_, Cube<R, BT>>,
    params: Vec<Values<R, BT, 3>>,
    grads: Vec<Values<R, BT, 3>>,
    moments: Vec<[Values<R, BT, 3>; 2]>,
) -> Updated<Cube<R, BT>> {
    let regularised = step.l1 != 0.0 || step.clip_norm.is_some();
    let (grads, scale, penalty) = if regularised {
        let (grads, scale, penalty) = regularise(step, &params, grads);
        (
            grads,
            step.clip_norm.map(|_| scale),
            (step.l1 != 0.0).then_some(penalty),
        )
    } else {
        (grads, None, None)
    };
    let (params, moments) = super::step_each(params, grads, moments, |p, g, moments| {
        adam_step_scaled(step.adam, p, g, moments, step.coefficients, scale.as_ref())
    });
    Updated {
        params,
        moments,
        penalty: penalty.map(from_cube),
    }
}

/// The penalised gradients, each member's clip factor `[members]` and its L1 penalty
/// `[members]`.
fn regularise<R: CubeRuntime, BT: BoolElement>(
    step: &MlpStep<'_, Cube<R, BT>>,
    params: &[Values<R, BT, 3>],
    grads: Vec<Values<R, BT, 3>>,
) -> (Vec<Values<R, BT, 3>>, CubeTensor<R>, CubeTensor<R>) {
    let members = params[0].dims()[0];
    let first = to_cube(params[0].clone());
    let client = first.client.clone();
    let dtype = first.dtype;
    let lanes = LANES.min(client.properties().hardware.max_cube_dim.0);
    let partials = empty_shaped(&first, [params.len(), members, lanes as usize, 2]);
    let l1 = step.l1 as f32;
    let penalised = params
        .iter()
        .zip(grads)
        .enumerate()
        .map(|(slot, (param, grad))| {
            let [_, rows, cols] = param.dims();
            let (param, grad) = (to_cube(param.clone()), to_cube(grad));
            let out = empty_like(&grad);
            penalty_kernel::launch::<R>(
                &client,
                CubeCount::Static(members as u32, 1, 1),
                CubeDim::new_1d(lanes),
                param.into_tensor_arg(),
                grad.into_tensor_arg(),
                out.clone().into_tensor_arg(),
                partials.clone().into_tensor_arg(),
                (rows * cols) as u32,
                l1,
                slot as u32,
                dtype.into(),
            );
            from_cube(out)
        })
        .collect();
    let scale = empty_shaped(&first, [members]);
    let penalty = empty_shaped(&first, [members]);
    let (count, dim) = elementwise(&client, members);
    clip_kernel::launch::<R>(
        &client,
        count,
        dim,
        partials.into_tensor_arg(),
        scale.clone().into_tensor_arg(),
        penalty.clone().into_tensor_arg(),
        params.len() as u32,
        lanes,
        step.clip_norm.unwrap_or(0.0) as f32,
        u32::from(step.clip_norm.is_some()),
        l1,
        dtype.into(),
    );
    (penalised, scale, penalty)
}
