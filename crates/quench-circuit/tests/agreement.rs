//! The batched device simulation and its autodiff gradients against the f64 host reference,
//! its parameter-shift gradients and finite differences, on random circuits.

use burn::backend::{Autodiff, NdArray};
use burn::tensor::{Tensor, TensorData};
use proptest::prelude::*;
use quench_circuit::{Angle, Circuit, Gate, GateKind, Mode, Simulator, reference};

type B = NdArray<f64>;
type AD = Autodiff<NdArray<f64>>;

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

fn tensor2(values: Vec<f64>, rows: usize, cols: usize) -> Option<Tensor<B, 2>> {
    (cols > 0)
        .then(|| Tensor::from_data(TensorData::new(values, [rows, cols]), &Default::default()))
}

/// One member's weights, `[1, weights]`.
fn weights_row(values: Vec<f64>) -> Option<Tensor<B, 2>> {
    let n = values.len();
    (n > 0).then(|| Tensor::from_data(TensorData::new(values, [1, n]), &Default::default()))
}

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

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn device_states_match_the_reference((qubits, spec) in spec_strategy(), seed in 0.1f64..2.0) {
        let circuit = build(qubits, &spec);
        let batch = 3;
        let inputs: Vec<Vec<f64>> = (0..batch).map(|r| angles(circuit.inputs(), r, seed)).collect();
        let weights = angles(circuit.weights(), 9, seed);
        for mode in [Mode::GateByGate, Mode::Fused] {
            let simulator = Simulator::<B>::new(circuit.clone(), mode, &Default::default());
            let state = simulator
                .run(batch, tensor2(inputs.concat(), batch, circuit.inputs()), weights_row(weights.clone()))
                .unwrap();
            let re: Vec<f64> = state.re.clone().into_data().to_vec().unwrap();
            let im: Vec<f64> = match &state.im {
                Some(im) => im.clone().into_data().to_vec().unwrap(),
                None => vec![0.0; re.len()],
            };
            let z: Vec<f64> = simulator.z_expectations(&state).into_data().to_vec().unwrap();
            let dim = circuit.dimension();
            for (row, x) in inputs.iter().enumerate() {
                let expected = reference::state(&circuit, x, &weights).unwrap();
                for (k, amplitude) in expected.iter().enumerate() {
                    prop_assert!((re[row * dim + k] - amplitude.re).abs() < 1e-10);
                    prop_assert!((im[row * dim + k] - amplitude.im).abs() < 1e-10);
                }
                let expected_z = reference::z_expectations(qubits, &expected);
                for (i, e) in expected_z.iter().enumerate() {
                    prop_assert!((z[row * qubits + i] - e).abs() < 1e-10);
                }
            }
            if circuit.is_real() {
                prop_assert!(state.im.is_none(), "a real circuit kept an imaginary part");
            }
        }
    }

    #[test]
    fn autodiff_gradients_match_parameter_shift_and_finite_differences(
        (qubits, spec) in spec_strategy(),
        seed in 0.1f64..2.0,
    ) {
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
        for mode in [Mode::GateByGate, Mode::Fused] {
            let device = Default::default();
            let simulator = Simulator::<AD>::new(circuit.clone(), mode, &device);
            let x = (circuit.inputs() > 0).then(|| {
                Tensor::<AD, 2>::from_data(
                    TensorData::new(inputs.concat(), [batch, circuit.inputs()]),
                    &device,
                )
                .require_grad()
            });
            let w = (circuit.weights() > 0).then(|| {
                Tensor::<AD, 2>::from_data(TensorData::new(weights.clone(), [1, weights.len()]), &device)
                    .require_grad()
            });
            let state = simulator.run(batch, x.clone(), w.clone()).unwrap();
            let c = Tensor::<AD, 2>::from_data(TensorData::new(coefficients.clone(), [1, qubits]), &device);
            let loss = (simulator.z_expectations(&state) * c).sum();
            let grads = loss.backward();
            if let Some(x) = &x {
                let g: Vec<f64> = x.grad(&grads).map_or(vec![0.0; batch * circuit.inputs()], |g| g.into_data().to_vec().unwrap());
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
                        prop_assert!((found - by_shift).abs() < 1e-9, "input {j}: {found} vs shift {by_shift}");
                        prop_assert!((found - by_difference).abs() < 1e-6, "input {j}: {found} vs difference {by_difference}");
                    }
                }
            }
            if let Some(w) = &w {
                let g: Vec<f64> = w.grad(&grads).map_or(vec![0.0; weights.len()], |g| g.into_data().to_vec().unwrap());
                for (j, found) in g.iter().enumerate() {
                    let by_shift: f64 = inputs
                        .iter()
                        .map(|xs| {
                            let shift = reference::parameter_shift(&circuit, xs, &weights).unwrap();
                            shift.weights[j].iter().zip(&coefficients).map(|(d, c)| d * c).sum::<f64>()
                        })
                        .sum();
                    prop_assert!((found - by_shift).abs() < 1e-9, "weight {j}: {found} vs shift {by_shift}");
                }
            }
        }
    }
}
