//! Batch normalisation of one member in training mode, forward and back, in f32: the channel
//! statistics accumulated over the rows (rows are contiguous, so each pass runs along the
//! channels and vectorises), then one pass writing the standardised input and the output;
//! back, one pass accumulating the gain's and shift's gradients and one writing the input's.
//! The host kernel of `quench_kernels::ops::batch_norm` runs the members on the lanes.

use crate::math::relu_if;

/// One member's forward outputs: `[output, normed]` `[rows, channels]`, `[mean, var,
/// inv_std]` `[channels]`.
pub struct Forward<'a> {
    /// `[output, normed]`, `[rows, channels]` each.
    pub rows: [&'a mut [f32]; 2],
    /// `[mean, var, inv_std]`, `[channels]` each.
    pub stats: [&'a mut [f32]; 3],
}

crate::simd_dispatch! {
    /// One member's forward pass over `x` `[rows, channels]`.
    pub fn forward_member(x: &[f32], gamma: &[f32], beta: &[f32], eps: f32, rectify: bool, out: Forward<'_>) => forward_portable
}

#[inline(always)]
fn forward_portable(
    x: &[f32],
    gamma: &[f32],
    beta: &[f32],
    eps: f32,
    rectify: bool,
    out: Forward<'_>,
) {
    let width = gamma.len();
    let [output, normed] = out.rows;
    let [mean, var, inv_std] = out.stats;
    let rows = x.len() / width;
    let scale = 1.0 / rows as f32;
    mean.fill(0.0);
    for row in x.chunks_exact(width) {
        mean.iter_mut().zip(row).for_each(|(s, &v)| *s += v);
    }
    mean.iter_mut().for_each(|s| *s *= scale);
    var.fill(0.0);
    for row in x.chunks_exact(width) {
        for ((s, &v), &mu) in var.iter_mut().zip(row).zip(mean.iter()) {
            *s += (v - mu) * (v - mu);
        }
    }
    for (s, inv) in var.iter_mut().zip(inv_std.iter_mut()) {
        *s *= scale;
        *inv = 1.0 / (*s + eps).sqrt();
    }
    let rows_out = output
        .chunks_exact_mut(width)
        .zip(normed.chunks_exact_mut(width));
    for (row, (y, n)) in x.chunks_exact(width).zip(rows_out) {
        for c in 0..width {
            let standard = (row[c] - mean[c]) * inv_std[c];
            n[c] = standard;
            y[c] = relu_if(standard * gamma[c] + beta[c], rectify);
        }
    }
}

/// One member's backward inputs: `[normed, dy]` and the ReLU's output, `[rows, channels]`;
/// `[gamma, inv_std]` `[channels]`.
pub struct Backward<'a> {
    /// `[normed, dy]`, `[rows, channels]` each.
    pub rows: [&'a [f32]; 2],
    /// The ReLU's output `[rows, channels]`, where the layer rectifies.
    pub rectified: Option<&'a [f32]>,
    /// `[gamma, inv_std]`, `[channels]` each.
    pub channel: [&'a [f32]; 2],
}

crate::simd_dispatch! {
    /// One member's gradients into `[dx]` `[rows, channels]` and `[dgamma, dbeta]`.
    pub fn backward_member(input: Backward<'_>, dx: &mut [f32], dgamma: &mut [f32], dbeta: &mut [f32]) => backward_portable
}

#[inline(always)]
fn backward_portable(input: Backward<'_>, dx: &mut [f32], dgamma: &mut [f32], dbeta: &mut [f32]) {
    let [normed, dy] = input.rows;
    let [gamma, inv_std] = input.channel;
    let width = gamma.len();
    let rows = normed.len() / width;
    // The ReLU's gradient mask applied once, into dx as scratch.
    dx.copy_from_slice(dy);
    if let Some(out) = input.rectified {
        dx.iter_mut()
            .zip(out)
            .for_each(|(g, &o)| *g = if o > 0.0 { *g } else { 0.0 });
    }
    dgamma.fill(0.0);
    dbeta.fill(0.0);
    for (g, n) in dx.chunks_exact(width).zip(normed.chunks_exact(width)) {
        for c in 0..width {
            dbeta[c] += g[c];
            dgamma[c] += g[c] * n[c];
        }
    }
    let scale = 1.0 / rows as f32;
    for (g, n) in dx.chunks_exact_mut(width).zip(normed.chunks_exact(width)) {
        for c in 0..width {
            let centred = g[c] - dbeta[c] * scale - n[c] * dgamma[c] * scale;
            g[c] = centred * gamma[c] * inv_std[c];
        }
    }
}
