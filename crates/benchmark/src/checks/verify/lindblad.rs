//! quench-lindblad: the three solvers against the f64 reference.

use super::Check;
use quench_kernels::QuenchBackend;
use quench_lindblad::conformance::{Pulses, state_error};
use quench_lindblad::{Method, Solver, presets};

/// The three solvers against the f64 reference on 32 random one-qubit tasks (20 segments,
/// |u| <= 1.5, rates <= 0.2), with the f32 accuracy targets of the solver's tests.
pub(super) fn solver_accuracy<B: QuenchBackend>(device: &B::Device) -> anyhow::Result<Vec<Check>> {
    let system = presets::one_qubit();
    let pulses = Pulses::random(&system, 32, 20, 1.5, 0.2, 1);
    [
        ("lindblad exact vs f64 reference", Method::Exact, 2e-5),
        (
            "lindblad rk4 dt 0.01 vs f64 reference",
            Method::Rk4 { dt: 0.01 },
            1e-4,
        ),
        // First order at the guide's fast step: visibly off, but bounded.
        (
            "lindblad euler dt 0.02 vs f64 reference",
            Method::Euler { dt: 0.02 },
            1e-1,
        ),
    ]
    .into_iter()
    .map(|(name, method, tolerance)| {
        let solver = Solver {
            method,
            ..Solver::default()
        };
        let error = state_error::<B::InnerBackend>(&system, solver, &pulses, 1.0, device)?;
        Ok(Check::measured(name, error, tolerance))
    })
    .collect()
}
