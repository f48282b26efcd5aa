//! The f64 host reference: one circuit at a time, complex amplitudes, written for clarity.
//! Tests check the batched device simulation against it, and the `hybrid` workload's baseline
//! uses it with [`parameter_shift`] to reproduce the original's per-sample host circuit.

use num_complex::Complex64;

use crate::circuit::Circuit;
use crate::error::CircuitError;
use crate::gate::{Angle, GateKind};

/// The value of `angle` for one sample's `inputs` and the shared `weights`, whose lengths
/// [`check_lengths`] has checked.
fn resolve(angle: Angle, inputs: &[f64], weights: &[f64]) -> f64 {
    match angle {
        Angle::Fixed(value) => value,
        Angle::Input(i) => inputs[i],
        Angle::Weight(i) => weights[i],
    }
}

/// Refuses `inputs` or `weights` shorter than `circuit` reads.
fn check_lengths(circuit: &Circuit, inputs: &[f64], weights: &[f64]) -> Result<(), CircuitError> {
    if inputs.len() < circuit.inputs() {
        return Err(CircuitError::Shape {
            name: "inputs",
            expected: format!("[{}]", circuit.inputs()),
            found: vec![inputs.len()],
        });
    }
    if weights.len() < circuit.weights() {
        return Err(CircuitError::Shape {
            name: "weights",
            expected: format!("[{}]", circuit.weights()),
            found: vec![weights.len()],
        });
    }
    Ok(())
}

/// The bit of a basis index that holds `wire` (wire 0 is the most significant).
fn mask(qubits: usize, wire: usize) -> usize {
    1 << (qubits - 1 - wire)
}

/// The final state of `circuit` for one sample, amplitudes `[2^qubits]`; the angle of gate
/// `shift.0`, if given, is moved by `shift.1` radians (for the parameter-shift rule).
///
/// Refuses `inputs` or `weights` shorter than [`Circuit::inputs`] and [`Circuit::weights`].
pub fn state_shifted(
    circuit: &Circuit,
    inputs: &[f64],
    weights: &[f64],
    shift: Option<(usize, f64)>,
) -> Result<Vec<Complex64>, CircuitError> {
    check_lengths(circuit, inputs, weights)?;
    let n = circuit.qubits();
    let mut amplitudes = vec![Complex64::new(0.0, 0.0); circuit.dimension()];
    amplitudes[0] = Complex64::new(1.0, 0.0);
    for (index, gate) in circuit.gates().iter().enumerate() {
        let mut angle = gate
            .angle
            .map_or(0.0, |angle| resolve(angle, inputs, weights));
        if let Some((shifted, by)) = shift
            && shifted == index
        {
            angle += by;
        }
        match gate.kind {
            GateKind::Cnot | GateKind::Cz | GateKind::Swap => {
                let (a, b) = (mask(n, gate.wires[0]), mask(n, gate.wires[1]));
                for k in 0..amplitudes.len() {
                    match gate.kind {
                        GateKind::Cnot if k & a != 0 && k & b == 0 => amplitudes.swap(k, k | b),
                        GateKind::Cz if k & a != 0 && k & b != 0 => amplitudes[k] = -amplitudes[k],
                        GateKind::Swap if k & a != 0 && k & b == 0 => {
                            amplitudes.swap(k, (k & !a) | b)
                        }
                        _ => {}
                    }
                }
            }
            kind => {
                let Some(u) = kind.matrix(angle) else {
                    unreachable!("one-qubit gates have a matrix")
                };
                let m = mask(n, gate.wires[0]);
                for k in (0..amplitudes.len()).filter(|k| k & m == 0) {
                    let (a0, a1) = (amplitudes[k], amplitudes[k | m]);
                    amplitudes[k] = u[0][0] * a0 + u[0][1] * a1;
                    amplitudes[k | m] = u[1][0] * a0 + u[1][1] * a1;
                }
            }
        }
    }
    Ok(amplitudes)
}

/// The final state of `circuit` for one sample (see [`state_shifted`]).
pub fn state(
    circuit: &Circuit,
    inputs: &[f64],
    weights: &[f64],
) -> Result<Vec<Complex64>, CircuitError> {
    state_shifted(circuit, inputs, weights, None)
}

/// `<Z_i>` of `amplitudes` (`[2^qubits]`) for every qubit `i`, `[qubits]`.
pub fn z_expectations(qubits: usize, amplitudes: &[Complex64]) -> Vec<f64> {
    (0..qubits)
        .map(|wire| {
            let m = mask(qubits, wire);
            amplitudes
                .iter()
                .enumerate()
                .map(|(k, a)| {
                    if k & m == 0 {
                        a.norm_sqr()
                    } else {
                        -a.norm_sqr()
                    }
                })
                .sum()
        })
        .collect()
}

/// `<Z_i Z_j>` of `amplitudes` (`[2^qubits]`).
pub fn zz_expectation(qubits: usize, amplitudes: &[Complex64], i: usize, j: usize) -> f64 {
    let (a, b) = (mask(qubits, i), mask(qubits, j));
    amplitudes
        .iter()
        .enumerate()
        .map(|(k, amp)| {
            let parity = ((k & a != 0) as u8) ^ ((k & b != 0) as u8);
            if parity == 0 {
                amp.norm_sqr()
            } else {
                -amp.norm_sqr()
            }
        })
        .sum()
}

/// `<Z_i>` for every qubit and their gradients by the parameter-shift rule, for one sample.
#[derive(Debug, Clone, PartialEq)]
pub struct ShiftGradients {
    /// `<Z_i>`, `[qubits]`.
    pub values: Vec<f64>,
    /// `d<Z_i>/d inputs[j]`, `[inputs][qubits]`.
    pub inputs: Vec<Vec<f64>>,
    /// `d<Z_i>/d weights[j]`, `[weights][qubits]`.
    pub weights: Vec<Vec<f64>>,
}

/// `<Z_i>` and their gradients with respect to `inputs` and `weights` by the parameter-shift
/// rule: every gate whose angle is an input or weight is run at `angle +- pi/2` and
/// `d<Z>/d angle = (<Z>(+) - <Z>(-)) / 2` (exact for RX, RY, RZ and phase, whose generators
/// have eigenvalues a distance 1 apart); an angle used by several gates sums their terms.
/// `2 * (parametrised gates) + 1` circuit runs, as PennyLane's `parameter-shift` does.
pub fn parameter_shift(
    circuit: &Circuit,
    inputs: &[f64],
    weights: &[f64],
) -> Result<ShiftGradients, CircuitError> {
    let n = circuit.qubits();
    let values = z_expectations(n, &state(circuit, inputs, weights)?);
    let mut gradients = ShiftGradients {
        values,
        inputs: vec![vec![0.0; n]; circuit.inputs()],
        weights: vec![vec![0.0; n]; circuit.weights()],
    };
    let half_pi = std::f64::consts::FRAC_PI_2;
    for (index, gate) in circuit.gates().iter().enumerate() {
        let target = match gate.angle {
            Some(Angle::Input(i)) => &mut gradients.inputs[i],
            Some(Angle::Weight(i)) => &mut gradients.weights[i],
            _ => continue,
        };
        let plus = z_expectations(
            n,
            &state_shifted(circuit, inputs, weights, Some((index, half_pi)))?,
        );
        let minus = z_expectations(
            n,
            &state_shifted(circuit, inputs, weights, Some((index, -half_pi)))?,
        );
        for ((g, p), m) in target.iter_mut().zip(plus).zip(minus) {
            *g += (p - m) / 2.0;
        }
    }
    Ok(gradients)
}
