//! The LSTM layer as one operation: its tensors, the default composition of Burn tensor ops,
//! and the autodiff form with its own backward pass.
//!
//! A layer is `rows` independent recurrences (in Quench, a member's two directions are two
//! rows), each over its inputs in its own time order; gates in PyTorch's order i, f, g, o:
//! `z = x W_x + h_{t-1} W_h + b`, `c_t = f c_{t-1} + i g`, `h_t = o tanh(c_t)`, zero initial
//! state.

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

/// A layer's weights, rows first.
#[derive(Debug, Clone)]
pub struct LstmWeights<B: Backend> {
    /// Input projection `[rows, input, 4 hidden]`.
    pub w_x: Tensor<B, 3>,
    /// Recurrent projection `[rows, hidden, 4 hidden]`.
    pub w_h: Tensor<B, 3>,
    /// The gates' bias (PyTorch's two summed) `[rows, 1, 4 hidden]`.
    pub bias: Tensor<B, 3>,
}

/// What a forward pass keeps for the backward one; `hidden` is the layer's output.
#[derive(Debug, Clone)]
pub struct LstmTape<B: Backend> {
    /// The inputs `[rows, seq, batch, input]`, each row in its own time order.
    pub inputs: Tensor<B, 4>,
    /// The activated gates (i, f, g, o) `[rows, seq, batch, 4 hidden]`.
    pub gates: Tensor<B, 4>,
    /// The cell after each step `[rows, seq, batch, hidden]`.
    pub cells: Tensor<B, 4>,
    /// The hidden state after each step `[rows, seq, batch, hidden]`: the output.
    pub hidden: Tensor<B, 4>,
}

/// The gradients of a layer's weights and inputs, shaped as they are.
#[derive(Debug, Clone)]
pub struct LstmGradients<B: Backend> {
    /// `[rows, input, 4 hidden]`.
    pub w_x: Tensor<B, 3>,
    /// `[rows, hidden, 4 hidden]`.
    pub w_h: Tensor<B, 3>,
    /// `[rows, 1, 4 hidden]`.
    pub bias: Tensor<B, 3>,
    /// `[rows, seq, batch, input]`.
    pub inputs: Tensor<B, 4>,
}

/// The layer's hidden states `[rows, seq, batch, hidden]` for `inputs` `[rows, seq, batch,
/// input]`, differentiable on an autodiff backend (through [`QuenchOps::lstm_backward`]).
/// `lanes`: threads a host kernel may use.
pub fn lstm<B: QuenchOps>(
    inputs: Tensor<B, 4>,
    weights: &LstmWeights<B>,
    lanes: usize,
) -> Tensor<B, 4> {
    B::lstm_forward(inputs, weights, lanes).hidden
}

/// The forward pass as Burn tensor ops: one batched input projection for every step, then per
/// step one recurrent product and the gate and cell arithmetic over every row at once.
pub fn composed_forward<B: Backend>(inputs: Tensor<B, 4>, weights: &LstmWeights<B>) -> LstmTape<B> {
    let [rows, seq, batch, input] = inputs.dims();
    let [_, hidden, gates] = weights.w_h.dims();
    let device = inputs.device();
    let projected = inputs
        .clone()
        .reshape_to([rows, seq * batch, input])
        .matmul(weights.w_x.clone())
        + weights.bias.clone();
    let mut h = Tensor::<B, 3>::zeros([rows, batch, hidden], &device);
    let mut c = h.clone();
    let (mut all_gates, mut cells, mut hiddens) = (Vec::new(), Vec::new(), Vec::new());
    for t in 0..seq {
        let z = projected
            .clone()
            .slice([0..rows, t * batch..(t + 1) * batch, 0..gates])
            + h.matmul(weights.w_h.clone());
        let part = |k: usize| {
            z.clone()
                .slice([0..rows, 0..batch, k * hidden..(k + 1) * hidden])
        };
        let (i, f, g, o) = (sigmoid(part(0)), sigmoid(part(1)), part(2).tanh(), sigmoid(part(3)));
        c = f.clone() * c + i.clone() * g.clone();
        h = o.clone() * c.clone().tanh();
        all_gates.push(Tensor::cat(vec![i, f, g, o], 2));
        cells.push(c.clone());
        hiddens.push(h.clone());
    }
    LstmTape {
        inputs,
        gates: Tensor::stack(all_gates, 1),
        cells: Tensor::stack(cells, 1),
        hidden: Tensor::stack(hiddens, 1),
    }
}

/// The backward pass as Burn tensor ops: per step in reverse, the gate and cell arithmetic
/// and one recurrent product; then the weight gradients, bias sums and input gradient as
/// products over every step.
pub fn composed_backward<B: Backend>(
    weights: &LstmWeights<B>,
    tape: &LstmTape<B>,
    d_hidden: Tensor<B, 4>,
) -> LstmGradients<B> {
    let [rows, seq, batch, input] = tape.inputs.dims();
    let [_, hidden, gates] = weights.w_h.dims();
    let device = d_hidden.device();
    let at = |t: &Tensor<B, 4>, step: usize| {
        let width = t.dims()[3];
        t.clone()
            .slice([0..rows, step..step + 1])
            .reshape_to([rows, batch, width])
    };
    let one_minus = |t: Tensor<B, 3>| t.neg().add_scalar(1.0);
    let zeros = Tensor::<B, 3>::zeros([rows, batch, hidden], &device);
    let w_h_t = weights.w_h.clone().swap_dims(1, 2);
    let (mut dh_next, mut dc_next) = (zeros.clone(), zeros.clone());
    let mut dz_steps = Vec::with_capacity(seq);
    for t in (0..seq).rev() {
        let a = at(&tape.gates, t);
        let part = |k: usize| {
            a.clone()
                .slice([0..rows, 0..batch, k * hidden..(k + 1) * hidden])
        };
        let (i, f, g, o) = (part(0), part(1), part(2), part(3));
        let c_prev = if t == 0 {
            zeros.clone()
        } else {
            at(&tape.cells, t - 1)
        };
        let tc = at(&tape.cells, t).tanh();
        let dh = at(&d_hidden, t) + dh_next;
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
        dz_steps.push(dz);
    }
    dz_steps.reverse();
    let dz = Tensor::cat(dz_steps, 1);
    let previous = if seq > 1 {
        let before = tape
            .hidden
            .clone()
            .slice([0..rows, 0..seq - 1])
            .reshape_to([rows, (seq - 1) * batch, hidden]);
        Tensor::cat(vec![zeros, before], 1)
    } else {
        zeros
    };
    let inputs = tape.inputs.clone().reshape_to([rows, seq * batch, input]);
    LstmGradients {
        w_x: inputs.swap_dims(1, 2).matmul(dz.clone()),
        w_h: previous.swap_dims(1, 2).matmul(dz.clone()),
        bias: dz.clone().sum_along(1).reshape_to([rows, 1, gates]),
        inputs: dz
            .matmul(weights.w_x.clone().swap_dims(1, 2))
            .reshape_to([rows, seq, batch, input]),
    }
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
            let d_hidden = grads.consume::<B>(&ops.node);
            let (weights, tape) = ops.state;
            let d_hidden = Tensor::from_primitive(TensorPrimitive::Float(d_hidden));
            let g = B::lstm_backward(&weights, &tape, d_hidden, self.lanes);
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
    let hidden = tape.hidden.clone().into_primitive().tensor();
    let hidden = match (LstmLayer { lanes })
        .prepare::<C>(parents)
        .compute_bound()
        .stateful()
    {
        OpsKind::Tracked(prep) => prep.finish((inner, tape.clone()), hidden),
        OpsKind::UnTracked(prep) => prep.finish(hidden),
    };
    LstmTape {
        inputs,
        gates: Tensor::from_inner(tape.gates),
        cells: Tensor::from_inner(tape.cells),
        hidden: Tensor::from_primitive(TensorPrimitive::Float(hidden)),
    }
}

/// The autodiff backend's explicit backward pass: the inner backend's, on values (first-order
/// autodiff: its results are not tracked).
pub(super) fn autodiff_backward<B: QuenchOps, C: CheckpointStrategy>(
    weights: &LstmWeights<Autodiff<B, C>>,
    tape: &LstmTape<Autodiff<B, C>>,
    d_hidden: Tensor<Autodiff<B, C>, 4>,
    lanes: usize,
) -> LstmGradients<Autodiff<B, C>> {
    let weights = LstmWeights {
        w_x: weights.w_x.clone().inner(),
        w_h: weights.w_h.clone().inner(),
        bias: weights.bias.clone().inner(),
    };
    let tape = LstmTape {
        inputs: tape.inputs.clone().inner(),
        gates: tape.gates.clone().inner(),
        cells: tape.cells.clone().inner(),
        hidden: tape.hidden.clone().inner(),
    };
    let g = B::lstm_backward(&weights, &tape, d_hidden.inner(), lanes);
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
    use burn::backend::NdArray;
    use burn::tensor::Distribution;

    type Host = NdArray<f32>;
    type Diff = Autodiff<Host>;

    fn worst(a: Tensor<impl Backend, 4>, b: Tensor<impl Backend, 4>) -> f32 {
        let (a, b) = (to_host_f32(a), to_host_f32(b));
        assert_eq!(a.len(), b.len());
        a.iter().zip(&b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
    }

    fn rank4<B: Backend>(t: Tensor<B, 3>) -> Tensor<B, 4> {
        let [a, b, c] = t.dims();
        t.reshape_to([1, a, b, c])
    }

    /// Random weights (non-zero biases) for `[rows, seq, batch, input, hidden]`, inputs and
    /// the weights of a loss `sum(hidden * loss_weights)`.
    fn case<B: Backend>(
        [rows, seq, batch, input, hidden]: [usize; 5],
        seed: u64,
    ) -> (LstmWeights<B>, Tensor<B, 4>, Tensor<B, 4>) {
        let device = Default::default();
        let _generator = crate::SeededGenerator::acquire::<B>(&device, seed);
        let normal = |shape: [usize; 3], scale: f64| {
            Tensor::random(shape, Distribution::Normal(0.0, scale), &device)
        };
        let weights = LstmWeights {
            w_x: normal([rows, input, 4 * hidden], 0.4),
            w_h: normal([rows, hidden, 4 * hidden], 0.4),
            bias: normal([rows, 1, 4 * hidden], 0.4),
        };
        let x = Tensor::random([rows, seq, batch, input], Distribution::Normal(0.0, 1.0), &device);
        let loss = Tensor::random([rows, seq, batch, hidden], Distribution::Normal(0.0, 1.0), &device);
        (weights, x, loss)
    }

    #[test]
    fn the_host_kernel_is_the_composition_in_every_tape_entry_and_gradient() {
        for (sizes, lanes) in [([4, 7, 5, 3, 6], 1), ([4, 7, 5, 3, 6], 3), ([2, 1, 3, 4, 5], 2)] {
            let (weights, x, loss) = case::<Host>(sizes, 11);
            let want = composed_forward(x.clone(), &weights);
            let got = Host::lstm_forward(x, &weights, lanes);
            for (name, a, b) in [
                ("gates", &got.gates, &want.gates),
                ("cells", &got.cells, &want.cells),
                ("hidden", &got.hidden, &want.hidden),
            ] {
                let gap = worst(a.clone(), b.clone());
                assert!(gap < 2e-6, "{sizes:?} in {lanes} lanes: {name} differ by {gap:e}");
            }
            let want = composed_backward(&weights, &want, loss.clone());
            let got = Host::lstm_backward(&weights, &got, loss, lanes);
            for (name, a, b) in [
                ("w_x", rank4(got.w_x), rank4(want.w_x)),
                ("w_h", rank4(got.w_h), rank4(want.w_h)),
                ("bias", rank4(got.bias), rank4(want.bias)),
                ("inputs", got.inputs, want.inputs),
            ] {
                let gap = worst(a, b);
                assert!(gap < 2e-5, "{sizes:?} in {lanes} lanes: d{name} differs by {gap:e}");
            }
        }
    }

    #[test]
    fn the_autodiff_layer_gives_autodiffs_gradients_of_the_composition() {
        let (weights, x, loss) = case::<Diff>([2, 6, 3, 4, 5], 12);
        let params = [&weights.w_x, &weights.w_h, &weights.bias].map(|w| w.clone().require_grad());
        let weights = LstmWeights {
            w_x: params[0].clone(),
            w_h: params[1].clone(),
            bias: params[2].clone(),
        };
        let x = x.require_grad();
        let through_op = lstm(x.clone(), &weights, 2);
        let through_ops = composed_forward(x.clone(), &weights).hidden;
        assert!(worst(through_op.clone(), through_ops.clone()) < 2e-6);
        let op = (through_op * loss.clone()).sum_all().backward();
        let ops = (through_ops * loss).sum_all().backward();
        for (k, p) in params.iter().enumerate() {
            let (a, b) = (p.grad(&op).expect("op gradient"), p.grad(&ops).expect("ops gradient"));
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
