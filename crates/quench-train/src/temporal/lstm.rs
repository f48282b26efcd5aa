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
//! The fused layer runs one input projection for every time step, both directions and every
//! member (one batched matmul), then one recurrent batched matmul per step for both directions
//! and every member: the backward direction reads its input reversed in time, so step `t`
//! serves both. `burn::nn::Lstm` runs eight matmuls per step and direction, member by member.

use burn::module::{Param, ParamId};
use burn::nn::{Linear, Lstm, LstmConfig};
use burn::tensor::activation::sigmoid;
use burn::tensor::backend::Backend;
use burn::tensor::{Tensor, TensorData};
use rand::SeedableRng;
use rand::rngs::StdRng;
use serde::{Deserialize, Serialize};

use crate::init::{Init, draw_layers, orthogonal};

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
pub fn initial_layer<B: Backend>(
    seeds: &[u64],
    input: usize,
    hidden: usize,
    device: &B::Device,
) -> Vec<Tensor<B, 3>> {
    let members = seeds.len();
    let rows = 2 * members;
    let gates = 4 * hidden;
    let mut w_x = Vec::with_capacity(rows * input * gates);
    let mut w_h = Vec::with_capacity(rows * hidden * gates);
    for &seed in seeds {
        for direction in 0..2u64 {
            let stream = seed.wrapping_mul(2).wrapping_add(direction);
            w_x.extend(
                draw_layers(Init::XavierUniform { gain: 1.0 }, 1, input, gates, stream).weight,
            );
            // PyTorch's weight_hh is [4H, H] with orthonormal columns; ours is its transpose.
            let mut rng = StdRng::seed_from_u64(stream ^ 0x5EED_0F0F);
            w_h.extend(
                orthogonal(&mut rng, hidden, gates)
                    .into_iter()
                    .map(|v| v as f32),
            );
        }
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

/// The layer's tensors as `[2 members, ...]` rows (a reshape, no copy).
fn rows<B: Backend>(layer: &[Tensor<B, 3>]) -> [Tensor<B, 3>; LAYER_PARAMS] {
    std::array::from_fn(|k| {
        let [members, inner, gates] = layer[k].dims();
        layer[k].clone().reshape([2 * members, inner / 2, gates])
    })
}

/// One bidirectional layer: `x` `[members, batch, seq, input]` to `[members, batch, seq,
/// 2 hidden]` (forward then backward features, as PyTorch and `BiLstm` concatenate them).
/// `layer` is `[w_x, w_h, b_x, b_h]` (module doc).
pub fn bidirectional<B: Backend>(
    core: LstmCore,
    layer: &[Tensor<B, 3>],
    x: Tensor<B, 4>,
) -> Tensor<B, 4> {
    match core {
        LstmCore::Fused => fused(layer, x),
        LstmCore::Burn => with_burn(layer, x),
    }
}

fn fused<B: Backend>(layer: &[Tensor<B, 3>], x: Tensor<B, 4>) -> Tensor<B, 4> {
    let [w_x, w_h, b_x, b_h] = rows(layer);
    let [members, batch, seq, input] = x.dims();
    let [rows, hidden, gates] = w_h.dims();
    let device = x.device();
    // Both directions' inputs, the backward one reversed in time: [2 members, batch seq, in].
    let both =
        Tensor::stack::<5>(vec![x.clone(), x.flip([2])], 1).reshape([rows, batch * seq, input]);
    let bias = b_x + b_h;
    // Every step's input projection at once, time-major so that a step is one slice.
    let projected = (both.matmul(w_x.clone()) + bias)
        .reshape([rows, batch, seq, gates])
        .permute([2, 0, 1, 3]);
    let mut h = Tensor::<B, 3>::zeros([rows, batch, hidden], &device);
    let mut c = h.clone();
    let mut outputs = Vec::with_capacity(seq);
    for t in 0..seq {
        let step = projected
            .clone()
            .slice([t..t + 1])
            .reshape([rows, batch, gates]);
        let z = step + h.matmul(w_h.clone());
        let s = sigmoid(z.clone());
        let i = s.clone().slice([0..rows, 0..batch, 0..hidden]);
        let f = s.clone().slice([0..rows, 0..batch, hidden..2 * hidden]);
        let o = s.slice([0..rows, 0..batch, 3 * hidden..4 * hidden]);
        let g = z.slice([0..rows, 0..batch, 2 * hidden..3 * hidden]).tanh();
        c = f * c + i * g;
        h = o * c.clone().tanh();
        outputs.push(h.clone());
    }
    // [2 members, batch, seq, hidden] -> the backward half back in time order.
    let out = Tensor::stack::<4>(outputs, 2).reshape([members, 2, batch, seq, hidden]);
    let forward = out.clone().slice([0..members, 0..1]);
    let backward = out.slice([0..members, 1..2]).flip([3]);
    Tensor::cat(vec![forward, backward], 4)
        .permute([0, 2, 3, 1, 4])
        .reshape([members, batch, seq, 2 * hidden])
}

/// The same layer through `burn::nn::Lstm`: for every member, a forward and a reversed LSTM
/// whose gate `Linear`s hold slices of the parameter list (so gradients reach the list).
fn with_burn<B: Backend>(layer: &[Tensor<B, 3>], x: Tensor<B, 4>) -> Tensor<B, 4> {
    let [members, batch, seq, input] = x.dims();
    let layer = rows(layer);
    let hidden = layer[1].dims()[1];
    let device = x.device();
    let outputs = (0..members)
        .map(|m| {
            let xm = x.clone().slice([m..m + 1]).reshape([batch, seq, input]);
            let directions = (0..2)
                .map(|d| {
                    let lstm = burn_lstm(&layer, 2 * m + d, d == 1, input, hidden, &device);
                    lstm.forward(xm.clone(), None).0
                })
                .collect();
            Tensor::cat(directions, 2).reshape([1, batch, seq, 2 * hidden])
        })
        .collect();
    Tensor::cat(outputs, 0)
}

/// `burn::nn::Lstm` for row `row` of the parameter list.
fn burn_lstm<B: Backend>(
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
                .reshape([fan_in, hidden]),
        ),
        bias: Some(Param::initialized(
            ParamId::new(),
            bias.clone()
                .slice([row..row + 1, 0..1, k * hidden..(k + 1) * hidden])
                .reshape([hidden]),
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

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::{Autodiff, NdArray};
    use burn::nn::BiLstmConfig;
    use burn::tensor::Distribution;
    use quench_device::readback::to_host_f32;

    type Train = Autodiff<NdArray<f32>>;

    fn worst(a: &[f32], b: &[f32]) -> f32 {
        assert_eq!(a.len(), b.len());
        a.iter()
            .zip(b)
            .map(|(x, y)| (x - y).abs())
            .fold(0.0, f32::max)
    }

    /// Random parameters for `members` members (biases non-zero so both paths are exercised).
    fn random_layer(
        members: usize,
        input: usize,
        hidden: usize,
        seed: u64,
    ) -> Vec<Tensor<Train, 3>> {
        let device = Default::default();
        let _generator = quench_device::SeededGenerator::acquire::<Train>(&device, seed);
        [
            [members, 2 * input, 4 * hidden],
            [members, 2 * hidden, 4 * hidden],
            [members, 2, 4 * hidden],
            [members, 2, 4 * hidden],
        ]
        .into_iter()
        .map(|shape| Tensor::random(shape, Distribution::Normal(0.0, 0.4), &device).require_grad())
        .collect()
    }

    #[test]
    fn fused_and_burn_cores_agree_in_values_and_every_gradient() {
        let (members, batch, seq, input, hidden) = (3, 4, 6, 5, 7);
        let layer = random_layer(members, input, hidden, 1);
        let device = Default::default();
        let x = Tensor::<Train, 4>::random(
            [members, batch, seq, input],
            Distribution::Normal(0.0, 1.0),
            &device,
        )
        .require_grad();
        let weights = Tensor::<Train, 4>::random(
            [members, batch, seq, 2 * hidden],
            Distribution::Normal(0.0, 1.0),
            &device,
        );
        let run = |core| {
            let y = bidirectional(core, &layer, x.clone());
            let grads = (y.clone() * weights.clone()).sum().backward();
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
    fn each_member_and_direction_is_burns_bilstm_with_the_same_weights() {
        let (members, batch, seq, input, hidden) = (2, 3, 5, 4, 6);
        let layer = random_layer(members, input, hidden, 2);
        let device = Default::default();
        let x = Tensor::<Train, 4>::random(
            [members, batch, seq, input],
            Distribution::Normal(0.0, 1.0),
            &device,
        );
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
            let xm = x.clone().slice([m..m + 1]).reshape([batch, seq, input]);
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
        let x0 = x.slice([0..1]).reshape([batch, seq, input]);
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
