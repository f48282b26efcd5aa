//! Fidelities of batched results, differentiable: dot products in the real basis.
//!
//! With the orthonormal Hermitian basis, `Tr(rho sigma) = sum_i r_i s_i`, and for channels
//! with real superoperators `S`, `S_U` the process fidelity with a unitary `U` is
//! `Tr(S_U^T S) / d^2`.

use burn::tensor::Tensor;
use quench_device::QuenchOps;
use quench_device::reductions::Reduce;
use quench_device::views::ReshapeTo;

/// The state fidelity `Tr(rho sigma)` of states `[tasks, d^2]` with pure targets `[tasks, d^2]`
/// or one target `[1, d^2]` for all, giving `[tasks]`. For a pure target this is
/// `<psi| rho |psi>`, the fidelity.
pub fn state_fidelity<B: QuenchOps>(states: Tensor<B, 2>, targets: Tensor<B, 2>) -> Tensor<B, 1> {
    let tasks = states.dims()[0];
    (states * targets).sum_along(1).reshape_to([tasks])
}

/// The guide's training signal `|Tr(rho sigma)|^2` clamped to `[0, 1]`, `[tasks]`: the
/// squared overlap, which the guide calls fidelity (a quirk: for a pure target the fidelity
/// is the overlap itself, see [`state_fidelity`]).
pub fn squared_overlap<B: QuenchOps>(states: Tensor<B, 2>, targets: Tensor<B, 2>) -> Tensor<B, 1> {
    state_fidelity(states, targets)
        .powi_scalar(2)
        .clamp(0.0, 1.0)
}

/// The average gate fidelity `F_avg = (d F_pro + 1) / (d + 1)` of propagators
/// `[tasks, d^2, d^2]` with a target unitary given by its superoperator `[1, d^2, d^2]` (or one
/// per task, `[tasks, d^2, d^2]`; see
/// [`Basis::unitary_superoperator`](crate::Basis::unitary_superoperator)), where
/// `F_pro = Tr(S_U^T S) / d^2` is the process (entanglement) fidelity; gives `[tasks]`.
pub fn average_gate_fidelity<B: QuenchOps>(
    propagators: Tensor<B, 3>,
    target: Tensor<B, 3>,
) -> Tensor<B, 1> {
    let [tasks, n, _] = propagators.dims();
    let d = (n as f64).sqrt();
    let process = (propagators * target)
        .reshape_to([tasks, n * n])
        .sum_along(1)
        .reshape_to([tasks])
        .div_scalar(n as f64);
    process
        .mul_scalar(d / (d + 1.0))
        .add_scalar(1.0 / (d + 1.0))
}
