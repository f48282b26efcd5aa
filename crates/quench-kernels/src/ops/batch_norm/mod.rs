//! Batch normalisation in training mode over a member axis, with the ReLU that usually
//! follows it, as operations ([`QuenchOps::batch_norm_forward`] and
//! [`QuenchOps::batch_norm_backward`]): statistics per member and channel over the rows
//! (PyTorch's `BatchNorm1d` on `[rows, channels]`: biased variance, `eps` inside the root).
//! The default composes Burn's ops; the CPU backend's host kernel makes two passes over the
//! rows forward and two backward; under autodiff one node (the batch statistics' own
//! gradient inside its backward pass), where Burn's graph reduced a middle axis slice by
//! slice and summed each broadcast gradient again.

use burn::backend::Autodiff;
use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::tensor::activation::relu;
use burn::tensor::backend::Backend;
use burn::tensor::{Tensor, TensorPrimitive};

use super::QuenchOps;
use super::dense::NormGradients;
use crate::reductions::Reduce;

pub(crate) mod host;

/// What a batch normalisation keeps for its backward pass.
#[derive(Debug, Clone)]
pub struct BatchNormTape<B: Backend> {
    /// The input standardised, before gain and shift: `[members, rows, channels]`.
    pub normed: Tensor<B, 3>,
    /// `1 / sqrt(variance + eps)` per channel: `[members, 1, channels]`.
    pub inv_std: Tensor<B, 3>,
    /// The output where ReLU follows (its positive entries are where gradients pass).
    pub rectified: Option<Tensor<B, 3>>,
}

/// A batch normalisation's output with the batch statistics it used and its tape.
#[derive(Debug, Clone)]
pub struct BatchNormed<B: Backend> {
    /// `[members, rows, channels]`.
    pub output: Tensor<B, 3>,
    /// Per member and channel over the rows, `[members, 1, channels]`: constants (for the
    /// running statistics), their gradient being part of the operation's.
    pub mean: Tensor<B, 3>,
    /// The biased variance, as `mean`.
    pub var: Tensor<B, 3>,
    /// For the backward pass.
    pub tape: BatchNormTape<B>,
}

/// `gamma (x - mean) / sqrt(var + eps) + beta` with the batch's statistics per member and
/// channel, then ReLU where `rectify`: `x` `[members, rows, channels]`, `gamma`, `beta`
/// `[members, 1, channels]`; differentiable on an autodiff backend. A gain or shift shared by
/// every member (`[1, 1, channels]`) takes Burn's ops.
pub fn batch_norm<B: QuenchOps>(
    x: Tensor<B, 3>,
    gamma: &Tensor<B, 3>,
    beta: &Tensor<B, 3>,
    eps: f64,
    rectify: bool,
) -> BatchNormed<B> {
    let members = x.dims()[0];
    if gamma.dims()[0] != members || beta.dims()[0] != members {
        return composed_batch_norm(x, gamma, beta, eps, rectify);
    }
    B::batch_norm_forward(x, gamma, beta, eps, rectify)
}

/// The forward pass as Burn ops.
pub fn composed_batch_norm<B: Backend>(
    x: Tensor<B, 3>,
    gamma: &Tensor<B, 3>,
    beta: &Tensor<B, 3>,
    eps: f64,
    rectify: bool,
) -> BatchNormed<B> {
    let mean = x.clone().mean_along(1);
    let centred = x - mean.clone();
    let var = centred.clone().powi_scalar(2).mean_along(1);
    let std = var.clone().add_scalar(eps).sqrt();
    // A division, not `recip` (burn-ndarray's is a 12-bit estimate).
    let inv_std = std.ones_like() / std;
    let normed = centred * inv_std.clone();
    let y = normed.clone() * gamma.clone() + beta.clone();
    let (output, rectified) = if rectify {
        let out = relu(y);
        (out.clone(), Some(out))
    } else {
        (y, None)
    };
    BatchNormed {
        output,
        mean,
        var,
        tape: BatchNormTape {
            normed,
            inv_std,
            rectified,
        },
    }
}

/// The backward pass as Burn ops: with `g` the output's gradient through the ReLU,
/// `dx = gamma inv_std (g - mean_rows(g) - normed mean_rows(g normed))`; the gain's and
/// shift's gradients summed over rows.
pub fn composed_batch_norm_backward<B: Backend>(
    tape: &BatchNormTape<B>,
    gamma: &Tensor<B, 3>,
    dy: Tensor<B, 3>,
) -> NormGradients<B> {
    let g = match &tape.rectified {
        Some(out) => dy.mask_fill(out.clone().lower_equal_elem(0.0), 0.0),
        None => dy,
    };
    let rows = g.dims()[1] as f64;
    let beta = g.clone().sum_along(1);
    let gamma_grad = (g.clone() * tape.normed.clone()).sum_along(1);
    let x = (g - beta.clone() / rows - tape.normed.clone() * gamma_grad.clone() / rows)
        * (gamma.clone() * tape.inv_std.clone());
    NormGradients {
        x,
        gamma: gamma_grad,
        beta,
    }
}

fn primitive<B: Backend>(t: Tensor<B, 3>) -> burn::tensor::ops::FloatTensor<B> {
    t.into_primitive().tensor()
}

/// The autodiff backend's batch normalisation: the inner forward pass as one node whose
/// backward pass is the inner backend's [`QuenchOps::batch_norm_backward`].
pub(super) fn autodiff_batch_norm<B: QuenchOps, C: CheckpointStrategy>(
    x: Tensor<Autodiff<B, C>, 3>,
    gamma: &Tensor<Autodiff<B, C>, 3>,
    beta: &Tensor<Autodiff<B, C>, 3>,
    eps: f64,
    rectify: bool,
) -> BatchNormed<Autodiff<B, C>> {
    #[derive(Debug)]
    struct BatchNorm;

    impl<B: QuenchOps> Backward<B, 3> for BatchNorm {
        type State = (BatchNormTape<B>, Tensor<B, 3>);

        fn backward(self, ops: Ops<Self::State, 3>, grads: &mut Gradients, _: &mut Checkpointer) {
            let dy = Tensor::from_primitive(TensorPrimitive::Float(grads.consume::<B>(&ops.node)));
            let (tape, gamma) = ops.state;
            let g = B::batch_norm_backward(&tape, &gamma, dy);
            let [node_x, node_g, node_b] = ops.parents;
            for (node, gradient) in [(node_x, g.x), (node_g, g.gamma), (node_b, g.beta)] {
                if let Some(node) = node {
                    grads.register::<B>(node.id, primitive(gradient));
                }
            }
        }
    }

    let gamma_inner = gamma.clone().inner();
    let inner = B::batch_norm_forward(
        x.clone().inner(),
        &gamma_inner,
        &beta.clone().inner(),
        eps,
        rectify,
    );
    let parents = [x, gamma.clone(), beta.clone()].map(|t| primitive(t).node);
    let output = primitive(inner.output);
    let output = match BatchNorm.prepare::<C>(parents).compute_bound().stateful() {
        OpsKind::Tracked(prep) => prep.finish((inner.tape.clone(), gamma_inner), output),
        OpsKind::UnTracked(prep) => prep.finish(output),
    };
    BatchNormed {
        output: Tensor::from_primitive(TensorPrimitive::Float(output)),
        mean: Tensor::from_inner(inner.mean),
        var: Tensor::from_inner(inner.var),
        tape: BatchNormTape {
            normed: Tensor::from_inner(inner.tape.normed),
            inv_std: Tensor::from_inner(inner.tape.inv_std),
            rectified: inner.tape.rectified.map(Tensor::from_inner),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::largest_gap as worst;
    use burn::backend::NdArray;
    use burn::tensor::Distribution;

    type Host = NdArray<f32>;
    type Diff = Autodiff<Host>;

    fn random<B: Backend>(shape: [usize; 3], scale: f64, shift: f64) -> Tensor<B, 3> {
        Tensor::random(
            shape,
            Distribution::Normal(shift, scale),
            &Default::default(),
        )
    }

    /// The host kernel against the composition, values, statistics and gradients, with and
    /// without ReLU, over members and a thread split.
    #[test]
    fn the_host_batch_norm_is_the_composition() {
        let _hold = crate::SeededGenerator::acquire::<Host>(&Default::default(), 4);
        for (shape, rectify) in [
            ([2, 64, 9], true),
            ([3, 5, 4], false),
            ([1, 300, 128], true),
        ] {
            let [members, _, width] = shape;
            let x = random::<Host>(shape, 2.0, 1.0);
            let gamma = random::<Host>([members, 1, width], 0.5, 1.0);
            let beta = random::<Host>([members, 1, width], 0.5, 0.0);
            let want = composed_batch_norm(x.clone(), &gamma, &beta, 1e-5, rectify);
            let got = Host::batch_norm_forward(x, &gamma, &beta, 1e-5, rectify);
            assert!(worst(got.output, want.output) < 1e-5);
            assert!(worst(got.mean, want.mean) < 1e-5);
            assert!(worst(got.var, want.var) < 1e-4);
            let dy = random::<Host>(shape, 1.0, 0.0);
            let want = composed_batch_norm_backward(&want.tape, &gamma, dy.clone());
            let got = Host::batch_norm_backward(&got.tape, &gamma, dy);
            assert!(worst(got.x, want.x) < 1e-4, "{shape:?}");
            assert!(worst(got.gamma, want.gamma) < 1e-3);
            assert!(worst(got.beta, want.beta) < 1e-3);
        }
    }

    /// The operation's node gives autodiff's gradients of the composition.
    #[test]
    fn the_autodiff_batch_norm_gives_autodiffs_gradients_of_the_composition() {
        let _hold = crate::SeededGenerator::acquire::<Host>(&Default::default(), 5);
        let x = random::<Diff>([2, 40, 6], 1.5, 0.5).require_grad();
        let gamma = random::<Diff>([2, 1, 6], 0.5, 1.0).require_grad();
        let beta = random::<Diff>([2, 1, 6], 0.5, 0.0).require_grad();
        let weights = random::<Diff>([2, 40, 6], 1.0, 0.0);
        let op = batch_norm(x.clone(), &gamma, &beta, 1e-5, true).output;
        let ops = composed_batch_norm(x.clone(), &gamma, &beta, 1e-5, true).output;
        let op_grads = (op * weights.clone()).sum_all().backward();
        let ops_grads = (ops * weights).sum_all().backward();
        for p in [&x, &gamma, &beta] {
            let (a, b) = (p.grad(&op_grads), p.grad(&ops_grads));
            let (a, b) = (a.expect("op gradient"), b.expect("composition gradient"));
            assert!(worst(a, b) < 1e-4);
        }
    }
}
