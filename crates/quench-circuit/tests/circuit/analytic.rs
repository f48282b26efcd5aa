//! Known states and expectations, on the device simulation in both modes.
//!
//! On the CPU the simulation runs in f64, to the tolerance of f64; on another device in its
//! f32, to the tolerance of f32. burn-ndarray 0.21 takes a device's default float type from
//! the first backend that uses it in the process, so the CPU's f32 backend, which the tests'
//! device is there, cannot share this binary with the f64 one.

use burn::backend::NdArray;
use burn::tensor::Tensor;
use quench_circuit::{Angle, Circuit, Gate, GateKind, Mode, Simulator};
use quench_kernels::QuenchOps;
use quench_kernels::readback::{float_tensor, to_host_f64};
use quench_kernels::testing::on_cpu;

/// The largest error of an expectation in f64.
const IN_F64: f64 = 1e-12;

/// The largest error of an expectation in f32: MEASURED.
const IN_F32: f64 = 1e-6;

/// Defines a device test for each check of [`checks`], run on the CPU with NdArray in f64 and
/// on another device with its own f32 backend, with the tolerance of the precision.
macro_rules! on_the_tests_backend {
    ($($check:ident),* $(,)?) => {
        quench_kernels::device_test! {
            $(
                fn $check<B>(device) {
                    if on_cpu() {
                        checks::$check::<NdArray<f64>>(&Default::default(), IN_F64);
                    } else {
                        checks::$check::<B::InnerBackend>(device, IN_F32);
                    }
                }
            )*
        }
    };
}

on_the_tests_backend!(
    bell_pair_is_uncorrelated_locally_and_perfectly_correlated,
    ghz_states_correlate_every_pair,
    rotations_give_the_cosine_of_their_angle,
    paulis_swap_and_cz_move_amplitudes_where_they_should,
    twenty_qubits_fit_for_a_batch_of_one,
    per_sample_angles_give_each_row_its_own_state,
    misshapen_inputs_and_weights_are_refused,
    members_run_with_their_own_weights,
);

fn gate(kind: GateKind, wires: &[usize]) -> Gate {
    Gate::new(kind, wires)
}

fn fixed(kind: GateKind, wire: usize, angle: f64) -> Gate {
    Gate::rotation(kind, wire, Angle::Fixed(angle))
}

/// `<Z_i>` and `<Z_i Z_j>` of `circuit` (no inputs or weights) in `mode`, batch of one; the
/// read-out alone checked against the state's within `tolerance`.
fn expectations<P: QuenchOps>(
    circuit: Circuit,
    mode: Mode,
    pairs: &[(usize, usize)],
    device: &P::Device,
    tolerance: f64,
) -> (Vec<f64>, Vec<f64>) {
    let simulator = Simulator::<P>::new(circuit, mode, device).unwrap();
    let state = simulator.run(1, None, None).unwrap();
    let z = to_host_f64(simulator.z_expectations(&state).unwrap());
    // The read-out alone (for a real circuit in Fused mode the seam's fused operation, which
    // never holds the state) gives the same `<Z_i>`.
    let read_out = to_host_f64(simulator.expectations(1, None, None).unwrap());
    assert_close(&read_out, &z, tolerance);
    let zz = if pairs.is_empty() {
        Vec::new()
    } else {
        to_host_f64(simulator.zz_expectations(&state, pairs).unwrap())
    };
    (z, zz)
}

fn assert_close(found: &[f64], expected: &[f64], tolerance: f64) {
    assert_eq!(found.len(), expected.len(), "{found:?} vs {expected:?}");
    for (f, e) in found.iter().zip(expected) {
        assert!((f - e).abs() <= tolerance, "{found:?} vs {expected:?}");
    }
}

const MODES: [Mode; 2] = [Mode::GateByGate, Mode::Fused];

/// The checks, generic over the backend, each with the tolerance of its precision.
mod checks {
    use super::*;

    pub fn bell_pair_is_uncorrelated_locally_and_perfectly_correlated<P: QuenchOps>(
        device: &P::Device,
        tolerance: f64,
    ) {
        for mode in MODES {
            let bell = Circuit::new(
                2,
                vec![gate(GateKind::H, &[0]), gate(GateKind::Cnot, &[0, 1])],
            )
            .unwrap();
            let (z, zz) = expectations::<P>(bell, mode, &[(0, 1)], device, tolerance);
            assert_close(&z, &[0.0, 0.0], tolerance);
            assert_close(&zz, &[1.0], tolerance);
        }
    }

    pub fn ghz_states_correlate_every_pair<P: QuenchOps>(device: &P::Device, tolerance: f64) {
        for n in [3, 5] {
            for mode in MODES {
                let mut gates = vec![gate(GateKind::H, &[0])];
                gates.extend((1..n).map(|i| gate(GateKind::Cnot, &[i - 1, i])));
                let pairs: Vec<_> = (1..n).map(|i| (0, i)).collect();
                let (z, zz) = expectations::<P>(
                    Circuit::new(n, gates).unwrap(),
                    mode,
                    &pairs,
                    device,
                    tolerance,
                );
                assert_close(&z, &vec![0.0; n], tolerance);
                assert_close(&zz, &vec![1.0; n - 1], tolerance);
            }
        }
    }

    pub fn rotations_give_the_cosine_of_their_angle<P: QuenchOps>(
        device: &P::Device,
        tolerance: f64,
    ) {
        let t = 0.7_f64;
        for mode in MODES {
            for kind in [GateKind::Rx, GateKind::Ry] {
                let circuit = Circuit::new(1, vec![fixed(kind, 0, t)]).unwrap();
                let (z, _) = expectations::<P>(circuit, mode, &[], device, tolerance);
                assert_close(&z, &[t.cos()], tolerance);
            }
            // RZ and the phase gate only turn the equator: H RZ(t) H and H P(t) H give cos t.
            for kind in [GateKind::Rz, GateKind::Phase] {
                let circuit = Circuit::new(
                    1,
                    vec![
                        gate(GateKind::H, &[0]),
                        fixed(kind, 0, t),
                        gate(GateKind::H, &[0]),
                    ],
                )
                .unwrap();
                assert_close(
                    &expectations::<P>(circuit, mode, &[], device, tolerance).0,
                    &[t.cos()],
                    tolerance,
                );
            }
        }
    }

    pub fn paulis_swap_and_cz_move_amplitudes_where_they_should<P: QuenchOps>(
        device: &P::Device,
        tolerance: f64,
    ) {
        for mode in MODES {
            // X on wire 2 of 3: only <Z_2> flips (wire order: wire 0 is the most significant).
            let x = Circuit::new(3, vec![gate(GateKind::X, &[2])]).unwrap();
            assert_close(
                &expectations::<P>(x, mode, &[], device, tolerance).0,
                &[1.0, 1.0, -1.0],
                tolerance,
            );
            // Y flips too (the phase i does not show in <Z>); Z leaves |0> alone.
            let y =
                Circuit::new(2, vec![gate(GateKind::Y, &[0]), gate(GateKind::Z, &[1])]).unwrap();
            assert_close(
                &expectations::<P>(y, mode, &[], device, tolerance).0,
                &[-1.0, 1.0],
                tolerance,
            );
            // SWAP carries the excitation from wire 0 to wire 2.
            let swap = Circuit::new(
                3,
                vec![gate(GateKind::X, &[0]), gate(GateKind::Swap, &[0, 2])],
            )
            .unwrap();
            assert_close(
                &expectations::<P>(swap, mode, &[], device, tolerance).0,
                &[1.0, 1.0, -1.0],
                tolerance,
            );
            // H CZ H on the target is a CNOT: |10> -> |11>.
            let cz = Circuit::new(
                2,
                vec![
                    gate(GateKind::X, &[0]),
                    gate(GateKind::H, &[1]),
                    gate(GateKind::Cz, &[0, 1]),
                    gate(GateKind::H, &[1]),
                ],
            )
            .unwrap();
            assert_close(
                &expectations::<P>(cz, mode, &[], device, tolerance).0,
                &[-1.0, -1.0],
                tolerance,
            );
        }
    }

    pub fn twenty_qubits_fit_for_a_batch_of_one<P: QuenchOps>(device: &P::Device, tolerance: f64) {
        // GHZ on 20 qubits: past MAX_FUSED_QUBITS, so both modes run gate by gate and the
        // expectations reduce over axes instead of a [2^20, 20] sign matrix.
        let n = 20;
        let mut gates = vec![gate(GateKind::H, &[0])];
        gates.extend((1..n).map(|i| gate(GateKind::Cnot, &[i - 1, i])));
        // Ry(pi) on the last wire flips it: (|0...01> + |1...10>) / sqrt(2), so the last wire
        // is anti-correlated with every other one.
        gates.push(fixed(GateKind::Ry, n - 1, std::f64::consts::PI));
        let simulator =
            Simulator::<P>::new(Circuit::new(n, gates).unwrap(), Mode::Fused, device).unwrap();
        let state = simulator.run(1, None, None).unwrap();
        let z = to_host_f64(simulator.z_expectations(&state).unwrap());
        assert_eq!(z.len(), n);
        assert!(z.iter().all(|v| v.abs() < tolerance), "{z:?}");
        let pairs = [(0, n - 1), (5, 12), (n - 1, 3), (7, 7)];
        let zz = to_host_f64(simulator.zz_expectations(&state, &pairs).unwrap());
        assert_close(&zz, &[-1.0, 1.0, -1.0, 1.0], tolerance);
    }

    pub fn per_sample_angles_give_each_row_its_own_state<P: QuenchOps>(
        device: &P::Device,
        tolerance: f64,
    ) {
        let circuit = Circuit::angle_encoded_ring(4, 0).unwrap();
        let angles: [f64; 8] = [0.0, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5];
        let inputs = float_tensor::<P, _, 2>(angles.to_vec(), [2, 4], device);
        for mode in MODES {
            let simulator = Simulator::<P>::new(circuit.clone(), mode, device).unwrap();
            let state = simulator.run(2, Some(inputs.clone()), None).unwrap();
            let z = to_host_f64(simulator.z_expectations(&state).unwrap());
            let expected: Vec<f64> = angles.iter().map(|a| a.cos()).collect();
            assert_close(&z, &expected, tolerance);
            let read_out = simulator
                .expectations(2, Some(inputs.clone()), None)
                .unwrap();
            assert_close(&to_host_f64(read_out), &expected, tolerance);
        }
    }

    /// Compares no numbers: the tolerance goes unused.
    pub fn misshapen_inputs_and_weights_are_refused<P: QuenchOps>(device: &P::Device, _: f64) {
        let simulator = Simulator::<P>::new(
            Circuit::angle_encoded_ring(4, 3).unwrap(),
            Mode::Fused,
            device,
        )
        .unwrap();
        let weights = Some(Tensor::<P, 2>::zeros([1, 12], device));
        let narrow = Tensor::<P, 2>::zeros([8, 3], device);
        let error = simulator
            .run(8, Some(narrow.clone()), weights.clone())
            .unwrap_err();
        assert!(
            error.to_string().contains("inputs: expected shape [8, 4]"),
            "{error}"
        );
        // The read-out alone checks the same way before any work.
        let error = simulator
            .expectations(8, Some(narrow), weights.clone())
            .unwrap_err();
        assert!(
            error.to_string().contains("inputs: expected shape [8, 4]"),
            "{error}"
        );
        assert!(simulator.run(8, None, weights).is_err());
        let inputs = Tensor::<P, 2>::zeros([8, 4], device);
        let short = Tensor::<P, 2>::zeros([1, 11], device);
        let error = simulator.run(8, Some(inputs), Some(short)).unwrap_err();
        assert!(
            error
                .to_string()
                .contains("weights: expected shape [members dividing 8, 12]"),
            "{error}"
        );
        // No circuits: refused, not a division by zero inside the backend.
        let empty = Tensor::<P, 2>::zeros([0, 4], device);
        let error = simulator
            .run(0, Some(empty), Some(Tensor::<P, 2>::zeros([1, 12], device)))
            .unwrap_err();
        assert!(error.to_string().contains("batch = 0"), "{error}");
        // An angle column so far out that counting the columns would overflow.
        let error = Circuit::new(
            2,
            vec![Gate::rotation(GateKind::Ry, 0, Angle::Input(usize::MAX))],
        )
        .unwrap_err();
        assert!(error.to_string().contains("angle index"), "{error}");
        // A batch whose states could never fit (10^8 states of 16 qubits: about 100 TB) is
        // refused with its estimate where the host's memory can be read, before allocating.
        if cfg!(target_os = "linux") {
            let wide = Circuit::new(16, vec![gate(GateKind::H, &[0])]).unwrap();
            let simulator = Simulator::<P>::new(wide, Mode::GateByGate, device).unwrap();
            let error = simulator.run(100_000_000, None, None).unwrap_err();
            assert!(error.to_string().contains("MiB available"), "{error}");
        }
    }

    pub fn members_run_with_their_own_weights<P: QuenchOps>(device: &P::Device, tolerance: f64) {
        // Two members of two samples each, in one batch, against each member run alone.
        let circuit = Circuit::angle_encoded_ring(4, 3).unwrap();
        let x: Vec<f64> = (0..16).map(|i| (i as f64 * 0.37).sin() * 2.0).collect();
        let w: Vec<f64> = (0..24).map(|i| (i as f64 * 0.71).cos()).collect();
        let tensor =
            |values: &[f64], shape| float_tensor::<P, _, 2>(values.to_vec(), shape, device);
        for mode in MODES {
            let simulator = Simulator::<P>::new(circuit.clone(), mode, device).unwrap();
            let state = simulator
                .run(4, Some(tensor(&x, [4, 4])), Some(tensor(&w, [2, 12])))
                .unwrap();
            let together = to_host_f64(simulator.z_expectations(&state).unwrap());
            for member in 0..2 {
                let alone = simulator
                    .run(
                        2,
                        Some(tensor(&x[member * 8..member * 8 + 8], [2, 4])),
                        Some(tensor(&w[member * 12..member * 12 + 12], [1, 12])),
                    )
                    .unwrap();
                let alone = to_host_f64(simulator.z_expectations(&alone).unwrap());
                assert_close(&together[member * 8..member * 8 + 8], &alone, tolerance);
            }
            let third = simulator.run(
                4,
                Some(tensor(&x, [4, 4])),
                Some(tensor(&w[..12].repeat(3), [3, 12])),
            );
            assert!(third.is_err(), "3 members cannot share 4 rows");
        }
    }
}
