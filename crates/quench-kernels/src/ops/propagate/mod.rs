//! Piecewise-constant linear evolutions carried through their segments, differentiable, as an
//! operation ([`QuenchOps::propagate_forward`] and [`QuenchOps::propagate_backward`]): every
//! task's state `w_0 = initial` `[n]` goes through `w_{s+1} = P_s w_s`, each segment's
//! propagator a polynomial of its (scaled) generator raised to a power of two,
//! `P_s = p(X_s)^(2^q)` ([`SquaredPolynomial`]; the exact Lindblad solver's Taylor polynomial
//! of `M t_segment / 2^q` and its squarings).
//!
//! Gradients: with `g_{s+1}` the loss's gradient with respect to `w_{s+1}`, the gradient with
//! respect to `w_s` is `P_s^T g_{s+1}` and the one with respect to `X_s` is `L_r(X_s^T)[g_{s+1}
//! w_s^T]`, the Fréchet derivative of `r = p^(2^q)` at the transpose in the direction of the
//! outer product (for a real polynomial, the adjoint of `L_r(X)` is `L_r(X^T)`), computed by
//! carrying the derivative along the same Horner steps and squarings
//! ([`SquaredPolynomial::derivative`]): the exact gradient of what the forward pass computed.
//!
//! The default composes batched products (a Horner step and a squaring are one product each
//! over all segments and tasks, the carry one per segment); the CPU backend's host kernel
//! (`propagate::host`) carries each task in f64 over the cores; a CubeCL backend runs four
//! kernels (`propagate::cube`): the propagators, the carry, the carry back and the generators'
//! gradients, where the composition takes a few hundred launches under autodiff.
//!
//! Layouts: generators `[n, n, segments, tasks]` (the batch last, as the solver forms them
//! from one product of the coefficients with its generator stack), states `[tasks, n]`.

use burn::backend::Autodiff;
use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::tensor::backend::Backend;
use burn::tensor::{Tensor, TensorPrimitive};

pub use quench_host::small_matrix::SquaredPolynomial;

use super::QuenchOps;
use crate::precise_matmul;
use crate::readback::float_tensor;
use crate::views::ReshapeTo;

#[cfg(any(feature = "cuda", feature = "wgpu"))]
pub(crate) mod cube;
pub(crate) mod host;

/// A forward pass and what its backward pass needs.
#[derive(Debug, Clone)]
pub struct PropagateTape<B: Backend> {
    /// Every segment's propagator `P_s`, `[segments, tasks, n, n]`, row-major matrices.
    pub propagators: Tensor<B, 4>,
    /// The state entering each segment, `w_s`, `[segments, tasks, n]`.
    pub states: Tensor<B, 3>,
    /// The final states `w_segments`, `[tasks, n]`.
    pub output: Tensor<B, 2>,
}

/// Gradients of a loss with respect to a propagation's inputs.
#[derive(Debug, Clone)]
pub struct PropagateGradients<B: Backend> {
    /// With respect to the generators, `[n, n, segments, tasks]`.
    pub generators: Tensor<B, 4>,
    /// With respect to the initial states, `[tasks, n]`.
    pub initial: Tensor<B, 2>,
}

/// The final states `[tasks, n]` of `initial` `[tasks, n]` carried through the segments of
/// `generators` `[n, n, segments, tasks]` by the propagators `r(X_s)` of `polynomial`;
/// differentiable on an autodiff backend (one node, through
/// [`QuenchOps::propagate_backward`]).
pub fn propagate<B: QuenchOps>(
    generators: Tensor<B, 4>,
    initial: Tensor<B, 2>,
    polynomial: &SquaredPolynomial,
) -> Tensor<B, 2> {
    B::propagate_forward(generators, initial, polynomial).output
}

/// `c I` as `[1, n, n]` on `like`'s device, in the backend's float type.
fn scaled_identity<B: Backend>(n: usize, c: f64, like: &Tensor<B, 3>) -> Tensor<B, 3> {
    let values = (0..n * n)
        .map(|index| if index / n == index % n { c } else { 0.0 })
        .collect();
    float_tensor::<B, f64, 3>(values, [1, n, n], &like.device())
}

/// The generators `[n, n, segments, tasks]` as `[segments * tasks, n, n]` matrices, transposed
/// when `transposed`.
fn matrices<B: Backend>(generators: Tensor<B, 4>, transposed: bool) -> Tensor<B, 3> {
    let [n, _, segments, tasks] = generators.dims();
    let flat = generators.reshape_to([n, n, segments * tasks]);
    if transposed {
        flat.permute([2, 1, 0])
    } else {
        flat.permute([2, 0, 1])
    }
}

/// `r(x)` of every matrix of `x` `[batch, n, n]`, and with `direction` `[batch, n, n]` also its
/// Fréchet derivative in that direction, as [`SquaredPolynomial::derivative`]: a batched
/// product per Horner step and squaring (two more per step for the derivative).
fn squared_polynomial<B: QuenchOps>(
    x: Tensor<B, 3>,
    direction: Option<Tensor<B, 3>>,
    polynomial: &SquaredPolynomial,
) -> (Tensor<B, 3>, Option<Tensor<B, 3>>) {
    let [batch, n, _] = x.dims();
    let top = polynomial.coefficients.last().copied().unwrap_or(0.0);
    let mut p = scaled_identity(n, top, &x).expand([batch, n, n]);
    let mut l = direction.as_ref().map(Tensor::zeros_like);
    for &c in polynomial.coefficients.iter().rev().skip(1) {
        l = l.map(|l| {
            let e = direction.clone().expect("a derivative has a direction");
            precise_matmul(e, p.clone()) + precise_matmul(x.clone(), l)
        });
        p = precise_matmul(x.clone(), p) + scaled_identity(n, c, &x);
    }
    for _ in 0..polynomial.squarings {
        l = l.map(|l| precise_matmul(p.clone(), l.clone()) + precise_matmul(l, p.clone()));
        p = precise_matmul(p.clone(), p);
    }
    (p, l)
}

/// [`QuenchOps::propagate_forward`] in Burn's tensor ops.
pub fn composed_forward<B: QuenchOps>(
    generators: Tensor<B, 4>,
    initial: Tensor<B, 2>,
    polynomial: &SquaredPolynomial,
) -> PropagateTape<B> {
    let [n, _, segments, tasks] = generators.dims();
    let (propagators, _) = squared_polynomial(matrices(generators, false), None, polynomial);
    let mut carried = initial.clone().reshape_to([tasks, n, 1]);
    let mut states = Vec::with_capacity(segments);
    for s in 0..segments {
        states.push(carried.clone().reshape_to([1, tasks, n]));
        let step = propagators.clone().narrow(0, s * tasks, tasks);
        carried = precise_matmul(step, carried);
    }
    let states = if states.is_empty() {
        Tensor::zeros([0, tasks, n], &initial.device())
    } else {
        Tensor::cat(states, 0)
    };
    PropagateTape {
        propagators: propagators.reshape_to([segments, tasks, n, n]),
        states,
        output: carried.reshape_to([tasks, n]),
    }
}

/// [`QuenchOps::propagate_backward`] in Burn's tensor ops.
pub fn composed_backward<B: QuenchOps>(
    generators: Tensor<B, 4>,
    tape: PropagateTape<B>,
    d_output: Tensor<B, 2>,
    polynomial: &SquaredPolynomial,
) -> PropagateGradients<B> {
    let [n, _, segments, tasks] = generators.dims();
    let propagators = tape.propagators.reshape_to([segments * tasks, n, n]);
    let mut carried = d_output.reshape_to([tasks, n, 1]);
    let mut leaving = Vec::with_capacity(segments);
    for s in (0..segments).rev() {
        leaving.push(carried.clone().reshape_to([1, tasks, n]));
        let step = propagators.clone().narrow(0, s * tasks, tasks);
        carried = precise_matmul(step.swap_dims(1, 2), carried);
    }
    let initial = carried.reshape_to([tasks, n]);
    if leaving.is_empty() {
        return PropagateGradients {
            generators: generators.zeros_like(),
            initial,
        };
    }
    leaving.reverse();
    let leaving = Tensor::cat(leaving, 0).reshape_to([segments * tasks, n, 1]);
    let direction = leaving * tape.states.reshape_to([segments * tasks, 1, n]);
    let (_, derivative) =
        squared_polynomial(matrices(generators, true), Some(direction), polynomial);
    let derivative = derivative.expect("asked with a direction");
    PropagateGradients {
        generators: derivative
            .permute([1, 2, 0])
            .reshape_to([n, n, segments, tasks]),
        initial,
    }
}

/// The autodiff backend's propagation: the inner backend's forward pass, recorded as one node
/// (parents: the generators and the initial states) whose backward pass is the inner
/// backend's [`QuenchOps::propagate_backward`].
pub(super) fn autodiff_forward<B: QuenchOps, C: CheckpointStrategy>(
    generators: Tensor<Autodiff<B, C>, 4>,
    initial: Tensor<Autodiff<B, C>, 2>,
    polynomial: &SquaredPolynomial,
) -> PropagateTape<Autodiff<B, C>> {
    #[derive(Debug)]
    struct Propagation {
        polynomial: SquaredPolynomial,
    }

    impl<B: QuenchOps> Backward<B, 2> for Propagation {
        type State = (Tensor<B, 4>, PropagateTape<B>);

        fn backward(
            self,
            ops: Ops<Self::State, 2>,
            grads: &mut Gradients,
            _checkpointer: &mut Checkpointer,
        ) {
            let d_output = grads.consume::<B>(&ops.node);
            let (generators, tape) = ops.state;
            let d_output = Tensor::from_primitive(TensorPrimitive::Float(d_output));
            let g = B::propagate_backward(generators, tape, d_output, &self.polynomial);
            let [node_generators, node_initial] = ops.parents;
            if let Some(node) = node_generators {
                grads.register::<B>(node.id, g.generators.into_primitive().tensor());
            }
            if let Some(node) = node_initial {
                grads.register::<B>(node.id, g.initial.into_primitive().tensor());
            }
        }
    }

    let inner_generators = generators.clone().inner();
    let tape = B::propagate_forward(
        inner_generators.clone(),
        initial.clone().inner(),
        polynomial,
    );
    let parents = [
        generators.into_primitive().tensor().node,
        initial.into_primitive().tensor().node,
    ];
    let output = tape.output.clone().into_primitive().tensor();
    let propagation = Propagation {
        polynomial: polynomial.clone(),
    };
    let output = match propagation.prepare::<C>(parents).compute_bound().stateful() {
        OpsKind::Tracked(prep) => prep.finish((inner_generators, tape.clone()), output),
        OpsKind::UnTracked(prep) => prep.finish(output),
    };
    PropagateTape {
        propagators: Tensor::from_inner(tape.propagators),
        states: Tensor::from_inner(tape.states),
        output: Tensor::from_primitive(TensorPrimitive::Float(output)),
    }
}

/// The autodiff backend's explicit backward pass: the inner backend's, on values (first-order
/// autodiff: its results are not tracked).
pub(super) fn autodiff_backward<B: QuenchOps, C: CheckpointStrategy>(
    generators: Tensor<Autodiff<B, C>, 4>,
    tape: PropagateTape<Autodiff<B, C>>,
    d_output: Tensor<Autodiff<B, C>, 2>,
    polynomial: &SquaredPolynomial,
) -> PropagateGradients<Autodiff<B, C>> {
    let tape = PropagateTape {
        propagators: tape.propagators.inner(),
        states: tape.states.inner(),
        output: tape.output.inner(),
    };
    let g = B::propagate_backward(generators.inner(), tape, d_output.inner(), polynomial);
    PropagateGradients {
        generators: Tensor::from_inner(g.generators),
        initial: Tensor::from_inner(g.initial),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::readback::to_host_f64;
    use crate::reductions::Reduce;
    use burn::backend::NdArray;
    use quench_support::stats::max_abs_difference;

    /// A Taylor polynomial of `degree` with `squarings`.
    fn taylor(degree: usize, squarings: u32) -> SquaredPolynomial {
        SquaredPolynomial::taylor(degree, squarings)
    }

    /// Generators `[n, n, segments, tasks]` of 1-norm below 0.12 (so below one after the
    /// tests' three squarings: every propagator's norm within e) and initial states
    /// `[tasks, n]`, deterministic.
    fn inputs<B: Backend>(
        n: usize,
        segments: usize,
        tasks: usize,
        device: &B::Device,
    ) -> (Tensor<B, 4>, Tensor<B, 2>) {
        let scale = 0.12 / n as f32;
        let generators = crate::testing::spread(n * n * segments * tasks, 31, scale);
        let initial = crate::testing::spread(tasks * n, 32, 1.0);
        (
            float_tensor::<B, f32, 4>(generators, [n, n, segments, tasks], device),
            float_tensor::<B, f32, 2>(initial, [tasks, n], device),
        )
    }

    /// The final states and the gradients of `sum(output * weights)` with respect to the
    /// generators and the initial states, on backend `X`.
    fn run<X: crate::QuenchBackend>(
        n: usize,
        segments: usize,
        tasks: usize,
        polynomial: &SquaredPolynomial,
        composed: bool,
        device: &X::Device,
    ) -> [Vec<f64>; 3] {
        let (generators, initial) = inputs::<X>(n, segments, tasks, device);
        let (generators, initial) = (generators.require_grad(), initial.require_grad());
        let output = if composed {
            composed_forward(generators.clone(), initial.clone(), polynomial).output
        } else {
            propagate(generators.clone(), initial.clone(), polynomial)
        };
        let weights = crate::testing::spread(tasks * n, 33, 1.0);
        let weights = float_tensor::<X, f32, 2>(weights, [tasks, n], device);
        let grads = (output.clone() * weights).sum_all().backward();
        let grad = |t: &Tensor<X, 4>| t.grad(&grads).map(to_host_f64).unwrap_or_default();
        [
            to_host_f64(output),
            grad(&generators),
            initial.grad(&grads).map(to_host_f64).unwrap_or_default(),
        ]
    }

    #[test]
    fn the_explicit_gradients_are_autodiffs_through_the_composition() {
        // In f64, the op's node (the default composition forward, the explicit backward)
        // against autodiff through the composed forward pass: the same products up to the
        // order of sums, so within a few hundred f64 epsilons of the values' scale.
        type X = Autodiff<NdArray<f64>>;
        for (n, segments, tasks) in [(2, 3, 2), (4, 1, 1), (3, 5, 3)] {
            let polynomial = taylor(6, 2);
            let device = Default::default();
            let op = run::<X>(n, segments, tasks, &polynomial, false, &device);
            let composed = run::<X>(n, segments, tasks, &polynomial, true, &device);
            for (name, (a, b)) in ["states", "d generators", "d initial"]
                .iter()
                .zip(op.iter().zip(&composed))
            {
                assert_eq!(a.len(), b.len(), "{name}");
                assert!(!a.is_empty(), "{name}");
                let scale = b.iter().fold(1f64, |m, v| m.max(v.abs()));
                let gap = max_abs_difference(a, b) / scale;
                assert!(gap < 1e-13, "{name} ({n}, {segments}, {tasks}): {gap:e}");
            }
        }
    }

    #[test]
    fn the_host_kernel_is_the_composition_in_f64() {
        // The host kernel computes in f64 and rounds each stored propagator and state to f32
        // once (relative 2^-24); the carry and the gradients then read those, a rounding each
        // per segment and product: within `f32_bound` of the values' scale.
        let polynomial = taylor(8, 3);
        for (n, segments, tasks) in [(1, 1, 1), (4, 7, 3), (16, 2, 2)] {
            let host = run::<Autodiff<NdArray<f32>>>(
                n,
                segments,
                tasks,
                &polynomial,
                false,
                &Default::default(),
            );
            let reference = run::<Autodiff<NdArray<f64>>>(
                n,
                segments,
                tasks,
                &polynomial,
                false,
                &Default::default(),
            );
            for (name, (a, b)) in ["states", "d generators", "d initial"]
                .iter()
                .zip(host.iter().zip(&reference))
            {
                let scale = b.iter().fold(1f64, |m, v| m.max(v.abs()));
                let gap = max_abs_difference(a, b) / scale;
                let bound = f32_bound(n, segments, &polynomial);
                assert!(
                    gap < bound,
                    "{name} ({n}, {segments}, {tasks}): {gap:e} > {bound:e}"
                );
            }
        }
    }

    /// A first-order bound on the f32 error of a propagation relative to its scale: a product
    /// of `n`-long sums errs by at most `n u` of the sum of magnitudes, which the inputs keep
    /// within `e` of the result's scale (every `2^q X` of norm below one); Horner takes
    /// `degree` products, each squaring doubles the error before it and adds its own, the
    /// derivative's pair twice as many, and the carry adds one product per segment, so
    /// `2 e (degree + q + 1) 2^q n u` per segment, over `segments`.
    fn f32_bound(n: usize, segments: usize, polynomial: &SquaredPolynomial) -> f64 {
        let degree = polynomial.coefficients.len() as f64;
        let q = f64::from(polynomial.squarings);
        let u = 2f64.powi(-24);
        2.0 * std::f64::consts::E * (degree + q) * 2f64.powf(q) * n as f64 * u * segments as f64
    }

    crate::device_test! {
        fn the_device_kernels_give_the_host_kernels_values_and_gradients<B>(device) {
            // f32 products of at most 16 terms along every Horner step and squaring, against
            // the host's f64 rounded once: within `f32_bound` (twice: both sides round).
            let polynomial = taylor(8, 3);
            for (n, segments, tasks) in [(1, 1, 1), (4, 7, 3), (9, 2, 5), (16, 3, 2)] {
                let on_device = run::<B>(n, segments, tasks, &polynomial, false, device);
                let on_host = run::<Autodiff<NdArray<f32>>>(
                    n, segments, tasks, &polynomial, false, &Default::default(),
                );
                for (name, (a, b)) in ["states", "d generators", "d initial"]
                    .iter()
                    .zip(on_device.iter().zip(&on_host))
                {
                    assert_eq!(a.len(), b.len(), "{name}");
                    let scale = b.iter().fold(1f64, |m, v| m.max(v.abs()));
                    let gap = max_abs_difference(a, b) / scale;
                    let bound = 2.0 * f32_bound(n, segments, &polynomial);
                    assert!(gap < bound, "{name} ({n}, {segments}, {tasks}): {gap:e} > {bound:e}");
                }
            }
        }
    }
}
