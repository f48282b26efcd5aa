//! The JSON interface: a document of circuits with fixed angles, read with every error named
//! by circuit and gate, and simulated with circuits of one structure as one batch.
//!
//! ```json
//! {"qubits": 2, "circuits": [
//!   [{"gate": "h", "wires": [0]}, {"gate": "cnot", "wires": [0, 1]}],
//!   [{"gate": "ry", "wires": [0], "angle": 0.3}]
//! ]}
//! ```
//! gives `{"expectations": [[0.0, 0.0], [0.955..., 1.0]]}`: `<Z_0>, ..., <Z_{n-1}>` for each
//! circuit, in order. Gates: h, x, y, z, rx, ry, rz, phase (with `"angle"`, radians), cnot and
//! cz (wires `[control, target]`), swap.

use quench_kernels::QuenchOps;
use std::collections::HashMap;

use quench_kernels::readback::float_tensor;
use serde_json::Value;
use thiserror::Error;

use crate::circuit::Circuit;
use crate::error::CircuitError;
use crate::gate::{Angle, Gate, GateKind};
use crate::simulate::{Mode, Simulator, fusion_pays};

/// What is wrong with a JSON document, naming where.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum JsonError {
    /// Not JSON at all.
    #[error("not valid JSON: {0}")]
    Syntax(String),
    /// A field of the document itself (`qubits`, `circuits`) missing or of the wrong type.
    #[error("{field}: {reason}")]
    Document {
        /// The field.
        field: &'static str,
        /// What it must be.
        reason: String,
    },
    /// A gate entry that is not `{"gate": name, "wires": [..], "angle"?: number}`.
    #[error("circuit {circuit}, gate {gate}: {reason}")]
    Entry {
        /// Index of the circuit.
        circuit: usize,
        /// Index of the gate in it.
        gate: usize,
        /// What is wrong.
        reason: String,
    },
    /// A circuit that [`Circuit::new`] refuses, or one too large to simulate.
    #[error("circuit {circuit}: {source}")]
    Circuit {
        /// Index of the circuit.
        circuit: usize,
        /// What is wrong with it.
        source: CircuitError,
    },
}

/// A parsed document: the qubit count and each circuit's gates, angles fixed.
#[derive(Debug, Clone, PartialEq)]
pub struct Document {
    /// Qubits of every circuit.
    pub qubits: usize,
    /// The circuits, checked.
    pub circuits: Vec<Circuit>,
}

impl Document {
    /// Parses and checks `text`.
    pub fn parse(text: &str) -> Result<Self, JsonError> {
        // Editors on Windows write UTF-8 with a byte-order mark; JSON has none.
        let text = text.strip_prefix('\u{FEFF}').unwrap_or(text);
        let value = quench_support::json::parse_strict(text)
            .map_err(|e| JsonError::Syntax(e.to_string()))?;
        let Some(fields) = value.as_object() else {
            return Err(JsonError::Document {
                field: "document",
                reason: "not an object {\"qubits\": n, \"circuits\": [...]}".into(),
            });
        };
        if let Some(unknown) = fields
            .keys()
            .find(|k| !["qubits", "circuits"].contains(&k.as_str()))
        {
            return Err(JsonError::Document {
                field: "document",
                reason: format!("unknown key {unknown:?} (the keys are qubits and circuits)"),
            });
        }
        let qubits =
            value
                .get("qubits")
                .and_then(Value::as_u64)
                .ok_or_else(|| JsonError::Document {
                    field: "qubits",
                    reason: "missing or not a non-negative integer".into(),
                })?;
        let qubits = usize::try_from(qubits).unwrap_or(usize::MAX);
        let circuits = value
            .get("circuits")
            .and_then(Value::as_array)
            .ok_or_else(|| JsonError::Document {
                field: "circuits",
                reason: "missing or not an array of circuits".into(),
            })?;
        if circuits.is_empty() {
            return Err(JsonError::Document {
                field: "circuits",
                reason: "empty: there is nothing to simulate".into(),
            });
        }
        let circuits = circuits
            .iter()
            .enumerate()
            .map(|(index, circuit)| parse_circuit(index, circuit, qubits))
            .collect::<Result<_, _>>()?;
        Ok(Document { qubits, circuits })
    }

    /// `<Z_i>` of every circuit, `[circuits][qubits]`, simulated on `device`; circuits of the
    /// same gates and wires (angles aside) run as one batch. Refuses a batch whose states
    /// would need more than `available_bytes` (at 8 bytes per value: f64 backends).
    pub fn expectations<B: QuenchOps>(
        &self,
        device: &B::Device,
        available_bytes: Option<u128>,
    ) -> Result<Vec<Vec<f64>>, JsonError> {
        let mut groups: HashMap<Vec<(GateKind, Vec<usize>)>, Vec<usize>> = HashMap::new();
        let mut order = Vec::new();
        for (index, circuit) in self.circuits.iter().enumerate() {
            let key: Vec<_> = circuit
                .gates()
                .iter()
                .map(|g| (g.kind, g.wires.clone()))
                .collect();
            let members = groups.entry(key.clone()).or_default();
            if members.is_empty() {
                order.push(key);
            }
            members.push(index);
        }
        let mut results = vec![Vec::new(); self.circuits.len()];
        for key in order {
            let members = &groups[&key];
            let first = members[0];
            let batched =
                self.batched(&self.circuits[first])
                    .map_err(|source| JsonError::Circuit {
                        circuit: first,
                        source,
                    })?;
            batched
                .check_fits(members.len(), 8, available_bytes)
                .map_err(|source| JsonError::Circuit {
                    circuit: first,
                    source,
                })?;
            let angles: Vec<f64> = members
                .iter()
                .flat_map(|&m| {
                    self.circuits[m]
                        .gates()
                        .iter()
                        .filter_map(|g| match g.angle {
                            Some(Angle::Fixed(value)) => Some(value),
                            _ => None,
                        })
                })
                .collect();
            let columns = batched.inputs();
            let inputs =
                (columns > 0).then(|| float_tensor(angles, [members.len(), columns], device));
            // A constant run's matrix is built with the simulator: for this one call, only
            // where fusion pays at this batch.
            let mode = if fusion_pays(self.qubits, members.len()) {
                Mode::Fused
            } else {
                Mode::GateByGate
            };
            let simulator = Simulator::<B>::new(batched, mode, device).map_err(|source| {
                JsonError::Circuit {
                    circuit: first,
                    source,
                }
            })?;
            let state = simulator
                .run(members.len(), inputs, None)
                .map_err(|source| JsonError::Circuit {
                    circuit: first,
                    source,
                })?;
            let values: Vec<f64> = simulator
                .z_expectations(&state)
                .map_err(|source| JsonError::Circuit {
                    circuit: first,
                    source,
                })?
                .into_data()
                .convert::<f64>()
                .to_vec()
                .map_err(|e| JsonError::Syntax(format!("reading results back: {e:?}")))?;
            for (row, &m) in values.chunks(self.qubits).zip(members) {
                results[m] = row.to_vec();
            }
        }
        Ok(results)
    }

    /// `circuit` with its j-th angle read from input column j, so circuits of its structure
    /// run as one batch.
    fn batched(&self, circuit: &Circuit) -> Result<Circuit, CircuitError> {
        let mut column = 0;
        let gates = circuit
            .gates()
            .iter()
            .map(|gate| {
                let mut gate = gate.clone();
                if gate.angle.is_some() {
                    gate.angle = Some(Angle::Input(column));
                    column += 1;
                }
                gate
            })
            .collect();
        Circuit::new(self.qubits, gates)
    }
}

/// The circuit at `index` of the document.
fn parse_circuit(index: usize, value: &Value, qubits: usize) -> Result<Circuit, JsonError> {
    let entries = value.as_array().ok_or_else(|| JsonError::Document {
        field: "circuits",
        reason: format!("circuit {index} is not an array of gates"),
    })?;
    let gates = entries
        .iter()
        .enumerate()
        .map(|(gate, entry)| {
            parse_gate(entry).map_err(|reason| JsonError::Entry {
                circuit: index,
                gate,
                reason,
            })
        })
        .collect::<Result<_, _>>()?;
    Circuit::new(qubits, gates).map_err(|source| JsonError::Circuit {
        circuit: index,
        source,
    })
}

/// One gate entry, or why it is malformed.
fn parse_gate(entry: &Value) -> Result<Gate, String> {
    let object = entry
        .as_object()
        .ok_or("not an object {\"gate\": .., \"wires\": [..]}")?;
    if let Some(unknown) = object
        .keys()
        .find(|k| !matches!(k.as_str(), "gate" | "wires" | "angle"))
    {
        return Err(format!(
            "unknown field \"{unknown}\" (fields: gate, wires, angle)"
        ));
    }
    let name = object
        .get("gate")
        .and_then(Value::as_str)
        .ok_or("\"gate\" missing or not a string")?;
    let kind = GateKind::from_name(name).ok_or_else(|| {
        format!("unknown gate \"{name}\" (known: h, x, y, z, rx, ry, rz, phase, cnot, cz, swap)")
    })?;
    let wires = object
        .get("wires")
        .and_then(Value::as_array)
        .ok_or("\"wires\" missing or not an array")?
        .iter()
        .map(|w| {
            w.as_u64()
                .and_then(|w| usize::try_from(w).ok())
                .ok_or_else(|| format!("wire {w} is not a non-negative integer"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let angle = match object.get("angle") {
        None | Some(Value::Null) => None,
        Some(value) => Some(Angle::Fixed(
            value
                .as_f64()
                .ok_or_else(|| format!("angle {value} is not a number"))?,
        )),
    };
    Ok(Gate { kind, wires, angle })
}

/// `{"expectations": [[...], ...]}` of `rows`.
pub fn render(rows: &[Vec<f64>]) -> String {
    serde_json::json!({ "expectations": rows }).to_string()
}
