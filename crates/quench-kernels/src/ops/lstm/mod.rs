//! The bidirectional LSTM layer as one operation: its tensors, the default composition of
//! Burn tensor ops, and the autodiff form with its own backward pass.
//!
//! A layer holds, for each member `m`, two recurrences over the member's inputs (rows
//! `2 m + d` of the weights): `d = 0` reads the sequence forward in time, `d = 1` backward, as
//! `torch.nn.LSTM(bidirectional=True, batch_first=True)` does. Gates in PyTorch's order i, f,
//! g, o: `z = x W_x + h_prev W_h + b`, `c = f c_prev + i g`, `h = o tanh(c)`, zero initial
//! state. The output puts both directions' hidden states side by side at each time step.

use burn::backend::Autodiff;
use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::tensor::activation::sigmoid;
use burn::tensor::backend::Backend;
use burn::tensor::{Tensor, TensorPrimitive};

use super::QuenchOps;
use crate::reductions::Reduce;
use crate::views::ReshapeTo;

#[cfg(any(feature = "cuda", feature = "wgpu"))]
pub(crate) mod cube;
pub(crate) mod host;

/// A layer's weights, rows `2 m + d` (member `m`, direction `d`).
#[derive(Debug, Clone)]
pub struct LstmWeights<B: Backend> {
    /// Input projection `[2 members, input, 4 hidden]`.
    pub w_x: Tensor<B, 3>,
    /// Recurrent projection `[2 members, hidden, 4 hidden]`.
    pub w_h: Tensor<B, 3>,
    /// The gates' bias (PyTorch's two summed) `[2 members, 1, 4 hidden]`.
    pub bias: Tensor<B, 3>,
}

/// What a forward pass keeps for the backward one; `output` is the layer's output. Every
/// tensor is in time order, whichever way its row reads.
#[derive(Debug, Clone)]
pub struct LstmTape<B: Backend> {
    /// The inputs `[members, batch, seq, input]`.
    pub inputs: Tensor<B, 4>,
    /// The activated gates (i, f, g, o) of each row `[2 members, batch, seq, 4 hidden]`.
    pub gates: Tensor<B, 4>,
    /// The cells of each row `[2 members, batch, seq, hidden]`.
    pub cells: Tensor<B, 4>,
    /// The hidden states, forward direction then backward at each step: `[members, batch,
    /// seq, 2 hidden]`.
    pub output: Tensor<B, 4>,
}

/// The gradients of a layer's weights and inputs, shaped as they are.
#[derive(Debug, Clone)]
pub struct LstmGradients<B: Backend> {
    /// `[2 members, input, 4 hidden]`.
    pub w_x: Tensor<B, 3>,
    /// `[2 members, hidden, 4 hidden]`.
    pub w_h: Tensor<B, 3>,
    /// `[2 members, 1, 4 hidden]`.
    pub bias: Tensor<B, 3>,
    /// `[members, batch, seq, input]`.
    pub inputs: Tensor<B, 4>,
}

/// The layer's output `[members, batch, seq, 2 hidden]` for `inputs` `[members, batch, seq,
/// input]`, differentiable on an autodiff backend (through [`QuenchOps::lstm_backward`]).
/// `lanes`: threads a host kernel may use.
pub fn lstm<B: QuenchOps>(
    inputs: Tensor<B, 4>,
    weights: &LstmWeights<B>,
    lanes: usize,
) -> Tensor<B, 4> {
    B::lstm_inference(inputs, weights, lanes)
}

/// `t` `[2 members, batch, seq, width]` with the backward rows' time axis reversed: from time
/// order to each row's reading order, and back.
fn reading_order<B: Backend>(t: Tensor<B, 4>) -> Tensor<B, 4> {
    let [rows, batch, seq, width] = t.dims();
    let t = t.reshape_to([rows / 2, 2, batch, seq, width]);
    let forward = t.clone().slice([0..rows / 2, 0..1]);
    let backward = t.slice([0..rows / 2, 1..2]).flip([3]);
    Tensor::cat(vec![forward, backward], 1).reshape_to([rows, batch, seq, width])
}

/// Each row's inputs in its reading order, `[rows, batch, seq, input]` (both directions of a
/// member read the same inputs).
fn inputs_in_reading_order<B: Backend>(inputs: Tensor<B, 4>) -> Tensor<B, 4> {
    let [members, batch, seq, input] = inputs.dims();
    reading_order(
        Tensor::stack::<5>(vec![inputs.clone(), inputs], 1).reshape_to([
            2 * members,
            batch,
            seq,
            input,
        ]),
    )
}

/// The input projection of every step, `x W_x + b`, in each row's reading order: `[rows,
/// batch, seq, gates]`.
pub(crate) fn projection<B: Backend>(
    inputs: Tensor<B, 4>,
    weights: &LstmWeights<B>,
) -> Tensor<B, 4> {
    let [_, batch, seq, input] = inputs.dims();
    let [rows, _, gates] = weights.w_h.dims();
    (inputs_in_reading_order(inputs)
        .reshape_to([rows, batch * seq, input])
        .matmul(weights.w_x.clone())
        + weights.bias.clone())
    .reshape_to([rows, batch, seq, gates])
}

/// The tape from every step's gate activations `[rows, batch, seq, gates]`, cells and hidden
/// states `[rows, batch, seq, hidden]`, all in each row's reading order.
pub(crate) fn tape_from_steps<B: Backend>(
    inputs: Tensor<B, 4>,
    gates: Tensor<B, 4>,
    cells: Tensor<B, 4>,
    hiddens: Tensor<B, 4>,
) -> LstmTape<B> {
    let [members, batch, seq, _] = inputs.dims();
    let hidden = cells.dims()[3];
    LstmTape {
        inputs,
        gates: reading_order(gates),
        cells: reading_order(cells),
        output: reading_order(hiddens)
            .reshape_to([members, 2, batch, seq, hidden])
            .permute([0, 2, 3, 1, 4])
            .reshape_to([members, batch, seq, 2 * hidden]),
    }
}

/// The forward pass as Burn tensor ops: one batched input projection for every step, then per
/// step one recurrent product and the gate and cell arithmetic over every row at once.
pub fn composed_forward<B: Backend>(inputs: Tensor<B, 4>, weights: &LstmWeights<B>) -> LstmTape<B> {
    let [_, batch, seq, _] = inputs.dims();
    let [rows, hidden, gates] = weights.w_h.dims();
    let device = inputs.device();
    let projected = projection(inputs.clone(), weights);
    let mut h = Tensor::<B, 3>::zeros([rows, batch, hidden], &device);
    let mut c = h.clone();
    let (mut all_gates, mut cells, mut hiddens) = (Vec::new(), Vec::new(), Vec::new());
    for s in 0..seq {
        let z = projected
            .clone()
            .slice([0..rows, 0..batch, s..s + 1])
            .reshape_to([rows, batch, gates])
            + h.matmul(weights.w_h.clone());
        let part = |k: usize| {
            z.clone()
                .slice([0..rows, 0..batch, k * hidden..(k + 1) * hidden])
        };
        let (i, f, g, o) = (
            sigmoid(part(0)),
            sigmoid(part(1)),
            part(2).tanh(),
            sigmoid(part(3)),
        );
        c = f.clone() * c + i.clone() * g.clone();
        h = o.clone() * c.clone().tanh();
        all_gates.push(Tensor::cat(vec![i, f, g, o], 2));
        cells.push(c.clone());
        hiddens.push(h.clone());
    }
    tape_from_steps(
        inputs,
        Tensor::stack(all_gates, 2),
        Tensor::stack(cells, 2),
        Tensor::stack(hiddens, 2),
    )
}

/// Each row's gate activations, cells, hidden states and output gradients in its reading
/// order, for a backward pass: `[rows, batch, seq, width]` each.
pub(crate) struct StepsInReadingOrder<B: Backend> {
    pub(crate) gates: Tensor<B, 4>,
    pub(crate) cells: Tensor<B, 4>,
    pub(crate) hiddens: Tensor<B, 4>,
    pub(crate) d_output: Tensor<B, 4>,
}

impl<B: Backend> StepsInReadingOrder<B> {
    /// The tape's steps and the output's gradient `[members, batch, seq, 2 hidden]`.
    pub(crate) fn new(tape: &LstmTape<B>, d_output: Tensor<B, 4>) -> Self {
        let [members, batch, seq, _] = tape.inputs.dims();
        let hidden = tape.cells.dims()[3];
        let rows = 2 * members;
        let per_row = |t: Tensor<B, 4>| {
            reading_order(
                t.reshape_to([members, batch, seq, 2, hidden])
                    .permute([0, 3, 1, 2, 4])
                    .reshape_to([rows, batch, seq, hidden]),
            )
        };
        Self {
            gates: reading_order(tape.gates.clone()),
            cells: reading_order(tape.cells.clone()),
            hiddens: per_row(tape.output.clone()),
            d_output: per_row(d_output),
        }
    }
}

/// The weight, bias and input gradients from every step's gate gradients `dz` `[rows, batch,
/// seq, gates]` and hidden states `[rows, batch, seq, hidden]`, both in reading order: products
/// over every step at once.
pub(crate) fn gradients_from_steps<B: Backend>(
    weights: &LstmWeights<B>,
    inputs: Tensor<B, 4>,
    hiddens: Tensor<B, 4>,
    dz: Tensor<B, 4>,
) -> LstmGradients<B> {
    let [members, batch, seq, input] = inputs.dims();
    let [rows, hidden, gates] = weights.w_h.dims();
    let device = dz.device();
    let dz = dz.reshape_to([rows, batch * seq, gates]);
    // The hidden state each step started from, in reading order: zero, then one step behind.
    let previous = if seq > 1 {
        let behind = hiddens.slice([0..rows, 0..batch, 0..seq - 1]);
        Tensor::cat(
            vec![Tensor::zeros([rows, batch, 1, hidden], &device), behind],
            2,
        )
    } else {
        Tensor::zeros([rows, batch, 1, hidden], &device)
    }
    .reshape_to([rows, batch * seq, hidden]);
    let both = inputs_in_reading_order(inputs).reshape_to([rows, batch * seq, input]);
    let d_inputs = reading_order(
        dz.clone()
            .matmul(weights.w_x.clone().swap_dims(1, 2))
            .reshape_to([rows, batch, seq, input]),
    )
    .reshape_to([members, 2, batch, seq, input])
    .sum_along(1)
    .reshape_to([members, batch, seq, input]);
    LstmGradients {
        w_x: both.swap_dims(1, 2).matmul(dz.clone()),
        w_h: previous.swap_dims(1, 2).matmul(dz.clone()),
        bias: dz.sum_along(1).reshape_to([rows, 1, gates]),
        inputs: d_inputs,
    }
}

/// The backward pass as Burn tensor ops: per step in reverse reading order, the gate and cell
/// arithmetic and one recurrent product; then the weight gradients, bias sums and input
/// gradient as products over every step.
pub fn composed_backward<B: Backend>(
    weights: &LstmWeights<B>,
    tape: &LstmTape<B>,
    d_output: Tensor<B, 4>,
) -> LstmGradients<B> {
    let [_, batch, seq, _] = tape.inputs.dims();
    let [rows, hidden, gates] = weights.w_h.dims();
    let device = d_output.device();
    let steps = StepsInReadingOrder::new(tape, d_output);
    let at = |t: &Tensor<B, 4>, step: usize| {
        let width = t.dims()[3];
        t.clone()
            .slice([0..rows, 0..batch, step..step + 1])
            .reshape_to([rows, batch, width])
    };
    let one_minus = |t: Tensor<B, 3>| t.neg().add_scalar(1.0);
    let zeros = Tensor::<B, 3>::zeros([rows, batch, hidden], &device);
    let w_h_t = weights.w_h.clone().swap_dims(1, 2);
    let (mut dh_next, mut dc_next) = (zeros.clone(), zeros.clone());
    let mut dz_steps = Vec::with_capacity(seq);
    for s in (0..seq).rev() {
        let a = at(&steps.gates, s);
        let part = |k: usize| {
            a.clone()
                .slice([0..rows, 0..batch, k * hidden..(k + 1) * hidden])
        };
        let (i, f, g, o) = (part(0), part(1), part(2), part(3));
        let c_prev = if s == 0 {
            zeros.clone()
        } else {
            at(&steps.cells, s - 1)
        };
        let tc = at(&steps.cells, s).tanh();
        let dh = at(&steps.d_output, s) + dh_next;
        let dc = dc_next + dh.clone() * o.clone() * one_minus(tc.clone() * tc.clone());
        let dz = Tensor::cat(
            vec![
                dc.clone() * g.clone() * i.clone() * one_minus(i.clone()),
                dc.clone() * c_prev * f.clone() * one_minus(f.clone()),
                dc.clone() * i * one_minus(g.clone() * g),
                dh * tc * o.clone() * one_minus(o),
            ],
            2,
        );
        dc_next = dc * f;
        dh_next = dz.clone().matmul(w_h_t.clone());
        dz_steps.push(dz.reshape_to([rows, batch, 1, gates]));
    }
    dz_steps.reverse();
    gradients_from_steps(
        weights,
        tape.inputs.clone(),
        steps.hiddens,
        Tensor::cat(dz_steps, 2),
    )
}

/// The autodiff backend's LSTM: the inner backend's forward pass, recorded as one node whose
/// backward pass is the inner backend's [`QuenchOps::lstm_backward`].
pub(super) fn autodiff_forward<B: QuenchOps, C: CheckpointStrategy>(
    inputs: Tensor<Autodiff<B, C>, 4>,
    weights: &LstmWeights<Autodiff<B, C>>,
    lanes: usize,
) -> LstmTape<Autodiff<B, C>> {
    #[derive(Debug)]
    struct LstmLayer {
        lanes: usize,
    }

    impl<B: QuenchOps> Backward<B, 4> for LstmLayer {
        type State = (LstmWeights<B>, LstmTape<B>);

        fn backward(
            self,
            ops: Ops<Self::State, 4>,
            grads: &mut Gradients,
            _checkpointer: &mut Checkpointer,
        ) {
            let d_output = grads.consume::<B>(&ops.node);
            let (weights, tape) = ops.state;
            let d_output = Tensor::from_primitive(TensorPrimitive::Float(d_output));
            let g = B::lstm_backward(&weights, tape, d_output, self.lanes);
            let [x, w_x, w_h, bias] = ops.parents;
            let pairs = [
                (x, g.inputs.into_primitive().tensor()),
                (w_x, g.w_x.into_primitive().tensor()),
                (w_h, g.w_h.into_primitive().tensor()),
                (bias, g.bias.into_primitive().tensor()),
            ];
            for (node, gradient) in pairs {
                if let Some(node) = node {
                    grads.register::<B>(node.id, gradient);
                }
            }
        }
    }

    let inner = LstmWeights {
        w_x: weights.w_x.clone().inner(),
        w_h: weights.w_h.clone().inner(),
        bias: weights.bias.clone().inner(),
    };
    let tape = B::lstm_forward(inputs.clone().inner(), &inner, lanes);
    let node = |t: Tensor<Autodiff<B, C>, 3>| t.into_primitive().tensor().node;
    let parents = [
        inputs.clone().into_primitive().tensor().node,
        node(weights.w_x.clone()),
        node(weights.w_h.clone()),
        node(weights.bias.clone()),
    ];
    let output = tape.output.clone().into_primitive().tensor();
    let output = match (LstmLayer { lanes })
        .prepare::<C>(parents)
        .compute_bound()
        .stateful()
    {
        OpsKind::Tracked(prep) => prep.finish((inner, tape.clone()), output),
        OpsKind::UnTracked(prep) => prep.finish(output),
    };
    LstmTape {
        inputs,
        gates: Tensor::from_inner(tape.gates),
        cells: Tensor::from_inner(tape.cells),
        output: Tensor::from_primitive(TensorPrimitive::Float(output)),
    }
}

/// The autodiff backend's explicit backward pass: the inner backend's, on values (first-order
/// autodiff: its results are not tracked).
pub(super) fn autodiff_backward<B: QuenchOps, C: CheckpointStrategy>(
    weights: &LstmWeights<Autodiff<B, C>>,
    tape: LstmTape<Autodiff<B, C>>,
    d_output: Tensor<Autodiff<B, C>, 4>,
    lanes: usize,
) -> LstmGradients<Autodiff<B, C>> {
    let weights = LstmWeights {
        w_x: weights.w_x.clone().inner(),
        w_h: weights.w_h.clone().inner(),
        bias: weights.bias.clone().inner(),
    };
    let tape = LstmTape {
        inputs: tape.inputs.inner(),
        gates: tape.gates.inner(),
        cells: tape.cells.inner(),
        output: tape.output.inner(),
    };
    let g = B::lstm_backward(&weights, tape, d_output.inner(), lanes);
    LstmGradients {
        w_x: Tensor::from_inner(g.w_x),
        w_h: Tensor::from_inner(g.w_h),
        bias: Tensor::from_inner(g.bias),
        inputs: Tensor::from_inner(g.inputs),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::readback::to_host_f32;
    use crate::testing::largest_gap as worst;
    use burn::backend::NdArray;
    use burn::tensor::Distribution;

    type Host = NdArray<f32>;
    type Diff = Autodiff<Host>;

    fn rank4<B: Backend>(t: Tensor<B, 3>) -> Tensor<B, 4> {
        let [a, b, c] = t.dims();
        t.reshape_to([1, a, b, c])
    }

    /// Random weights (non-zero biases) for `[members, batch, seq, input, hidden]`, inputs
    /// and the weights of a loss `sum(output * loss_weights)`.
    fn case<B: Backend>(
        [members, batch, seq, input, hidden]: [usize; 5],
        seed: u64,
    ) -> (LstmWeights<B>, Tensor<B, 4>, Tensor<B, 4>) {
        let device = Default::default();
        let _generator = crate::SeededGenerator::acquire::<B>(&device, seed);
        let normal = |shape: [usize; 3], scale: f64| {
            Tensor::random(shape, Distribution::Normal(0.0, scale), &device)
        };
        let rows = 2 * members;
        let weights = LstmWeights {
            w_x: normal([rows, input, 4 * hidden], 0.4),
            w_h: normal([rows, hidden, 4 * hidden], 0.4),
            bias: normal([rows, 1, 4 * hidden], 0.4),
        };
        let unit = Distribution::Normal(0.0, 1.0);
        let x = Tensor::random([members, batch, seq, input], unit, &device);
        let loss = Tensor::random([members, batch, seq, 2 * hidden], unit, &device);
        (weights, x, loss)
    }

    #[test]
    fn the_host_kernel_is_the_composition_in_every_tape_entry_and_gradient() {
        // One lane, one per row, uneven lanes; one step; one member; one sequence.
        for (sizes, lanes) in [
            ([2, 7, 5, 3, 6], 1),
            ([2, 7, 5, 3, 6], 4),
            ([3, 2, 4, 3, 5], 4),
            ([1, 3, 1, 4, 5], 2),
            ([1, 1, 6, 2, 3], 3),
        ] {
            let (weights, x, loss) = case::<Host>(sizes, 11);
            let want = composed_forward(x.clone(), &weights);
            let inferred = Host::lstm_inference(x.clone(), &weights, lanes);
            let got = Host::lstm_forward(x, &weights, lanes);
            for (name, a, b) in [
                ("output without a tape", &inferred, &want.output),
                ("gates", &got.gates, &want.gates),
                ("cells", &got.cells, &want.cells),
                ("output", &got.output, &want.output),
            ] {
                let gap = worst(a.clone(), b.clone());
                assert!(
                    gap < 2e-6,
                    "{sizes:?} in {lanes} lanes: {name} differ by {gap:e}"
                );
            }
            let want = composed_backward(&weights, &want, loss.clone());
            let got = Host::lstm_backward(&weights, got, loss, lanes);
            for (name, a, b) in [
                ("w_x", rank4(got.w_x), rank4(want.w_x)),
                ("w_h", rank4(got.w_h), rank4(want.w_h)),
                ("bias", rank4(got.bias), rank4(want.bias)),
                ("inputs", got.inputs, want.inputs),
            ] {
                let gap = worst(a, b);
                assert!(
                    gap < 2e-5,
                    "{sizes:?} in {lanes} lanes: d{name} differs by {gap:e}"
                );
            }
        }
    }

    #[test]
    fn an_empty_batch_gives_empty_outputs_and_zero_gradients_on_the_host() {
        let (weights, _, _) = case::<Host>([2, 1, 3, 4, 5], 13);
        let x = Tensor::<Host, 4>::zeros([2, 0, 3, 4], &Default::default());
        let inferred = Host::lstm_inference(x.clone(), &weights, 2);
        let tape = Host::lstm_forward(x, &weights, 2);
        assert_eq!(tape.output.dims(), [2, 0, 3, 10]);
        assert_eq!(inferred.dims(), [2, 0, 3, 10]);
        let d_output = tape.output.clone();
        let g = Host::lstm_backward(&weights, tape, d_output, 2);
        assert_eq!((g.w_x.dims(), g.inputs.dims()), ([4, 4, 20], [2, 0, 3, 4]));
        assert!(to_host_f32(g.w_h).iter().all(|&v| v == 0.0));
    }

    #[test]
    fn with_no_inputs_the_host_layer_runs_on_its_bias_and_recurrent_weights() {
        // No inputs against one input that is zero everywhere: the same recurrence (Burn's
        // reshape rejects a zero-sized axis, so the composition cannot be the reference).
        let (weights, _, loss) = case::<Host>([2, 3, 4, 1, 5], 15);
        let device = Default::default();
        let none = LstmWeights {
            w_x: Tensor::<Host, 3>::zeros([4, 0, 20], &device),
            ..weights.clone()
        };
        let zero_input = Tensor::<Host, 4>::zeros([2, 3, 4, 1], &device);
        let no_input = Tensor::<Host, 4>::zeros([2, 3, 4, 0], &device);
        let want = Host::lstm_forward(zero_input, &weights, 2);
        let got = Host::lstm_forward(no_input, &none, 2);
        assert!(worst(got.output.clone(), want.output.clone()) < 1e-7);
        let want = Host::lstm_backward(&weights, want, loss.clone(), 2);
        let got = Host::lstm_backward(&none, got, loss, 2);
        assert_eq!(
            (got.w_x.dims(), got.inputs.dims()),
            ([4, 0, 20], [2, 3, 4, 0])
        );
        assert!(to_host_f32(want.w_h.clone()).iter().any(|&v| v != 0.0));
        assert!(worst(rank4(got.w_h), rank4(want.w_h)) < 1e-7, "dW_h");
        assert!(worst(rank4(got.bias), rank4(want.bias)) < 1e-7, "dbias");
    }

    #[test]
    fn the_host_backward_pass_gives_the_tapes_buffers_to_the_next_forward_one() {
        // Gates of 2 x 64 x 8 x 4 * 48 values: large enough to be kept (`host::buffers`).
        let (weights, x, loss) = case::<Host>([1, 64, 8, 3, 48], 14);
        use quench_host::buffers::address_of as address;
        let first = Host::lstm_forward(x.clone(), &weights, 2);
        let gates = address(&first.gates);
        assert!(!quench_host::buffers::holds(gates));
        let _ = Host::lstm_backward(&weights, first, loss.clone(), 2);
        assert!(quench_host::buffers::holds(gates));
        let second = Host::lstm_forward(x, &weights, 2);
        assert_eq!(address(&second.gates), gates);
        assert!(!quench_host::buffers::holds(gates));
        // A tape whose gates someone else still holds keeps them.
        let held = second.gates.clone();
        let _ = Host::lstm_backward(&weights, second, loss, 2);
        assert!(!quench_host::buffers::holds(address(&held)));
    }

    #[test]
    fn the_autodiff_layer_gives_autodiffs_gradients_of_the_composition() {
        let (weights, x, loss) = case::<Diff>([2, 3, 6, 4, 5], 12);
        let params = [&weights.w_x, &weights.w_h, &weights.bias].map(|w| w.clone().require_grad());
        let weights = LstmWeights {
            w_x: params[0].clone(),
            w_h: params[1].clone(),
            bias: params[2].clone(),
        };
        let x = x.require_grad();
        let through_op = lstm(x.clone(), &weights, 2);
        let through_ops = composed_forward(x.clone(), &weights).output;
        assert!(worst(through_op.clone(), through_ops.clone()) < 2e-6);
        let op = (through_op * loss.clone()).sum_all().backward();
        let ops = (through_ops * loss).sum_all().backward();
        for (k, p) in params.iter().enumerate() {
            let (a, b) = (
                p.grad(&op).expect("op gradient"),
                p.grad(&ops).expect("ops gradient"),
            );
            let gap = worst(rank4(a), rank4(b));
            assert!(gap < 2e-5, "weight {k}: gradients differ by {gap:e}");
        }
        let gap = worst(x.grad(&op).expect("op"), x.grad(&ops).expect("ops"));
        assert!(gap < 2e-5, "input gradients differ by {gap:e}");
        // Untracked inputs: values only, no node.
        let plain = LstmWeights {
            w_x: weights.w_x.clone().detach(),
            w_h: weights.w_h.clone().detach(),
            bias: weights.bias.clone().detach(),
        };
        let values = lstm(x.clone().detach(), &plain, 1);
        assert!(!values.is_require_grad());
    }
}
