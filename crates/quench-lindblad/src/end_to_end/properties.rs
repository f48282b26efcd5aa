//! Invariants over random pulses (proptest, few cases to stay quick): the trace is conserved,
//! states are Hermitian and positive within tolerance, and permuting tasks permutes results.

use super::common::{Pulses, initial_states, min_eigenvalue, values};
use crate::{
    Basis, Batch, CMatrix, Generators, Method, Output, Solver, System, operators, presets,
};
use burn::backend::NdArray;
use burn::tensor::{Int, Tensor, TensorData};
use proptest::prelude::*;

type B = NdArray<f32>;

const SEGMENTS: usize = 10;

fn systems() -> [System; 3] {
    [
        presets::one_qubit(),
        presets::two_qubit(),
        presets::relax_dephase(),
    ]
}

fn methods() -> [Method; 3] {
    [
        Method::Exact,
        Method::Rk4 { dt: 0.01 },
        Method::Euler { dt: 0.02 },
    ]
}

/// Final density matrices of random tasks, and the batch's state and propagator values.
fn run(
    system: &System,
    method: Method,
    pulses: &Pulses,
    order: Option<&[usize]>,
) -> (Vec<f64>, Vec<f64>) {
    let device = Default::default();
    let basis = Basis::gell_mann(system.dim());
    let generators = Generators::<B>::upload(system, &device);
    let tasks = pulses.tasks();
    let permute2 = |t: Tensor<B, 2>| match order {
        Some(o) => t.select(0, indices(o)),
        None => t,
    };
    let permute3 = |t: Tensor<B, 3>| match order {
        Some(o) => t.select(0, indices(o)),
        None => t,
    };
    let batch = Batch {
        t_total: 1.0,
        amplitudes: permute3(pulses.amplitude_tensor(&device)),
        rates: permute2(pulses.rate_tensor(&device)),
        initial: initial_states(
            &basis,
            &operators::basis_state(system.dim(), 0),
            tasks,
            &device,
        )
        .unwrap(),
    };
    let solver = Solver {
        method,
        ..Solver::default()
    };
    let evolution = solver
        .evolve(&generators, batch, Output::StatesAndPropagators)
        .unwrap();
    (
        values(evolution.states),
        values(evolution.propagators.unwrap()),
    )
}

fn indices(order: &[usize]) -> Tensor<B, 1, Int> {
    let data: Vec<i64> = order.iter().map(|&i| i as i64).collect();
    Tensor::from_data(TensorData::new(data, [order.len()]), &Default::default())
}

fn density_matrices(system: &System, states: &[f64]) -> Vec<CMatrix> {
    let basis = Basis::gell_mann(system.dim());
    states
        .chunks(basis.size())
        .map(|s| basis.operator(s).unwrap())
        .collect()
}

#[test]
fn min_eigenvalue_finds_the_smallest_eigenvalue() {
    let h = operators::pauli_y().scale(num_complex::Complex64::new(0.3, 0.0));
    assert!((min_eigenvalue(&h) + 0.3).abs() < 1e-12);
    let mixed = &operators::basis_state(2, 0).scale(num_complex::Complex64::new(0.8, 0.0))
        + &operators::basis_state(2, 1).scale(num_complex::Complex64::new(0.2, 0.0));
    assert!((min_eigenvalue(&mixed) - 0.2).abs() < 1e-12);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 6, ..ProptestConfig::default() })]

    #[test]
    fn trace_is_conserved_and_states_are_hermitian(seed in any::<u64>(), which in 0usize..3, tasks in 1usize..5) {
        let system = &systems()[which];
        // Up to the control bound: even Euler, far off here, keeps the trace exactly.
        let pulses = Pulses::random(system, tasks, SEGMENTS, 10.0, 1.0, seed);
        for method in methods() {
            for rho in density_matrices(system, &run(system, method, &pulses, None).0) {
                prop_assert!((rho.trace().re - 1.0).abs() < 1e-5, "{:?} trace {}", method, rho.trace());
                prop_assert!(rho.hermiticity_deviation() < 1e-6);
            }
        }
    }

    #[test]
    fn accurate_methods_keep_states_positive(seed in any::<u64>(), which in 0usize..3, tasks in 1usize..5) {
        let system = &systems()[which];
        // Strong damping drives states to the boundary of positivity, where errors would show.
        let pulses = Pulses::random(system, tasks, SEGMENTS, 3.0, 1.0, seed);
        for method in [Method::Exact, Method::Rk4 { dt: 0.01 }] {
            for rho in density_matrices(system, &run(system, method, &pulses, None).0) {
                prop_assert!(min_eigenvalue(&rho) > -1e-5, "{:?} eigenvalue {}", method, min_eigenvalue(&rho));
            }
        }
    }

    #[test]
    fn permuting_tasks_permutes_results(seed in any::<u64>(), which in 0usize..3, order in Just((0..5).collect::<Vec<usize>>()).prop_shuffle()) {
        let system = &systems()[which];
        let pulses = Pulses::random(system, order.len(), SEGMENTS, 5.0, 0.5, seed);
        let n = system.dim() * system.dim();
        for method in methods() {
            let (states, propagators) = run(system, method, &pulses, None);
            let (permuted_states, permuted_propagators) = run(system, method, &pulses, Some(&order));
            for (position, &task) in order.iter().enumerate() {
                for i in 0..n {
                    prop_assert!((permuted_states[position * n + i] - states[task * n + i]).abs() < 1e-6);
                }
                for i in 0..n * n {
                    let (a, b) = (permuted_propagators[position * n * n + i], propagators[task * n * n + i]);
                    prop_assert!((a - b).abs() < 1e-5 * (1.0 + b.abs()), "{:?}", method);
                }
            }
        }
    }
}
