//! Autodiff gradients with respect to amplitudes and rates against central finite
//! differences, for every method, through states, propagators and all three fidelities.
//! In f64, so that the finite differences themselves are accurate to about 1e-9.

mod common;

use burn::backend::{Autodiff, NdArray};
use burn::tensor::{Tensor, backend::Backend};
use common::{Pulses, initial_states, tensor, values};
use quench_lindblad::{
    Basis, Batch, Generators, Method, Output, Solver, System, fidelity, operators, presets,
};

type Plain = NdArray<f64>;
type Diff = Autodiff<Plain>;

const TASKS: usize = 3;
const SEGMENTS: usize = 5;
const STEP: f64 = 1e-6;

/// A loss touching every output: a weighted sum of the states, the squared overlap and the
/// state fidelity with |1>, and the average gate fidelity with the X gate.
fn loss<B: Backend>(
    system: &System,
    solver: &Solver,
    amplitudes: Tensor<B, 3>,
    rates: Tensor<B, 2>,
) -> Tensor<B, 1> {
    let device = amplitudes.device();
    let basis = Basis::gell_mann(system.dim());
    let n = basis.size();
    let generators = Generators::<B>::upload(system, &device);
    let batch = Batch {
        t_total: 1.0,
        amplitudes,
        rates,
        initial: initial_states(
            &basis,
            &operators::basis_state(system.dim(), 0),
            TASKS,
            &device,
        ),
    };
    let evolution = solver
        .evolve(&generators, batch, Output::StatesAndPropagators)
        .unwrap();
    let weights = tensor(
        (0..TASKS * n).map(|i| ((i * 7 % 5) as f64) - 2.0).collect(),
        [TASKS, n],
        &device,
    );
    let target = tensor(
        basis.coordinates(&operators::basis_state(system.dim(), 1)),
        [1, n],
        &device,
    );
    let gate = basis.unitary_superoperator(&operators::kron_all(&vec![
        operators::pauli_x();
        system.dim().ilog2()
            as usize
    ]));
    let gate = tensor(gate, [1, n, n], &device);
    let states = evolution.states;
    (states.clone() * weights).sum()
        + fidelity::squared_overlap(states.clone(), target.clone()).sum()
        + fidelity::state_fidelity(states, target)
            .sum()
            .mul_scalar(0.5)
        + fidelity::average_gate_fidelity(evolution.propagators.unwrap(), gate).sum()
}

fn check(system: &System, method: Method) {
    let device = Default::default();
    let pulses = Pulses::random(system, TASKS, SEGMENTS, 1.5, 0.3, 11);
    let solver = Solver {
        method,
        ..Solver::default()
    };
    let amplitudes = values(pulses.amplitude_tensor::<Plain>(&device));
    let rates = values(pulses.rate_tensor::<Plain>(&device));
    let a_shape = [TASKS, SEGMENTS, system.controls().len()];
    let r_shape = [TASKS, system.jumps().len()];

    let a = tensor::<Diff, 3>(amplitudes.clone(), a_shape, &device).require_grad();
    let r = tensor::<Diff, 2>(rates.clone(), r_shape, &device).require_grad();
    let gradients = loss(system, &solver, a.clone(), r.clone()).backward();
    let a_grad = values(a.grad(&gradients).unwrap());
    let r_grad = values(r.grad(&gradients).unwrap());

    let at = |a: &[f64], r: &[f64]| -> f64 {
        let a = tensor::<Plain, 3>(a.to_vec(), a_shape, &device);
        let r = tensor::<Plain, 2>(r.to_vec(), r_shape, &device);
        values(loss(system, &solver, a, r))[0]
    };
    let difference = |data: &[f64], index: usize, evaluate: &dyn Fn(&[f64]) -> f64| {
        let (mut plus, mut minus) = (data.to_vec(), data.to_vec());
        plus[index] += STEP;
        minus[index] -= STEP;
        (evaluate(&plus) - evaluate(&minus)) / (2.0 * STEP)
    };
    assert!(
        a_grad.iter().any(|g| g.abs() > 1e-2),
        "{method:?}: amplitudes matter"
    );
    assert!(
        r_grad.iter().any(|g| g.abs() > 1e-2),
        "{method:?}: rates matter"
    );
    let close =
        |autodiff: f64, numeric: f64| (autodiff - numeric).abs() <= 1e-7 + 1e-6 * numeric.abs();
    for index in (0..amplitudes.len()).step_by(3) {
        let numeric = difference(&amplitudes, index, &|a| at(a, &rates));
        assert!(
            close(a_grad[index], numeric),
            "{method:?} amplitude {index}: {} vs {numeric}",
            a_grad[index]
        );
    }
    for (index, &autodiff) in r_grad.iter().enumerate() {
        let numeric = difference(&rates, index, &|r| at(&amplitudes, r));
        assert!(
            close(autodiff, numeric),
            "{method:?} rate {index}: {autodiff} vs {numeric}"
        );
    }
}

#[test]
fn one_qubit_gradients_match_finite_differences() {
    for method in [
        Method::Exact,
        Method::Rk4 { dt: 0.05 },
        Method::Euler { dt: 0.02 },
    ] {
        check(&presets::one_qubit(), method);
    }
}

#[test]
fn two_qubit_exact_gradients_match_finite_differences() {
    check(&presets::two_qubit(), Method::Exact);
}
