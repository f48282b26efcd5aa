//! Attention pooling's weighted sum over a sequence as one operation:
//! `pooled[r, :] = sum_t weights[r, t] values[r, t, :]` for `values` `[rows, seq, width]` and
//! `weights` `[rows, seq]` (a softmax over time, in the LSTM's head), with its backward pass
//! `d_values[r, t, :] = weights[r, t] g[r, :]` and `d_weights[r, t] = <values[r, t, :], g[r, :]>`.
//!
//! As Burn ops the forward pass is a broadcast product written out whole and a sum over it,
//! and its gradient another two products and a sum (on the CPU backend each a pass over the
//! `[rows, seq, width]` values, the product first copying the values it shares with the
//! tape). The CPU backend's host kernel reads the values once forward and once backward, rows
//! over lanes; the default composes the Burn ops; autodiff records one node.

use burn::backend::Autodiff;
use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::tensor::backend::Backend;
use burn::tensor::{Tensor, TensorPrimitive};

use super::QuenchOps;
use crate::reductions::Reduce;
use crate::views::ReshapeTo;

pub(crate) mod host;

/// The weighted sum's gradients.
#[derive(Debug, Clone)]
pub struct PoolGradients<B: Backend> {
    /// `[rows, seq, width]`.
    pub values: Tensor<B, 3>,
    /// `[rows, seq]`.
    pub weights: Tensor<B, 2>,
}

/// `sum_t weights[r, t] values[r, t, :]`: `values` `[rows, seq, width]` and `weights` `[rows,
/// seq]` to `[rows, width]`, differentiable on an autodiff backend
/// ([`QuenchOps::weighted_sum_backward`]).
pub fn weighted_sum<B: QuenchOps>(values: Tensor<B, 3>, weights: Tensor<B, 2>) -> Tensor<B, 2> {
    B::weighted_sum(values, weights)
}

/// The weighted sum as Burn tensor ops.
pub fn composed_weighted_sum<B: Backend>(
    values: Tensor<B, 3>,
    weights: Tensor<B, 2>,
) -> Tensor<B, 2> {
    let [rows, seq, width] = values.dims();
    (values * weights.reshape_to([rows, seq, 1]))
        .sum_along(1)
        .reshape_to([rows, width])
}

/// The weighted sum's gradients as Burn tensor ops, from the pooled output's gradient `grad`
/// `[rows, width]`.
pub fn composed_weighted_sum_backward<B: Backend>(
    values: &Tensor<B, 3>,
    weights: &Tensor<B, 2>,
    grad: Tensor<B, 2>,
) -> PoolGradients<B> {
    let [rows, seq, width] = values.dims();
    let grad = grad.reshape_to([rows, 1, width]).repeat_dim(1, seq);
    PoolGradients {
        values: grad.clone() * weights.clone().reshape_to([rows, seq, 1]),
        weights: (values.clone() * grad).sum_along(2).reshape_to([rows, seq]),
    }
}

/// The autodiff backend's weighted sum: the inner backend's, recorded as one node whose
/// backward pass is the inner backend's [`QuenchOps::weighted_sum_backward`].
pub(super) fn autodiff_weighted_sum<B: QuenchOps, C: CheckpointStrategy>(
    values: Tensor<Autodiff<B, C>, 3>,
    weights: Tensor<Autodiff<B, C>, 2>,
) -> Tensor<Autodiff<B, C>, 2> {
    #[derive(Debug)]
    struct WeightedSum;

    impl<B: QuenchOps> Backward<B, 2> for WeightedSum {
        type State = (Tensor<B, 3>, Tensor<B, 2>);

        fn backward(self, ops: Ops<Self::State, 2>, grads: &mut Gradients, _: &mut Checkpointer) {
            let grad =
                Tensor::from_primitive(TensorPrimitive::Float(grads.consume::<B>(&ops.node)));
            let (values, weights) = ops.state;
            let g = B::weighted_sum_backward(&values, &weights, grad);
            let [node_values, node_weights] = ops.parents;
            if let Some(node) = node_values {
                grads.register::<B>(node.id, g.values.into_primitive().tensor());
            }
            if let Some(node) = node_weights {
                grads.register::<B>(node.id, g.weights.into_primitive().tensor());
            }
        }
    }

    let (inner_values, inner_weights) = (values.clone().inner(), weights.clone().inner());
    let pooled = B::weighted_sum(inner_values.clone(), inner_weights.clone())
        .into_primitive()
        .tensor();
    let parents = [
        values.into_primitive().tensor().node,
        weights.into_primitive().tensor().node,
    ];
    let out = match WeightedSum.prepare::<C>(parents).compute_bound().stateful() {
        OpsKind::Tracked(prep) => prep.finish((inner_values, inner_weights), pooled),
        OpsKind::UnTracked(prep) => prep.finish(pooled),
    };
    Tensor::from_primitive(TensorPrimitive::Float(out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::largest_gap as gap;
    use burn::backend::NdArray;
    use burn::tensor::Distribution;

    type Host = NdArray<f32>;
    type Diff = Autodiff<Host>;

    /// Values `[rows, seq, width]`, weights `[rows, seq]` and the loss's weights `[rows, width]`.
    fn case<B: Backend>([rows, seq, width]: [usize; 3], seed: u64) -> [Tensor<B, 3>; 3] {
        let device = Default::default();
        let _generator = crate::SeededGenerator::acquire::<B>(&device, seed);
        let normal = Distribution::Normal(0.0, 1.0);
        [[rows, seq, width], [rows, seq, 1], [rows, 1, width]]
            .map(|shape| Tensor::random(shape, normal, &device))
    }

    #[test]
    fn the_host_kernel_is_the_composition_in_values_and_gradients() {
        // One thread; split over lanes; one step; empty rows.
        for sizes in [[3, 5, 7], [600, 20, 256], [4, 1, 3], [0, 4, 3]] {
            let [values, weights, grad] = case::<Host>(sizes, 31);
            let [rows, seq, width] = sizes;
            let weights = weights.reshape_to([rows, seq]);
            let grad = grad.reshape_to([rows, width]);
            let got = Host::weighted_sum(values.clone(), weights.clone());
            let want = composed_weighted_sum(values.clone(), weights.clone());
            assert_eq!(got.dims(), [rows, width]);
            assert!(gap(got, want) < 1e-4, "{sizes:?}: pooled");
            let got = Host::weighted_sum_backward(&values, &weights, grad.clone());
            let want = composed_weighted_sum_backward(&values, &weights, grad);
            assert!(gap(got.values, want.values) < 1e-6, "{sizes:?}: d values");
            assert!(
                gap(got.weights, want.weights) < 1e-4,
                "{sizes:?}: d weights"
            );
        }
    }

    #[test]
    fn the_autodiff_node_gives_autodiffs_gradients_of_the_composition() {
        let [values, weights, loss] = case::<Diff>([4, 6, 5], 32);
        let values = values.require_grad();
        let weights = weights.reshape_to([4, 6]).require_grad();
        let loss = loss.reshape_to([4, 5]);
        let through_op = weighted_sum(values.clone(), weights.clone());
        let through_ops = composed_weighted_sum(values.clone(), weights.clone());
        assert!(gap(through_op.clone(), through_ops.clone()) < 1e-5);
        let op = (through_op * loss.clone()).sum_all().backward();
        let ops = (through_ops * loss).sum_all().backward();
        let (a, b) = (
            values.grad(&op).expect("op"),
            values.grad(&ops).expect("ops"),
        );
        assert!(gap(a, b) < 1e-5, "values' gradients differ");
        let (a, b) = (
            weights.grad(&op).expect("op"),
            weights.grad(&ops).expect("ops"),
        );
        assert!(gap(a, b) < 1e-5, "weights' gradients differ");
    }
}
