//! One training step's losses and gradients.
//!
//! Every model but the fused LSTM is differentiated by Burn's autodiff. The fused LSTM's
//! recurrence is differentiated by hand ([`lstm::backward`], the `QuenchOps` LSTM operation's
//! backward pass: a host kernel on the CPU) and autodiff covers the rest in two pieces: the
//! head, with the last layer's output as a leaf whose gradient starts the back-propagation
//! through time, and the input LayerNorm, whose parameters receive the gradient that comes out
//! of the first layer. Autodiff through the recurrence would record
//! tens of small ops per step, and every step's slice of the time-major projection would be
//! back-propagated as a zero-filled tensor of the whole projection; by hand a step costs one
//! matmul and a few elementwise passes, and the weight gradients are three matmuls over all
//! steps.

use burn::tensor::{Distribution, Int, Tensor};
use quench_device::Precision;
use quench_kernels::SeededGenerator;
use quench_kernels::ops::dropout::dropout;
use quench_kernels::ops::view::ViewTo;
use quench_kernels::readback::to_host_f32;
use quench_kernels::reductions::Reduce;
use quench_kernels::{QuenchBackend, QuenchOps};
use quench_support::stats::max_or_nan;

use super::lstm::{self, LstmCore};
use super::model::{ModelKind, TemporalNet, Widths};
use quench_train::amp::MixedPrecision;
use quench_train::classify::smoothed_cross_entropy;
use quench_train::params::{gradients, require_grad};

/// What a training step needs besides the batch: the loss, dropout, precision and lanes.
#[derive(Debug, Clone, Copy)]
pub struct Objective<'a> {
    /// Label smoothing.
    pub smoothing: f64,
    /// Class weights `[3]`, if any.
    pub class_weights: Option<&'a [f32]>,
    /// Dropout rate.
    pub dropout: f64,
    /// Precision of the forward pass.
    pub precision: Precision,
    /// Threads of the fused LSTM's recurrence (`quench_kernels::host_lanes`).
    pub lanes: usize,
}

/// What a step computed: every member's loss `[members]`, the gradients of their sum (`None`
/// when loss scaling skips the step) and the network's state after the step.
pub struct StepGradients<B: QuenchBackend> {
    /// Loss per member.
    pub loss: Tensor<B::InnerBackend, 1>,
    /// Gradients in the parameter list's order.
    pub gradients: Option<Vec<Tensor<B::InnerBackend, 3>>>,
    /// The state after the step (BatchNorm running statistics).
    pub state: Vec<Tensor<B::InnerBackend, 3>>,
}

/// Loss and gradients of one batch `x` `[members, batch, window, features]` with `labels`
/// `[members, batch]`.
pub fn step_gradients<B: QuenchBackend>(
    net: &TemporalNet<B>,
    params: &[Tensor<B::InnerBackend, 3>],
    state: &[Tensor<B::InnerBackend, 3>],
    x: Tensor<B::InnerBackend, 4>,
    labels: Tensor<B::InnerBackend, 2, Int>,
    objective: &Objective,
    amp: &mut MixedPrecision,
) -> StepGradients<B> {
    if net.kind == ModelKind::Lstm && net.core == LstmCore::Fused {
        return fused_lstm(net, params, state, x, labels, objective, amp);
    }
    let p = require_grad::<B>(params.to_vec());
    let s: Vec<Tensor<B, 3>> = state.iter().cloned().map(Tensor::from_inner).collect();
    let (logits, next_state) = net.forward(
        &p,
        &s,
        Tensor::from_inner(x),
        Some(objective.dropout),
        objective.precision,
    );
    let loss = smoothed_cross_entropy(
        logits,
        Tensor::from_inner(labels),
        objective.smoothing,
        objective.class_weights,
    );
    StepGradients {
        loss: loss.clone().inner(),
        gradients: amp.gradients(loss.sum_all(), &p),
        state: next_state.into_iter().map(|t| t.inner()).collect(),
    }
}

/// The fused LSTM's step (module doc).
fn fused_lstm<B: QuenchBackend>(
    net: &TemporalNet<B>,
    params: &[Tensor<B::InnerBackend, 3>],
    state: &[Tensor<B::InnerBackend, 3>],
    x: Tensor<B::InnerBackend, 4>,
    labels: Tensor<B::InnerBackend, 2, Int>,
    objective: &Objective,
    amp: &mut MixedPrecision,
) -> StepGradients<B> {
    let precision = objective.precision;
    // Each layer's weights in the compute precision, cast once for both passes.
    let layers: Vec<Vec<Tensor<B::InnerBackend, 3>>> = net
        .lstm_layer_ranges()
        .map(|range| precision.to_compute_all(&params[range]))
        .collect();
    // The input LayerNorm under autodiff, kept to pull the input gradient back through it.
    let norm = require_grad::<B>(params[..2].to_vec());
    let normed = TemporalNet::<B>::lstm_input_norm(
        &precision.to_compute_all(&norm),
        Tensor::from_inner(precision.to_compute(x)),
    );
    let mut h = normed.clone().inner();
    let mut tapes = Vec::new();
    let mut masks = Vec::new();
    for (l, layer) in layers.iter().enumerate() {
        if l > 0 && objective.dropout > 0.0 {
            let dropped = B::InnerBackend::dropout_forward(h, objective.dropout);
            h = dropped.output;
            masks.push(dropped.mask);
        }
        let (y, tape) = lstm::forward_taped(layer, h, objective.lanes);
        tapes.push(tape);
        h = y;
    }
    // The head under autodiff with the recurrence's output as a leaf (rank 3 for the
    // gradient helpers: [members, batch window, 2 hidden]).
    let dims = h.dims();
    let [members, batch, window, width] = dims;
    let output =
        Tensor::<B, 3>::from_inner(h.view_to([members, batch * window, width])).require_grad();
    let head_start = net.lstm_head_start();
    let head = require_grad::<B>(params[head_start..].to_vec());
    let drop = |t: Tensor<B, 3>| dropout(t, objective.dropout);
    let logits = precision.to_master(net.lstm_head(
        &precision.to_compute_all(&head),
        output.clone().view_to(dims),
        drop,
    ));
    let loss = smoothed_cross_entropy(
        logits,
        Tensor::from_inner(labels),
        objective.smoothing,
        objective.class_weights,
    );
    let mut leaves = head.clone();
    leaves.push(output);
    let gradients = amp
        .gradients(loss.clone().sum_all(), &leaves)
        .map(|mut head_grads| {
            let mut d = head_grads
                .pop()
                .unwrap_or_else(|| unreachable!("the output leaf was pushed last"))
                .view_to(dims);
            // Back through the layers by hand, the last first.
            let mut layer_grads = vec![Vec::new(); layers.len()];
            for (l, layer) in layers.iter().enumerate().rev() {
                let tape = tapes
                    .pop()
                    .unwrap_or_else(|| unreachable!("one tape per layer"));
                let (g, dx) = lstm::backward(layer, tape, precision.to_compute(d), objective.lanes);
                layer_grads[l] = g.into_iter().map(|t| precision.to_master(t)).collect();
                d = match (l > 0).then(|| masks.pop()).flatten() {
                    Some(mask) => B::InnerBackend::dropout_backward(dx, mask),
                    None => dx,
                };
            }
            // The input norm's gradient: autodiff of <normed, d>, whose gradient is d's pull-back.
            let surrogate = (normed * Tensor::from_inner(d)).sum_all();
            let mut all = gradients(&norm, &surrogate.backward());
            all.extend(layer_grads.into_iter().flatten());
            all.extend(head_grads);
            all
        });
    StepGradients {
        loss: loss.inner(),
        gradients,
        state: state.to_vec(),
    }
}

/// How far the fused LSTM's training step (recurrence differentiated by hand, in lanes) is
/// from autodiff through `burn::nn::Lstm` on `device`, for the same small 3-layer network, 2
/// seeds, label smoothing and class weights: the largest loss difference and the largest
/// gradient difference relative to its parameter's largest gradient (at least 1). What the
/// test and `benchmark verify` hold under a tolerance.
pub fn fused_lstm_gap<B: QuenchBackend>(device: &B::Device) -> (f64, f64) {
    let widths = Widths {
        lstm_hidden: 6,
        lstm_layers: 3,
        lstm_head: 5,
        ..Widths::default()
    };
    let (members, batch, window, features) = (2, 4, 5, 3);
    let _generator = SeededGenerator::acquire::<B>(device, 4);
    let x = Tensor::<B::InnerBackend, 4>::random(
        [members, batch, window, features],
        Distribution::Normal(0.0, 1.0),
        device,
    );
    let labels = Tensor::<B::InnerBackend, 2, Int>::random(
        [members, batch],
        Distribution::Uniform(0.0, 3.0),
        device,
    );
    let inner = TemporalNet::<B::InnerBackend>::new(
        ModelKind::Lstm,
        widths.clone(),
        features,
        LstmCore::Fused,
    );
    let (params, state) = inner.initial_params(&[5, 6], device);
    // Non-zero biases and norms, so that every path carries weight.
    let params: Vec<_> = params
        .into_iter()
        .map(|p| p.clone() + Tensor::random(p.shape(), Distribution::Normal(0.0, 0.1), device))
        .collect();
    let weights = [0.5f32, 2.0, 1.0];
    let objective = Objective {
        smoothing: 0.1,
        class_weights: Some(&weights),
        dropout: 0.0,
        precision: Precision::F32,
        lanes: 2,
    };
    let run = |core| {
        let net = TemporalNet::<B>::new(ModelKind::Lstm, widths.clone(), features, core);
        let mut amp = MixedPrecision::new(Precision::F32);
        let step = step_gradients::<B>(
            &net,
            &params,
            &state,
            x.clone(),
            labels.clone(),
            &objective,
            &mut amp,
        );
        let grads: Vec<Vec<f32>> = step
            .gradients
            .unwrap_or_default()
            .into_iter()
            .map(to_host_f32)
            .collect();
        (to_host_f32(step.loss), grads)
    };
    let (hand_loss, hand) = run(LstmCore::Fused);
    let (auto_loss, auto) = run(LstmCore::Burn);
    let loss_gap = max_or_nan(
        hand_loss
            .iter()
            .zip(&auto_loss)
            .map(|(a, b)| f64::from((a - b).abs())),
    );
    let gradient_gap = if hand.len() == params.len() && auto.len() == params.len() {
        max_or_nan(hand.iter().zip(&auto).map(|(h, a)| {
            let scale = a.iter().map(|v| v.abs()).fold(1.0f32, f32::max);
            quench_support::stats::max_abs_difference(h, a) / f64::from(scale)
        }))
    } else {
        f64::INFINITY
    };
    (loss_gap, gradient_gap)
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::{Autodiff, NdArray};

    type Train = Autodiff<NdArray<f32>>;

    #[test]
    fn the_hand_differentiated_lstm_step_equals_autodiff_through_burns_lstm() {
        let (loss, gradients) = fused_lstm_gap::<Train>(&Default::default());
        assert!(loss < 1e-5, "losses differ by {loss}");
        assert!(
            gradients < 1e-4,
            "gradients differ by {gradients} (relative)"
        );
    }
}
