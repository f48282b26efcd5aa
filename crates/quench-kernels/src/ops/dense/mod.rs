//! The dense layer with its activation, and layer normalisation, as operations over a member
//! axis: their default compositions of Burn tensor ops and their autodiff forms, each one node
//! whose backward pass is the inner backend's operation.

use burn::backend::Autodiff;
use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::tensor::activation::{gelu, leaky_relu, relu};
use burn::tensor::backend::Backend;
use burn::tensor::{Tensor, TensorPrimitive};

use super::QuenchOps;
use crate::reductions::Reduce;

#[cfg(any(feature = "cuda", feature = "wgpu"))]
pub(crate) mod cube;
pub(crate) mod host;

/// A nonlinearity that follows a dense layer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Activation {
    /// `max(0, x)`.
    Relu,
    /// `tanh(x)`.
    Tanh,
    /// `x` for positive inputs, `negative_slope x` otherwise.
    LeakyRelu(f64),
    /// `x Phi(x)` with `Phi` the standard normal distribution function (the exact GELU, as
    /// PyTorch's and Burn's default).
    Gelu,
}

impl Activation {
    /// Applies the nonlinearity elementwise (Burn's ops).
    pub fn apply<B: Backend, const D: usize>(self, x: Tensor<B, D>) -> Tensor<B, D> {
        match self {
            Self::Relu => relu(x),
            Self::Tanh => x.tanh(),
            Self::LeakyRelu(negative_slope) => leaky_relu(x, negative_slope),
            Self::Gelu => gelu(x),
        }
    }

    /// Whether the layer keeps the activation's derivative itself for its backward pass (what
    /// [`DenseOutput::kept`] then holds), rather than its output: GELU's derivative is not a
    /// function of the output (found with the output in one pass, it costs a few operations
    /// where the backward pass would take a second `erf`), nor is a leaky ReLU's (the output's
    /// sign is the input's only where the slope below zero is positive). Either way the kept
    /// tensor is as large as the output.
    pub fn keeps_derivative(self) -> bool {
        matches!(self, Self::Gelu | Self::LeakyRelu(_))
    }

    /// The output at pre-activation `z` and what the layer keeps (the derivative where
    /// [`Activation::keeps_derivative`], else the output), as tensor ops; a leaky ReLU's
    /// derivative is 1 from zero up.
    fn output_and_kept<B: Backend>(self, z: Tensor<B, 3>) -> (Tensor<B, 3>, Tensor<B, 3>) {
        match self {
            Self::Relu | Self::Tanh => {
                let output = self.apply(z);
                (output.clone(), output)
            }
            Self::LeakyRelu(negative_slope) => {
                let positive = z.clone().greater_equal_elem(0.0).float();
                let derivative = positive
                    .mul_scalar(1.0 - negative_slope)
                    .add_scalar(negative_slope);
                (self.apply(z), derivative)
            }
            Self::Gelu => {
                // Phi(z) + z phi(z).
                let cdf = z
                    .clone()
                    .div_scalar(std::f64::consts::SQRT_2)
                    .erf()
                    .add_scalar(1.0)
                    .mul_scalar(0.5);
                let density = z
                    .clone()
                    .powi_scalar(2)
                    .mul_scalar(-0.5)
                    .exp()
                    .mul_scalar(1.0 / (2.0 * std::f64::consts::PI).sqrt());
                (self.apply(z.clone()), cdf + z * density)
            }
        }
    }

    /// The derivative as tensor ops from what the layer kept ([`Activation::output_and_kept`]).
    fn derivative_from_kept<B: Backend>(self, kept: Tensor<B, 3>) -> Tensor<B, 3> {
        match self {
            Self::Tanh => (kept.clone() * kept).neg().add_scalar(1.0),
            // Positive where the input is.
            Self::Relu => kept.greater_elem(0.0).float(),
            Self::LeakyRelu(_) | Self::Gelu => kept,
        }
    }
}

/// A dense layer's output and what its backward pass needs.
#[derive(Debug, Clone)]
pub struct DenseOutput<B: Backend> {
    /// `activation(x W + b)` `[members, rows, fan_out]`.
    pub output: Tensor<B, 3>,
    /// The activation's derivative at `x W + b` where [`Activation::keeps_derivative`], else
    /// the output.
    pub kept: Tensor<B, 3>,
}

/// Gradients of a dense layer, shaped as its operands.
#[derive(Debug, Clone)]
pub struct DenseGradients<B: Backend> {
    /// `[members, rows, fan_in]`.
    pub x: Tensor<B, 3>,
    /// `[members, fan_in, fan_out]`.
    pub weight: Tensor<B, 3>,
    /// `[members, 1, fan_out]`.
    pub bias: Tensor<B, 3>,
}

/// `activation(x W + b)` per member: `x` `[members, rows, fan_in]`, `weight` `[members, fan_in,
/// fan_out]`, `bias` `[members, 1, fan_out]`, to `[members, rows, fan_out]`; differentiable on
/// an autodiff backend (through [`QuenchOps::dense_backward`]). A weight or bias shared by
/// every member (`[1, ..]`, broadcast) takes Burn's ops, whose autodiff sums its gradient.
pub fn dense<B: QuenchOps>(
    x: Tensor<B, 3>,
    weight: &Tensor<B, 3>,
    bias: &Tensor<B, 3>,
    activation: Option<Activation>,
) -> Tensor<B, 3> {
    let members = x.dims()[0];
    if weight.dims()[0] != members || bias.dims()[0] != members {
        // The output alone: nothing here takes a backward pass but Burn's autodiff.
        let z = x.matmul(weight.clone()) + bias.clone();
        return match activation {
            Some(a) => a.apply(z),
            None => z,
        };
    }
    B::dense_forward(x, weight, bias, activation).output
}

/// The dense layer as Burn ops.
pub fn composed_dense<B: Backend>(
    x: Tensor<B, 3>,
    weight: &Tensor<B, 3>,
    bias: &Tensor<B, 3>,
    activation: Option<Activation>,
) -> DenseOutput<B> {
    let z = x.matmul(weight.clone()) + bias.clone();
    let (output, kept) = match activation {
        Some(a) => a.output_and_kept(z),
        None => (z.clone(), z),
    };
    DenseOutput { output, kept }
}

/// The dense layer's gradients as Burn ops, from its input `x`, `weight`, what the forward
/// pass kept ([`DenseOutput::kept`]) and the output's gradient `dy`.
pub fn composed_dense_backward<B: Backend>(
    x: Tensor<B, 3>,
    weight: &Tensor<B, 3>,
    kept: Tensor<B, 3>,
    dy: Tensor<B, 3>,
    activation: Option<Activation>,
) -> DenseGradients<B> {
    let dz = match activation {
        Some(a) => dy * a.derivative_from_kept(kept),
        None => dy,
    };
    DenseGradients {
        x: dz.clone().matmul(weight.clone().swap_dims(1, 2)),
        weight: x.swap_dims(1, 2).matmul(dz.clone()),
        bias: dz.sum_along(1),
    }
}

/// What a layer normalisation keeps for its backward pass.
#[derive(Debug, Clone)]
pub struct NormTape<B: Backend> {
    /// The input standardised, before gain and shift: `[members, rows, width]`.
    pub normed: Tensor<B, 3>,
    /// `1 / sqrt(variance + eps)` per row: `[members, rows, 1]`.
    pub inv_std: Tensor<B, 3>,
}

/// A layer normalisation's output `[members, rows, width]` and its tape.
pub type Normed<B> = (Tensor<B, 3>, NormTape<B>);

/// Gradients of a layer normalisation, shaped as its operands.
#[derive(Debug, Clone)]
pub struct NormGradients<B: Backend> {
    /// `[members, rows, width]`.
    pub x: Tensor<B, 3>,
    /// `[members, 1, width]`.
    pub gamma: Tensor<B, 3>,
    /// `[members, 1, width]`.
    pub beta: Tensor<B, 3>,
}

/// Layer normalisation over the last axis with per-member gain and shift (PyTorch's
/// `nn.LayerNorm`: biased variance, `eps` inside the root): `x` `[members, rows, width]`,
/// `gamma`, `beta` `[members, 1, width]`; differentiable on an autodiff backend (through
/// [`QuenchOps::layer_norm_backward`]). A gain or shift shared by every member (`[1, 1,
/// width]`) takes Burn's ops, as in [`dense`].
pub fn layer_norm<B: QuenchOps>(
    x: Tensor<B, 3>,
    gamma: &Tensor<B, 3>,
    beta: &Tensor<B, 3>,
    eps: f64,
) -> Tensor<B, 3> {
    let members = x.dims()[0];
    if gamma.dims()[0] != members || beta.dims()[0] != members {
        return composed_layer_norm(x, gamma, beta, eps).0;
    }
    B::layer_norm_forward(x, gamma, beta, eps).0
}

/// Layer normalisation as Burn ops: the output and the tape.
pub fn composed_layer_norm<B: Backend>(
    x: Tensor<B, 3>,
    gamma: &Tensor<B, 3>,
    beta: &Tensor<B, 3>,
    eps: f64,
) -> Normed<B> {
    let centred = x.clone() - x.mean_along(2);
    let variance = centred.clone().powi_scalar(2).mean_along(2);
    let inv_std = variance.add_scalar(eps).sqrt().recip();
    let normed = centred * inv_std.clone();
    let y = normed.clone() * gamma.clone() + beta.clone();
    (y, NormTape { normed, inv_std })
}

/// Layer normalisation's gradients as Burn ops: `dx = inv_std (g - mean(g) - normed
/// mean(g normed))` with `g = dy gamma`; the gain's and shift's summed over rows.
pub fn composed_layer_norm_backward<B: Backend>(
    tape: &NormTape<B>,
    gamma: &Tensor<B, 3>,
    dy: Tensor<B, 3>,
) -> NormGradients<B> {
    let g = dy.clone() * gamma.clone();
    let mean_g = g.clone().mean_along(2);
    let mean_gn = (g.clone() * tape.normed.clone()).mean_along(2);
    NormGradients {
        x: (g - mean_g - tape.normed.clone() * mean_gn) * tape.inv_std.clone(),
        gamma: (dy.clone() * tape.normed.clone()).sum_along(1),
        beta: dy.sum_along(1),
    }
}

fn primitive<B: Backend>(t: Tensor<B, 3>) -> burn::tensor::ops::FloatTensor<B> {
    t.into_primitive().tensor()
}

fn from_primitive<B: Backend>(t: burn::tensor::ops::FloatTensor<B>) -> Tensor<B, 3> {
    Tensor::from_primitive(TensorPrimitive::Float(t))
}

/// The autodiff backend's dense layer: the inner backend's forward pass as one node whose
/// backward pass is the inner backend's [`QuenchOps::dense_backward`].
pub(super) fn autodiff_dense<B: QuenchOps, C: CheckpointStrategy>(
    x: Tensor<Autodiff<B, C>, 3>,
    weight: &Tensor<Autodiff<B, C>, 3>,
    bias: &Tensor<Autodiff<B, C>, 3>,
    activation: Option<Activation>,
) -> DenseOutput<Autodiff<B, C>> {
    #[derive(Debug)]
    struct Dense;

    type DenseState<B> = (Tensor<B, 3>, Tensor<B, 3>, Tensor<B, 3>, Option<Activation>);

    impl<B: QuenchOps> Backward<B, 3> for Dense {
        type State = DenseState<B>;

        fn backward(self, ops: Ops<Self::State, 3>, grads: &mut Gradients, _: &mut Checkpointer) {
            let dy = from_primitive(grads.consume::<B>(&ops.node));
            let (x, weight, kept, activation) = ops.state;
            let g = B::dense_backward(x, &weight, kept, dy, activation);
            let [node_x, node_w, node_b] = ops.parents;
            for (node, gradient) in [(node_x, g.x), (node_w, g.weight), (node_b, g.bias)] {
                if let Some(node) = node {
                    grads.register::<B>(node.id, primitive(gradient));
                }
            }
        }
    }

    let (x_inner, w_inner) = (x.clone().inner(), weight.clone().inner());
    let inner = B::dense_forward(x_inner.clone(), &w_inner, &bias.clone().inner(), activation);
    let parents = [x, weight.clone(), bias.clone()].map(|t| primitive(t).node);
    let output = primitive(inner.output);
    let output = match Dense.prepare::<C>(parents).compute_bound().stateful() {
        OpsKind::Tracked(prep) => {
            prep.finish((x_inner, w_inner, inner.kept.clone(), activation), output)
        }
        OpsKind::UnTracked(prep) => prep.finish(output),
    };
    DenseOutput {
        output: from_primitive(output),
        kept: Tensor::from_inner(inner.kept),
    }
}

/// The autodiff backend's layer normalisation, one node as [`autodiff_dense`].
pub(super) fn autodiff_layer_norm<B: QuenchOps, C: CheckpointStrategy>(
    x: Tensor<Autodiff<B, C>, 3>,
    gamma: &Tensor<Autodiff<B, C>, 3>,
    beta: &Tensor<Autodiff<B, C>, 3>,
    eps: f64,
) -> Normed<Autodiff<B, C>> {
    #[derive(Debug)]
    struct LayerNorm;

    impl<B: QuenchOps> Backward<B, 3> for LayerNorm {
        type State = (NormTape<B>, Tensor<B, 3>);

        fn backward(self, ops: Ops<Self::State, 3>, grads: &mut Gradients, _: &mut Checkpointer) {
            let dy = from_primitive(grads.consume::<B>(&ops.node));
            let (tape, gamma) = ops.state;
            let g = B::layer_norm_backward(tape, &gamma, dy);
            let [node_x, node_g, node_b] = ops.parents;
            for (node, gradient) in [(node_x, g.x), (node_g, g.gamma), (node_b, g.beta)] {
                if let Some(node) = node {
                    grads.register::<B>(node.id, primitive(gradient));
                }
            }
        }
    }

    let gamma_inner = gamma.clone().inner();
    let (y, tape) =
        B::layer_norm_forward(x.clone().inner(), &gamma_inner, &beta.clone().inner(), eps);
    let parents = [x, gamma.clone(), beta.clone()].map(|t| primitive(t).node);
    let out = match LayerNorm.prepare::<C>(parents).compute_bound().stateful() {
        OpsKind::Tracked(prep) => prep.finish((tape.clone(), gamma_inner), primitive(y)),
        OpsKind::UnTracked(prep) => prep.finish(primitive(y)),
    };
    let tape = NormTape {
        normed: Tensor::from_inner(tape.normed),
        inv_std: Tensor::from_inner(tape.inv_std),
    };
    (from_primitive(out), tape)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::readback::{float_tensor, to_host_f32};
    use crate::testing::largest_gap as worst;
    use burn::backend::NdArray;
    use burn::tensor::Distribution;

    type Host = NdArray<f32>;
    type Diff = Autodiff<Host>;

    fn random<B: Backend>(shape: [usize; 3], scale: f64) -> Tensor<B, 3> {
        Tensor::random(shape, Distribution::Normal(0.0, scale), &Default::default())
    }

    const ACTIVATIONS: [Option<Activation>; 6] = [
        None,
        Some(Activation::Relu),
        Some(Activation::Tanh),
        Some(Activation::LeakyRelu(0.2)),
        Some(Activation::LeakyRelu(-0.5)),
        Some(Activation::Gelu),
    ];

    #[test]
    fn the_host_dense_layer_is_the_composition_in_values_and_gradients() {
        let _generator = crate::SeededGenerator::acquire::<Host>(&Default::default(), 21);
        // Small (one thread) and large enough to be split over lanes.
        for [members, rows, fan_in, fan_out] in [[3, 5, 4, 6], [2, 600, 40, 70]] {
            let x = random::<Host>([members, rows, fan_in], 1.0);
            let w = random::<Host>([members, fan_in, fan_out], 0.5);
            let b = random::<Host>([members, 1, fan_out], 0.5);
            let dy = random::<Host>([members, rows, fan_out], 1.0);
            for activation in ACTIVATIONS {
                let want = composed_dense(x.clone(), &w, &b, activation);
                let got = Host::dense_forward(x.clone(), &w, &b, activation);
                assert!(worst(got.output, want.output) < 1e-5, "{activation:?}");
                assert!(
                    worst(got.kept.clone(), want.kept.clone()) < 1e-5,
                    "{activation:?}"
                );
                let want =
                    composed_dense_backward(x.clone(), &w, want.kept, dy.clone(), activation);
                let got = Host::dense_backward(x.clone(), &w, got.kept, dy.clone(), activation);
                for (name, a, b) in [
                    ("x", got.x, want.x),
                    ("weight", got.weight, want.weight),
                    ("bias", got.bias, want.bias),
                ] {
                    let gap = worst(a, b);
                    assert!(
                        gap < 1e-4,
                        "{activation:?} {rows} rows: d{name} off by {gap:e}"
                    );
                }
            }
        }
    }

    #[test]
    fn the_host_backward_passes_give_back_the_buffers_nothing_else_holds() {
        use quench_host::buffers::{address_of, holds, holds_length};
        let _generator = crate::SeededGenerator::acquire::<Host>(&Default::default(), 24);
        // Lengths large enough to be kept (`host::buffers`) that no other test in this crate
        // uses: x 2 x 700 x 51, the kept derivatives and the norm's rows 2 x 700 x 61.
        let (x_len, out_len) = (2 * 700 * 51, 2 * 700 * 61);
        let x = random::<Host>([2, 700, 51], 1.0);
        let w = random::<Host>([2, 51, 61], 0.5);
        let b = random::<Host>([2, 1, 61], 0.5);
        let dy = random::<Host>([2, 700, 61], 1.0);
        let out = Host::dense_forward(x.clone(), &w, &b, Some(Activation::Gelu));
        let kept = address_of(&out.kept);
        // The caller's x stays with the caller; the layer's own copy of it goes back.
        let _ = Host::dense_backward(x.clone(), &w, out.kept, dy.clone(), None);
        assert!(holds(kept), "the kept derivatives");
        assert!(!holds_length(x_len), "x, held by the caller");
        let own_x = x.clone().add_scalar(0.0);
        let own_address = address_of(&own_x);
        let _ = Host::dense_backward(own_x, &w, x.clone(), dy.clone(), None);
        assert!(holds(own_address), "the layer's own input");

        let gamma = random::<Host>([2, 1, 61], 1.0);
        let (_, tape) = Host::layer_norm_forward(dy.clone(), &gamma, &b, 1e-5);
        let normed = address_of(&tape.normed);
        let _ = Host::layer_norm_backward(tape, &gamma, dy.clone());
        assert!(holds(normed), "the normalised rows");
        // Taken again by the next forward pass (its output and rows), then kept by the caller.
        let (_, tape) = Host::layer_norm_forward(dy.clone(), &gamma, &b, 1e-5);
        assert!(!holds_length(out_len));
        let held = tape.normed.clone();
        let _ = Host::layer_norm_backward(tape, &gamma, dy.clone());
        assert!(!holds_length(out_len), "the rows, held by the caller");
        drop(held);
    }

    #[test]
    fn the_autodiff_dense_layer_and_norm_give_autodiffs_gradients_of_the_compositions() {
        let _generator = crate::SeededGenerator::acquire::<Diff>(&Default::default(), 22);
        let x = random::<Diff>([2, 7, 5], 1.0).require_grad();
        let w = random::<Diff>([2, 5, 4], 0.5).require_grad();
        let b = random::<Diff>([2, 1, 4], 0.5).require_grad();
        let loss = random::<Diff>([2, 7, 4], 1.0);
        // Not GELU: Burn's GELU backward is the derivative of its tanh approximation (about
        // 1e-3 off the exact GELU it computes forward); ours is exact (`host::math`'s test) and
        // the same as the composition's (the host kernel's test).
        for activation in ACTIVATIONS
            .into_iter()
            .filter(|a| *a != Some(Activation::Gelu))
        {
            let op = dense(x.clone(), &w, &b, activation);
            let ops = composed_dense(x.clone(), &w, &b, activation).output;
            assert!(worst(op.clone(), ops.clone()) < 1e-5, "{activation:?}");
            let op = (op * loss.clone()).sum_all().backward();
            let ops = (ops * loss.clone()).sum_all().backward();
            for (k, p) in [&x, &w, &b].into_iter().enumerate() {
                let gap = worst(p.grad(&op).expect("op"), p.grad(&ops).expect("ops"));
                assert!(gap < 1e-5, "{activation:?}: operand {k} off by {gap:e}");
            }
        }
        let x = random::<Diff>([2, 7, 5], 1.0).require_grad();
        let gamma = random::<Diff>([2, 1, 5], 1.0).require_grad();
        let beta = random::<Diff>([2, 1, 5], 1.0).require_grad();
        let loss = random::<Diff>([2, 7, 5], 1.0);
        let op = layer_norm(x.clone(), &gamma, &beta, 1e-5);
        let ops = composed_layer_norm(x.clone(), &gamma, &beta, 1e-5).0;
        assert!(worst(op.clone(), ops.clone()) < 1e-5);
        let op = (op * loss.clone()).sum_all().backward();
        // Against exact arithmetic rather than autodiff through the composition, whose
        // `recip` is the CPU's estimate (`testing::RECIP_ESTIMATE_BOUND`) on 32 rows or more.
        let want =
            norm_gradients_reference(&x.clone().inner(), &gamma.clone().inner(), &loss.inner());
        for (k, (p, want)) in [&x, &gamma, &beta].into_iter().zip(&want).enumerate() {
            let got = crate::readback::to_host_f64(p.grad(&op).expect("op"));
            let gap = quench_support::stats::max_abs_difference(&got, want);
            // Sums of 5 (rows) and 7 (columns) terms of size 1 in f32: some tens of roundings
            // of 6e-8.
            assert!(gap < 1e-5, "layer norm operand {k} off by {gap:e}");
        }
    }

    /// Layer normalisation's gradients `[dx, dgamma, dbeta]` in f64, shaped as `x`, `gamma`
    /// and `gamma`, for `x` `[members, rows, width]` and the output's gradient `dy`.
    fn norm_gradients_reference(
        x: &Tensor<Host, 3>,
        gamma: &Tensor<Host, 3>,
        dy: &Tensor<Host, 3>,
    ) -> [Vec<f64>; 3] {
        norm_gradients_and_sensitivities(x, gamma, dy).0
    }

    /// [`norm_gradients_reference`] and how far each gradient moves, per unit of relative
    /// error in every row's inverse deviation (`inv_std (1 + delta)` moves `normed` and
    /// `mean(g normed)` by the same factor): `inv_std (|g - mean(g)| + 3 |normed mean(g
    /// normed)|)` for `dx`, `sum |dy normed|` for `dgamma`, 0 for `dbeta`.
    fn norm_gradients_and_sensitivities(
        x: &Tensor<Host, 3>,
        gamma: &Tensor<Host, 3>,
        dy: &Tensor<Host, 3>,
    ) -> ([Vec<f64>; 3], [Vec<f64>; 3]) {
        use crate::readback::to_host_f64;
        let [_, rows, width] = x.dims();
        let [xs, gs, dys] = [x, gamma, dy].map(|t| to_host_f64(t.clone()));
        let mut dx = Vec::with_capacity(xs.len());
        let mut dx_moves = Vec::with_capacity(xs.len());
        let (mut dgamma, mut dbeta) = (vec![0.0; gs.len()], vec![0.0; gs.len()]);
        let mut dgamma_moves = vec![0.0; gs.len()];
        for (r, (row, dy)) in xs.chunks(width).zip(dys.chunks(width)).enumerate() {
            let member = (r / rows) * width;
            let mean = row.iter().sum::<f64>() / width as f64;
            let variance = row.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / width as f64;
            let inv_std = 1.0 / (variance + 1e-5).sqrt();
            let normed: Vec<f64> = row.iter().map(|v| (v - mean) * inv_std).collect();
            let g: Vec<f64> = (0..width).map(|k| dy[k] * gs[member + k]).collect();
            let mean_g = g.iter().sum::<f64>() / width as f64;
            let mean_gn = g.iter().zip(&normed).map(|(g, n)| g * n).sum::<f64>() / width as f64;
            for k in 0..width {
                dx.push(inv_std * (g[k] - mean_g - normed[k] * mean_gn));
                dx_moves
                    .push(inv_std * ((g[k] - mean_g).abs() + 3.0 * (normed[k] * mean_gn).abs()));
                dgamma[member + k] += dy[k] * normed[k];
                dgamma_moves[member + k] += (dy[k] * normed[k]).abs();
                dbeta[member + k] += dy[k];
            }
        }
        let no_move = vec![0.0; dbeta.len()];
        ([dx, dgamma, dbeta], [dx_moves, dgamma_moves, no_move])
    }

    /// Layer normalisation of `x` `[members, rows, width]` in f64.
    fn norm_reference(
        x: &Tensor<Host, 3>,
        gamma: &Tensor<Host, 3>,
        beta: &Tensor<Host, 3>,
    ) -> Vec<f64> {
        let [_, rows, width] = x.dims();
        let (xs, gs, bs) = (
            to_host_f32(x.clone()),
            to_host_f32(gamma.clone()),
            to_host_f32(beta.clone()),
        );
        let mut reference = Vec::with_capacity(xs.len());
        for (r, row) in xs.chunks(width).enumerate() {
            let member = (r / rows) * width;
            let mean = row.iter().map(|&v| f64::from(v)).sum::<f64>() / width as f64;
            let variance = row
                .iter()
                .map(|&v| (f64::from(v) - mean).powi(2))
                .sum::<f64>()
                / width as f64;
            for (k, &v) in row.iter().enumerate() {
                let normed = (f64::from(v) - mean) / (variance + 1e-5).sqrt();
                reference.push(normed * f64::from(gs[member + k]) + f64::from(bs[member + k]));
            }
        }
        reference
    }

    #[test]
    fn the_host_layer_norm_is_the_composition_in_values_and_gradients() {
        let _generator = crate::SeededGenerator::acquire::<Host>(&Default::default(), 23);
        for [members, rows, width] in [[3, 5, 7], [1, 3000, 256]] {
            // Rows far from zero mean: the variance must not cancel.
            let x = random::<Host>([members, rows, width], 2.0).add_scalar(30.0);
            let gamma = random::<Host>([members, 1, width], 1.0);
            let beta = random::<Host>([members, 1, width], 1.0);
            let dy = random::<Host>([members, rows, width], 1.0);
            let (want, want_tape) = composed_layer_norm(x.clone(), &gamma, &beta, 1e-5);
            let (got, got_tape) = Host::layer_norm_forward(x.clone(), &gamma, &beta, 1e-5);
            // Both against f64 arithmetic on the same values: the host kernel's two passes
            // over each row are the more precise (the composition loses digits to rows far
            // from zero).
            let reference = norm_reference(&x, &gamma, &beta);
            let off = |t: Tensor<Host, 3>| {
                quench_support::stats::max_or_nan(
                    to_host_f32(t)
                        .iter()
                        .zip(&reference)
                        .map(|(a, b)| (f64::from(*a) - b).abs()),
                )
            };
            let (host_off, ops_off) = (off(got), off(want));
            assert!(host_off < 1e-4, "host kernel off f64 by {host_off:e}");
            assert!(
                host_off <= ops_off.max(1e-5),
                "{host_off:e} against {ops_off:e}"
            );
            // Against exact arithmetic: the composition's own tape carries the CPU's reciprocal
            // estimate (`testing::RECIP_ESTIMATE_BOUND`) in its inverse deviations, so it is
            // held to exact arithmetic within what that bound moves each gradient.
            let (want, moves) = norm_gradients_and_sensitivities(&x, &gamma, &dy);
            let composed = composed_layer_norm_backward(&want_tape, &gamma, dy.clone());
            let got = Host::layer_norm_backward(got_tape, &gamma, dy);
            for (name, a, c, b, m) in [
                ("x", got.x, composed.x, &want[0], &moves[0]),
                ("gamma", got.gamma, composed.gamma, &want[1], &moves[1]),
                ("beta", got.beta, composed.beta, &want[2], &moves[2]),
            ] {
                // Relative to the gradient's scale. Rows near 30 with deviation 2 lose about
                // 15 x 2^-24 to centring in f32; the gain's and shift's gradients sum 3000 rows,
                // whose roundings add up as about sqrt(3000) x 2^-24 of the sum of magnitudes
                // (Higham's probabilistic bound): about 1.5e-4 of the gradient's scale here.
                let scale = b.iter().fold(1f64, |m, v| m.max(v.abs()));
                let a = crate::readback::to_host_f64(a);
                let gap = quench_support::stats::max_abs_difference(&a, b) / scale;
                assert!(
                    gap < 1e-3,
                    "{rows} rows: d{name} off by {gap:e} of its scale"
                );
                let c = crate::readback::to_host_f64(c);
                let beyond =
                    quench_support::stats::max_or_nan(c.iter().zip(b).zip(m).map(|((c, b), m)| {
                        (c - b).abs() - crate::testing::RECIP_ESTIMATE_BOUND * m
                    }));
                assert!(
                    beyond / scale < 1e-3,
                    "{rows} rows: the composition's d{name} off by {beyond:e} beyond the estimate's bound"
                );
            }
        }
    }

    crate::device_test! {
        /// The device's dense layer (a CubeCL epilogue after cubek's product on a GPU) and its
        /// backward pass give the host kernel's values for every activation, at odd sizes: one
        /// member and one row, widths that are no multiple of a vector's lanes. Tolerance as
        /// the other device tests: 1e-4 of the values' scale (GELU's `erf` differs between
        /// the host's libm and the device's).
        fn the_dense_layer_is_the_cpu_kernel_on_every_device<B>(device) {
            for [members, rows, fan_in, fan_out] in [[1, 1, 5, 7], [3, 4, 6, 3]] {
                let values = |len: usize, salt: u32| crate::testing::spread(len, salt, 1.0);
                let tensors = || {
                    let d = device;
                    (
                        float_tensor::<B::InnerBackend, f32, 3>(values(members * rows * fan_in, 1), [members, rows, fan_in], d),
                        float_tensor::<B::InnerBackend, f32, 3>(values(members * fan_in * fan_out, 2), [members, fan_in, fan_out], d),
                        float_tensor::<B::InnerBackend, f32, 3>(values(members * fan_out, 3), [members, 1, fan_out], d),
                        float_tensor::<B::InnerBackend, f32, 3>(values(members * rows * fan_out, 4), [members, rows, fan_out], d),
                    )
                };
                let host = |activation| {
                    let d = Default::default();
                    let x = float_tensor::<Host, f32, 3>(values(members * rows * fan_in, 1), [members, rows, fan_in], &d);
                    let w = float_tensor::<Host, f32, 3>(values(members * fan_in * fan_out, 2), [members, fan_in, fan_out], &d);
                    let b = float_tensor::<Host, f32, 3>(values(members * fan_out, 3), [members, 1, fan_out], &d);
                    let dy = float_tensor::<Host, f32, 3>(values(members * rows * fan_out, 4), [members, rows, fan_out], &d);
                    let out = Host::dense_forward(x.clone(), &w, &b, activation);
                    let g = Host::dense_backward(x, &w, out.kept, dy, activation);
                    [out.output, g.x, g.weight, g.bias].map(to_host_f32)
                };
                for activation in ACTIVATIONS {
                    let (x, w, b, dy) = tensors();
                    let out = B::InnerBackend::dense_forward(x.clone(), &w, &b, activation);
                    let g = B::InnerBackend::dense_backward(x, &w, out.kept, dy, activation);
                    let got = [out.output, g.x, g.weight, g.bias].map(to_host_f32);
                    for (name, (got, want)) in ["output", "dx", "dw", "db"].iter().zip(got.iter().zip(host(activation))) {
                        let scale = want.iter().fold(1f32, |m, v| m.max(v.abs()));
                        let gap = quench_support::stats::max_abs_difference(got, &want) as f32;
                        assert!(gap / scale < 1e-4, "{activation:?} {members}x{rows}x{fan_in}x{fan_out} {name}: {gap:e}");
                    }
                }
            }
        }
    }
}
