//! The batched device simulation and its autodiff gradients against the f64 host reference,
//! its parameter-shift gradients and finite differences, on random circuits.
//!
//! On the CPU the simulation runs in f64, to the tolerances of f64; on another device in its
//! f32, to the tolerances of f32. burn-ndarray 0.21 takes a device's default float type from
//! the first backend that uses it in the process, so the CPU's f32 backend, which the tests'
//! device is there, cannot share this binary with the f64 one.

use burn::backend::{Autodiff, NdArray};
use burn::tensor::Tensor;
use proptest::prelude::*;
use quench_circuit::{Angle, Circuit, Gate, GateKind, Mode, Simulator, reference};
use quench_kernels::readback::{float_tensor, to_host_f64};
use quench_kernels::reductions::Reduce;
use quench_kernels::testing::on_cpu;
use quench_kernels::{QuenchBackend, QuenchOps};

/// The CPU backend of these tests.
type F64 = NdArray<f64>;

/// One gate of a random circuit: (gate, wire, other wire, angle source, fixed angle).
type GateSpec = (usize, usize, usize, u8, f64);

/// A random circuit on `qubits` qubits: `spec` lists (gate, wire, other wire, angle source),
/// angle sources 0 = fixed, 1 = input, 2 = weight; inputs and weights get one index per gate.
fn build(qubits: usize, spec: &[GateSpec]) -> Circuit {
    let (mut inputs, mut weights) = (0, 0);
    let gates = spec
        .iter()
        .map(|&(k, a, b, source, value)| {
            let kind = GateKind::ALL[k % GateKind::ALL.len()];
            let a = a % qubits;
            if kind.arity() == 2 {
                let b = (a + 1 + b % (qubits - 1)) % qubits;
                return Gate::new(kind, &[a, b]);
            }
            let mut gate = Gate::new(kind, &[a]);
            if kind.takes_angle() {
                gate.angle = Some(match source % 3 {
                    0 => Angle::Fixed(value),
                    1 => {
                        inputs += 1;
                        Angle::Input(inputs - 1)
                    }
                    _ => {
                        weights += 1;
                        Angle::Weight(weights - 1)
                    }
                });
            }
            gate
        })
        .collect();
    Circuit::new(qubits, gates).unwrap()
}

/// Deterministic angles for `count` parameters of sample `row`.
fn angles(count: usize, row: usize, seed: f64) -> Vec<f64> {
    (0..count)
        .map(|j| ((j as f64 + 1.3) * (row as f64 + 0.7) * seed).sin() * 3.0)
        .collect()
}

/// `[rows, cols]` of `values`, none when there are no columns.
fn tensor2<P: QuenchOps>(
    values: Vec<f64>,
    rows: usize,
    cols: usize,
    device: &P::Device,
) -> Option<Tensor<P, 2>> {
    (cols > 0).then(|| float_tensor(values, [rows, cols], device))
}

/// How close the simulation must come to the reference.
#[derive(Debug, Clone, Copy)]
struct Tolerances {
    /// State amplitudes and `<Z>` against the reference.
    state: f64,
    /// Autodiff gradients against the parameter-shift rule.
    shift: f64,
    /// Autodiff gradients against central finite differences (step 1e-6) of the reference.
    difference: f64,
}

/// The simulation in f64.
const IN_F64: Tolerances = Tolerances {
    state: 1e-10,
    shift: 1e-9,
    difference: 1e-6,
};

/// The simulation in f32. Measured on lavapipe over the 2 saved and 48 random circuits of each
/// test: amplitudes within 2.0e-7, `<Z>` within 4.3e-7, gradients within 1.6e-6 of the
/// parameter shift and 1.1e-6 of the finite differences.
const IN_F32: Tolerances = Tolerances {
    state: 2e-6,
    shift: 1e-5,
    difference: 1e-5,
};

fn spec_strategy() -> impl Strategy<Value = (usize, Vec<GateSpec>)> {
    (2usize..=5).prop_flat_map(|qubits| {
        (
            Just(qubits),
            prop::collection::vec(
                (0usize..11, 0usize..8, 0usize..8, 0u8..3, -4.0f64..4.0),
                1..24,
            ),
        )
    })
}

/// Random circuits on backend `P`: `cases` of them besides the saved regressions.
fn states_match_the_reference<P: QuenchOps>(device: &P::Device, tolerance: Tolerances, cases: u32) {
    proptest!(ProptestConfig::with_cases(cases), |((qubits, spec) in spec_strategy(), seed in 0.1f64..2.0)| {
        let circuit = build(qubits, &spec);
        let batch = 3;
        let inputs: Vec<Vec<f64>> = (0..batch).map(|r| angles(circuit.inputs(), r, seed)).collect();
        let weights = angles(circuit.weights(), 9, seed);
        for mode in [Mode::GateByGate, Mode::Fused] {
            let simulator = Simulator::<P>::new(circuit.clone(), mode, device).unwrap();
            let state = simulator
                .run(
                    batch,
                    tensor2(inputs.concat(), batch, circuit.inputs(), device),
                    tensor2(weights.clone(), 1, weights.len(), device),
                )
                .unwrap();
            let re = to_host_f64(state.re.clone());
            let im = match &state.im {
                Some(im) => to_host_f64(im.clone()),
                None => vec![0.0; re.len()],
            };
            let z = to_host_f64(simulator.z_expectations(&state).unwrap());
            let dim = circuit.dimension();
            for (row, x) in inputs.iter().enumerate() {
                let expected = reference::state(&circuit, x, &weights).unwrap();
                for (k, amplitude) in expected.iter().enumerate() {
                    prop_assert!((re[row * dim + k] - amplitude.re).abs() < tolerance.state);
                    prop_assert!((im[row * dim + k] - amplitude.im).abs() < tolerance.state);
                }
                let expected_z = reference::z_expectations(qubits, &expected);
                for (i, e) in expected_z.iter().enumerate() {
                    prop_assert!((z[row * qubits + i] - e).abs() < tolerance.state);
                }
            }
            if circuit.is_real() {
                prop_assert!(state.im.is_none(), "a real circuit kept an imaginary part");
            }
            // The read-out without the states (in Fused mode, for a real circuit, the seam's
            // fused operation).
            let z = to_host_f64(
                simulator
                    .expectations(
                        batch,
                        tensor2(inputs.concat(), batch, circuit.inputs(), device),
                        tensor2(weights.clone(), 1, weights.len(), device),
                    )
                    .unwrap(),
            );
            for (row, x) in inputs.iter().enumerate() {
                let expected = reference::state(&circuit, x, &weights).unwrap();
                let expected_z = reference::z_expectations(qubits, &expected);
                for (i, e) in expected_z.iter().enumerate() {
                    prop_assert!((z[row * qubits + i] - e).abs() < tolerance.state, "{mode:?} read-out");
                }
            }
        }
    });
}

/// Random circuits with autodiff backend `D`: `cases` of them besides the saved regressions.
fn gradients_match<D: QuenchBackend>(device: &D::Device, tolerance: Tolerances, cases: u32) {
    proptest!(ProptestConfig::with_cases(cases), |((qubits, spec) in spec_strategy(), seed in 0.1f64..2.0)| {
        let circuit = build(qubits, &spec);
        prop_assume!(circuit.inputs() + circuit.weights() > 0);
        let batch = 2;
        let inputs: Vec<Vec<f64>> = (0..batch).map(|r| angles(circuit.inputs(), r, seed)).collect();
        let weights = angles(circuit.weights(), 5, seed);
        // The loss is sum over samples and qubits of c_i <Z_i>, c_i = i + 1.
        let coefficients: Vec<f64> = (0..qubits).map(|i| i as f64 + 1.0).collect();
        let reference_loss = |x: &[f64], w: &[f64]| -> f64 {
            let z = reference::z_expectations(qubits, &reference::state(&circuit, x, w).unwrap());
            z.iter().zip(&coefficients).map(|(z, c)| z * c).sum()
        };
        // Each mode through its states, and Fused through its read-out alone (for a real
        // circuit the seam's fused operation, whose gradients are the adjoint method's).
        for (mode, read_out) in [(Mode::GateByGate, false), (Mode::Fused, false), (Mode::Fused, true)] {
            let simulator = Simulator::<D>::new(circuit.clone(), mode, device).unwrap();
            let x = tensor2::<D>(inputs.concat(), batch, circuit.inputs(), device)
                .map(Tensor::require_grad);
            let w = tensor2::<D>(weights.clone(), 1, weights.len(), device)
                .map(Tensor::require_grad);
            let z = if read_out {
                simulator.expectations(batch, x.clone(), w.clone()).unwrap()
            } else {
                let state = simulator.run(batch, x.clone(), w.clone()).unwrap();
                simulator.z_expectations(&state).unwrap()
            };
            let c = float_tensor::<D, _, 2>(coefficients.clone(), [1, qubits], device);
            let loss = (z * c).sum_all();
            let grads = loss.backward();
            if let Some(x) = &x {
                let g = x.grad(&grads).map_or(vec![0.0; batch * circuit.inputs()], to_host_f64);
                for (row, xs) in inputs.iter().enumerate() {
                    let shift = reference::parameter_shift(&circuit, xs, &weights).unwrap();
                    for j in 0..circuit.inputs() {
                        let by_shift: f64 = shift.inputs[j].iter().zip(&coefficients).map(|(d, c)| d * c).sum();
                        let h = 1e-6;
                        let (mut up, mut down) = (xs.clone(), xs.clone());
                        up[j] += h;
                        down[j] -= h;
                        let by_difference = (reference_loss(&up, &weights) - reference_loss(&down, &weights)) / (2.0 * h);
                        let found = g[row * circuit.inputs() + j];
                        prop_assert!((found - by_shift).abs() < tolerance.shift, "input {j}: {found} vs shift {by_shift}");
                        prop_assert!((found - by_difference).abs() < tolerance.difference, "input {j}: {found} vs difference {by_difference}");
                    }
                }
            }
            if let Some(w) = &w {
                let g = w.grad(&grads).map_or(vec![0.0; weights.len()], to_host_f64);
                for (j, found) in g.iter().enumerate() {
                    let by_shift: f64 = inputs
                        .iter()
                        .map(|xs| {
                            let shift = reference::parameter_shift(&circuit, xs, &weights).unwrap();
                            shift.weights[j].iter().zip(&coefficients).map(|(d, c)| d * c).sum::<f64>()
                        })
                        .sum();
                    prop_assert!((found - by_shift).abs() < tolerance.shift, "weight {j}: {found} vs shift {by_shift}");
                }
            }
        }
    });
}

/// Random circuits per test on the CPU.
const CASES: u32 = 48;

/// Random circuits per test on another device: fewer, as lavapipe takes about 5 s a circuit
/// (48 took 230 s for the states and 290 s for the gradients).
const CASES_ON_DEVICE: u32 = 8;

quench_kernels::device_test! {
    fn device_states_match_the_reference<B>(device) {
        if on_cpu() {
            states_match_the_reference::<F64>(&Default::default(), IN_F64, CASES);
        } else {
            states_match_the_reference::<B::InnerBackend>(device, IN_F32, CASES_ON_DEVICE);
        }
    }

    fn autodiff_gradients_match_parameter_shift_and_finite_differences<B>(device) {
        if on_cpu() {
            gradients_match::<Autodiff<F64>>(&Default::default(), IN_F64, CASES);
        } else {
            gradients_match::<B>(device, IN_F32, CASES_ON_DEVICE);
        }
    }
}
