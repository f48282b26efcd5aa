//! A circuit: qubits and a sequence of gates, checked once when it is built.

use crate::error::CircuitError;
use crate::gate::{Angle, Gate, GateKind};
use crate::limits::{MAX_ANGLES, MAX_FUSED_QUBITS, MAX_QUBITS};

/// A checked circuit on `qubits` qubits, starting from `|0...0>`.
///
/// Built with [`Circuit::new`], which refuses wires out of range, repeated wires, missing or
/// non-finite angles; every simulation of this crate may therefore assume a valid circuit.
#[derive(Debug, Clone, PartialEq)]
pub struct Circuit {
    qubits: usize,
    gates: Vec<Gate>,
    inputs: usize,
    weights: usize,
}

impl Circuit {
    /// The circuit of `gates` on `qubits` qubits, or the first thing wrong with it.
    pub fn new(qubits: usize, gates: Vec<Gate>) -> Result<Self, CircuitError> {
        if qubits == 0 || qubits > MAX_QUBITS {
            return Err(CircuitError::QubitCount(qubits));
        }
        let (mut inputs, mut weights) = (0, 0);
        for (index, gate) in gates.iter().enumerate() {
            check_gate(index, gate, qubits)?;
            let column = match gate.angle {
                Some(Angle::Input(i)) => Some((&mut inputs, i)),
                Some(Angle::Weight(i)) => Some((&mut weights, i)),
                _ => None,
            };
            if let Some((count, i)) = column {
                if i >= MAX_ANGLES {
                    return Err(CircuitError::AngleIndex {
                        gate: index,
                        name: gate.kind.name(),
                        index: i,
                    });
                }
                *count = (*count).max(i + 1);
            }
        }
        Ok(Circuit {
            qubits,
            gates,
            inputs,
            weights,
        })
    }

    /// Guide 003's circuit: `RY(x_i)` on every qubit `i` (input `i`), then `layers` times
    /// `RY(w_{l,i})` on every qubit (weight `l * qubits + i`) followed by the CNOT ring
    /// `0->1, 1->2, ..., (n-1)->0` (no ring on one qubit; one CNOT on two).
    pub fn angle_encoded_ring(qubits: usize, layers: usize) -> Result<Self, CircuitError> {
        let mut gates: Vec<Gate> = (0..qubits)
            .map(|i| Gate::rotation(GateKind::Ry, i, Angle::Input(i)))
            .collect();
        for layer in 0..layers {
            gates.extend(
                (0..qubits)
                    .map(|i| Gate::rotation(GateKind::Ry, i, Angle::Weight(layer * qubits + i))),
            );
            let ring = match qubits {
                1 => 0,
                2 => 1,
                n => n,
            };
            gates.extend((0..ring).map(|i| Gate::new(GateKind::Cnot, &[i, (i + 1) % qubits])));
        }
        Circuit::new(qubits, gates)
    }

    /// Qubits of the circuit.
    pub fn qubits(&self) -> usize {
        self.qubits
    }

    /// Amplitudes of a state, `2^qubits`.
    pub fn dimension(&self) -> usize {
        1 << self.qubits
    }

    /// The gates, in the order they act.
    pub fn gates(&self) -> &[Gate] {
        &self.gates
    }

    /// Columns of the per-sample inputs the circuit reads (largest input index + 1).
    pub fn inputs(&self) -> usize {
        self.inputs
    }

    /// Entries of the shared weights the circuit reads (largest weight index + 1).
    pub fn weights(&self) -> usize {
        self.weights
    }

    /// Whether every gate is real, so the simulation can keep one real vector per state.
    pub fn is_real(&self) -> bool {
        self.gates.iter().all(|gate| gate.kind.is_real())
    }

    /// Bytes of memory a batch of `batch` states takes at `bytes_per_value` bytes per real
    /// number, counting (re, im) for complex circuits and four such buffers for the gate
    /// being applied, its inputs and the autodiff record; and the simulator's tables of
    /// `2^qubits` 8-byte entries: an X permutation per wire, a permutation and its signs per
    /// gate, and three host copies while one is built; and where [`Mode::Fused`] may fuse
    /// (at most [`MAX_FUSED_QUBITS`] qubits), a `2^n x 2^n` matrix per run of shared gates
    /// (runs are at least two gates long and end at each per-sample gate). An estimate, used
    /// to refuse runs that cannot fit.
    ///
    /// [`Mode::Fused`]: crate::simulate::Mode::Fused
    pub fn simulation_bytes(&self, batch: usize, bytes_per_value: usize) -> u128 {
        let parts = if self.is_real() { 1 } else { 2 };
        let dimension = self.dimension() as u128;
        let states = 4 * parts * (batch as u128) * dimension * bytes_per_value as u128;
        let tables = (self.qubits() + 2 * self.gates().len() + 3) as u128 * dimension * 8;
        let fused = if self.qubits() <= MAX_FUSED_QUBITS {
            let per_sample = self.gates().iter().filter(|g| !g.is_shared()).count();
            let runs = (self.gates().len() / 2).min(per_sample + 1) as u128;
            runs * parts * dimension * dimension * bytes_per_value as u128
        } else {
            0
        };
        states + tables + fused
    }

    /// Refuses a simulation of `batch` circuits in values of `bytes_per_value` bytes when
    /// [`Self::simulation_bytes`] exceeds `available` bytes (no limit when `None`): the one
    /// check of the simulator and the JSON interface.
    ///
    /// # Errors
    /// [`CircuitError::TooLarge`] with the estimate and the limit.
    pub fn check_fits(
        &self,
        batch: usize,
        bytes_per_value: usize,
        available: Option<u128>,
    ) -> Result<(), CircuitError> {
        let needed = self.simulation_bytes(batch, bytes_per_value);
        match available {
            Some(available) if needed > available => Err(CircuitError::TooLarge {
                qubits: self.qubits,
                batch,
                needed_mib: u64::try_from(needed >> 20).unwrap_or(u64::MAX),
                available_mib: u64::try_from(available >> 20).unwrap_or(u64::MAX),
            }),
            _ => Ok(()),
        }
    }
}

/// Refuses `gate` (at `index`) when its wires or angle do not fit a `qubits`-qubit circuit.
fn check_gate(index: usize, gate: &Gate, qubits: usize) -> Result<(), CircuitError> {
    let name = gate.kind.name();
    if gate.wires.len() != gate.kind.arity() {
        return Err(CircuitError::WireCount {
            gate: index,
            name,
            expected: gate.kind.arity(),
            found: gate.wires.len(),
        });
    }
    for (position, &wire) in gate.wires.iter().enumerate() {
        if wire >= qubits {
            return Err(CircuitError::WireOutOfRange {
                gate: index,
                name,
                wire,
                qubits,
            });
        }
        if gate.wires[..position].contains(&wire) {
            return Err(CircuitError::RepeatedWire {
                gate: index,
                name,
                wire,
            });
        }
    }
    match (gate.kind.takes_angle(), gate.angle) {
        (true, None) => Err(CircuitError::MissingAngle { gate: index, name }),
        (false, Some(_)) => Err(CircuitError::UnexpectedAngle { gate: index, name }),
        (true, Some(Angle::Fixed(value))) if !quench_support::numbers::fits_f32(value) => {
            Err(CircuitError::NonFiniteAngle {
                gate: index,
                name,
                value,
            })
        }
        _ => Ok(()),
    }
}
