//! The attention's host kernel ([`crate::ops::attention`]) on the CPU backend in f32: per group
//! (one sequence) and head, the small products on the head's rows of the `[seq, heads d_k]`
//! inputs, so no head is ever copied out or merged back, and the softmax in one pass per row;
//! groups spread over lanes. Heads 16 wide over sequences of at most 32 (guide 004's
//! Transformer) take register kernels (each output row's sums in vector registers, no
//! allocation); others take [`quench_host::gemm`], which allocates and packs its operands on
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
        for (g, (context, weights)) in group {
            let block = g * s.group()..(g + 1) * s.group();
            let (q, k, v) = (&qv[block.clone()], &kv[block.clone()], &vv[block]);
            for (h, w) in weights.chunks_exact_mut(s.seq * s.seq).enumerate() {
                dots(w, q, k, s, h);
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

/// Whether the register kernels take `s`.
fn in_registers(s: Shape) -> bool {
    s.d_k == HEAD && s.seq <= PADDED
}

/// Head `h` of a group's `[seq, heads d_k]` rows, `[seq, d_k]`.
fn head(group: &[f32], s: Shape, h: usize) -> MatRef<'_> {
    MatRef::strided(&group[h * s.d_k..], s.seq, s.d_k, s.width())
}

/// `out[i, j] = a_i . b_j` over head `h`'s rows of a group's `a` and `b` (`[seq, heads d_k]`),
/// `out` `[seq, seq]`.
fn dots(out: &mut [f32], a: &[f32], b: &[f32], s: Shape, h: usize) {
    if in_registers(s) {
        return dots_in_registers(out, a, b, s, h);
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

quench_host::simd_dispatch! {
    /// [`dots`] with `b`'s head transposed into a zero-padded block and each row of `out`
    /// summed in registers (`k` order).
    fn dots_in_registers(out: &mut [f32], a: &[f32], b: &[f32], s: Shape, h: usize) => dots_portable
}

#[inline(always)]
fn dots_portable(out: &mut [f32], a: &[f32], b: &[f32], s: Shape, h: usize) {
    let (seq, width, at) = (s.seq, s.width(), h * HEAD);
    let mut columns = [[0.0f32; PADDED]; HEAD];
    for j in 0..seq {
        for (kk, column) in columns.iter_mut().enumerate() {
            column[j] = b[j * width + at + kk];
        }
    }
    for (i, row) in out.chunks_exact_mut(seq).enumerate().take(seq) {
        let mut sums = [0.0f32; PADDED];
        let ai = &a[i * width + at..i * width + at + HEAD];
        for (&x, column) in ai.iter().zip(&columns) {
            for (sum, &c) in sums.iter_mut().zip(column) {
                *sum += x * c;
            }
        }
        row.copy_from_slice(&sums[..seq]);
    }
}

quench_host::simd_dispatch! {
    /// [`combine`] with each output row summed in registers (`j` order).
    fn combine_in_registers(out: &mut [f32], w: &[f32], transposed: bool, x: &[f32], s: Shape, h: usize) => combine_portable
}

#[inline(always)]
fn combine_portable(out: &mut [f32], w: &[f32], transposed: bool, x: &[f32], s: Shape, h: usize) {
    let (seq, width, at) = (s.seq, s.width(), h * HEAD);
    for i in 0..seq {
        let mut sums = [0.0f32; HEAD];
        for j in 0..seq {
            let p = if transposed {
                w[j * seq + i]
            } else {
                w[i * seq + j]
            };
            let row: &[f32; HEAD] = x[j * width + at..j * width + at + HEAD]
                .try_into()
                .unwrap_or_else(|_| unreachable!("a head's row is HEAD wide"));
            for (sum, &v) in sums.iter_mut().zip(row) {
                *sum += p * v;
            }
        }
        out[i * width + at..i * width + at + HEAD].copy_from_slice(&sums);
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
        for (g, ((dq, dk), dv)) in group {
            let block = g * s.group()..(g + 1) * s.group();
            let (q, k, v, dc) = (
                &qv[block.clone()],
                &kv[block.clone()],
                &vv[block.clone()],
                &dcv[block],
            );
            for h in 0..s.heads {
                let at = (g * s.heads + h) * s.seq * s.seq;
                let w = &wv[at..at + s.seq * s.seq];
                // dV = W^T dC; dW = dC V^T, turned into the scores' gradient in place.
                combine(dv, w, true, dc, s, h);
                dots(&mut ds, dc, v, s, h);
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
