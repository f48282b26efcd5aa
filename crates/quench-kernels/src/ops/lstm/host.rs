//! The LSTM layer's host kernel ([`crate::ops::QuenchOps::lstm_forward`] and
//! [`crate::ops::QuenchOps::lstm_backward`] on the CPU backend in f32): each row (a member's
//! direction) runs its whole sequence on one thread ([`quench_host::lstm`], where the
//! algorithm, its flops and its buffers are described), rows spread over lanes; here the
//! tensors are read, the rows dealt out and the results put into tensors.

use burn::tensor::TensorMetadata;
use burn::tensor::ops::FloatTensor;

use quench_host::buffers::{recycle, recycle_tensor, take};
use quench_host::lanes::{in_lanes, pieces};
use quench_host::lstm::{
    Direction, RowGradients, RowInputs, RowShape, RowTape, backward_row, forward_row, infer_row,
    side_by_side,
};
use quench_host::tensor::{Host, in_f32, tensor, values};

/// The layer's sizes from `inputs` `[members, N, S, I]` and `w_h` `[2 members, H, G]`.
fn shape_of(inputs: &FloatTensor<Host>, w_h: &FloatTensor<Host>) -> (usize, RowShape) {
    let (x, w) = (inputs.shape(), w_h.shape());
    (
        x[0],
        RowShape {
            batch: x[1],
            seq: x[2],
            input: x[3],
            hidden: w[1],
        },
    )
}

/// Forward over every row (`2 m + d`: member `m`'s direction `d`) in up to `lanes` threads,
/// for `inputs` `[members, N, S, I]` and `w_x`, `w_h`, `bias`: the inputs in f32 and the
/// tape's `[gates, cells, output]`: `[2 members, N, S, G | H]` and `[members, N, S, 2H]`.
pub(crate) fn forward(
    inputs: FloatTensor<Host>,
    w_x: FloatTensor<Host>,
    w_h: FloatTensor<Host>,
    bias: FloatTensor<Host>,
    lanes: usize,
) -> (FloatTensor<Host>, [FloatTensor<Host>; 3]) {
    let [inputs, w_x, w_h, bias] = [inputs, w_x, w_h, bias].map(in_f32);
    let (members, s) = shape_of(&inputs, &w_h);
    let steps = s.seq * s.batch;
    let (g, h) = (s.gates(), s.hidden);
    let rows = 2 * members;
    let shape = |width| [rows, s.batch, s.seq, width];
    if steps == 0 || h == 0 {
        // Nothing to run: empty tapes and outputs.
        let empty = |shape: [usize; 4]| tensor(vec![0.0; shape.iter().product()], shape);
        let output = empty([members, s.batch, s.seq, 2 * h]);
        return (inputs, [empty(shape(g)), empty(shape(h)), output]);
    }
    let (x, wx, wh, b) = (values(&inputs), values(&w_x), values(&w_h), values(&bias));
    // The projection sets every gate before the steps add to it, and every step writes its
    // cells and hidden states: recycled buffers need no clearing.
    let mut gates = take(rows * steps * g);
    let mut cells = take(rows * steps * h);
    let mut hidden = take(rows * steps * h);
    let jobs: Vec<_> = gates
        .chunks_exact_mut(steps * g)
        .zip(cells.chunks_exact_mut(steps * h))
        .zip(hidden.chunks_exact_mut(steps * h))
        .enumerate()
        .collect();
    in_lanes(jobs, lanes, |group| {
        for (r, ((gates, cells), hidden)) in group {
            let direction = Direction::of_row(r, s.seq);
            let inputs = RowInputs::of_row(r, s, [&x, &wx, &wh, &b]);
            forward_row(s, direction, inputs, gates, cells, hidden);
        }
    });
    drop((x, wx, wh, b));
    let output = side_by_side(&hidden, members, steps, h, lanes);
    recycle(hidden);
    (
        inputs,
        [
            tensor(gates, [rows, s.batch, s.seq, g]),
            tensor(cells, [rows, s.batch, s.seq, h]),
            tensor(output, [members, s.batch, s.seq, 2 * h]),
        ],
    )
}

/// Forward over every row in up to `lanes` threads without a tape (inference): the output
/// `[members, N, S, 2H]` of `inputs` `[members, N, S, I]` as [`forward`]'s.
pub(crate) fn inference(
    inputs: FloatTensor<Host>,
    w_x: FloatTensor<Host>,
    w_h: FloatTensor<Host>,
    bias: FloatTensor<Host>,
    lanes: usize,
) -> FloatTensor<Host> {
    let [inputs, w_x, w_h, bias] = [inputs, w_x, w_h, bias].map(in_f32);
    let (members, s) = shape_of(&inputs, &w_h);
    let steps = s.seq * s.batch;
    let h = s.hidden;
    let (x, wx, wh, b) = (values(&inputs), values(&w_x), values(&w_h), values(&bias));
    // Every row's steps write all of its hidden states.
    let mut hidden = take(2 * members * steps * h);
    if steps > 0 && h > 0 {
        let jobs: Vec<_> = hidden.chunks_exact_mut(steps * h).enumerate().collect();
        in_lanes(jobs, lanes, |group| {
            for (r, hidden) in group {
                let inputs = RowInputs::of_row(r, s, [&x, &wx, &wh, &b]);
                infer_row(s, Direction::of_row(r, s.seq), inputs, hidden);
            }
        });
    }
    let output = side_by_side(&hidden, members, steps, h, lanes);
    recycle(hidden);
    tensor(output, [members, s.batch, s.seq, 2 * h])
}

/// Backward over every row in up to `lanes` threads: the gradients `[w_x, w_h, bias,
/// inputs]` from the tape `[inputs, gates, cells, output]`, the weights and `d_output`
/// `[members, N, S, 2H]`. The tape's buffers that nobody else holds go back to
/// [`quench_host::buffers`].
pub(crate) fn backward(
    tape: [FloatTensor<Host>; 4],
    w_x: FloatTensor<Host>,
    w_h: FloatTensor<Host>,
    d_output: FloatTensor<Host>,
    lanes: usize,
) -> [FloatTensor<Host>; 4] {
    let [inputs, gates, cells, output] = tape.map(in_f32);
    let [w_x, w_h, d_output] = [w_x, w_h, d_output].map(in_f32);
    let (members, s) = shape_of(&inputs, &w_h);
    let (x, a, c, y) = (
        values(&inputs),
        values(&gates),
        values(&cells),
        values(&output),
    );
    let (wx, wh, dy) = (values(&w_x), values(&w_h), values(&d_output));
    let steps = s.seq * s.batch;
    let (g, h, i) = (s.gates(), s.hidden, s.input);
    let rows = 2 * members;
    if steps == 0 || h == 0 {
        // No step or unit: every gradient is zero (or empty). (With no inputs the recurrence
        // still runs on the bias and W_h, so that case goes on below.)
        let zeros = |len: usize| vec![0.0; len];
        return [
            tensor(zeros(rows * i * g), [rows, i, g]),
            tensor(zeros(rows * h * g), [rows, h, g]),
            tensor(zeros(rows * g), [rows, 1, g]),
            tensor(zeros(members * steps * i), [members, s.batch, s.seq, i]),
        ];
    }
    let mut d_w_x = vec![0.0; rows * i * g];
    let mut d_w_h = vec![0.0; rows * h * g];
    let mut d_bias = vec![0.0; rows * g];
    // Each direction's share of the input gradient, summed per member below.
    let mut d_x_rows = take(rows * steps * i);
    let jobs: Vec<_> = pieces(&mut d_w_x, rows, i * g)
        .into_iter()
        .zip(pieces(&mut d_w_h, rows, h * g))
        .zip(pieces(&mut d_bias, rows, g))
        .zip(pieces(&mut d_x_rows, rows, steps * i))
        .enumerate()
        .collect();
    in_lanes(jobs, lanes, |group| {
        for (r, (((w_x, w_h), bias), x_grad)) in group {
            let m = r / 2;
            fn member(values: &[f32], m: usize, len: usize) -> &[f32] {
                &values[m * len..(m + 1) * len]
            }
            let tape = RowTape {
                x: member(&x, m, steps * i),
                w_x: &wx[r * i * g..(r + 1) * i * g],
                w_h: &wh[r * h * g..(r + 1) * h * g],
                gates: &a[r * steps * g..(r + 1) * steps * g],
                cells: &c[r * steps * h..(r + 1) * steps * h],
                output: member(&y, m, steps * 2 * h),
                offset: (r % 2) * h,
            };
            let out = RowGradients {
                w_x,
                w_h,
                bias,
                x: x_grad,
            };
            let direction = Direction::of_row(r, s.seq);
            backward_row(s, direction, tape, member(&dy, m, steps * 2 * h), out);
        }
    });
    drop((x, a, c, y, wx, wh, dy));
    for t in [inputs, gates, cells, output, d_output] {
        recycle_tensor(t);
    }
    // Each member's sum of its rows' shares, every value written, each member's values cut
    // into pieces over the lanes.
    let per_member = steps * i;
    let piece = per_member.div_ceil(lanes.max(1));
    let mut d_x = take(members * per_member);
    let jobs: Vec<_> = pieces(&mut d_x, members, per_member)
        .into_iter()
        .enumerate()
        .flat_map(|(m, d)| {
            d.chunks_mut(piece.max(1))
                .enumerate()
                .map(move |(p, d)| (m, p * piece, d))
        })
        .collect();
    in_lanes(jobs, lanes, |group| {
        for (m, start, d) in group {
            let (forward, backward) =
                d_x_rows[2 * m * per_member..(2 * m + 2) * per_member].split_at(per_member);
            for ((d, f), b) in d.iter_mut().zip(&forward[start..]).zip(&backward[start..]) {
                *d = f + b;
            }
        }
    });
    recycle(d_x_rows);
    [
        tensor(d_w_x, [rows, i, g]),
        tensor(d_w_h, [rows, h, g]),
        tensor(d_bias, [rows, 1, g]),
        tensor(d_x, [members, s.batch, s.seq, i]),
    ]
}
