//! The LSTM layer's host kernel ([`crate::ops::QuenchOps::lstm_forward`] and
//! [`crate::ops::QuenchOps::lstm_backward`] on the CPU backend in f32): each row (a member's
//! direction) runs its whole sequence on one thread, rows spread over lanes.
//!
//! Per row, with `S` steps, `N` batch, `I` inputs, `H` hidden units and `G = 4 H` gates:
//! - forward: the input projection of every step at once (`[S N, I] @ [I, G]`, into the gates
//!   buffer, bias first), then per step one recurrent product `[N, H] @ [H, G]` accumulated
//!   into that step's slice and one pass over its elements that activates the gates in place,
//!   updates the cell and writes the hidden state: `2 S N G (I + H)` flops of products and
//!   `S N H` cells;
//! - backward: per step, in reverse, `dh += dz_{t+1} @ W_h^T` and one pass that writes the
//!   step's pre-activation gradients and carries the cell gradient; then the weight gradients
//!   as two products over every step (`h_{t-1}^T dz`, `x^T dz`), the bias gradient as column
//!   sums and the input gradient as `dz @ W_x^T`: twice the forward's product flops.
//!
//! Products go through [`crate::host_gemm`]; the element passes through [`crate::simd_dispatch`]
//! with an exponential of our own (Cody-Waite reduction and a degree-7 polynomial, below
//! 1e-7 relative error) that vectorises, where libm's `tanhf` is a call per element. No
//! buffer is allocated inside a step: each row's tape is written where the tensors that hold
//! it will live.

use std::borrow::Cow;

use burn::tensor::ops::FloatTensor;
use burn::tensor::{FloatDType, TensorData, TensorMetadata};
use burn::tensor::ops::FloatTensorOps;
use burn_ndarray::{NdArray, NdArrayTensor};

use crate::host_gemm::{MatRef, gemm};
use crate::lanes::in_lanes;

/// One row's sizes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RowShape {
    /// Time steps `S`.
    pub seq: usize,
    /// Sequences per step `N`.
    pub batch: usize,
    /// Input features `I`.
    pub input: usize,
    /// Hidden units `H`.
    pub hidden: usize,
}

impl RowShape {
    fn gates(&self) -> usize {
        4 * self.hidden
    }
}

/// `ln 2` in two parts for the exponential's range reduction: the first exact in 9 bits, so
/// `n ln2_hi` is exact for the `n` that occur.
const LN2_HI: f32 = 0.693_359_4;
const LN2_LO: f32 = -2.121_944_4e-4;
/// `1.5 2^23`: adding and subtracting it rounds an f32 below `2^22` to an integer.
const ROUND: f32 = 12_582_912.0;

/// `e^x` for finite `x`, clamped to `[-87, 88]` (normal results); relative error below 1e-7.
/// Branch-free and without float-to-int conversions (whose saturation checks keep loops
/// scalar), so that loops over it vectorise.
#[inline(always)]
fn exp(x: f32) -> f32 {
    let x = x.clamp(-87.0, 88.0);
    // `shifted` holds round(x / ln 2) in its low mantissa bits, offset by ROUND's.
    let shifted = x * std::f32::consts::LOG2_E + ROUND;
    let n = shifted - ROUND;
    let r = (x - n * LN2_HI) - n * LN2_LO;
    // e^r on |r| <= ln2 / 2 by its Taylor polynomial of degree 7 (remainder below 6e-9).
    let p = 1.0
        + r * (1.0
            + r * (0.5
                + r * (1.0 / 6.0
                    + r * (1.0 / 24.0
                        + r * (1.0 / 120.0 + r * (1.0 / 720.0 + r * (1.0 / 5040.0)))))));
    let n_bits = shifted.to_bits().wrapping_sub(ROUND.to_bits());
    p * f32::from_bits(n_bits.wrapping_add(127) << 23)
}

#[inline(always)]
fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + exp(-x))
}

/// `tanh x = 1 - 2 / (1 + e^{2x})`: absolute error near f32's epsilon, which is what the cell
/// update adds it to.
#[inline(always)]
fn tanh(x: f32) -> f32 {
    1.0 - 2.0 / (1.0 + exp(2.0 * x))
}

crate::simd_dispatch! {
    /// One step's element pass, forward: `z` `[batch, 4 hidden]` pre-activations in, the
    /// activated gates (i, f, g, o) out in place; `c_prev` `[batch, hidden]` the cells before,
    /// `c` and `h` after.
    fn cells_forward(z: &mut [f32], c_prev: &[f32], c: &mut [f32], h: &mut [f32], hidden: usize) => cells_forward_portable
}

#[inline(always)]
fn cells_forward_portable(z: &mut [f32], c_prev: &[f32], c: &mut [f32], h: &mut [f32], hidden: usize) {
    let n = hidden;
    for (((z, c_prev), c), h) in z
        .chunks_exact_mut(4 * n)
        .zip(c_prev.chunks_exact(n))
        .zip(c.chunks_exact_mut(n))
        .zip(h.chunks_exact_mut(n))
    {
        // The activations a gate at a time: simple loops vectorise, where one loop over the
        // four gates is packed across them instead.
        let (ifg, zo) = z.split_at_mut(3 * n);
        let (zif, zg) = ifg.split_at_mut(2 * n);
        for v in zif.iter_mut() {
            *v = sigmoid(*v);
        }
        for v in zo.iter_mut() {
            *v = sigmoid(*v);
        }
        for v in zg.iter_mut() {
            *v = tanh(*v);
        }
        let (zi, zf) = zif.split_at(n);
        let (zi, zf, zg, zo) = (&zi[..n], &zf[..n], &zg[..n], &zo[..n]);
        let (c_prev, c, h) = (&c_prev[..n], &mut c[..n], &mut h[..n]);
        for j in 0..n {
            let cell = zf[j] * c_prev[j] + zi[j] * zg[j];
            c[j] = cell;
            h[j] = zo[j] * tanh(cell);
        }
    }
}

crate::simd_dispatch! {
    /// One step's element pass, backward: from the gates `a` `[batch, 4 hidden]`, the cells
    /// before (`c_prev`) and after (`c`) the step and the hidden state's gradient `dh`
    /// `[batch, hidden]`, the pre-activation gradients `dz` `[batch, 4 hidden]`; `dc` holds
    /// the cell gradient from the step after and leaves with the one for the step before.
    fn cells_backward(a: &[f32], c_prev: &[f32], c: &[f32], dh: &[f32], dc: &mut [f32], dz: &mut [f32], hidden: usize) => cells_backward_portable
}

#[inline(always)]
fn cells_backward_portable(
    a: &[f32],
    c_prev: &[f32],
    c: &[f32],
    dh: &[f32],
    dc: &mut [f32],
    dz: &mut [f32],
    hidden: usize,
) {
    let n = hidden;
    for (((((a, c_prev), c), dh), dc), dz) in a
        .chunks_exact(4 * n)
        .zip(c_prev.chunks_exact(n))
        .zip(c.chunks_exact(n))
        .zip(dh.chunks_exact(n))
        .zip(dc.chunks_exact_mut(n))
        .zip(dz.chunks_exact_mut(4 * n))
    {
        let (ai, rest) = a.split_at(n);
        let (af, rest) = rest.split_at(n);
        let (ag, ao) = rest.split_at(n);
        let (di, rest) = dz.split_at_mut(n);
        let (df, rest) = rest.split_at_mut(n);
        let (dg, d_o) = rest.split_at_mut(n);
        let (ao, d_o) = (&ao[..n], &mut d_o[..n]);
        let (c_prev, c, dh, dc) = (&c_prev[..n], &c[..n], &dh[..n], &mut dc[..n]);
        for j in 0..n {
            let (i, f, g, o) = (ai[j], af[j], ag[j], ao[j]);
            let tc = tanh(c[j]);
            let dcell = dc[j] + dh[j] * o * (1.0 - tc * tc);
            di[j] = dcell * g * (i * (1.0 - i));
            df[j] = dcell * c_prev[j] * (f * (1.0 - f));
            dg[j] = dcell * i * (1.0 - g * g);
            d_o[j] = dh[j] * tc * (o * (1.0 - o));
            dc[j] = dcell * f;
        }
    }
}

/// One row's forward pass: `x` `[S N, I]` (step-major), weights `w_x` `[I, G]`, `w_h` `[H, G]`,
/// `bias` `[G]`; writes the activated gates `[S N, G]`, cells and hidden states `[S N, H]`.
#[allow(clippy::too_many_arguments)]
fn forward_row(
    s: RowShape,
    x: &[f32],
    w_x: &[f32],
    w_h: &[f32],
    bias: &[f32],
    gates: &mut [f32],
    cells: &mut [f32],
    hidden: &mut [f32],
) {
    let (g, h, n) = (s.gates(), s.hidden, s.batch);
    for row in gates.chunks_exact_mut(g) {
        row.copy_from_slice(bias);
    }
    gemm(
        gates,
        MatRef::row_major(x, s.seq * n, s.input),
        MatRef::row_major(w_x, s.input, g),
        true,
    );
    let zeros = vec![0.0; n * h];
    for t in 0..s.seq {
        let z = &mut gates[t * n * g..(t + 1) * n * g];
        let (before, now) = cells.split_at_mut(t * n * h);
        let (h_before, h_now) = hidden.split_at_mut(t * n * h);
        let c_prev = if t == 0 {
            &zeros[..]
        } else {
            let previous = &h_before[(t - 1) * n * h..];
            gemm(
                z,
                MatRef::row_major(previous, n, h),
                MatRef::row_major(w_h, h, g),
                true,
            );
            &before[(t - 1) * n * h..]
        };
        cells_forward(z, c_prev, &mut now[..n * h], &mut h_now[..n * h], h);
    }
}

/// One row's gradients, written by [`backward_row`].
struct RowGradients<'a> {
    w_x: &'a mut [f32],
    w_h: &'a mut [f32],
    bias: &'a mut [f32],
    x: &'a mut [f32],
}

/// One row's tape and weights, read by [`backward_row`].
struct RowTape<'a> {
    x: &'a [f32],
    w_x: &'a [f32],
    w_h: &'a [f32],
    gates: &'a [f32],
    cells: &'a [f32],
    hidden: &'a [f32],
}

/// One row's backward pass from the hidden states' gradient `d_hidden` `[S N, H]`.
fn backward_row(s: RowShape, tape: RowTape<'_>, d_hidden: &[f32], out: RowGradients<'_>) {
    let (g, h, n) = (s.gates(), s.hidden, s.batch);
    if s.seq == 0 {
        for out in [out.w_x, out.w_h, out.bias, out.x] {
            out.fill(0.0);
        }
        return;
    }
    let mut dz = vec![0.0; s.seq * n * g];
    let mut dh = vec![0.0; n * h];
    let mut dc = vec![0.0; n * h];
    let zeros = vec![0.0; n * h];
    for t in (0..s.seq).rev() {
        dh.copy_from_slice(&d_hidden[t * n * h..(t + 1) * n * h]);
        let (now, after) = dz.split_at_mut((t + 1) * n * g);
        if t + 1 < s.seq {
            gemm(
                &mut dh,
                MatRef::row_major(&after[..n * g], n, g),
                MatRef::row_major(tape.w_h, h, g).t(),
                true,
            );
        }
        let c_prev = if t == 0 {
            &zeros[..]
        } else {
            &tape.cells[(t - 1) * n * h..t * n * h]
        };
        cells_backward(
            &tape.gates[t * n * g..(t + 1) * n * g],
            c_prev,
            &tape.cells[t * n * h..(t + 1) * n * h],
            &dh,
            &mut dc,
            &mut now[t * n * g..],
            h,
        );
    }
    // Weight gradients over every step: the recurrent one pairs step t's dz with h_{t-1}.
    let steps = s.seq * n;
    gemm(
        out.w_h,
        MatRef::row_major(tape.hidden, steps - n, h).t(),
        MatRef::row_major(&dz[n * g..], steps - n, g),
        false,
    );
    gemm(
        out.w_x,
        MatRef::row_major(tape.x, steps, s.input).t(),
        MatRef::row_major(&dz, steps, g),
        false,
    );
    out.bias.fill(0.0);
    for row in dz.chunks_exact(g) {
        for (b, d) in out.bias.iter_mut().zip(row) {
            *b += d;
        }
    }
    gemm(
        out.x,
        MatRef::row_major(&dz, steps, g),
        MatRef::row_major(tape.w_x, s.input, g).t(),
        false,
    );
}

type Host = NdArray<f32>;

/// `t` as an f32 tensor of the CPU backend (a cast only if it holds another float type).
fn in_f32(t: FloatTensor<Host>) -> FloatTensor<Host> {
    match t {
        NdArrayTensor::F32(_) => t,
        other => Host::float_cast(other, FloatDType::F32),
    }
}

/// The values of an f32 tensor, row-major: borrowed when contiguous.
fn values(t: &FloatTensor<Host>) -> Cow<'_, [f32]> {
    match t {
        NdArrayTensor::F32(storage) => {
            let view = storage.view();
            match view.to_slice() {
                Some(values) => Cow::Borrowed(values),
                None => Cow::Owned(view.iter().copied().collect()),
            }
        }
        _ => unreachable!("cast to f32 by in_f32 first"),
    }
}

fn tensor(values: Vec<f32>, shape: [usize; 4]) -> FloatTensor<Host> {
    NdArrayTensor::from_data(TensorData::new(values, shape))
}

/// The layer's sizes from `inputs` `[rows, S, N, I]` and `w_h` `[rows, H, G]`.
fn shape_of(inputs: &FloatTensor<Host>, w_h: &FloatTensor<Host>) -> (usize, RowShape) {
    let (x, w) = (inputs.shape(), w_h.shape());
    (
        x[0],
        RowShape {
            seq: x[1],
            batch: x[2],
            input: x[3],
            hidden: w[1],
        },
    )
}

/// Forward over every row in up to `lanes` threads: the tape's `[gates, cells, hidden]`
/// `[rows, S, N, G | H | H]` for `inputs` `[rows, S, N, I]` and `w_x`, `w_h`, `bias`.
pub(crate) fn forward(
    inputs: FloatTensor<Host>,
    w_x: FloatTensor<Host>,
    w_h: FloatTensor<Host>,
    bias: FloatTensor<Host>,
    lanes: usize,
) -> (FloatTensor<Host>, [FloatTensor<Host>; 3]) {
    let [inputs, w_x, w_h, bias] = [inputs, w_x, w_h, bias].map(in_f32);
    let (rows, s) = shape_of(&inputs, &w_h);
    let (x, wx, wh, b) = (values(&inputs), values(&w_x), values(&w_h), values(&bias));
    let steps = s.seq * s.batch;
    let (g, h) = (s.gates(), s.hidden);
    let mut gates = vec![0.0; rows * steps * g];
    let mut cells = vec![0.0; rows * steps * h];
    let mut hidden = vec![0.0; rows * steps * h];
    let jobs: Vec<_> = gates
        .chunks_exact_mut(steps * g)
        .zip(cells.chunks_exact_mut(steps * h))
        .zip(hidden.chunks_exact_mut(steps * h))
        .enumerate()
        .collect();
    in_lanes(jobs, lanes, |group| {
        for (r, ((gates, cells), hidden)) in group {
            forward_row(
                s,
                &x[r * steps * s.input..(r + 1) * steps * s.input],
                &wx[r * s.input * g..(r + 1) * s.input * g],
                &wh[r * h * g..(r + 1) * h * g],
                &b[r * g..(r + 1) * g],
                gates,
                cells,
                hidden,
            );
        }
    });
    drop((x, wx, wh, b));
    let shape = |width| [rows, s.seq, s.batch, width];
    (
        inputs,
        [
            tensor(gates, shape(g)),
            tensor(cells, shape(h)),
            tensor(hidden, shape(h)),
        ],
    )
}

/// Backward over every row in up to `lanes` threads: the gradients `[w_x, w_h, bias,
/// inputs]` from the tape `[inputs, gates, cells, hidden]`, the weights and `d_hidden`.
pub(crate) fn backward(
    tape: [FloatTensor<Host>; 4],
    w_x: FloatTensor<Host>,
    w_h: FloatTensor<Host>,
    d_hidden: FloatTensor<Host>,
    lanes: usize,
) -> [FloatTensor<Host>; 4] {
    let [inputs, gates, cells, hidden] = tape.map(in_f32);
    let [w_x, w_h, d_hidden] = [w_x, w_h, d_hidden].map(in_f32);
    let (rows, s) = shape_of(&inputs, &w_h);
    let (x, a, c, hs) = (values(&inputs), values(&gates), values(&cells), values(&hidden));
    let (wx, wh, dy) = (values(&w_x), values(&w_h), values(&d_hidden));
    let steps = s.seq * s.batch;
    let (g, h, i) = (s.gates(), s.hidden, s.input);
    let mut d_w_x = vec![0.0; rows * i * g];
    let mut d_w_h = vec![0.0; rows * h * g];
    let mut d_bias = vec![0.0; rows * g];
    let mut d_x = vec![0.0; rows * steps * i];
    let jobs: Vec<_> = d_w_x
        .chunks_exact_mut(i * g)
        .zip(d_w_h.chunks_exact_mut(h * g))
        .zip(d_bias.chunks_exact_mut(g))
        .zip(d_x.chunks_exact_mut(steps * i))
        .enumerate()
        .collect();
    in_lanes(jobs, lanes, |group| {
        for (r, (((w_x, w_h), bias), x_grad)) in group {
            let tape = RowTape {
                x: &x[r * steps * i..(r + 1) * steps * i],
                w_x: &wx[r * i * g..(r + 1) * i * g],
                w_h: &wh[r * h * g..(r + 1) * h * g],
                gates: &a[r * steps * g..(r + 1) * steps * g],
                cells: &c[r * steps * h..(r + 1) * steps * h],
                hidden: &hs[r * steps * h..(r + 1) * steps * h],
            };
            let out = RowGradients {
                w_x,
                w_h,
                bias,
                x: x_grad,
            };
            backward_row(s, tape, &dy[r * steps * h..(r + 1) * steps * h], out);
        }
    });
    [
        NdArrayTensor::from_data(TensorData::new(d_w_x, [rows, i, g])),
        NdArrayTensor::from_data(TensorData::new(d_w_h, [rows, h, g])),
        NdArrayTensor::from_data(TensorData::new(d_bias, [rows, 1, g])),
        tensor(d_x, [rows, s.seq, s.batch, i]),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_vectorised_activations_match_the_standard_library() {
        let mut worst = [0f64; 3];
        for k in -40_000..=40_000 {
            let x = k as f32 * 5e-4;
            let pairs = [
                (exp(x), x.exp()),
                (sigmoid(x), 1.0 / (1.0 + (-x).exp())),
                (tanh(x), x.tanh()),
            ];
            for (w, (got, want)) in worst.iter_mut().zip(pairs) {
                *w = w.max(f64::from((got - want).abs()) / f64::from(want.abs().max(1.0)));
            }
        }
        assert!(worst.iter().all(|&w| w < 3e-7), "worst errors {worst:?}");
        // Saturation, not overflow or NaN, far out.
        assert_eq!((tanh(500.0), tanh(-500.0)), (1.0, -1.0));
        assert_eq!(sigmoid(-500.0).max(0.0), sigmoid(-500.0));
        assert!(sigmoid(-500.0) < 1e-37 && sigmoid(500.0) == 1.0);
    }
}
