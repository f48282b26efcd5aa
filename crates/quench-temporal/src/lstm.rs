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

use quench_device::QuenchOps;
use quench_device::reductions::Reduce;
use quench_device::views::ReshapeTo;
use std::ops::Range;

use burn::module::{Param, ParamId};
use burn::nn::{Linear, Lstm, LstmConfig};
use burn::tensor::activation::sigmoid;
use burn::tensor::{Tensor, TensorData};
use quench_device::lanes::in_lanes;
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
fn rows<B: QuenchOps>(layer: &[Tensor<B, 3>]) -> [Tensor<B, 3>; LAYER_PARAMS] {
    std::array::from_fn(|k| {
        let [members, inner, gates] = layer[k].dims();
        layer[k].clone().reshape_to([2 * members, inner / 2, gates])
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

fn fused<B: QuenchOps>(layer: &[Tensor<B, 3>], x: Tensor<B, 4>) -> Tensor<B, 4> {
    let [w_x, w_h, b_x, b_h] = rows(layer);
    let [members, batch, seq, input] = x.dims();
    let [rows, hidden, gates] = w_h.dims();
    let device = x.device();
    // Both directions' inputs, the backward one reversed in time: [2 members, batch seq, in].
    let both =
        Tensor::stack::<5>(vec![x.clone(), x.flip([2])], 1).reshape_to([rows, batch * seq, input]);
    let bias = b_x + b_h;
    // Every step's input projection at once, time-major so that a step is one slice.
    let projected = (both.matmul(w_x.clone()) + bias)
        .reshape_to([rows, batch, seq, gates])
        .permute([2, 0, 1, 3]);
    let mut h = Tensor::<B, 3>::zeros([rows, batch, hidden], &device);
    let mut c = h.clone();
    let mut outputs = Vec::with_capacity(seq);
    for t in 0..seq {
        let step = projected
            .clone()
            .narrow(0, t, 1)
            .reshape_to([rows, batch, gates]);
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
    directions_to_features(
        Tensor::stack::<4>(outputs, 2).reshape_to([members, 2, batch, seq, hidden]),
    )
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

/// What [`forward_taped`] keeps of a layer's forward pass for [`backward`].
#[derive(Debug, Clone)]
pub struct Tape<B: QuenchOps> {
    /// Both directions' inputs, `[2 members, seq batch, input]`, step-major.
    inputs: Tensor<B, 3>,
    /// The recurrence of each lane (a range of rows).
    lanes: Vec<LaneTape<B>>,
}

/// One lane's record, per time step in each direction's own order: the gate activations
/// `[i, f, g, o]` `[rows, batch, 4 hidden]`, the tanh of their scaled pre-activations, the cell
/// before the step and the tanh of the cell after it, and the hidden state after it
/// `[rows, batch, hidden]`.
#[derive(Debug, Clone)]
struct LaneTape<B: QuenchOps> {
    rows: Range<usize>,
    gates: Vec<Tensor<B, 3>>,
    tanh_gates: Vec<Tensor<B, 3>>,
    cells: Vec<Tensor<B, 3>>,
    tanh_cells: Vec<Tensor<B, 3>>,
    hidden: Vec<Tensor<B, 3>>,
}

/// The gates through one tanh: `sigmoid(z) = (1 + tanh(z / 2)) / 2` for i, f and o, `tanh(z)`
/// for g; per gate column `[4 hidden]`: the pre-activation scale, the output's scale and
/// shift, and the derivative's factor (scale times output scale).
fn gate_constants<B: QuenchOps>(hidden: usize, device: &B::Device) -> [Tensor<B, 3>; 4] {
    let column = |ifo: f32, g: f32| {
        let values: Vec<f32> = (0..4 * hidden)
            .map(|k| {
                if (2 * hidden..3 * hidden).contains(&k) {
                    g
                } else {
                    ifo
                }
            })
            .collect();
        Tensor::from_data(TensorData::new(values, [1, 1, 4 * hidden]), device)
    };
    [
        column(0.5, 1.0),
        column(0.5, 1.0),
        column(0.5, 0.0),
        column(0.25, 1.0),
    ]
}

/// `rows` split into at most `lanes` contiguous, nearly equal ranges.
fn lane_ranges(rows: usize, lanes: usize) -> Vec<Range<usize>> {
    let lanes = lanes.clamp(1, rows.max(1));
    (0..lanes)
        .map(|l| l * rows / lanes..(l + 1) * rows / lanes)
        .collect()
}

/// `work` on every range, each in its own scoped thread when there are several: the per-step
/// elementwise work of a backend that runs ops on the calling thread (burn-ndarray) then
/// spreads over the cores.
fn per_range<T: Send>(
    ranges: Vec<Range<usize>>,
    work: impl Fn(Range<usize>) -> T + Sync,
) -> Vec<T> {
    let lanes = ranges.len();
    in_lanes(ranges, lanes, |group| {
        group.into_iter().map(&work).collect::<Vec<T>>()
    })
    .into_iter()
    .flatten()
    .collect()
}

/// [`bidirectional`]'s fused layer on a backend without autodiff, keeping what [`backward`]
/// needs: `x` `[members, batch, seq, input]` to `[members, batch, seq, 2 hidden]`. The
/// recurrence runs in up to `lanes` threads, each over a range of the `2 members` rows.
pub fn forward_taped<B: QuenchOps>(
    layer: &[Tensor<B, 3>],
    x: Tensor<B, 4>,
    lanes: usize,
) -> (Tensor<B, 4>, Tape<B>) {
    let [w_x, w_h, b_x, b_h] = rows(layer);
    let [members, batch, seq, input] = x.dims();
    let [rows, hidden, gates] = w_h.dims();
    let device = x.device();
    let [scale, out_scale, out_shift, _] = gate_constants::<B>(hidden, &device);
    // The gates' pre-activation scale folded into the weights: one pass less per step.
    let (w_x, w_h) = (w_x * scale.clone(), w_h * scale.clone());
    // Step-major rows per direction, the backward direction reversed in time.
    let inputs = Tensor::stack::<5>(vec![x.clone(), x.flip([2])], 1)
        .permute([0, 1, 3, 2, 4])
        .reshape_to([rows, seq * batch, input]);
    let projected = inputs.clone().matmul(w_x) + (b_x + b_h) * scale;
    let lanes = per_range(lane_ranges(rows, lanes), |range| {
        let n = range.len();
        let projected = projected.clone().slice([range.clone()]);
        let w_h = w_h.clone().slice([range.clone()]);
        let mut h = Tensor::<B, 3>::zeros([n, batch, hidden], &device);
        let mut c = h.clone();
        let mut lane = LaneTape {
            rows: range,
            gates: Vec::with_capacity(seq),
            tanh_gates: Vec::with_capacity(seq),
            cells: Vec::with_capacity(seq),
            tanh_cells: Vec::with_capacity(seq),
            hidden: Vec::with_capacity(seq),
        };
        for t in 0..seq {
            // Already scaled: the tanh's argument.
            let z = projected
                .clone()
                .slice([0..n, t * batch..(t + 1) * batch, 0..gates])
                + h.matmul(w_h.clone());
            let tz = z.tanh();
            let a = tz.clone() * out_scale.clone() + out_shift.clone();
            let gate = |k: usize| {
                a.clone()
                    .slice([0..n, 0..batch, k * hidden..(k + 1) * hidden])
            };
            let (i, f, g, o) = (gate(0), gate(1), gate(2), gate(3));
            lane.cells.push(c.clone());
            c = f * c + i * g;
            let tc = c.clone().tanh();
            h = o * tc.clone();
            lane.gates.push(a);
            lane.tanh_gates.push(tz);
            lane.tanh_cells.push(tc);
            lane.hidden.push(h.clone());
        }
        lane
    });
    let out = Tensor::cat(
        lanes
            .iter()
            .map(|lane| Tensor::stack::<4>(lane.hidden.clone(), 2))
            .collect(),
        0,
    )
    .reshape_to([members, 2, batch, seq, hidden]);
    (directions_to_features(out), Tape { inputs, lanes })
}

/// `[members, 2, batch, seq, hidden]` (direction-own time order) to `[members, batch, seq,
/// 2 hidden]` (forward features then backward, both in time order).
fn directions_to_features<B: QuenchOps>(out: Tensor<B, 5>) -> Tensor<B, 4> {
    let [members, _, batch, seq, hidden] = out.dims();
    let forward = out.clone().slice([0..members, 0..1]);
    let backward = out.slice([0..members, 1..2]).flip([3]);
    Tensor::cat(vec![forward, backward], 4)
        .permute([0, 2, 3, 1, 4])
        .reshape_to([members, batch, seq, 2 * hidden])
}

/// Back-propagation through time of a layer run by [`forward_taped`]: from the gradient of
/// its output `dy` `[members, batch, seq, 2 hidden]`, the gradients of `[w_x, w_h, b_x, b_h]`
/// (in the parameter list's layout) and of its input `[members, batch, seq, input]`. The
/// per-step work (elementwise, plus one recurrent matmul) runs in the forward pass's lanes;
/// the weight and input gradients are three matmuls over all steps at once.
pub fn backward<B: QuenchOps>(
    layer: &[Tensor<B, 3>],
    tape: Tape<B>,
    dy: Tensor<B, 4>,
) -> (Vec<Tensor<B, 3>>, Tensor<B, 4>) {
    let [w_x, w_h, _, _] = rows(layer);
    let [members, batch, seq, _] = dy.dims();
    let [rows, hidden, gates] = w_h.dims();
    let input = w_x.dims()[1];
    let device = dy.device();
    let [_, _, _, derivative] = gate_constants::<B>(hidden, &device);
    let negative_derivative = derivative.clone().neg();
    // dy in the directions' own time order: [2 members, seq, batch, hidden], step-major.
    let dy = dy
        .reshape_to([members, batch, seq, 2, hidden])
        .permute([0, 3, 2, 1, 4]);
    let d_forward = dy.clone().slice([0..members, 0..1]);
    let d_backward = dy.slice([0..members, 1..2]).flip([2]);
    let d_out = Tensor::cat(vec![d_forward, d_backward], 1).reshape_to([rows, seq, batch, hidden]);
    let w_h_t = w_h.clone().swap_dims(1, 2);
    let Tape { inputs, lanes } = tape;
    let ranges = lanes.iter().map(|lane| lane.rows.clone()).collect();
    // Each lane's [rows, seq batch, 4 hidden] pre-activation gradients and [rows, seq batch,
    // hidden] hidden states before each step, step-major like the tape's inputs.
    let per_lane = per_range(ranges, |range| {
        let lane = lanes
            .iter()
            .find(|lane| lane.rows == range)
            .unwrap_or_else(|| unreachable!("the ranges are the lanes'"));
        let n = range.len();
        let d_out = d_out.clone().slice([range.clone()]);
        let w_h_t = w_h_t.clone().slice([range]);
        let mut dh_next = Tensor::<B, 3>::zeros([n, batch, hidden], &device);
        let mut dc_next = dh_next.clone();
        let mut dz_steps = Vec::with_capacity(seq);
        for t in (0..seq).rev() {
            let a = &lane.gates[t];
            let gate = |k: usize| {
                a.clone()
                    .slice([0..n, 0..batch, k * hidden..(k + 1) * hidden])
            };
            let (i, f, g, o) = (gate(0), gate(1), gate(2), gate(3));
            let tc = lane.tanh_cells[t].clone();
            let dh = d_out
                .clone()
                .slice([0..n, t..t + 1])
                .reshape_to([n, batch, hidden])
                + dh_next;
            let d_o = dh.clone() * tc.clone();
            let dc = dc_next + dh * o * (tc.clone() * tc).neg().add_scalar(1.0);
            let d_i = dc.clone() * g;
            let d_g = dc.clone() * i;
            let d_f = dc.clone() * lane.cells[t].clone();
            dc_next = dc * f;
            let tz = lane.tanh_gates[t].clone();
            // d tanh(k z) / dz = k (1 - tanh^2), as k + (-k) tanh^2: three passes.
            let dz = Tensor::cat(vec![d_i, d_f, d_g, d_o], 2)
                * ((tz.clone() * tz) * negative_derivative.clone() + derivative.clone());
            dh_next = dz.clone().matmul(w_h_t.clone());
            dz_steps.push(dz);
        }
        dz_steps.reverse();
        let previous: Vec<Tensor<B, 3>> =
            std::iter::once(Tensor::<B, 3>::zeros([n, batch, hidden], &device))
                .chain(lane.hidden[..seq - 1].iter().cloned())
                .collect();
        (Tensor::cat(dz_steps, 1), Tensor::cat(previous, 1))
    });
    let (dz, previous): (Vec<_>, Vec<_>) = per_lane.into_iter().unzip();
    let (dz, previous) = (Tensor::cat(dz, 0), Tensor::cat(previous, 0));
    let d_w_h = previous.swap_dims(1, 2).matmul(dz.clone());
    let d_w_x = inputs.swap_dims(1, 2).matmul(dz.clone());
    let d_b = dz.clone().sum_along(1);
    let dx = dz
        .matmul(w_x.swap_dims(1, 2))
        .reshape_to([members, 2, seq, batch, input]);
    let dx = dx.clone().slice([0..members, 0..1]) + dx.slice([0..members, 1..2]).flip([2]);
    let dx = dx.reshape_to([members, seq, batch, input]).swap_dims(1, 2);
    let grads = vec![
        d_w_x.reshape_to([members, 2 * input, gates]),
        d_w_h.reshape_to([members, 2 * hidden, gates]),
        d_b.clone().reshape_to([members, 2, gates]),
        d_b.reshape_to([members, 2, gates]),
    ];
    (grads, dx)
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::{Autodiff, NdArray};
    use burn::nn::BiLstmConfig;
    use burn::tensor::Distribution;
    use quench_device::readback::to_host_f32;

    type Train = Autodiff<NdArray<f32>>;

    fn worst(a: &[f32], b: &[f32]) -> f64 {
        assert_eq!(a.len(), b.len());
        quench_device::stats::max_abs_difference(a, b)
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
        let _generator = quench_device::SeededGenerator::acquire::<Train>(&device, seed);
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
    fn hand_written_backpropagation_through_time_matches_autodiff() {
        let (layer, x, weights) = random_case([2, 3, 5, 4, 6], 3);
        let x = x.require_grad();
        let y = bidirectional(LstmCore::Fused, &layer, x.clone());
        let grads = (y.clone() * weights.clone()).sum_all().backward();
        let inner: Vec<_> = layer.iter().map(|p| p.clone().inner()).collect();
        // One lane, one per row, and lanes of uneven size give the same result.
        for lanes in [1, 4, 3] {
            let (taped_y, tape) = forward_taped(&inner, x.clone().inner(), lanes);
            assert_eq!(tape.lanes.len(), lanes);
            assert!(worst(&to_host_f32(taped_y), &to_host_f32(y.clone())) < 1e-6);
            let (hand, dx) = backward(&inner, tape, weights.clone().inner());
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
