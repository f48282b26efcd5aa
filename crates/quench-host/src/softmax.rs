//! The attention's softmax over rows of scores, forward and back, in f32: each row scaled (and
//! masked) and normalised in one pass, the maximum and the sum taken in
//! [`crate::math::REDUCTION_LANES`] partial results so that the passes vectorise; the host
//! kernel of `quench_kernels::ops::attention` runs it on each head's `[seq, seq]` scores.

use crate::math::{exp, lane_dot, lane_maxima_of_rows, lane_sums_of_rows};

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
    let rows = scores.len() / seq;
    let scores = &mut scores[..rows * seq];
    for (r, row) in scores.chunks_exact_mut(seq).enumerate() {
        if mask.is_empty() {
            row.iter_mut().for_each(|s| *s *= scale);
        } else {
            for (s, m) in row.iter_mut().zip(&mask[r * seq..(r + 1) * seq]) {
                *s *= scale * m;
            }
        }
    }
    // The rows' maxima and sums eight rows at a time (`lane_maxima_of_rows`), and the
    // exponentials over every row at once: a row as short as the Transformer's 20 leaves a
    // remainder past its last whole vector that ran one value at a time, for each row.
    by_rows::<Maxima>(scores, seq, |row, max| {
        row.iter_mut().for_each(|s| *s -= max)
    });
    scores.iter_mut().for_each(|s| *s = exp(*s));
    by_rows::<Sums>(scores, seq, |row, sum| {
        let inverse = 1.0 / sum;
        row.iter_mut().for_each(|s| *s *= inverse);
    });
}

/// A row-wise lane reduction that [`by_rows`] hands on.
trait RowValues {
    /// Each `width`-wide row's value into `out`.
    fn of_rows(rows: &[f32], width: usize, out: &mut [f32]);
}

/// [`lane_maxima_of_rows`].
struct Maxima;

impl RowValues for Maxima {
    #[inline(always)]
    fn of_rows(rows: &[f32], width: usize, out: &mut [f32]) {
        lane_maxima_of_rows(rows, width, out);
    }
}

/// [`lane_sums_of_rows`].
struct Sums;

impl RowValues for Sums {
    #[inline(always)]
    fn of_rows(rows: &[f32], width: usize, out: &mut [f32]) {
        lane_sums_of_rows(rows, width, out);
    }
}

/// `apply(row, value)` on each `seq`-wide row of `scores` with its value by `V`, [`MATH_ROWS`]
/// rows at a time. (A type, not the reduction as a function argument: a function passed in was
/// called at the baseline vector width, and an enum matched in the loop cost a tenth of the
/// attention's forward pass.)
#[inline(always)]
fn by_rows<V: RowValues>(scores: &mut [f32], seq: usize, apply: impl Fn(&mut [f32], f32)) {
    let rows = scores.len() / seq;
    let mut reduced = [0.0f32; MATH_ROWS];
    for (group, first) in scores
        .chunks_mut(seq * MATH_ROWS)
        .zip((0..rows).step_by(MATH_ROWS))
    {
        let n = (rows - first).min(MATH_ROWS);
        V::of_rows(group, seq, &mut reduced[..n]);
        for (row, value) in group.chunks_exact_mut(seq).zip(reduced) {
            apply(row, value);
        }
    }
}

/// Rows reduced together (`lane_maxima_of_rows`, `lane_sums_of_rows`).
const MATH_ROWS: usize = crate::math::REDUCTION_LANES;

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
