//! The fidelities against independent host computations: `Tr(rho sigma)` from density
//! matrices, and the average gate fidelity from its definition, averaged exactly over a
//! qubit 2-design, and from Nielsen's formula over the Pauli basis for two qubits.

use super::common::{Pulses, initial_states, tensor, values};
use crate::reference::ReferenceChannel;
use crate::{
    Basis, Batch, CMatrix, Generators, Output, Solver, System, fidelity, operators, presets,
};
use burn::backend::NdArray;
use num_complex::Complex64;

type B = NdArray<f64>;

const TASKS: usize = 4;
const SEGMENTS: usize = 8;

fn evolve(
    system: &System,
    pulses: &Pulses,
    rho0: &CMatrix,
) -> (
    Vec<f64>,
    burn::tensor::Tensor<B, 3>,
    burn::tensor::Tensor<B, 2>,
) {
    let device = Default::default();
    let basis = Basis::gell_mann(system.dim());
    let batch = Batch {
        t_total: 1.0,
        amplitudes: pulses.amplitude_tensor(&device),
        rates: pulses.rate_tensor(&device),
        initial: initial_states(&basis, rho0, pulses.tasks(), &device).unwrap(),
    };
    let evolution = Solver::default()
        .evolve(
            &Generators::<B>::upload(system, &device),
            batch,
            Output::StatesAndPropagators,
        )
        .unwrap();
    (
        values(evolution.states.clone()),
        evolution.propagators.unwrap(),
        evolution.states,
    )
}

fn gate_fidelity_on_device(system: &System, pulses: &Pulses, gate: &CMatrix) -> Vec<f64> {
    let basis = Basis::gell_mann(system.dim());
    let n = basis.size();
    let (_, propagators, _) = evolve(system, pulses, &operators::basis_state(system.dim(), 0));
    let target = tensor(
        basis.unitary_superoperator(gate),
        [1, n, n],
        &Default::default(),
    );
    values(fidelity::average_gate_fidelity(propagators, target).unwrap())
}

/// The six Pauli eigenstates of a qubit: a 2-design, so their mean of a quadratic function of
/// the state is the Haar average.
fn octahedron() -> Vec<CMatrix> {
    let h = std::f64::consts::FRAC_1_SQRT_2;
    let (one, i) = (Complex64::new(h, 0.0), Complex64::new(0.0, h));
    [
        [one, one],
        [one, -one],
        [one, i],
        [one, -i],
        [one * 2f64.sqrt(), Complex64::new(0.0, 0.0)],
        [Complex64::new(0.0, 0.0), one * 2f64.sqrt()],
    ]
    .iter()
    .map(|psi| operators::pure_state(psi))
    .collect()
}

#[test]
fn qubit_average_gate_fidelity_is_the_mean_over_a_two_design() {
    let system = presets::one_qubit();
    let pulses = Pulses::random(&system, TASKS, SEGMENTS, 2.0, 0.3, 5);
    for gate in [operators::pauli_x(), operators::hadamard()] {
        let device = gate_fidelity_on_device(&system, &pulses, &gate);
        for (t, &f) in device.iter().enumerate() {
            let channel = pulses.channel(&system, 1.0, t);
            let states = octahedron();
            let mean = states
                .iter()
                .map(|psi| {
                    channel
                        .apply(psi)
                        .trace_product(&psi.conjugated_by(&gate))
                        .re
                })
                .sum::<f64>()
                / states.len() as f64;
            assert!((f - mean).abs() < 1e-12, "task {t}: {f} vs {mean}");
        }
    }
}

#[test]
fn two_qubit_average_gate_fidelity_follows_nielsens_formula() {
    // F_avg = (sum_j Tr(U P_j^dag U^dag E(P_j)) + d^2) / (d^2 (d + 1)) over the 16 Pauli strings.
    let system = presets::two_qubit();
    let pulses = Pulses::random(&system, TASKS, SEGMENTS, 2.0, 0.3, 6);
    let single = [
        CMatrix::identity(2),
        operators::pauli_x(),
        operators::pauli_y(),
        operators::pauli_z(),
    ];
    let paulis: Vec<CMatrix> = single
        .iter()
        .flat_map(|a| single.iter().map(move |b| a.kron(b)))
        .collect();
    let gate = operators::kron_all(&[operators::hadamard(), operators::pauli_x()]);
    let device = gate_fidelity_on_device(&system, &pulses, &gate);
    let d = 4.0;
    for (t, &f) in device.iter().enumerate() {
        let channel: ReferenceChannel = pulses.channel(&system, 1.0, t);
        let sum: f64 = paulis
            .iter()
            .map(|p| {
                (&(&(&gate * &p.adjoint()) * &gate.adjoint()) * &channel.apply(p))
                    .trace()
                    .re
            })
            .sum();
        let expected = (sum + d * d) / (d * d * (d + 1.0));
        assert!((f - expected).abs() < 1e-12, "task {t}: {f} vs {expected}");
    }
}

#[test]
fn identity_channel_has_unit_gate_fidelity() {
    let system = System::new(
        CMatrix::zeros(2),
        vec![operators::pauli_x()],
        vec![operators::pauli_z()],
    )
    .unwrap();
    let pulses = Pulses::random(&system, TASKS, SEGMENTS, 0.0, 0.0, 7);
    for f in gate_fidelity_on_device(&system, &pulses, &CMatrix::identity(2)) {
        assert!((f - 1.0).abs() < 1e-14, "{f}");
    }
}

#[test]
fn state_fidelities_are_the_overlap_and_its_square() {
    let system = presets::one_qubit();
    let basis = Basis::gell_mann(2);
    let pulses = Pulses::random(&system, TASKS, SEGMENTS, 2.0, 0.3, 8);
    let target_state = operators::basis_state(2, 1);
    let (states, _, device_states) = evolve(&system, &pulses, &operators::basis_state(2, 0));
    let target = tensor(
        basis.coordinates(&target_state).unwrap(),
        [1, 4],
        &Default::default(),
    );
    let overlap = values(fidelity::state_fidelity(device_states.clone(), target.clone()).unwrap());
    let squared = values(fidelity::squared_overlap(device_states, target).unwrap());
    for (t, coordinates) in states.chunks(4).enumerate() {
        let expected = basis
            .operator(coordinates)
            .unwrap()
            .trace_product(&target_state)
            .re;
        assert!((overlap[t] - expected).abs() < 1e-12);
        assert!((squared[t] - expected * expected).abs() < 1e-12);
    }
}
