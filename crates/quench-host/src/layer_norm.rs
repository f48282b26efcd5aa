//! Layer normalisation over rows, forward and back, in f32: three passes over each row forward
//! (mean, centred variance, output) and two back (the two sums, then the input gradient with
//! the gain's and shift's sums); the host kernel of `quench_kernels::ops::dense` splits the
//! rows over lanes.

use crate::math::{lane_dot_pair, lane_squares_about, lane_sum};

crate::simd_dispatch! {
    /// Normalises each row of `x` (`width` wide) into `normed`, writes `y = normed gamma +
    /// beta` and each row's `1 / sqrt(variance + eps)` into `inv_std`.
    pub fn norm_rows(x: &[f32], gamma: &[f32], beta: &[f32], eps: f32, y: &mut [f32], normed: &mut [f32], inv_std: &mut [f32]) => norm_rows_portable
}

#[inline(always)]
fn norm_rows_portable(
    x: &[f32],
    gamma: &[f32],
    beta: &[f32],
    eps: f32,
    y: &mut [f32],
    normed: &mut [f32],
    inv_std: &mut [f32],
) {
    let width = gamma.len();
    let scale = 1.0 / width as f32;
    for (((x, y), normed), inv) in x
        .chunks_exact(width)
        .zip(y.chunks_exact_mut(width))
        .zip(normed.chunks_exact_mut(width))
        .zip(inv_std.iter_mut())
    {
        // The row's sums as `crate::math::REDUCTION_LANES` partial sums: taken in order, each
        // was one chain of dependent scalar adds, most of the kernel's time at width 128.
        let mean = lane_sum(x) * scale;
        // Centred first: the variance of rows far from zero must not cancel.
        let variance = lane_squares_about(x, mean) * scale;
        *inv = 1.0 / (variance + eps).sqrt();
        for ((((n, y), x), g), b) in normed
            .iter_mut()
            .zip(y.iter_mut())
            .zip(x)
            .zip(gamma)
            .zip(beta)
        {
            *n = (x - mean) * *inv;
            *y = *n * g + b;
        }
    }
}

crate::simd_dispatch! {
    /// Each row's input gradient `dx = inv_std (g - mean(g) - normed mean(g normed))`, `g = dy
    /// gamma`; adds `dy normed` and `dy` into the row sums `d_gamma` and `d_beta`.
    pub fn norm_rows_backward(normed: &[f32], inv_std: &[f32], gamma: &[f32], dy: &[f32], dx: &mut [f32], d_gamma: &mut [f32], d_beta: &mut [f32]) => norm_rows_backward_portable
}

#[inline(always)]
fn norm_rows_backward_portable(
    normed: &[f32],
    inv_std: &[f32],
    gamma: &[f32],
    dy: &[f32],
    dx: &mut [f32],
    d_gamma: &mut [f32],
    d_beta: &mut [f32],
) {
    let width = gamma.len();
    let scale = 1.0 / width as f32;
    for (((normed, inv), dy), dx) in normed
        .chunks_exact(width)
        .zip(inv_std)
        .zip(dy.chunks_exact(width))
        .zip(dx.chunks_exact_mut(width))
    {
        // In partial sums, as the forward pass's, both in one pass over the row.
        let (sum_g, sum_gn) = lane_dot_pair(dy, gamma, normed);
        let (mean_g, mean_gn) = (sum_g * scale, sum_gn * scale);
        for (((((x, n), d), g), dg), db) in dx
            .iter_mut()
            .zip(normed)
            .zip(dy)
            .zip(gamma)
            .zip(d_gamma.iter_mut())
            .zip(d_beta.iter_mut())
        {
            *x = inv * (d * g - mean_g - n * mean_gn);
            *dg += d * n;
            *db += d;
        }
    }
}
