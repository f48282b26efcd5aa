//! CubeCL kernels of the member MLP's training step ([`crate::ops::mlp`]) for every CubeCL
//! runtime. The backward pass is the dense operation's (its own kernels); what this adds is
//! the step around it. The softmax cross-entropy at the output takes two launches where the
//! composition takes about twenty; the L1 penalty and the per-member clip take one launch for
//! the whole parameter list, and the clip's factor is applied inside Adam's (one launch for
//! the list too): for a three-layer network the composition's seventy-odd element-wise ops and
//! reductions around the backward pass become four launches.
//!
//! Design. Cross-entropy: one unit per row (its `classes` logits: the maximum, the sum of the
//! shifted exponentials, the row's loss and gradient), then one unit per member averaging its
//! rows in order. Penalty: one cube of [`LANES`] units per member; unit `u` walks each
//! parameter's member values `u, u + LANES, ...` (the parameters bound as a sequence), writes
//! the penalised gradient `g + l1 sign(p)` and sums `g^2` and `|p|`; the cube's first unit adds
//! its units' sums from shared memory in a fixed order (no atomics, which f32 lacks on wgpu)
//! into the norm, the clip's factor `min(1, max / (norm + 1e-6))` and the penalty
//! `l1 sum |p|`. Each value is read twice (the penalty, Adam) and the gradient written once
//! more than by Adam alone.
#![allow(clippy::too_many_arguments)]

use burn::tensor::Int;
use burn_cubecl::kernel::into_contiguous;
use burn_cubecl::tensor::CubeTensor;
use burn_cubecl::{BoolElement, CubeRuntime};
use cubecl::prelude::*;

use super::{MlpStep, Updated};
use crate::ops::adam::cube::adam_step;
use crate::ops::cube::{
    Cube, elementwise, empty_like, empty_shaped, from_cube, items_per_launch, sequence, to_cube,
};

/// A tensor of the backend.
type Values<R, BT, const D: usize> = burn::tensor::Tensor<Cube<R, BT>, D>;

/// Units per member in the penalty's pass: enough to keep a member's values streaming on a
/// GPU, few enough that the first unit's sum of their partials stays short.
const LANES: u32 = 64;

/// Bindings of a penalty launch besides the list's: the partials, the clip factors, the
/// penalties and a spare for the runtime's own metadata buffer.
const FIXED_BINDINGS: u32 = 4;
/// Bindings per parameter in a penalty launch: parameter, gradient and penalised gradient.
const BINDINGS_PER_PARAMETER: u32 = 3;

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

/// Member `CUBE_POS_X`'s values of the list `params`, unit `UNIT_POS_X` every `lanes`-th of
/// each parameter: the penalised gradient `g + l1 sign(p)` and the unit's sums of its square
/// and of `|p|`. The cube's first unit adds its units' sums in order into this launch's
/// partials `partials[(launch * members + member) * 2 ..]`; in the last launch of a list
/// (`last` 1) it adds every launch's, in order, into the member's clip factor (1 where `clip`
/// is 0) and L1 penalty.
#[cube(launch)]
fn regularise_kernel<F: Float>(
    params: &Sequence<Tensor<F>>,
    grads: &Sequence<Tensor<F>>,
    grads_out: &mut Sequence<Tensor<F>>,
    partials: &mut Tensor<F>,
    scale: &mut Tensor<F>,
    penalty: &mut Tensor<F>,
    l1: f32,
    max_norm: f32,
    clip: u32,
    launch: u32,
    last: u32,
    #[comptime] lanes: usize,
    #[define(F)] _dtype: StorageType,
) {
    let member = CUBE_POS_X as usize;
    let members = CUBE_COUNT_X as usize;
    let unit = UNIT_POS_X as usize;
    let l1 = F::cast_from(l1);
    let zero = F::new(0.0);
    let mut squares = F::new(0.0);
    let mut magnitudes = F::new(0.0);
    #[unroll]
    for t in 0..params.len() {
        let param = params.index(t);
        let grad = grads.index(t);
        let per_member = param.len() / members;
        let start = member * per_member;
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
            grads_out.index_mut(t)[start + i] = g;
            squares += g * g;
            magnitudes += F::abs(p);
            i += lanes;
        }
    }
    let mut sums = SharedMemory::<F>::new(lanes * 2);
    sums[unit * 2] = squares;
    sums[unit * 2 + 1] = magnitudes;
    sync_cube();
    if unit == 0 {
        let mut launch_squares = F::new(0.0);
        let mut launch_magnitudes = F::new(0.0);
        for u in 0..lanes {
            launch_squares += sums[u * 2];
            launch_magnitudes += sums[u * 2 + 1];
        }
        let at = (launch as usize * members + member) * 2;
        partials[at] = launch_squares;
        partials[at + 1] = launch_magnitudes;
        if last == 1 {
            let mut all_squares = F::new(0.0);
            let mut all_magnitudes = F::new(0.0);
            for l in 0..=launch as usize {
                all_squares += partials[(l * members + member) * 2];
                all_magnitudes += partials[(l * members + member) * 2 + 1];
            }
            let mut factor = F::new(1.0);
            if clip == 1 {
                let bound = F::cast_from(max_norm) / (F::sqrt(all_squares) + F::new(1e-6));
                factor = F::min(bound, F::new(1.0));
            }
            scale[member] = factor;
            penalty[member] = all_magnitudes * l1;
        }
    }
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

/// [`super::composed_update`] in two launches: the penalty with the clip factors and the
/// penalties, then Adam's with the factor folded in (more only where the list has more tensors
/// than the device binds at once).
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
    let (params, moments) = adam_step(
        step.adam,
        params,
        grads,
        moments,
        step.coefficients,
        scale.as_ref(),
    );
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
    let pairs: Vec<[CubeTensor<R>; 2]> = params
        .iter()
        .zip(grads)
        .map(|(p, g)| [to_cube(p.clone()), to_cube(g)])
        .collect();
    let first = &pairs[0][0];
    let client = first.client.clone();
    let dtype = first.dtype;
    // The cube's width and the kernel's comptime `lanes` are this one value: the shared
    // memory holds a slot per unit.
    let lanes = LANES.min(client.properties().hardware.max_cube_dim.0);
    let per_launch = items_per_launch(&client, FIXED_BINDINGS, BINDINGS_PER_PARAMETER);
    let launches = pairs.len().div_ceil(per_launch);
    let partials = empty_shaped(first, [launches, members, 2]);
    let scale = empty_shaped(first, [members]);
    let penalty = empty_shaped(first, [members]);
    let mut penalised = Vec::with_capacity(pairs.len());
    for (launch, chunk) in pairs.chunks(per_launch).enumerate() {
        let outputs: Vec<CubeTensor<R>> = chunk.iter().map(|[_, g]| empty_like(g)).collect();
        regularise_kernel::launch::<R>(
            &client,
            CubeCount::Static(members as u32, 1, 1),
            CubeDim::new_1d(lanes),
            sequence(chunk.iter().map(|[p, _]| p)),
            sequence(chunk.iter().map(|[_, g]| g)),
            sequence(outputs.iter()),
            partials.clone().into_tensor_arg(),
            scale.clone().into_tensor_arg(),
            penalty.clone().into_tensor_arg(),
            step.l1 as f32,
            step.clip_norm.unwrap_or(0.0) as f32,
            u32::from(step.clip_norm.is_some()),
            launch as u32,
            u32::from(launch + 1 == launches),
            lanes as usize,
            dtype.into(),
        );
        penalised.extend(outputs.into_iter().map(from_cube));
    }
    (penalised, scale, penalty)
}
