//! The attention's softmax over rows of scores, forward and back, in f32: each row scaled (and
//! masked) and normalised in one pass, the maximum and the sum taken in
//! [`crate::math::REDUCTION_LANES`] partial results so that the passes vectorise; the host
//! kernel of `quench_kernels::ops::attention` runs it on each head's `[seq, seq]` scores.

use crate::math::{exp, lane_dot, lane_max, lane_sum};

crate::simd_dispatch! {
    /// Each row of `scores` (`seq` wide) scaled by `scale`, times its mask row if any, then
    /// replaced by its softmax.
    pub fn softmax_rows(scores: &mut [f32], mask: &[f32], seq: usize, scale: f32) => softmax_rows_portable
}

#[inline(always)]
fn softmax_rows_portable(scores: &mut [f32], mask: &[f32], seq: usize, scale: f32) {
    if seq == 0 {
        return;
    }
    let whole = scores.len() / seq * seq;
    let scores = &mut scores[..whole];
    for (r, row) in scores.chunks_exact_mut(seq).enumerate() {
        if mask.is_empty() {
            row.iter_mut().for_each(|s| *s *= scale);
        } else {
            for (s, m) in row.iter_mut().zip(&mask[r * seq..(r + 1) * seq]) {
                *s *= scale * m;
            }
        }
        let max = lane_max(row);
        row.iter_mut().for_each(|s| *s -= max);
    }
    // The exponentials over every row at once: a row as short as the Transformer's 20 leaves a
    // remainder past its last whole vector that ran one value at a time, for each row.
    scores.iter_mut().for_each(|s| *s = exp(*s));
    for row in scores.chunks_exact_mut(seq) {
        let inverse = 1.0 / lane_sum(row);
        row.iter_mut().for_each(|s| *s *= inverse);
    }
}

crate::simd_dispatch! {
    /// The scores' gradient from the weights' gradient `dw`, in place: `w (dw - sum(dw w))`
    /// per row, times the mask row if any, times `scale`.
    pub fn softmax_rows_backward(dw: &mut [f32], weights: &[f32], mask: &[f32], seq: usize, scale: f32) => softmax_rows_backward_portable
}

#[inline(always)]
fn softmax_rows_backward_portable(
    dw: &mut [f32],
    weights: &[f32],
    mask: &[f32],
    seq: usize,
    scale: f32,
) {
    for (r, (d, w)) in dw
        .chunks_exact_mut(seq)
        .zip(weights.chunks_exact(seq))
        .enumerate()
    {
        let dot = lane_dot(d, w);
        for (d, w) in d.iter_mut().zip(w) {
            *d = w * (*d - dot) * scale;
        }
        if !mask.is_empty() {
            for (d, m) in d.iter_mut().zip(&mask[r * seq..(r + 1) * seq]) {
                *d *= m;
            }
        }
    }
}
