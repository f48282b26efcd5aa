//! Host kernel of attention pooling's weighted sum ([`crate::ops::pooling`]) on the CPU
//! backend in f32: each row's values read once forward (a multiply-add per value) and once
//! backward (the values' gradient written, the weights' gradient as dot products), rows split
//! over lanes.

use burn::tensor::TensorMetadata;
use burn::tensor::ops::FloatTensor;

use quench_host::buffers::take;
use quench_host::lanes::{in_lanes, lanes_for};
use quench_host::math::lane_dot;
use quench_host::tensor::{Host, in_f32, tensor, values};

quench_host::simd_dispatch! {
    /// One row's weighted sum: `pooled += weights[t] values[t, :]` over the `weights.len()`
    /// steps of `values` `[seq, width]` (`pooled` starts at zero).
    fn pool_row(values: &[f32], weights: &[f32], pooled: &mut [f32]) => pool_row_portable
}

#[inline(always)]
fn pool_row_portable(values: &[f32], weights: &[f32], pooled: &mut [f32]) {
    for (step, &w) in values.chunks_exact(pooled.len()).zip(weights) {
        for (p, v) in pooled.iter_mut().zip(step) {
            *p += w * v;
        }
    }
}

quench_host::simd_dispatch! {
    /// One row's gradients: `d_values[t, :] = weights[t] grad` and `d_weights[t] = <values[t,
    /// :], grad>`, `values` and `d_values` `[seq, width]`, `grad` `[width]`.
    fn pool_row_backward(values: &[f32], weights: &[f32], grad: &[f32], d_values: &mut [f32], d_weights: &mut [f32]) => pool_row_backward_portable
}

#[inline(always)]
fn pool_row_backward_portable(
    values: &[f32],
    weights: &[f32],
    grad: &[f32],
    d_values: &mut [f32],
    d_weights: &mut [f32],
) {
    let width = grad.len();
    for (((step, d_step), &w), d_w) in values
        .chunks_exact(width)
        .zip(d_values.chunks_exact_mut(width))
        .zip(weights)
        .zip(d_weights.iter_mut())
    {
        for (d, g) in d_step.iter_mut().zip(grad) {
            *d = w * g;
        }
        *d_w = lane_dot(step, grad);
    }
}

/// Rows of `[rows, seq, width]` values per job, and the lanes, for a pass over them.
fn pool_jobs(rows: usize, seq: usize, width: usize) -> (usize, usize) {
    let lanes = lanes_for(rows * seq * width * 4);
    (rows.div_ceil(lanes).max(1), lanes)
}

/// `[rows, seq, width]` of the weighted sum's `values`, checked against its `weights` `[rows,
/// seq]` (a caller's shape error panics, as Burn's ops do).
fn pool_shape(values: &FloatTensor<Host>, weights: &FloatTensor<Host>) -> [usize; 3] {
    let [rows, seq, width] = values.shape().dims::<3>();
    assert_eq!(
        weights.shape().dims::<2>(),
        [rows, seq],
        "the weights' shape"
    );
    [rows, seq, width]
}

/// Attention pooling's weighted sum ([`crate::ops::pooling`]): `values` `[rows, seq, width]`
/// and `weights` `[rows, seq]` to `[rows, width]`.
pub(crate) fn weighted_sum(
    values_in: FloatTensor<Host>,
    weights_in: FloatTensor<Host>,
) -> FloatTensor<Host> {
    let [values_in, weights_in] = [values_in, weights_in].map(in_f32);
    let [rows, seq, width] = pool_shape(&values_in, &weights_in);
    let mut pooled = vec![0.0; rows * width];
    if rows * seq * width > 0 {
        let (v, w) = (values(&values_in), values(&weights_in));
        let (per_job, lanes) = pool_jobs(rows, seq, width);
        let jobs: Vec<_> = pooled.chunks_mut(per_job * width).enumerate().collect();
        in_lanes(jobs, lanes, |group| {
            for (j, pooled) in group {
                let first = j * per_job;
                let count = pooled.len() / width;
                for (r, pooled) in (first..first + count).zip(pooled.chunks_exact_mut(width)) {
                    pool_row(
                        &v[r * seq * width..(r + 1) * seq * width],
                        &w[r * seq..(r + 1) * seq],
                        pooled,
                    );
                }
            }
        });
    }
    tensor(pooled, [rows, width])
}

/// The weighted sum's gradients `[values, weights]` (`[rows, seq, width]`, `[rows, seq]`) from
/// the pooled output's gradient `grad` `[rows, width]`.
pub(crate) fn weighted_sum_backward(
    values_in: FloatTensor<Host>,
    weights_in: FloatTensor<Host>,
    grad_in: FloatTensor<Host>,
) -> [FloatTensor<Host>; 2] {
    let [values_in, weights_in, grad_in] = [values_in, weights_in, grad_in].map(in_f32);
    let [rows, seq, width] = pool_shape(&values_in, &weights_in);
    assert_eq!(
        grad_in.shape().dims::<2>(),
        [rows, width],
        "the gradient's shape"
    );
    // Every value of both is written below (zeros where a row has no width).
    let mut d_values = take(rows * seq * width);
    let mut d_weights = vec![0.0; rows * seq];
    if rows * seq * width > 0 {
        let (v, w, g) = (values(&values_in), values(&weights_in), values(&grad_in));
        let (per_job, lanes) = pool_jobs(rows, seq, width);
        let jobs: Vec<_> = d_values
            .chunks_mut(per_job * seq * width)
            .zip(d_weights.chunks_mut(per_job * seq))
            .enumerate()
            .collect();
        in_lanes(jobs, lanes, |group| {
            for (j, (d_values, d_weights)) in group {
                let first = j * per_job;
                let count = d_weights.len() / seq;
                for (k, r) in (first..first + count).enumerate() {
                    let span = k * seq * width..(k + 1) * seq * width;
                    pool_row_backward(
                        &v[r * seq * width..(r + 1) * seq * width],
                        &w[r * seq..(r + 1) * seq],
                        &g[r * width..(r + 1) * width],
                        &mut d_values[span],
                        &mut d_weights[k * seq..(k + 1) * seq],
                    );
                }
            }
        });
    }
    [
        tensor(d_values, [rows, seq, width]),
        tensor(d_weights, [rows, seq]),
    ]
}
