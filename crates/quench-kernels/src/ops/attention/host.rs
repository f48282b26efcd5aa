//! The attention's host kernel ([`crate::ops::attention`]) on the CPU backend in f32: per group
//! (one sequence) and head, the four small products through [`quench_host::gemm`] on strided
//! views of the `[seq, heads d_k]` rows, so no head is ever copied out or merged back, and the
//! softmax in one pass per row; groups spread over lanes.

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

    /// Head `h` of a group's `[seq, heads d_k]` rows, `[seq, d_k]`.
    fn head<'a>(&self, group: &'a [f32], h: usize) -> MatRef<'a> {
        MatRef::strided(&group[h * self.d_k..], self.seq, self.d_k, self.width())
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
                gemm(w, s.head(q, h), s.head(k, h).t(), false);
                let mask = match &mv {
                    Some(m) => {
                        let start = (g * s.heads + h) * s.seq * s.seq;
                        &m[start..start + s.seq * s.seq]
                    }
                    None => &[][..],
                };
                softmax_rows(w, mask, s.seq, scale);
                gemm_strided(
                    &mut context[h * s.d_k..],
                    s.width(),
                    MatRef::row_major(w, s.seq, s.seq),
                    s.head(v, h),
                    false,
                );
            }
        }
    });
    drop((qv, kv, vv, mv));
    [
        tensor(context, [s.groups, s.seq, s.width()]),
        tensor(weights, [s.groups, s.heads, s.seq, s.seq]),
    ]
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
                let weights = MatRef::row_major(w, s.seq, s.seq);
                // dV = W^T dC; dW = dC V^T, turned into the scores' gradient in place.
                gemm_strided(
                    &mut dv[h * s.d_k..],
                    s.width(),
                    weights.t(),
                    s.head(dc, h),
                    false,
                );
                gemm(&mut ds, s.head(dc, h), s.head(v, h).t(), false);
                let mask = match &mv {
                    Some(m) => &m[at..at + s.seq * s.seq],
                    None => &[][..],
                };
                softmax_rows_backward(&mut ds, w, mask, s.seq, scale);
                let scores = MatRef::row_major(&ds, s.seq, s.seq);
                gemm_strided(&mut dq[h * s.d_k..], s.width(), scores, s.head(k, h), false);
                gemm_strided(
                    &mut dk[h * s.d_k..],
                    s.width(),
                    scores.t(),
                    s.head(q, h),
                    false,
                );
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
