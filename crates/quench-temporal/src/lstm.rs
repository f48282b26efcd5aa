//! Bidirectional LSTM layers over a member axis, in two implementations of one function:
//! [`LstmCore::Fused`] (ours) and [`LstmCore::Burn`] (`burn::nn::Lstm`, the reference).
//!
//! A layer's parameters are four tensors with the member axis first and the two directions
//! stacked inside a member (`d = 0` forward in time, `1` backward; reshaped for free to
//! `[2 members, ...]` rows `2 m + d`), gates in PyTorch's order i, f, g, o:
//! - `w_x` `[members, 2 input, 4 hidden]`: the input projection;
//! - `w_h` `[members, 2 hidden, 4 hidden]`: the recurrent projection;
//! - `b_x`, `b_h` `[members, 2, 4 hidden]`: PyTorch's two biases (`b_ih`, `b_hh`), kept
//!   apart so that Adam and weight decay treat them as PyTorch does.
//!
//! A member's two directions share its axis entry, so per-member clipping, early stopping and
//! optimiser masks cover the whole network of a seed.
//!
//! The fused layer is one [`QuenchOps::lstm_forward`] over `2 members` rows (the backward
//! direction reads its input reversed in time), its gradient one [`QuenchOps::lstm_backward`]:
//! on the CPU a host kernel (one thread per row range, AVX-512 products), elsewhere a
//! composition of Burn ops with one recurrent product per step for every row.
//! `burn::nn::Lstm` runs eight matmuls per step and direction, member by member.

use quench_host::lanes::{host_cores, in_lanes};
use quench_kernels::QuenchOps;
use quench_kernels::ops::lstm::{LstmTape, LstmWeights};
use quench_kernels::ops::view::ViewTo;
use quench_kernels::views::ReshapeTo;

use burn::module::{Param, ParamId};
use burn::nn::{Linear, Lstm, LstmConfig};
use burn::tensor::{Tensor, TensorData};
use rand::SeedableRng;
use rand::rngs::StdRng;
use serde::{Deserialize, Serialize};

use quench_train::init::{Init, draw_layers, orthogonal};

/// Tensors per layer in a parameter list: `w_x`, `w_h`, `b_x`, `b_h`.
pub const LAYER_PARAMS: usize = 4;

/// Which implementation runs the recurrence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LstmCore {
    /// One input projection for all steps; one recurrent matmul per step for both directions
    /// and all members.
    Fused,
    /// `burn::nn::Lstm` per member and direction, as a user of Burn's layers would write it.
    Burn,
}

/// One layer's parameters `[w_x, w_h, b_x, b_h]` for the members drawn from `seeds` (one per
/// member, each from its seed alone): Xavier-uniform input weights, orthogonal recurrent
/// weights (as PyTorch's `orthogonal_` on `weight_hh`), zero biases.
pub fn initial_layer<B: QuenchOps>(
    seeds: &[u64],
    input: usize,
    hidden: usize,
    device: &B::Device,
) -> Vec<Tensor<B, 3>> {
    let members = seeds.len();
    let rows = 2 * members;
    let gates = 4 * hidden;
    // Each row (member, direction) draws from its own stream, so the rows are drawn in
    // parallel (the orthogonalisation of a 128-unit layer takes milliseconds).
    let streams: Vec<u64> = seeds
        .iter()
        .flat_map(|&seed| (0..2u64).map(move |d| seed.wrapping_mul(2).wrapping_add(d)))
        .collect();
    let drawn = in_lanes(streams, host_cores(), |group| {
        group
            .into_iter()
            .map(|stream| {
                let w_x =
                    draw_layers(Init::XavierUniform { gain: 1.0 }, 1, input, gates, stream).weight;
                // PyTorch's weight_hh is [4H, H] with orthonormal columns; ours is its
                // transpose.
                let mut rng = StdRng::seed_from_u64(stream ^ 0x5EED_0F0F);
                let w_h: Vec<f32> = orthogonal(&mut rng, hidden, gates)
                    .into_iter()
                    .map(|v| v as f32)
                    .collect();
                (w_x, w_h)
            })
            .collect::<Vec<_>>()
    });
    let mut w_x = Vec::with_capacity(rows * input * gates);
    let mut w_h = Vec::with_capacity(rows * hidden * gates);
    for (x, h) in drawn.into_iter().flatten() {
        w_x.extend(x);
        w_h.extend(h);
    }
    [
        (w_x, [members, 2 * input, gates]),
        (w_h, [members, 2 * hidden, gates]),
        (vec![0.0; rows * gates], [members, 2, gates]),
        (vec![0.0; rows * gates], [members, 2, gates]),
    ]
    .into_iter()
    .map(|(values, shape)| Tensor::from_data(TensorData::new(values, shape), device))
    .collect()
}

/// The layer's tensors as `[2 members, ...]` rows (a view, no copy).
fn rows<B: QuenchOps>(layer: &[Tensor<B, 3>]) -> [Tensor<B, 3>; LAYER_PARAMS] {
    std::array::from_fn(|k| {
        let [members, inner, gates] = layer[k].dims();
        layer[k].clone().view_to([2 * members, inner / 2, gates])
    })
}

/// One bidirectional layer: `x` `[members, batch, seq, input]` to `[members, batch, seq,
/// 2 hidden]` (forward then backward features, as PyTorch and `BiLstm` concatenate them).
/// `layer` is `[w_x, w_h, b_x, b_h]` (module doc).
pub fn bidirectional<B: QuenchOps>(
    core: LstmCore,
    layer: &[Tensor<B, 3>],
    x: Tensor<B, 4>,
) -> Tensor<B, 4> {
    match core {
        LstmCore::Fused => fused(layer, x),
        LstmCore::Burn => with_burn(layer, x),
    }
}

/// The fused layer's output ([`QuenchOps::lstm_inference`]: no tape on a backend without
/// autodiff, as in evaluation; differentiable on an autodiff one).
fn fused<B: QuenchOps>(layer: &[Tensor<B, 3>], x: Tensor<B, 4>) -> Tensor<B, 4> {
    B::lstm_inference(x, &weights(layer), quench_kernels::host_lanes::<B>())
}

/// The same layer through `burn::nn::Lstm`: for every member, a forward and a reversed LSTM
/// whose gate `Linear`s hold slices of the parameter list (so gradients reach the list).
fn with_burn<B: QuenchOps>(layer: &[Tensor<B, 3>], x: Tensor<B, 4>) -> Tensor<B, 4> {
    let [members, batch, seq, input] = x.dims();
    let layer = rows(layer);
    let hidden = layer[1].dims()[1];
    let device = x.device();
    let outputs = (0..members)
        .map(|m| {
            let xm = x.clone().narrow(0, m, 1).reshape_to([batch, seq, input]);
            let directions = (0..2)
                .map(|d| {
                    let lstm = burn_lstm(&layer, 2 * m + d, d == 1, input, hidden, &device);
                    lstm.forward(xm.clone(), None).0
                })
                .collect();
            Tensor::cat(directions, 2).reshape_to([1, batch, seq, 2 * hidden])
        })
        .collect();
    Tensor::cat(outputs, 0)
}

/// `burn::nn::Lstm` for row `row` of the parameter list.
fn burn_lstm<B: QuenchOps>(
    layer: &[Tensor<B, 3>],
    row: usize,
    reverse: bool,
    input: usize,
    hidden: usize,
    device: &B::Device,
) -> Lstm<B> {
    let mut lstm = LstmConfig::new(input, hidden, true)
        .with_reverse(reverse)
        .init::<B>(device);
    let gate = |k: usize, fan_in: usize, weight: &Tensor<B, 3>, bias: &Tensor<B, 3>| Linear {
        weight: Param::initialized(
            ParamId::new(),
            weight
                .clone()
                .slice([row..row + 1, 0..fan_in, k * hidden..(k + 1) * hidden])
                .reshape_to([fan_in, hidden]),
        ),
        bias: Some(Param::initialized(
            ParamId::new(),
            bias.clone()
                .slice([row..row + 1, 0..1, k * hidden..(k + 1) * hidden])
                .reshape_to([hidden]),
        )),
    };
    for (k, controller) in [
        &mut lstm.input_gate,
        &mut lstm.forget_gate,
        &mut lstm.cell_gate,
        &mut lstm.output_gate,
    ]
    .into_iter()
    .enumerate()
    {
        controller.input_transform = gate(k, input, &layer[0], &layer[2]);
        controller.hidden_transform = gate(k, hidden, &layer[1], &layer[3]);
    }
    lstm
}

/// What [`forward_taped`] keeps of a layer's forward pass for [`backward`]: the operation's
/// tape, rows `2 m + d`.
pub type Tape<B> = LstmTape<B>;

/// The layer's weights as the operation takes them: `[2 members, ...]` rows, biases summed.
fn weights<B: QuenchOps>(layer: &[Tensor<B, 3>]) -> LstmWeights<B> {
    let [w_x, w_h, b_x, b_h] = rows(layer);
    LstmWeights {
        w_x,
        w_h,
        bias: b_x + b_h,
    }
}

/// [`bidirectional`]'s fused layer, keeping what [`backward`] needs: `x` `[members, batch,
/// seq, input]` to `[members, batch, seq, 2 hidden]`, through [`QuenchOps::lstm_forward`]
/// (differentiable on an autodiff backend). A host kernel spreads the `2 members` rows over
/// up to `lanes` threads.
pub fn forward_taped<B: QuenchOps>(
    layer: &[Tensor<B, 3>],
    x: Tensor<B, 4>,
    lanes: usize,
) -> (Tensor<B, 4>, Tape<B>) {
    let tape = B::lstm_forward(x, &weights(layer), lanes);
    (tape.output.clone(), tape)
}

/// Back-propagation through time of a layer run by [`forward_taped`]
/// ([`QuenchOps::lstm_backward`]): from the gradient of its output `dy` `[members, batch, seq,
/// 2 hidden]`, the gradients of `[w_x, w_h, b_x, b_h]` (in the parameter list's layout) and of
/// its input `[members, batch, seq, input]`.
pub fn backward<B: QuenchOps>(
    layer: &[Tensor<B, 3>],
    tape: Tape<B>,
    dy: Tensor<B, 4>,
    lanes: usize,
) -> (Vec<Tensor<B, 3>>, Tensor<B, 4>) {
    let weights = weights(layer);
    let g = B::lstm_backward(&weights, tape, dy, lanes);
    let grads = [g.w_x, g.w_h, g.bias.clone(), g.bias]
        .into_iter()
        .zip(layer)
        .map(|(gradient, param)| gradient.view_to(param.dims()))
        .collect();
    (grads, g.inputs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::{Autodiff, NdArray};
    use burn::nn::BiLstmConfig;
    use burn::tensor::Distribution;
    use quench_kernels::readback::to_host_f32;
    use quench_kernels::reductions::Reduce;

    type Train = Autodiff<NdArray<f32>>;

    fn worst(a: &[f32], b: &[f32]) -> f64 {
        assert_eq!(a.len(), b.len());
        quench_support::stats::max_abs_difference(a, b)
    }

    /// A layer's random parameters for `members` members (biases non-zero, so both bias paths
    /// are exercised), inputs `[members, batch, seq, input]` and weights of the output
    /// `[members, batch, seq, 2 hidden]` whose product with it is the loss; all drawn under
    /// the generator's lease from `seed`.
    fn random_case(
        [members, batch, seq, input, hidden]: [usize; 5],
        seed: u64,
    ) -> (Vec<Tensor<Train, 3>>, Tensor<Train, 4>, Tensor<Train, 4>) {
        let device = Default::default();
        let _generator = quench_kernels::SeededGenerator::acquire::<Train>(&device, seed);
        let layer = [
            [members, 2 * input, 4 * hidden],
            [members, 2 * hidden, 4 * hidden],
            [members, 2, 4 * hidden],
            [members, 2, 4 * hidden],
        ]
        .into_iter()
        .map(|shape| Tensor::random(shape, Distribution::Normal(0.0, 0.4), &device).require_grad())
        .collect();
        let normal = Distribution::Normal(0.0, 1.0);
        let x = Tensor::random([members, batch, seq, input], normal, &device);
        let weights = Tensor::random([members, batch, seq, 2 * hidden], normal, &device);
        (layer, x, weights)
    }

    #[test]
    fn fused_and_burn_cores_agree_in_values_and_every_gradient() {
        let (layer, x, weights) = random_case([3, 4, 6, 5, 7], 1);
        let x = x.require_grad();
        let run = |core| {
            let y = bidirectional(core, &layer, x.clone());
            let grads = (y.clone() * weights.clone()).sum_all().backward();
            let mut g: Vec<Vec<f32>> = layer
                .iter()
                .map(|p| to_host_f32(p.grad(&grads).unwrap()))
                .collect();
            g.push(to_host_f32(x.grad(&grads).unwrap()));
            (to_host_f32(y), g)
        };
        let (fused_y, fused_g) = run(LstmCore::Fused);
        let (burn_y, burn_g) = run(LstmCore::Burn);
        assert!(
            worst(&fused_y, &burn_y) < 1e-5,
            "outputs differ by {}",
            worst(&fused_y, &burn_y)
        );
        for (k, (a, b)) in fused_g.iter().zip(&burn_g).enumerate() {
            assert!(
                worst(a, b) < 1e-4,
                "gradient {k} differs by {}",
                worst(a, b)
            );
        }
    }

    #[test]
    fn hand_written_backpropagation_through_time_matches_autodiff_through_burns_lstm() {
        let (layer, x, weights) = random_case([2, 3, 5, 4, 6], 3);
        let x = x.require_grad();
        let y = bidirectional(LstmCore::Burn, &layer, x.clone());
        let grads = (y.clone() * weights.clone()).sum_all().backward();
        let inner: Vec<_> = layer.iter().map(|p| p.clone().inner()).collect();
        // One lane, one per row, and lanes of uneven size give the same result.
        for lanes in [1, 4, 3] {
            let (taped_y, tape) = forward_taped(&inner, x.clone().inner(), lanes);
            assert!(worst(&to_host_f32(taped_y), &to_host_f32(y.clone())) < 1e-5);
            let (hand, dx) = backward(&inner, tape, weights.clone().inner(), lanes);
            for (k, (p, g)) in layer.iter().zip(&hand).enumerate() {
                let want = to_host_f32(p.grad(&grads).unwrap());
                let got = to_host_f32(g.clone());
                assert!(
                    worst(&got, &want) < 1e-5,
                    "{lanes} lanes: gradient {k} differs by {}",
                    worst(&got, &want)
                );
            }
            let want = to_host_f32(x.grad(&grads).unwrap());
            assert!(worst(&to_host_f32(dx), &want) < 1e-5);
        }
    }

    #[test]
    fn each_member_and_direction_is_burns_bilstm_with_the_same_weights() {
        let (members, batch, seq, input, hidden) = (2, 3, 5, 4, 6);
        let (layer, x, _) = random_case([members, batch, seq, input, hidden], 2);
        let device = Default::default();
        let fused = to_host_f32(bidirectional(LstmCore::Fused, &layer, x.clone()));
        let layer = rows(&layer);
        for m in 0..members {
            // A stock BiLstm, its weights copied in gate by gate from member m's rows.
            let mut bi = BiLstmConfig::new(input, hidden, true).init::<Train>(&device);
            bi.forward = burn_lstm(&layer, 2 * m, false, input, hidden, &device);
            let mut reverse = burn_lstm(&layer, 2 * m + 1, false, input, hidden, &device);
            // BiLstm runs its `reverse` member backwards itself.
            reverse.reverse = false;
            bi.reverse = reverse;
            let xm = x.clone().narrow(0, m, 1).reshape_to([batch, seq, input]);
            let want = to_host_f32(bi.forward(xm, None).0);
            let per = batch * seq * 2 * hidden;
            let got = &fused[m * per..(m + 1) * per];
            assert!(
                worst(got, &want) < 1e-5,
                "member {m} differs by {}",
                worst(got, &want)
            );
        }
        // And a unidirectional nn::Lstm reproduces the forward half.
        let lstm = burn_lstm(&layer, 0, false, input, hidden, &device);
        let x0 = x.narrow(0, 0, 1).reshape_to([batch, seq, input]);
        let want = to_host_f32(lstm.forward(x0, None).0);
        let got: Vec<f32> = fused[..batch * seq * 2 * hidden]
            .chunks(2 * hidden)
            .flat_map(|row| row[..hidden].to_vec())
            .collect();
        assert!(worst(&got, &want) < 1e-5);
    }

    #[test]
    fn initial_weights_follow_each_seed_alone() {
        let device = Default::default();
        let both = initial_layer::<Train>(&[7, 8], 3, 4, &device);
        let alone = initial_layer::<Train>(&[8], 3, 4, &device);
        for (b, a) in both.iter().zip(&alone) {
            let b = to_host_f32(b.clone());
            assert_eq!(&b[b.len() / 2..], &to_host_f32(a.clone())[..]);
        }
        // Recurrent rows are orthonormal: W_h W_h^T = I for each direction's [hidden, 4 hidden].
        let (hidden, gates) = (4, 16);
        let w_h = to_host_f32(both[1].clone());
        for r in 0..hidden {
            for s in 0..hidden {
                let dot: f32 = (0..gates)
                    .map(|k| w_h[r * gates + k] * w_h[s * gates + k])
                    .sum();
                let want = if r == s { 1.0 } else { 0.0 };
                assert!((dot - want).abs() < 1e-5, "({r}, {s}): {dot}");
            }
        }
    }
}
