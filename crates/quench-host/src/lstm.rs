//! One row of a bidirectional LSTM layer (a member's direction) over its whole sequence, in
//! f32: the host kernel of `quench_kernels::ops::lstm` runs each row on one thread, rows
//! spread over lanes.
//!
//! Per row, with `S` steps, `N` batch, `I` inputs, `H` hidden units and `G = 4 H` gates:
//! - forward: the input projection of every step at once (`[S N, I] @ [I, G]`, into the gates
//!   buffer), then per step one recurrent product `[N, H] @ [H, G]` accumulated into that
//!   step's slice and one pass over its elements that adds the bias, activates the gates in
//!   place, updates the cell and writes the hidden state: `2 S N G (I + H)` flops of products
//!   and `S N H` cells (the bias added in the pass that reads the gates anyway, not written
//!   into the whole buffer first);
//! - backward: per step, in reverse, `dh += dz_{t+1} @ W_h^T` and one pass that writes the
//!   step's pre-activation gradients and carries the cell gradient; then the weight gradients
//!   as two products over every step (`x^T dz`, and `dz^T h_{t-1}` turned into `W_h`'s
//!   layout: the faster order at these shapes), the bias gradient as column
//!   sums and the input gradient as `dz @ W_x^T`: twice the forward's product flops.
//!
//! Products go through [`crate::gemm`]; the element passes through [`crate::simd_dispatch`]
//! with [`crate::math`]'s activations, which vectorise. No buffer is allocated inside a
//! step: each row's tape is written where the tensors that hold it will live. The large buffers
//! (tape, output, the backward pass's scratch) come from [`crate::buffers`], and the
//! backward pass gives the tape's back once it is done with them, so that batch after batch
//! reuses the same memory without clearing it.

use crate::buffers::{recycle, take};
use crate::gemm::{MatRef, add_rows, copy_into, gemm, gemm_strided};
use crate::lanes::in_lanes;
use crate::math::{sigmoid, tanh};

/// One row's sizes.
#[derive(Debug, Clone, Copy)]
pub struct RowShape {
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
    /// Gates per step, `4 H`.
    pub fn gates(&self) -> usize {
        4 * self.hidden
    }
}

crate::simd_dispatch! {
    /// One step's element pass, forward: `z` `[batch, 4 hidden]` pre-activations less the
    /// `bias` `[4 hidden]` in, the activated gates (i, f, g, o) out in place; `c_prev`
    /// `[batch, hidden]` the cells before, `c` and `h` after.
    fn cells_forward(z: &mut [f32], bias: &[f32], c_prev: &[f32], c: &mut [f32], h: &mut [f32], hidden: usize) => cells_forward_portable
}

#[inline(always)]
fn cells_forward_portable(
    z: &mut [f32],
    bias: &[f32],
    c_prev: &[f32],
    c: &mut [f32],
    h: &mut [f32],
    hidden: usize,
) {
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
        let (bif, bias_rest) = bias[..4 * n].split_at(2 * n);
        let (bg, bo) = bias_rest.split_at(n);
        for (v, b) in zif.iter_mut().zip(bif) {
            *v = sigmoid(*v + b);
        }
        for (v, b) in zo.iter_mut().zip(bo) {
            *v = sigmoid(*v + b);
        }
        for (v, b) in zg.iter_mut().zip(bg) {
            *v = tanh(*v + b);
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

/// Where a row is in its sequence: the time step it reads at its `s`-th step (forward rows
/// read times in order, backward rows from the last), and the one it read just before.
#[derive(Debug, Clone, Copy)]
pub struct Direction {
    backward: bool,
    seq: usize,
}

impl Direction {
    /// Row `r`'s direction (`r = 2 m + d`: odd rows read backward) over `seq` steps.
    pub fn of_row(r: usize, seq: usize) -> Self {
        Self {
            backward: r % 2 == 1,
            seq,
        }
    }

    fn time(self, step: usize) -> usize {
        if self.backward {
            self.seq - 1 - step
        } else {
            step
        }
    }
}

/// `width` values at row `n`, time `t` of a `[batch, seq, width]` buffer.
fn at(n: usize, t: usize, seq: usize, width: usize) -> std::ops::Range<usize> {
    let start = (n * seq + t) * width;
    start..start + width
}

/// Two disjoint `width`-long pieces of `data` at `read` and `write` (different starts).
fn read_and_write(
    data: &mut [f32],
    read: std::ops::Range<usize>,
    write: std::ops::Range<usize>,
) -> (&[f32], &mut [f32]) {
    if read.start < write.start {
        let (low, high) = data.split_at_mut(write.start);
        (&low[read], &mut high[..write.len()])
    } else {
        let (low, high) = data.split_at_mut(read.start);
        (&high[..read.len()], &mut low[write])
    }
}

/// What a row's forward pass reads: its member's inputs `x` `[N, S, I]` and its weights `w_x`
/// `[I, G]`, `w_h` `[H, G]`, `bias` `[G]`.
#[derive(Clone, Copy)]
pub struct RowInputs<'a> {
    x: &'a [f32],
    w_x: &'a [f32],
    w_h: &'a [f32],
    bias: &'a [f32],
}

impl<'a> RowInputs<'a> {
    /// Row `r`'s (member `r / 2`'s inputs) of the layer's `x` `[members, N, S, I]`, `w_x`
    /// `[rows, I, G]`, `w_h` `[rows, H, G]` and `bias` `[rows, G]`.
    pub fn of_row(r: usize, s: RowShape, [x, w_x, w_h, bias]: [&'a [f32]; 4]) -> Self {
        let (g, h, i, steps) = (s.gates(), s.hidden, s.input, s.seq * s.batch);
        let m = r / 2;
        Self {
            x: &x[m * steps * i..(m + 1) * steps * i],
            w_x: &w_x[r * i * g..(r + 1) * i * g],
            w_h: &w_h[r * h * g..(r + 1) * h * g],
            bias: &bias[r * g..(r + 1) * g],
        }
    }
}

/// One row's forward pass over its `inputs`: writes the activated gates `[N, S, G]`, the
/// cells and the hidden states `[N, S, H]`, all in time order whichever way the row reads.
pub fn forward_row(
    s: RowShape,
    direction: Direction,
    inputs: RowInputs<'_>,
    gates: &mut [f32],
    cells: &mut [f32],
    hidden: &mut [f32],
) {
    let RowInputs { x, w_x, w_h, bias } = inputs;
    let (g, h, n, seq) = (s.gates(), s.hidden, s.batch, s.seq);
    gemm(
        gates,
        MatRef::row_major(x, n * seq, s.input),
        MatRef::row_major(w_x, s.input, g),
        false,
    );
    let zeros = vec![0.0; h];
    for step in 0..seq {
        let t = direction.time(step);
        let before = (step > 0).then(|| direction.time(step - 1));
        if let Some(tb) = before {
            // z(n, t) += h(n, tb) W_h for every n: rows `seq` apart in both buffers.
            gemm_strided(
                &mut gates[t * g..],
                seq * g,
                MatRef::strided(&hidden[tb * h..], n, h, seq * h),
                MatRef::row_major(w_h, h, g),
                true,
            );
        }
        for b in 0..n {
            let (c_prev, c) = match before {
                Some(tb) => read_and_write(cells, at(b, tb, seq, h), at(b, t, seq, h)),
                None => (&zeros[..], &mut cells[at(b, t, seq, h)]),
            };
            cells_forward(
                &mut gates[at(b, t, seq, g)],
                bias,
                c_prev,
                c,
                &mut hidden[at(b, t, seq, h)],
                h,
            );
        }
    }
}

/// One row's forward pass that keeps no tape (inference): per step the input and recurrent
/// products into one `[N, G]` buffer, the gates activated in place and the cells carried in
/// two `[N, H]` buffers; writes only the hidden states `[N, S, H]`, in time order. Where
/// [`forward_row`] writes `N S (G + 2 H)` values of tape, this writes `N S H`.
pub fn infer_row(s: RowShape, direction: Direction, inputs: RowInputs<'_>, hidden: &mut [f32]) {
    let RowInputs { x, w_x, w_h, bias } = inputs;
    let (g, h, n, seq, i) = (s.gates(), s.hidden, s.batch, s.seq, s.input);
    // Every step's products set all of `z` before the cells read it.
    let mut z = take(n * g);
    let (mut c_prev, mut c) = (vec![0.0; n * h], vec![0.0; n * h]);
    for step in 0..seq {
        let t = direction.time(step);
        gemm(
            &mut z,
            MatRef::strided(&x[t * i..], n, i, seq * i),
            MatRef::row_major(w_x, i, g),
            false,
        );
        if step > 0 {
            let tb = direction.time(step - 1);
            gemm_strided(
                &mut z,
                g,
                MatRef::strided(&hidden[tb * h..], n, h, seq * h),
                MatRef::row_major(w_h, h, g),
                true,
            );
        }
        for (b, ((z, c_prev), c)) in z
            .chunks_exact_mut(g)
            .zip(c_prev.chunks_exact(h))
            .zip(c.chunks_exact_mut(h))
            .enumerate()
        {
            cells_forward(z, bias, c_prev, c, &mut hidden[at(b, t, seq, h)], h);
        }
        std::mem::swap(&mut c_prev, &mut c);
    }
    recycle(z);
}

/// One row's gradients, written by [`backward_row`]: `w_x` `[I, G]`, `w_h` `[H, G]`, `bias`
/// `[G]` and its share of the input gradient `x` `[N, S, I]`.
pub struct RowGradients<'a> {
    /// `[I, G]`.
    pub w_x: &'a mut [f32],
    /// `[H, G]`.
    pub w_h: &'a mut [f32],
    /// `[G]`.
    pub bias: &'a mut [f32],
    /// `[N, S, I]`, this row's share.
    pub x: &'a mut [f32],
}

/// One row's tape and weights, read by [`backward_row`]: its member's inputs `x` `[N, S, I]`,
/// `w_x`, `w_h`, its gates `[N, S, G]` and cells `[N, S, H]`, and the member's output `[N, S,
/// 2H]` with this row's hidden states at `offset` in each time step's `2H`.
pub struct RowTape<'a> {
    /// The member's inputs `[N, S, I]`.
    pub x: &'a [f32],
    /// `[I, G]`.
    pub w_x: &'a [f32],
    /// `[H, G]`.
    pub w_h: &'a [f32],
    /// The activated gates `[N, S, G]`.
    pub gates: &'a [f32],
    /// The cells `[N, S, H]`.
    pub cells: &'a [f32],
    /// The member's output `[N, S, 2H]`.
    pub output: &'a [f32],
    /// Where this row's hidden states sit in each time step's `2H`.
    pub offset: usize,
}

/// One row's backward pass from the member's output gradient `d_output` `[N, S, 2H]` (this
/// row's part at the tape's `offset`).
pub fn backward_row(
    s: RowShape,
    direction: Direction,
    tape: RowTape<'_>,
    d_output: &[f32],
    out: RowGradients<'_>,
) {
    let (g, h, n, seq) = (s.gates(), s.hidden, s.batch, s.seq);
    // Every step writes its `dz` for every sequence before a later one reads it.
    let mut dz = take(n * seq * g);
    let mut dh = vec![0.0; n * h];
    let mut dc = vec![0.0; n * h];
    let zeros = vec![0.0; h];
    // W_h^T `[G, H]` row-major, so that each step's product reads its right operand in order
    // (measured 15 % faster than through the transposed view at H = 128).
    let mut w_h_t = take(g * h);
    copy_into(&mut w_h_t, MatRef::row_major(tape.w_h, h, g).t());
    for step in (0..seq).rev() {
        let t = direction.time(step);
        for (b, dh) in dh.chunks_exact_mut(h).enumerate() {
            let start = (b * seq + t) * 2 * h + tape.offset;
            dh.copy_from_slice(&d_output[start..start + h]);
        }
        if step + 1 < seq {
            let after = direction.time(step + 1);
            gemm(
                &mut dh,
                MatRef::strided(&dz[after * g..], n, g, seq * g),
                MatRef::row_major(&w_h_t, g, h),
                true,
            );
        }
        let before = (step > 0).then(|| direction.time(step - 1));
        for (b, (dh, dc)) in dh.chunks_exact(h).zip(dc.chunks_exact_mut(h)).enumerate() {
            let c_prev = match before {
                Some(tb) => &tape.cells[at(b, tb, seq, h)],
                None => &zeros[..],
            };
            cells_backward(
                &tape.gates[at(b, t, seq, g)],
                c_prev,
                &tape.cells[at(b, t, seq, h)],
                dh,
                dc,
                &mut dz[at(b, t, seq, g)],
                h,
            );
        }
    }
    // The recurrent weights' gradient pairs dz(n, t) with h(n, t'), t' the step before t in
    // this row's order: the hidden states shifted one step, zero at the first.
    let mut previous = take(n * seq * h);
    let first = direction.time(0);
    for b in 0..n {
        previous[at(b, first, seq, h)].fill(0.0);
    }
    for step in 1..seq {
        let (t, tb) = (direction.time(step), direction.time(step - 1));
        for b in 0..n {
            let start = (b * seq + tb) * 2 * h + tape.offset;
            previous[at(b, t, seq, h)].copy_from_slice(&tape.output[start..start + h]);
        }
    }
    let steps = n * seq;
    // As its transpose `dz^T @ previous` `[G, H]` (16 % faster than `previous^T @ dz` at H =
    // 128), into W_h^T's buffer, then turned.
    let d_w_h_t = &mut w_h_t;
    gemm(
        d_w_h_t,
        MatRef::row_major(&dz, steps, g).t(),
        MatRef::row_major(&previous, steps, h),
        false,
    );
    copy_into(out.w_h, MatRef::row_major(d_w_h_t, g, h).t());
    recycle(w_h_t);
    gemm(
        out.w_x,
        MatRef::row_major(tape.x, steps, s.input).t(),
        MatRef::row_major(&dz, steps, g),
        false,
    );
    out.bias.fill(0.0);
    add_rows(out.bias, &dz);
    gemm(
        out.x,
        MatRef::row_major(&dz, steps, g),
        MatRef::row_major(tape.w_x, s.input, g).t(),
        false,
    );
    recycle(dz);
    recycle(previous);
}

/// The rows' hidden states `[2 members, N S, H]` with the directions side by side in each
/// time step's features, as PyTorch lays them out: `[members, N S, 2 H]`, the copies spread
/// over up to `lanes` threads (every value of the output is written).
pub fn side_by_side(
    hidden: &[f32],
    members: usize,
    steps: usize,
    h: usize,
    lanes: usize,
) -> Vec<f32> {
    let mut output = take(members * steps * 2 * h);
    if output.is_empty() {
        return output;
    }
    // One job per lane, each a range of all members' steps.
    let per_job = (members * steps).div_ceil(lanes.max(1));
    let jobs: Vec<_> = output.chunks_mut(per_job * 2 * h).enumerate().collect();
    in_lanes(jobs, lanes, |group| {
        for (j, piece) in group {
            for (k, both) in (j * per_job..).zip(piece.chunks_exact_mut(2 * h)) {
                // Step `k` of all members' steps: member `k / steps`, rows 2m and 2m + 1.
                let (m, step) = (k / steps, k % steps);
                let row = |r: usize| &hidden[(r * steps + step) * h..][..h];
                let (forward, backward) = both.split_at_mut(h);
                forward.copy_from_slice(row(2 * m));
                backward.copy_from_slice(row(2 * m + 1));
            }
        }
    });
    output
}
