//! The three solvers in f32 against the f64 reference, with random pulses on the guide's
//! systems; the printed errors are the numbers of the accuracy table.

use super::common::{Pulses, initial_states, max_density_error, values};
use crate::{Basis, Batch, Generators, Method, Output, Solver, System, operators, presets};
use quench_kernels::QuenchOps;

const SEGMENTS: usize = 20;
const TASKS: usize = 32;

/// Largest density-matrix element error of the states, and largest propagator entry error.
fn errors<B: QuenchOps>(
    system: &System,
    solver: Solver,
    pulses: &Pulses,
    device: &B::Device,
) -> (f64, f64) {
    let basis = Basis::gell_mann(system.dim());
    let rho0 = operators::basis_state(system.dim(), 0);
    let generators = Generators::<B>::upload(system, device);
    let batch = Batch {
        t_total: 1.0,
        amplitudes: pulses.amplitude_tensor(device),
        rates: pulses.rate_tensor(device),
        initial: initial_states(&basis, &rho0, pulses.tasks(), device).unwrap(),
    };
    let evolution = solver
        .evolve(&generators, batch, Output::StatesAndPropagators)
        .unwrap();
    let channels: Vec<_> = (0..pulses.tasks())
        .map(|t| pulses.channel(system, 1.0, t))
        .collect();
    let reference: Vec<_> = channels.iter().map(|c| c.apply(&rho0)).collect();
    let state_error = max_density_error(&basis, &values(evolution.states), &reference);
    let propagators = values(evolution.propagators.unwrap());
    let n2 = basis.size() * basis.size();
    let propagator_error = propagators.chunks(n2).zip(&channels).flat_map(|(p, c)| {
        p.iter()
            .zip(c.superoperator(&basis))
            .map(|(a, b)| (a - b).abs())
            .collect::<Vec<_>>()
    });
    let propagator_error = quench_support::stats::max_or_nan(propagator_error);
    (state_error, propagator_error)
}

fn solver(method: Method) -> Solver {
    Solver {
        method,
        ..Solver::default()
    }
}

quench_kernels::device_test! {
    fn one_qubit_meets_the_f32_accuracy_targets<B>(device) {
        let system = presets::one_qubit();
        let measure =
            |solver, pulses: &Pulses| errors::<B::InnerBackend>(&system, solver, pulses, device);
        // Amplitudes like a trained policy's (an X flip needs about pi/2) and larger.
        for (amplitude, seed) in [(1.5, 1), (3.0, 2)] {
            let pulses = Pulses::random(&system, TASKS, SEGMENTS, amplitude, 0.2, seed);
            let (exact, exact_propagator) = measure(solver(Method::Exact), &pulses);
            let (rk4, rk4_propagator) = measure(solver(Method::Rk4 { dt: 0.01 }), &pulses);
            let (euler, _) = measure(solver(Method::Euler { dt: 0.02 }), &pulses);
            println!(
                "one qubit, |u| <= {amplitude}, rates <= 0.2: max density-matrix element error"
            );
            println!("  exact         {exact:.2e} (propagator {exact_propagator:.2e})");
            println!("  rk4 dt 0.01   {rk4:.2e} (propagator {rk4_propagator:.2e})");
            println!("  euler dt 0.02 {euler:.2e}");
            assert!(exact < 2e-5, "exact {exact}");
            assert!(
                exact_propagator < 2e-5,
                "exact propagator {exact_propagator}"
            );
            assert!(rk4 < 1e-4, "rk4 {rk4}");
            // Euler at the guide's fast setting is first order: visibly off, but not diverging.
            assert!(euler > 1e-3 && euler < 1.0, "euler {euler}");
        }
    }

    fn exact_solver_is_accurate_up_to_the_control_bound<B>(device) {
        let system = presets::one_qubit();
        let pulses = Pulses::random(&system, TASKS, SEGMENTS, 10.0, 1.0, 2);
        let (exact, _) = errors::<B::InnerBackend>(&system, solver(Method::Exact), &pulses, device);
        println!("one qubit, |u| <= 10, rates <= 1: exact {exact:.2e}");
        assert!(exact < 2e-5, "exact {exact}");
    }

    fn two_qubit_and_relax_dephase_agree_with_the_reference<B>(device) {
        for (name, system, rate) in [
            ("two qubit", presets::two_qubit(), 0.2),
            ("relax-dephase", presets::relax_dephase(), 0.15),
        ] {
            let pulses = Pulses::random(&system, 8, SEGMENTS, 2.0, rate, 3);
            let measure = |solver| errors::<B::InnerBackend>(&system, solver, &pulses, device);
            let (exact, exact_propagator) = measure(solver(Method::Exact));
            let (rk4, _) = measure(solver(Method::Rk4 { dt: 0.01 }));
            println!(
                "{name}: exact {exact:.2e} (propagator {exact_propagator:.2e}), \
                 rk4 dt 0.01 {rk4:.2e}"
            );
            assert!(
                exact < 2e-5 && exact_propagator < 5e-5,
                "{name} exact {exact} {exact_propagator}"
            );
            assert!(rk4 < 1e-4, "{name} rk4 {rk4}");
        }
    }
}
