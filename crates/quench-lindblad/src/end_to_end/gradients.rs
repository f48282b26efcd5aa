//! Autodiff gradients with respect to amplitudes and rates against central finite
//! differences, for every method, through states, propagators and all three fidelities.
//! The finite differences are taken in f64 on the CPU, so that they themselves are accurate
//! to about 1e-9; the autodiff gradients are f64 on the CPU and the device's f32 elsewhere.

use super::common::{Pulses, initial_states, tensor, values};
use crate::{
    Basis, Batch, Generators, Method, Output, Solver, System, fidelity, operators, presets,
};
use burn::backend::{Autodiff, NdArray};
use burn::tensor::Tensor;
use quench_kernels::reductions::Reduce;
use quench_kernels::testing::on_cpu;
use quench_kernels::{QuenchBackend, QuenchOps};

/// The finite differences' backend.
type Plain = NdArray<f64>;

const TASKS: usize = 3;
const SEGMENTS: usize = 5;
const STEP: f64 = 1e-6;

/// A loss touching every output: a weighted sum of the states, the squared overlap and the
/// state fidelity with |1>, and the average gate fidelity with the X gate.
fn loss<B: QuenchOps>(
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
        )
        .unwrap(),
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
        basis
            .coordinates(&operators::basis_state(system.dim(), 1))
            .unwrap(),
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
    (states.clone() * weights).sum_all()
        + fidelity::squared_overlap(states.clone(), target.clone())
            .unwrap()
            .sum_all()
        + fidelity::state_fidelity(states, target)
            .unwrap()
            .sum_all()
            .mul_scalar(0.5)
        + fidelity::average_gate_fidelity(evolution.propagators.unwrap(), gate)
            .unwrap()
            .sum_all()
}

/// How close an autodiff gradient must come to the finite difference: `absolute + relative
/// * |numeric|`.
#[derive(Clone, Copy)]
struct Close {
    absolute: f64,
    relative: f64,
}

/// Autodiff in f64: the finite differences' own accuracy.
const F64: Close = Close {
    absolute: 1e-7,
    relative: 1e-6,
};

/// Autodiff in f32, on a device other than the CPU. Measured: the largest error was 4.4e-6 on
/// lavapipe and 3.5e-6 with the CPU's f32 backend (with the exact solver; 1.2e-6 with RK4 and
/// Euler), at most a fifth of this bound.
const F32: Close = Close {
    absolute: 2e-5,
    relative: 1e-5,
};

/// Checks `method`'s autodiff gradients on `system`: on the CPU in f64, the precision of the
/// finite differences; on another device in its f32, to the tolerance of f32.
fn check_on<B: QuenchBackend>(system: &System, method: Method, device: &B::Device) {
    if on_cpu() {
        check::<Autodiff<Plain>>(system, method, &Default::default(), F64);
    } else {
        check::<B>(system, method, device, F32);
    }
}

/// `method`'s autodiff gradients on backend `D` against central finite differences in f64.
fn check<D: QuenchBackend>(system: &System, method: Method, device: &D::Device, bound: Close) {
    let cpu = Default::default();
    let pulses = Pulses::random(system, TASKS, SEGMENTS, 1.5, 0.3, 11);
    let solver = Solver {
        method,
        ..Solver::default()
    };
    let amplitudes = values(pulses.amplitude_tensor::<Plain>(&cpu));
    let rates = values(pulses.rate_tensor::<Plain>(&cpu));
    let a_shape = [TASKS, SEGMENTS, system.controls().len()];
    let r_shape = [TASKS, system.jumps().len()];

    let a = tensor::<D, 3>(amplitudes.clone(), a_shape, device).require_grad();
    let r = tensor::<D, 2>(rates.clone(), r_shape, device).require_grad();
    let gradients = loss(system, &solver, a.clone(), r.clone()).backward();
    let a_grad = values(a.grad(&gradients).unwrap());
    let r_grad = values(r.grad(&gradients).unwrap());

    let at = |a: &[f64], r: &[f64]| -> f64 {
        let a = tensor::<Plain, 3>(a.to_vec(), a_shape, &cpu);
        let r = tensor::<Plain, 2>(r.to_vec(), r_shape, &cpu);
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
    let close = |autodiff: f64, numeric: f64| {
        (autodiff - numeric).abs() <= bound.absolute + bound.relative * numeric.abs()
    };
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

quench_kernels::device_test! {
    fn one_qubit_gradients_match_finite_differences<B>(device) {
        for method in [
            Method::Exact,
            Method::Rk4 { dt: 0.05 },
            Method::Euler { dt: 0.02 },
        ] {
            check_on::<B>(&presets::one_qubit(), method, device);
        }
    }

    fn two_qubit_exact_gradients_match_finite_differences<B>(device) {
        check_on::<B>(&presets::two_qubit(), Method::Exact, device);
    }
}
