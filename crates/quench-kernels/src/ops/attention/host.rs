//! The attention's host kernel ([`crate::ops::attention`]) on the CPU backend in f32: per group
//! (one sequence) and head, the small products on the head's rows of the `[seq, heads d_k]`
//! inputs, so no head is ever copied out or merged back, and the softmax in one pass per row;
//! groups spread over lanes. Heads 16 wide over sequences of at most 32 (guide 004's
//! Transformer) take register kernels (output rows' sums in vector registers; one buffer per
//! lane and call, for a group's transposed keys or values); others take [`quench_host::gemm`], which allocates and packs its operands on
//! every call: at five calls per head, sequence and layer, about 85 % of the Transformer
//! step's allocations, for the same time.

use burn::tensor::TensorMetadata;
use burn::tensor::ops::FloatTensor;

use quench_host::buffers::{recycle_tensor, take};
use quench_host::gemm::{MatRef, gemm, gemm_strided};
use quench_host::lanes::in_lanes;
use quench_host::softmax::{softmax_rows, softmax_rows_backward};
use quench_host::tensor::{Host, in_f32, tensor, values};

/// Sizes of one call.
#[derive(Debug, Clone, Copy)]
struct Shape {
    groups: usize,
    seq: usize,
    heads: usize,
    d_k: usize,
}

impl Shape {
    fn width(&self) -> usize {
        self.heads * self.d_k
    }

    /// One group's `[seq, heads d_k]` values.
    fn group(&self) -> usize {
        self.seq * self.width()
    }

    /// One group's `[heads, seq, seq]` weights.
    fn scores(&self) -> usize {
        self.heads * self.seq * self.seq
    }
}

/// Whether the host kernel takes these inputs: at least one head, sequence step and group,
/// heads that divide the width, and a mask (if any) of the full `[groups, heads, seq, seq]`
/// shape. Others take the composition, which broadcasts a mask or refuses the shapes itself.
pub(crate) fn fits(q: &[usize], heads: usize, mask: Option<&[usize]>) -> bool {
    let [groups, seq, width] = [q[0], q[1], q[2]];
    heads > 0
        && groups > 0
        && seq > 0
        && width > 0
        && width.is_multiple_of(heads)
        && mask.is_none_or(|m| m == [groups, heads, seq, seq])
}

fn shape_of(q: &FloatTensor<Host>, heads: usize) -> Shape {
    let s = q.shape();
    Shape {
        groups: s[0],
        seq: s[1],
        heads,
        d_k: s[2] / heads.max(1),
    }
}

/// The context `[groups, seq, heads d_k]` and the weights `[groups, heads, seq, seq]`.
pub(crate) fn forward(
    [q, k, v]: [FloatTensor<Host>; 3],
    mask: Option<FloatTensor<Host>>,
    heads: usize,
) -> [FloatTensor<Host>; 2] {
    let [q, k, v] = [q, k, v].map(in_f32);
    let mask = mask.map(in_f32);
    let s = shape_of(&q, heads);
    let (qv, kv, vv) = (values(&q), values(&k), values(&v));
    let mv = mask.as_ref().map(values);
    let scale = 1.0 / (s.d_k as f32).sqrt();
    // Recycled: every head's columns of the context and every weight are written below.
    let mut context = take(s.groups * s.group());
    let mut weights = take(s.groups * s.scores());
    let jobs: Vec<_> = context
        .chunks_exact_mut(s.group())
        .zip(weights.chunks_exact_mut(s.scores()))
        .enumerate()
        .collect();
    let lanes = quench_host::lanes::lanes_for(s.groups * s.scores() * s.d_k * 2);
    in_lanes(jobs, lanes, |group| {
        let mut columns = Vec::new();
        for (g, (context, weights)) in group {
            let block = g * s.group()..(g + 1) * s.group();
            let (q, k, v) = (&qv[block.clone()], &kv[block.clone()], &vv[block]);
            transpose_heads(k, s, &mut columns);
            for (h, w) in weights.chunks_exact_mut(s.seq * s.seq).enumerate() {
                dots(w, q, k, &columns, s, h);
                let mask = match &mv {
                    Some(m) => {
                        let start = (g * s.heads + h) * s.seq * s.seq;
                        &m[start..start + s.seq * s.seq]
                    }
                    None => &[][..],
                };
                softmax_rows(w, mask, s.seq, scale);
                combine(context, w, false, v, s, h);
            }
        }
    });
    drop((qv, kv, vv, mv));
    [
        tensor(context, [s.groups, s.seq, s.width()]),
        tensor(weights, [s.groups, s.heads, s.seq, s.seq]),
    ]
}

/// Head width and padded sequence of the register kernels below: guide 004's Transformer has
/// 16-wide heads over 20-bar windows. Other shapes take the `gemm` crate.
const HEAD: usize = 16;
const PADDED: usize = 32;
/// Output rows the weighted sums' register kernel sums side by side ([`each_row_sum`]): four
/// rows of a head are eight AVX2 vectors, with room for the term's row in the sixteen.
const COMBINE_ROWS: usize = 4;
/// The same for the score dots: two padded score rows are eight AVX2 vectors with the term's
/// four beside them (four rows spilled).
const DOT_ROWS: usize = 2;

/// Whether the register kernels take `s`.
fn in_registers(s: Shape) -> bool {
    s.d_k == HEAD && s.seq <= PADDED
}

/// Head `h` of a group's `[seq, heads d_k]` rows, `[seq, d_k]`.
fn head(group: &[f32], s: Shape, h: usize) -> MatRef<'_> {
    MatRef::strided(&group[h * s.d_k..], s.seq, s.d_k, s.width())
}

/// A group's `[seq, heads d_k]` rows `b` transposed for [`dots_in_registers`] into `columns`,
/// `[heads d_k]` columns of `PADDED` zero-padded values, where the register kernels take `s`
/// (else left empty). All heads at once, before any is read: a vector load of a column just
/// written value by value waits for those stores to retire (they cannot be forwarded to it),
/// which cost a head's transposition written just before its product as much as the product.
fn transpose_heads(b: &[f32], s: Shape, columns: &mut Vec<[f32; PADDED]>) {
    if !in_registers(s) {
        return;
    }
    // The padding past `seq` stays zero: only the first `seq` values are ever written.
    columns.resize(s.width(), [0.0; PADDED]);
    for (j, row) in b.chunks_exact(s.width()).enumerate().take(s.seq) {
        for (column, &value) in columns.iter_mut().zip(row) {
            column[j] = value;
        }
    }
}

/// `out[i, j] = a_i . b_j` over head `h`'s rows of a group's `a` and `b` (`[seq, heads d_k]`),
/// `out` `[seq, seq]`; `columns` is `b` as [`transpose_heads`] left it.
fn dots(out: &mut [f32], a: &[f32], b: &[f32], columns: &[[f32; PADDED]], s: Shape, h: usize) {
    if in_registers(s) {
        return dots_in_registers(out, a, &columns[h * HEAD..(h + 1) * HEAD], s, h);
    }
    gemm(out, head(a, s, h), head(b, s, h).t(), false);
}

/// `out_i = sum_j w'[i, j] x_j` into head `h`'s rows of `out`, `w'` the `[seq, seq]` `w` or
/// (`transposed`) its transpose, `x_j` head `h`'s rows of `x`.
fn combine(out: &mut [f32], w: &[f32], transposed: bool, x: &[f32], s: Shape, h: usize) {
    if in_registers(s) {
        return combine_in_registers(out, w, transposed, x, s, h);
    }
    let weights = MatRef::row_major(w, s.seq, s.seq);
    let weights = if transposed { weights.t() } else { weights };
    gemm_strided(
        &mut out[h * s.d_k..],
        s.width(),
        weights,
        head(x, s, h),
        false,
    );
}

/// `sums[r] = sum_j weight(first + r, j) x(j)` for `j < terms`, the `R` output rows `N` wide in
/// vector registers; each row's terms added in `j` order from zero, so a row's values do not
/// depend on `R` or on the rows summed beside it.
#[inline(always)]
fn row_sums<const N: usize, const R: usize>(
    first: usize,
    terms: usize,
    weight: impl Fn(usize, usize) -> f32,
    x: impl Fn(usize) -> [f32; N],
) -> [[f32; N]; R] {
    let mut sums = [[0.0f32; N]; R];
    for j in 0..terms {
        let xj = x(j);
        for (r, sum) in sums.iter_mut().enumerate() {
            let p = weight(first + r, j);
            for (s, &v) in sum.iter_mut().zip(&xj) {
                *s += p * v;
            }
        }
    }
    sums
}

/// `rows` output rows by [`row_sums`], `R` at a time and then one at a time, each row handed
/// to `put(i, sums)`. Rows side by side load each term's row `x_j` once for all of them, and
/// their sums are independent chains of adds (one row's sums are one chain per vector, each
/// add waiting on the last); `R N` is bounded by the vector registers.
#[inline(always)]
fn each_row_sum<const N: usize, const R: usize>(
    rows: usize,
    terms: usize,
    weight: impl Fn(usize, usize) -> f32 + Copy,
    x: impl Fn(usize) -> [f32; N] + Copy,
    mut put: impl FnMut(usize, &[f32; N]),
) {
    let whole = rows / R * R;
    for first in (0..whole).step_by(R) {
        let sums = row_sums::<N, R>(first, terms, weight, x);
        for (r, sum) in sums.iter().enumerate() {
            put(first + r, sum);
        }
    }
    for i in whole..rows {
        let [sum] = row_sums::<N, 1>(i, terms, weight, x);
        put(i, &sum);
    }
}

/// `N` values of `values` from `start`: a head's row.
#[inline(always)]
fn head_row<const N: usize>(values: &[f32], start: usize) -> [f32; N] {
    let mut row = [0.0f32; N];
    row.copy_from_slice(&values[start..start + N]);
    row
}

quench_host::simd_dispatch! {
    /// [`dots`] from head `h`'s `HEAD` zero-padded columns of `b`, the rows of `out` summed in
    /// registers, [`DOT_ROWS`] at a time (`k` order).
    fn dots_in_registers(out: &mut [f32], a: &[f32], columns: &[[f32; PADDED]], s: Shape, h: usize) => dots_portable
}

#[inline(always)]
fn dots_portable(out: &mut [f32], a: &[f32], columns: &[[f32; PADDED]], s: Shape, h: usize) {
    let (seq, width, at) = (s.seq, s.width(), h * HEAD);
    each_row_sum::<PADDED, DOT_ROWS>(
        seq,
        HEAD,
        |i, k| a[i * width + at + k],
        |k| columns[k],
        |i, sums| out[i * seq..(i + 1) * seq].copy_from_slice(&sums[..seq]),
    );
}

quench_host::simd_dispatch! {
    /// [`combine`] with the output rows summed in registers, [`COMBINE_ROWS`] at a time (`j`
    /// order).
    fn combine_in_registers(out: &mut [f32], w: &[f32], transposed: bool, x: &[f32], s: Shape, h: usize) => combine_portable
}

#[inline(always)]
fn combine_portable(out: &mut [f32], w: &[f32], transposed: bool, x: &[f32], s: Shape, h: usize) {
    let (seq, width, at) = (s.seq, s.width(), h * HEAD);
    let x_row = |j| head_row::<HEAD>(x, j * width + at);
    let mut put = |i: usize, sums: &[f32; HEAD]| {
        out[i * width + at..i * width + at + HEAD].copy_from_slice(sums);
    };
    if transposed {
        each_row_sum::<HEAD, COMBINE_ROWS>(seq, seq, |i, j| w[j * seq + i], x_row, &mut put);
    } else {
        each_row_sum::<HEAD, COMBINE_ROWS>(seq, seq, |i, j| w[i * seq + j], x_row, &mut put);
    }
}

/// The gradients `[q, k, v]` from the inputs, the weights and the context's gradient.
pub(crate) fn backward(
    [q, k, v]: [FloatTensor<Host>; 3],
    mask: Option<FloatTensor<Host>>,
    heads: usize,
    weights: FloatTensor<Host>,
    d_context: FloatTensor<Host>,
) -> [FloatTensor<Host>; 3] {
    let [q, k, v, weights, d_context] = [q, k, v, weights, d_context].map(in_f32);
    let mask = mask.map(in_f32);
    let s = shape_of(&q, heads);
    let (qv, kv, vv) = (values(&q), values(&k), values(&v));
    let (wv, dcv) = (values(&weights), values(&d_context));
    let mv = mask.as_ref().map(values);
    let scale = 1.0 / (s.d_k as f32).sqrt();
    // Recycled: every head's columns of the three are written below.
    let [mut dq, mut dk, mut dv] = [(); 3].map(|_| take(s.groups * s.group()));
    let jobs: Vec<_> = dq
        .chunks_exact_mut(s.group())
        .zip(dk.chunks_exact_mut(s.group()))
        .zip(dv.chunks_exact_mut(s.group()))
        .enumerate()
        .collect();
    let lanes = quench_host::lanes::lanes_for(s.groups * s.scores() * s.d_k * 4);
    in_lanes(jobs, lanes, |group| {
        let mut ds = vec![0.0; s.seq * s.seq];
        let mut columns = Vec::new();
        for (g, ((dq, dk), dv)) in group {
            let block = g * s.group()..(g + 1) * s.group();
            let (q, k, v, dc) = (
                &qv[block.clone()],
                &kv[block.clone()],
                &vv[block.clone()],
                &dcv[block],
            );
            transpose_heads(v, s, &mut columns);
            for h in 0..s.heads {
                let at = (g * s.heads + h) * s.seq * s.seq;
                let w = &wv[at..at + s.seq * s.seq];
                // dV = W^T dC; dW = dC V^T, turned into the scores' gradient in place.
                combine(dv, w, true, dc, s, h);
                dots(&mut ds, dc, v, &columns, s, h);
                let mask = match &mv {
                    Some(m) => &m[at..at + s.seq * s.seq],
                    None => &[][..],
                };
                softmax_rows_backward(&mut ds, w, mask, s.seq, scale);
                combine(dq, &ds, false, k, s, h);
                combine(dk, &ds, true, q, s, h);
            }
        }
    });
    drop((qv, kv, vv, wv, dcv, mv));
    // The weights and the inputs are done with: their buffers serve the next step's.
    [q, k, v, weights, d_context]
        .into_iter()
        .for_each(recycle_tensor);
    let shape = [s.groups, s.seq, s.width()];
    [tensor(dq, shape), tensor(dk, shape), tensor(dv, shape)]
}
