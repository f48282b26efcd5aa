//! Fidelities of batched results, differentiable: dot products in the real basis.
//!
//! With the orthonormal Hermitian basis, `Tr(rho sigma) = sum_i r_i s_i`, and for channels
//! with real superoperators `S`, `S_U` the process fidelity with a unitary `U` is
//! `Tr(S_U^T S) / d^2`.

use burn::tensor::Tensor;
use quench_kernels::QuenchOps;

use crate::error::LindbladError;
use quench_kernels::reductions::Reduce;
use quench_kernels::views::ReshapeTo;

/// The state fidelity `Tr(rho sigma)` of states `[tasks, d^2]` with pure targets `[tasks, d^2]`
/// or one target `[1, d^2]` for all, giving `[tasks]`. For a pure target this is
/// `<psi| rho |psi>`, the fidelity.
///
/// # Errors
/// When `targets` is not `[tasks, d^2]` or `[1, d^2]` for `states` `[tasks, d^2]`.
pub fn state_fidelity<B: QuenchOps>(
    states: Tensor<B, 2>,
    targets: Tensor<B, 2>,
) -> Result<Tensor<B, 1>, LindbladError> {
    let [tasks, _] = states.dims();
    check_targets("targets", &states.dims(), &targets.dims())?;
    Ok((states * targets).sum_along(1).reshape_to([tasks]))
}

/// Refuses `targets` unless it is shaped as `of`, or as `of` with one leading row for all.
fn check_targets(name: &'static str, of: &[usize], targets: &[usize]) -> Result<(), LindbladError> {
    let fits = targets.len() == of.len()
        && (targets[0] == of[0] || targets[0] == 1)
        && targets[1..] == of[1..];
    if fits {
        return Ok(());
    }
    let rest: Vec<String> = of[1..].iter().map(ToString::to_string).collect();
    Err(LindbladError::Shape {
        name,
        expected: format!("[{} or 1, {}]", of[0], rest.join(", ")),
        found: targets.to_vec(),
    })
}

/// The guide's training signal `|Tr(rho sigma)|^2` clamped to `[0, 1]`, `[tasks]`: the
/// squared overlap, which the guide calls fidelity (a quirk: for a pure target the fidelity
/// is the overlap itself, see [`state_fidelity`]).
///
/// # Errors
/// As [`state_fidelity`].
pub fn squared_overlap<B: QuenchOps>(
    states: Tensor<B, 2>,
    targets: Tensor<B, 2>,
) -> Result<Tensor<B, 1>, LindbladError> {
    Ok(state_fidelity(states, targets)?
        .powi_scalar(2)
        .clamp(0.0, 1.0))
}

/// The average gate fidelity `F_avg = (d F_pro + 1) / (d + 1)` of propagators
/// `[tasks, d^2, d^2]` with a target unitary given by its superoperator `[1, d^2, d^2]` (or one
/// per task, `[tasks, d^2, d^2]`; see
/// [`Basis::unitary_superoperator`](crate::Basis::unitary_superoperator)), where
/// `F_pro = Tr(S_U^T S) / d^2` is the process (entanglement) fidelity; gives `[tasks]`.
///
/// # Errors
/// When `target` is not `[tasks, d^2, d^2]` or `[1, d^2, d^2]` for `propagators`
/// `[tasks, d^2, d^2]`.
pub fn average_gate_fidelity<B: QuenchOps>(
    propagators: Tensor<B, 3>,
    target: Tensor<B, 3>,
) -> Result<Tensor<B, 1>, LindbladError> {
    check_targets("target", &propagators.dims(), &target.dims())?;
    let [tasks, n, _] = propagators.dims();
    let d = (n as f64).sqrt();
    let process = (propagators * target)
        .reshape_to([tasks, n * n])
        .sum_along(1)
        .reshape_to([tasks])
        .div_scalar(n as f64);
    Ok(process
        .mul_scalar(d / (d + 1.0))
        .add_scalar(1.0 / (d + 1.0)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::NdArray;

    type B = NdArray<f64>;

    #[test]
    fn targets_of_another_shape_are_refused_not_broadcast_into_a_panic() {
        let device = Default::default();
        let states = Tensor::<B, 2>::ones([3, 4], &device);
        // One target for all tasks, or one per task.
        assert!(state_fidelity(states.clone(), Tensor::ones([1, 4], &device)).is_ok());
        assert!(squared_overlap(states.clone(), Tensor::ones([3, 4], &device)).is_ok());
        for bad in [[2, 4], [3, 9], [1, 1]] {
            let err = state_fidelity(states.clone(), Tensor::ones(bad, &device)).unwrap_err();
            assert!(
                err.to_string()
                    .contains("targets: expected shape [3 or 1, 4]"),
                "{err}"
            );
        }
        let propagators = Tensor::<B, 3>::ones([2, 4, 4], &device);
        let err = average_gate_fidelity(propagators, Tensor::ones([1, 9, 9], &device)).unwrap_err();
        assert!(
            err.to_string()
                .contains("target: expected shape [2 or 1, 4, 4]"),
            "{err}"
        );
    }
}
