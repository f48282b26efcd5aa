//! CubeCL kernels of multi-head attention ([`crate::ops::attention`]) for every CubeCL runtime:
//! the forward pass in one launch and the backward pass in two, where the composition takes
//! about fifteen (the heads split and merged by copies, two products, the scale, the mask and
//! the softmax's five) and about twenty.
//!
//! Design. The sequences here are short (a window of tens of bars) and the heads narrow
//! (`d_k` 8 to 32), so one unit per (group, head, query row) does a row's whole work in
//! registers and its own row of the weights: the scores against every key (`seq d_k` reads of
//! keys, mostly from cache: a cube's units share their group's keys), the softmax in three
//! passes over the row, and the context row (`seq d_k` reads of values). The heads are read
//! in place from the `[groups, seq, heads d_k]` layout the dense layers leave, and the context
//! written into it: no split or merge copies. Backward: one unit per (group, head, query row)
//! for the score gradients `ds` (written, `[groups, heads, seq, seq]`) and the query's
//! gradient; then one unit per (group, head, key row) for the key's and value's gradients,
//! which sum over the query rows (`2 seq d_k` reads each).
#![allow(clippy::too_many_arguments)]

use burn_cubecl::{BoolElement, CubeRuntime};
use cubecl::prelude::*;

use super::{AttentionGradients, AttentionInputs, AttentionOutput, scale};
use crate::ops::cube::{Cube, elementwise, empty_like, empty_shaped, from_cube, to_cube};

/// Where a unit's row sits: unit `((group heads + head) seq + row)` of a `[groups, seq, heads
/// d_k]` layout.
#[derive(CubeType, Clone, Copy)]
struct Place {
    /// The row within its sequence.
    row: usize,
    /// `heads d_k`: the stride from one row to the next.
    width: usize,
    /// The flat index of the row's first value of its head.
    row_start: usize,
    /// The flat index of the head's first value in the sequence's first row.
    first_row: usize,
}

#[cube]
fn place_of(unit: usize, seq: usize, heads: usize, d_k: usize) -> Place {
    let width = heads * d_k;
    let row = unit % seq;
    let head = (unit / seq) % heads;
    let group = unit / (seq * heads);
    let first_row = group * seq * width + head * d_k;
    Place {
        row,
        width,
        row_start: first_row + row * width,
        first_row,
    }
}

/// `sum_c a[a_at + c] b[b_at + c]` over one head's `d_k` values.
#[cube]
fn dot<F: Float>(a: &Tensor<F>, a_at: usize, b: &Tensor<F>, b_at: usize, d_k: usize) -> F {
    let mut sum = F::new(0.0);
    for c in 0..d_k {
        sum += a[a_at + c] * b[b_at + c];
    }
    sum
}

/// `sum_j coefficients[at + j] rows[first + j width + c]` over a sequence's `seq` rows: value
/// `c` of the rows' mix (the context from the weights and values, a query's gradient from the
/// score gradients and keys).
#[cube]
fn mix<F: Float>(
    coefficients: &Tensor<F>,
    at: usize,
    rows: &Tensor<F>,
    first: usize,
    width: usize,
    seq: usize,
    c: usize,
) -> F {
    let mut sum = F::new(0.0);
    for j in 0..seq {
        sum += coefficients[at + j] * rows[first + j * width + c];
    }
    sum
}

/// Unit `ABSOLUTE_POS` = ((group heads + head) seq + row): the row's scores `q k^T scale`
/// (times the mask where `masked` is 1), their softmax into `weights` and the context row.
#[cube(launch)]
fn forward_kernel<F: Float>(
    q: &Tensor<F>,
    k: &Tensor<F>,
    v: &Tensor<F>,
    mask: &Tensor<F>,
    weights: &mut Tensor<F>,
    context: &mut Tensor<F>,
    seq: u32,
    heads: u32,
    d_k: u32,
    scale: f32,
    masked: u32,
    #[define(F)] _dtype: StorageType,
) {
    let unit = ABSOLUTE_POS;
    if unit >= weights.len() / seq as usize {
        terminate!();
    }
    let (seq, d_k) = (seq as usize, d_k as usize);
    let place = place_of(unit, seq, heads as usize, d_k);
    let (width, query, first_key, at) = (place.width, place.row_start, place.first_row, unit * seq);
    let scale = F::cast_from(scale);
    for j in 0..seq {
        let mut s = dot(q, query, k, first_key + j * width, d_k) * scale;
        if masked == 1 {
            s *= mask[at + j];
        }
        weights[at + j] = s;
    }
    let mut top = weights[at];
    for j in 1..seq {
        top = F::max(top, weights[at + j]);
    }
    let mut sum = F::new(0.0);
    for j in 0..seq {
        let e = F::exp(weights[at + j] - top);
        weights[at + j] = e;
        sum += e;
    }
    for j in 0..seq {
        weights[at + j] /= sum;
    }
    for c in 0..d_k {
        context[query + c] = mix(weights, at, v, first_key, width, seq, c);
    }
}

/// Unit `ABSOLUTE_POS` as in [`forward_kernel`]: the row's weight gradients `dw_j = dc . v_j`,
/// the score gradients `ds_j = w_j (dw_j - sum_l dw_l w_l)` (times the mask) times the scale
/// into `ds`, and the query's gradient `sum_j ds_j k_j`.
#[cube(launch)]
fn scores_backward_kernel<F: Float>(
    k: &Tensor<F>,
    v: &Tensor<F>,
    mask: &Tensor<F>,
    weights: &Tensor<F>,
    d_context: &Tensor<F>,
    ds: &mut Tensor<F>,
    dq: &mut Tensor<F>,
    seq: u32,
    heads: u32,
    d_k: u32,
    scale: f32,
    masked: u32,
    #[define(F)] _dtype: StorageType,
) {
    let unit = ABSOLUTE_POS;
    if unit >= weights.len() / seq as usize {
        terminate!();
    }
    let (seq, d_k) = (seq as usize, d_k as usize);
    let place = place_of(unit, seq, heads as usize, d_k);
    let (width, query, first_key, at) = (place.width, place.row_start, place.first_row, unit * seq);
    let mut weighted = F::new(0.0);
    for j in 0..seq {
        let dw = dot(d_context, query, v, first_key + j * width, d_k);
        ds[at + j] = dw;
        weighted += dw * weights[at + j];
    }
    let scale = F::cast_from(scale);
    for j in 0..seq {
        let mut g = weights[at + j] * (ds[at + j] - weighted);
        if masked == 1 {
            g *= mask[at + j];
        }
        ds[at + j] = g * scale;
    }
    for c in 0..d_k {
        dq[query + c] = mix(ds, at, k, first_key, width, seq, c);
    }
}

/// Unit `ABSOLUTE_POS` = ((group heads + head) seq + key row `j`): the key's gradient
/// `sum_i ds_ij q_i` and the value's `sum_i w_ij dc_i`.
#[cube(launch)]
fn keys_backward_kernel<F: Float>(
    q: &Tensor<F>,
    weights: &Tensor<F>,
    ds: &Tensor<F>,
    d_context: &Tensor<F>,
    dk: &mut Tensor<F>,
    dv: &mut Tensor<F>,
    seq: u32,
    heads: u32,
    d_k: u32,
    #[define(F)] _dtype: StorageType,
) {
    let unit = ABSOLUTE_POS;
    if unit >= weights.len() / seq as usize {
        terminate!();
    }
    let (seq, d_k) = (seq as usize, d_k as usize);
    let place = place_of(unit, seq, heads as usize, d_k);
    let (width, key, first_query) = (place.width, place.row_start, place.first_row);
    // Column `row` of the unit's (group, head) block of weights, one row of `seq` apart.
    let first_weight = (unit - place.row) * seq + place.row;
    for c in 0..d_k {
        let mut dk_c = F::new(0.0);
        let mut dv_c = F::new(0.0);
        for i in 0..seq {
            let query = first_query + i * width + c;
            dk_c += ds[first_weight + i * seq] * q[query];
            dv_c += weights[first_weight + i * seq] * d_context[query];
        }
        dk[key + c] = dk_c;
        dv[key + c] = dv_c;
    }
}

/// The launch shape's sizes of `inputs`: `(groups heads seq, seq, heads, d_k)`.
fn sizes<R: CubeRuntime, BT: BoolElement>(
    inputs: &AttentionInputs<Cube<R, BT>>,
) -> (usize, usize, usize, usize) {
    let [groups, seq, width] = inputs.q.dims();
    let heads = inputs.heads;
    (groups * heads * seq, seq, heads, width / heads)
}

/// [`crate::ops::QuenchOps::attention_forward`] on a CubeCL backend: one launch (the
/// composition for an empty batch or zero-width heads).
pub(crate) fn attention_forward<R: CubeRuntime, BT: BoolElement>(
    inputs: &AttentionInputs<Cube<R, BT>>,
) -> AttentionOutput<Cube<R, BT>> {
    let (rows, seq, heads, d_k) = sizes(inputs);
    if rows == 0 || d_k == 0 {
        return super::composed_attention(inputs);
    }
    let [q, k, v] = [&inputs.q, &inputs.k, &inputs.v].map(|t| to_cube(t.clone()));
    let [groups, _, _] = inputs.q.dims();
    // Without a mask any tensor stands in its place (the kernel does not read it).
    let mask = inputs
        .mask
        .clone()
        .map_or_else(|| q.clone(), |m| to_cube(m));
    let weights = empty_shaped(&q, [groups, heads, seq, seq]);
    let context = empty_like(&q);
    let client = q.client.clone();
    let dtype = q.dtype;
    let (count, dim) = elementwise(&client, rows);
    forward_kernel::launch::<R>(
        &client,
        count,
        dim,
        q.into_tensor_arg(),
        k.into_tensor_arg(),
        v.into_tensor_arg(),
        mask.into_tensor_arg(),
        weights.clone().into_tensor_arg(),
        context.clone().into_tensor_arg(),
        seq as u32,
        heads as u32,
        d_k as u32,
        scale(d_k) as f32,
        u32::from(inputs.mask.is_some()),
        dtype.into(),
    );
    AttentionOutput {
        context: from_cube(context),
        weights: from_cube(weights),
    }
}

/// [`crate::ops::QuenchOps::attention_backward`] on a CubeCL backend: two launches (the
/// composition where the forward pass took it).
pub(crate) fn attention_backward<R: CubeRuntime, BT: BoolElement>(
    inputs: AttentionInputs<Cube<R, BT>>,
    weights: burn::tensor::Tensor<Cube<R, BT>, 4>,
    d_context: burn::tensor::Tensor<Cube<R, BT>, 3>,
) -> AttentionGradients<Cube<R, BT>> {
    let (rows, seq, heads, d_k) = sizes(&inputs);
    if rows == 0 || d_k == 0 {
        return super::composed_attention_backward(&inputs, &weights, d_context);
    }
    let masked = inputs.mask.is_some();
    let [q, k, v] = [inputs.q, inputs.k, inputs.v].map(to_cube);
    let weights = to_cube(weights);
    let d_context = to_cube(d_context);
    let mask = inputs.mask.map_or_else(|| q.clone(), to_cube);
    let ds = empty_like(&weights);
    let [dq, dk, dv] = [&q, &k, &v].map(empty_like);
    let client = q.client.clone();
    let dtype = q.dtype;
    let (count, dim) = elementwise(&client, rows);
    scores_backward_kernel::launch::<R>(
        &client,
        count.clone(),
        dim,
        k.into_tensor_arg(),
        v.into_tensor_arg(),
        mask.into_tensor_arg(),
        weights.clone().into_tensor_arg(),
        d_context.clone().into_tensor_arg(),
        ds.clone().into_tensor_arg(),
        dq.clone().into_tensor_arg(),
        seq as u32,
        heads as u32,
        d_k as u32,
        scale(d_k) as f32,
        u32::from(masked),
        dtype.into(),
    );
    keys_backward_kernel::launch::<R>(
        &client,
        count,
        dim,
        q.into_tensor_arg(),
        weights.into_tensor_arg(),
        ds.into_tensor_arg(),
        d_context.into_tensor_arg(),
        dk.clone().into_tensor_arg(),
        dv.clone().into_tensor_arg(),
        seq as u32,
        heads as u32,
        d_k as u32,
        dtype.into(),
    );
    AttentionGradients {
        q: from_cube(dq),
        k: from_cube(dk),
        v: from_cube(dv),
    }
}
