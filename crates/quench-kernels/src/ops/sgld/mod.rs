//! One step of stochastic-gradient Langevin dynamics over a batch of chains, each an
//! `inputs -> hidden -> 1` ReLU network trained on the bounded logistic loss (guide 002), as an
//! operation ([`QuenchOps::sgld_step`]): parameters, minibatch and the step's coefficients in,
//! the updated parameters out.
//!
//! The step is `theta <- theta - drift (grad + theta / sigma^2) - noise xi` with the chain's
//! own gradient of `factor * mean_batch(loss)` (derived by hand, no autodiff graph) and `xi`
//! the chain's counter-based normal draw ([`crate::threefry`]), laid out parameter after
//! parameter. The loss of a sample with logit `z` and label `y` is `-ln psi`, `psi = floor +
//! (1 - 2 floor) sigmoid(s z)`, `s = 2 y - 1`.
//!
//! The default composes Burn's ops ([`composed_step`]: a few matmuls and element-wise passes,
//! which a GPU's compiler fuses); the CPU backend's host kernel steps each chain in one pass
//! over its few kilobytes, chains spread over the cores, updating the parameters in place
//! where the tensors are not shared.
//!
//! Shapes: weight `[chains, inputs, hidden]`, bias `[chains, 1, hidden]`, output weight
//! `[chains, hidden, 1]`, output bias `[chains, 1, 1]`; features `[chains, batch, inputs]`,
//! labels 0/1 `[chains, batch, 1]`.

use burn::tensor::Tensor;
use burn::tensor::activation::sigmoid;

use super::QuenchOps;
use crate::ops::random::normals;
use crate::reductions::Reduce;
use crate::threefry::StreamKey;
use crate::views::ReshapeTo;

#[cfg(any(feature = "cuda", feature = "wgpu"))]
pub(crate) mod cube;
pub(crate) mod host;

/// The loss, prior and noise of one step; the per-chain coefficients are tensors so that a
/// device computes them without a read-back.
#[derive(Debug, Clone)]
pub struct SgldStep<'a, B: QuenchOps> {
    /// Each chain's drift coefficient (`lr / 2`; 0 takes no gradient step), `[chains, 1, 1]`.
    pub drift: Tensor<B, 3>,
    /// Each chain's noise scale (0 for a chain that stays put), `[chains, 1, 1]`.
    pub noise: Tensor<B, 3>,
    /// The loss's floor `e^-l_max` (dimensionless probability).
    pub floor: f64,
    /// The objective's scale: a chain's objective is `factor * mean_batch(loss in nats)`.
    pub factor: f64,
    /// The Gaussian prior's precision `1 / sigma^2`.
    pub inv_var: f64,
    /// Each chain's noise stream, in chain order.
    pub keys: &'a [StreamKey],
    /// The draw of the streams this step takes.
    pub draw: u64,
}

/// For logits and labels 0/1 of the same shape (or labels with member axis 1): the sign `s =
/// 2 y - 1`, the probability of the true class `p = sigmoid(s z)` and the bounded loss's
/// mixed probability `psi = floor + (1 - 2 floor) p` (the loss is `-ln psi`). `sigmoid(s z)`
/// for the true class avoids the cancellation of `1 - sigmoid(z)` for confident wrong
/// answers.
pub fn true_class_probability<B: QuenchOps>(
    logits: Tensor<B, 3>,
    labels: Tensor<B, 3>,
    floor: f64,
) -> [Tensor<B, 3>; 3] {
    let sign = labels.mul_scalar(2.0).sub_scalar(1.0);
    let p = sigmoid(logits * sign.clone());
    let psi = p.clone().mul_scalar(1.0 - 2.0 * floor).add_scalar(floor);
    [sign, p, psi]
}

/// The bounded loss's derivative with respect to the logit: `-(1 - 2 floor) s p (1 - p) /
/// psi` ([`true_class_probability`]), same shapes.
pub fn logit_gradient<B: QuenchOps>(
    logits: Tensor<B, 3>,
    labels: Tensor<B, 3>,
    floor: f64,
) -> Tensor<B, 3> {
    let [sign, p, psi] = true_class_probability(logits, labels, floor);
    let slope = p.clone() * p.neg().add_scalar(1.0);
    (slope * sign / psi).mul_scalar(-(1.0 - 2.0 * floor))
}

/// Each chain's gradient of `factor * mean_batch(loss)` with respect to `params` (weight,
/// bias, output weight, output bias; shapes in the module documentation), in that order.
pub fn gradients<B: QuenchOps>(
    params: &[Tensor<B, 3>; 4],
    features: Tensor<B, 3>,
    labels: Tensor<B, 3>,
    floor: f64,
    factor: f64,
) -> [Tensor<B, 3>; 4] {
    let [w1, b1, w2, b2] = params.clone();
    let batch = features.dims()[1];
    let pre = features.clone().matmul(w1) + b1;
    let inactive = pre.clone().lower_equal_elem(0.0);
    let hidden = pre.mask_fill(inactive.clone(), 0.0);
    let logits = hidden.clone().matmul(w2.clone()) + b2;
    // d objective / d logit, [chains, batch, 1].
    let dz = logit_gradient(logits, labels, floor).mul_scalar(factor / batch.max(1) as f64);
    let dw2 = hidden.swap_dims(1, 2).matmul(dz.clone());
    let db2 = dz.clone().sum_along(1);
    let dpre = dz.matmul(w2.swap_dims(1, 2)).mask_fill(inactive, 0.0);
    let dw1 = features.swap_dims(1, 2).matmul(dpre.clone());
    let db1 = dpre.sum_along(1);
    [dw1, db1, dw2, db2]
}

/// The Langevin update of one parameter `[chains, a, b]` with its gradient, its noise `xi`
/// and the per-chain `drift` and `noise` `[chains, 1, 1]`.
pub fn langevin_update<B: QuenchOps>(
    param: Tensor<B, 3>,
    grad: Tensor<B, 3>,
    xi: Tensor<B, 3>,
    drift: Tensor<B, 3>,
    noise: Tensor<B, 3>,
    inv_var: f64,
) -> Tensor<B, 3> {
    let pull = (grad + param.clone().mul_scalar(inv_var)) * drift;
    param - pull - xi * noise
}

/// The step as Burn's ops: [`gradients`], the streams' draw split parameter after parameter,
/// then [`langevin_update`] of each parameter.
pub fn composed_step<B: QuenchOps>(
    params: [Tensor<B, 3>; 4],
    features: Tensor<B, 3>,
    labels: Tensor<B, 3>,
    step: &SgldStep<'_, B>,
) -> [Tensor<B, 3>; 4] {
    let grads = gradients(&params, features, labels, step.floor, step.factor);
    let total = params.iter().map(|p| p.dims()[1] * p.dims()[2]).sum();
    let device = params[0].device();
    let xi = normals::<B>(step.keys, step.draw, total, &device);
    let mut offset = 0;
    let mut updated = params.into_iter().zip(grads).map(|(p, g)| {
        let d = p.dims();
        let part = xi.clone().narrow(1, offset, d[1] * d[2]).reshape_to(d);
        offset += d[1] * d[2];
        let (drift, noise) = (step.drift.clone(), step.noise.clone());
        langevin_update(p, g, part, drift, noise, step.inv_var)
    });
    [(); 4].map(|_| updated.next().expect("four parameters"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::readback::{float_tensor, to_host_f32};
    use burn::backend::NdArray;
    use quench_support::stats::max_abs_difference;

    type Host = NdArray<f32>;

    use crate::testing::spread;

    fn tensor(shape: [usize; 3], salt: u32, scale: f32) -> Tensor<Host, 3> {
        let len = shape.iter().product();
        float_tensor(spread(len, salt, scale), shape, &Default::default())
    }

    #[test]
    fn the_host_kernel_takes_the_compositions_steps_and_leaves_shared_inputs_alone() {
        // The host kernel takes the hidden layer in blocks of 16 units and the inputs in
        // groups of 4: a whole block and a remainder, one group; and a layer narrower than a
        // block, a group and a single input.
        for (inputs, hidden) in [(4, 24), (5, 7)] {
            host_kernel_against_composition(inputs, hidden);
        }
    }

    fn host_kernel_against_composition(inputs: usize, hidden: usize) {
        let (chains, batch) = (5, 5);
        let start = [
            tensor([chains, inputs, hidden], 1, 0.9),
            tensor([chains, 1, hidden], 2, 0.3),
            tensor([chains, hidden, 1], 3, 0.5),
            tensor([chains, 1, 1], 4, 0.2),
        ];
        let x = tensor([chains, batch, inputs], 5, 1.5);
        let y = tensor([chains, batch, 1], 6, 1.0).greater_elem(0.0).float();
        let keys: Vec<StreamKey> = (10..15).map(StreamKey::from_seed).collect();
        let column = |values: Vec<f32>| float_tensor(values, [chains, 1, 1], &Default::default());
        // Two temperatures, chain 3 finished (its step must leave it in place).
        let drift = column(vec![0.0, 0.05, 0.05, 0.0, 0.1]);
        let noise = column(vec![0.1, 0.03, 0.03, 0.0, 0.01]);
        let (mut host, mut composed) = (start.clone(), start.clone());
        for draw in 0..3 {
            let step = SgldStep {
                drift: drift.clone(),
                noise: noise.clone(),
                floor: (-4f64).exp(),
                factor: 0.27,
                inv_var: 0.25,
                keys: &keys,
                draw,
            };
            host = Host::sgld_step(host, x.clone(), y.clone(), &step);
            composed = composed_step(composed, x.clone(), y.clone(), &step);
        }
        for (k, ((h, c), s)) in host.iter().zip(&composed).zip(&start).enumerate() {
            let [h, c, s] = [h, c, s].map(|t| to_host_f32(t.clone()));
            let worst = max_abs_difference(&h, &c);
            assert!(worst < 1e-5, "{inputs} x {hidden}, parameter {k}: {worst}");
            let per = s.len() / chains;
            assert_eq!(
                h[3 * per..4 * per],
                s[3 * per..4 * per],
                "the finished chain stays"
            );
            assert_ne!(h[..per], s[..per], "a running chain moves");
        }
        // `start` was shared with both runs' first step: the in-place update copied it.
        assert_eq!(
            to_host_f32(start[0].clone()),
            spread(chains * inputs * hidden, 1, 0.9),
            "a shared input is not written"
        );
    }

    crate::device_test! {
        /// The operation on the tests' device (the host kernel on the CPU, the CubeCL kernels
        /// on lavapipe) keeps a diverged chain NaN where the composition does, and the other
        /// chain finite.
        fn a_diverged_chain_stays_nan_as_in_the_composition<B>(device) {
            type D<B> = <B as burn::tensor::backend::AutodiffBackend>::InnerBackend;
            let on = |shape: [usize; 3], salt: u32, scale: f32| -> Tensor<D<B>, 3> {
                let len = shape.iter().product();
                float_tensor(spread(len, salt, scale), shape, device)
            };
            let mut params = [
                on([2, 3, 8], 1, 0.9),
                on([2, 1, 8], 2, 0.3),
                on([2, 8, 1], 3, 0.5),
                on([2, 1, 1], 4, 0.2),
            ];
            params[1] = params[1].clone().slice_assign(
                [0..1, 0..1, 0..1],
                Tensor::full([1, 1, 1], f32::NAN, device),
            );
            let x = on([2, 4, 3], 5, 1.0);
            let y = on([2, 4, 1], 6, 1.0).greater_elem(0.0).float();
            let keys = [StreamKey::from_seed(1), StreamKey::from_seed(2)];
            let scale = |v: f32| float_tensor(vec![v; 2], [2, 1, 1], device);
            let step = SgldStep {
                drift: scale(0.05),
                noise: scale(0.01),
                floor: 0.02,
                factor: 1.0,
                inv_var: 0.0,
                keys: &keys,
                draw: 0,
            };
            let fused = D::<B>::sgld_step(params.clone(), x.clone(), y.clone(), &step);
            let composed = composed_step(params, x, y, &step);
            for (h, c) in fused.into_iter().zip(composed) {
                let (h, c) = (to_host_f32(h), to_host_f32(c));
                let half = h.len() / 2;
                assert!(h[..half].iter().any(|v| v.is_nan()), "chain 0 diverged");
                assert!(h[half..].iter().all(|v| v.is_finite()), "chain 1 did not");
                for (a, b) in h.iter().zip(&c) {
                    assert!(a.is_nan() == b.is_nan(), "NaN where the composition has it");
                }
            }
        }
    }
}
