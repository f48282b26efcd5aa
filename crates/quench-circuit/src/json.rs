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
use quench_support::excerpt::excerpt;
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
        let (value, qubits) = parse_object(text, "circuits")?;
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

/// One circuit whose angles may come from per-sample inputs or shared weights: the template a
/// caller runs on arrays (the Python package's `quench.circuit.run`). Its text is
/// `{"qubits": n, "gates": [..]}`, each gate as in a document, with `"angle"` a number, or
/// `{"input": k}` (column `k` of the inputs `[batch, inputs]`) or `{"weight": k}` (entry `k`
/// of the weights `[weights]`).
#[derive(Debug, Clone, PartialEq)]
pub struct Template {
    /// The circuit, checked.
    pub circuit: Circuit,
}

impl Template {
    /// Parses and checks `text`; errors name the gate as a document's do (as circuit 0).
    pub fn parse(text: &str) -> Result<Self, JsonError> {
        let (value, qubits) = parse_object(text, "gates")?;
        let gates = value.get("gates").ok_or_else(|| JsonError::Document {
            field: "gates",
            reason: "missing: a list of gate dicts".into(),
        })?;
        let circuit = circuit_of(0, gates, qubits, Angles::Sourced)?;
        Ok(Template { circuit })
    }
}

/// `text` as an object `{"qubits": n, "<body>": [...]}` with no other key: the value and `n`
/// (saturated at `usize::MAX`, for the circuit's own bound to refuse).
fn parse_object(text: &str, body: &str) -> Result<(Value, usize), JsonError> {
    let value =
        quench_support::json::parse_strict(text).map_err(|e| JsonError::Syntax(e.to_string()))?;
    let Some(fields) = value.as_object() else {
        return Err(JsonError::Document {
            field: "document",
            reason: format!("not an object {{\"qubits\": n, \"{body}\": [...]}}"),
        });
    };
    if let Some(unknown) = fields
        .keys()
        .find(|k| !["qubits", body].contains(&k.as_str()))
    {
        return Err(JsonError::Document {
            field: "document",
            reason: format!(
                "unknown key {:?} (the keys are qubits and {body})",
                excerpt(unknown)
            ),
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
    Ok((value, usize::try_from(qubits).unwrap_or(usize::MAX)))
}

/// Which angles a gate entry may give.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Angles {
    /// Numbers only (a document's circuits).
    Fixed,
    /// Numbers, `{"input": k}` or `{"weight": k}` (a [`Template`]).
    Sourced,
}

/// The circuit at `index` of the document.
fn parse_circuit(index: usize, value: &Value, qubits: usize) -> Result<Circuit, JsonError> {
    circuit_of(index, value, qubits, Angles::Fixed)
}

/// The circuit `value` (a list of gate entries) at `index`, its angles as `angles` allows.
fn circuit_of(
    index: usize,
    value: &Value,
    qubits: usize,
    angles: Angles,
) -> Result<Circuit, JsonError> {
    let entries = value.as_array().ok_or_else(|| JsonError::Document {
        field: "circuits",
        reason: format!("circuit {index} is not an array of gates"),
    })?;
    let gates = entries
        .iter()
        .enumerate()
        .map(|(gate, entry)| {
            parse_gate(entry, angles).map_err(|reason| JsonError::Entry {
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
fn parse_gate(entry: &Value, angles: Angles) -> Result<Gate, String> {
    let object = entry
        .as_object()
        .ok_or("not an object {\"gate\": .., \"wires\": [..]}")?;
    if let Some(unknown) = object
        .keys()
        .find(|k| !matches!(k.as_str(), "gate" | "wires" | "angle"))
    {
        return Err(format!(
            "unknown field \"{}\" (fields: gate, wires, angle)",
            excerpt(unknown)
        ));
    }
    let name = object
        .get("gate")
        .and_then(Value::as_str)
        .ok_or("\"gate\" missing or not a string")?;
    let kind = GateKind::from_name(name).ok_or_else(|| {
        format!(
            "unknown gate \"{}\" (known: h, x, y, z, rx, ry, rz, phase, cnot, cz, swap)",
            excerpt(name)
        )
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
        Some(value) => Some(match (value.as_f64(), value.as_object(), angles) {
            (Some(fixed), _, _) => Angle::Fixed(fixed),
            (None, Some(source), Angles::Sourced) => sourced_angle(value, source)?,
            (None, _, Angles::Fixed) => return Err(format!("angle {value} is not a number")),
            (None, None, Angles::Sourced) => {
                return Err(format!(
                    "angle {value} is not a number, {{\"input\": k}} or {{\"weight\": k}}"
                ));
            }
        }),
    };
    Ok(Gate { kind, wires, angle })
}

/// `{"input": k}` or `{"weight": k}` as the angle it names.
fn sourced_angle(value: &Value, source: &serde_json::Map<String, Value>) -> Result<Angle, String> {
    let index = |v: &Value| v.as_u64().and_then(|k| usize::try_from(k).ok());
    match (source.len(), source.get("input"), source.get("weight")) {
        (1, Some(k), None) => index(k).map(Angle::Input),
        (1, None, Some(k)) => index(k).map(Angle::Weight),
        _ => None,
    }
    .ok_or_else(|| {
        format!("angle {value} is not {{\"input\": k}} or {{\"weight\": k}} with an index k >= 0")
    })
}

/// `{"expectations": [[...], ...]}` of `rows`.
pub fn render(rows: &[Vec<f64>]) -> String {
    serde_json::json!({ "expectations": rows }).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_template_takes_fixed_input_and_weight_angles_and_names_a_bad_one() {
        let template = Template::parse(
            r#"{"qubits": 2, "gates": [
                {"gate": "ry", "wires": [0], "angle": {"input": 1}},
                {"gate": "rx", "wires": [1], "angle": {"weight": 0}},
                {"gate": "rz", "wires": [1], "angle": 0.5},
                {"gate": "cnot", "wires": [0, 1]}]}"#,
        )
        .unwrap();
        let angles: Vec<_> = template.circuit.gates().iter().map(|g| g.angle).collect();
        assert_eq!(
            angles,
            [
                Some(Angle::Input(1)),
                Some(Angle::Weight(0)),
                Some(Angle::Fixed(0.5)),
                None
            ]
        );
        assert_eq!(
            (template.circuit.inputs(), template.circuit.weights()),
            (2, 1)
        );
        for (bad, words) in [
            (r#"{"input": -1}"#, "index k >= 0"),
            (r#"{"input": 0, "weight": 1}"#, "index k >= 0"),
            (r#""0.3""#, "is not a number"),
        ] {
            let text = format!(
                r#"{{"qubits": 1, "gates": [{{"gate": "ry", "wires": [0], "angle": {bad}}}]}}"#
            );
            let err = Template::parse(&text).unwrap_err().to_string();
            assert!(err.starts_with("circuit 0, gate 0: angle"), "{err}");
            assert!(err.contains(words), "{err}");
        }
        // A document's circuits keep fixed angles only.
        let err = Document::parse(
            r#"{"qubits": 1, "circuits": [[{"gate": "ry", "wires": [0], "angle": {"input": 0}}]]}"#,
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("is not a number"), "{err}");
    }

    #[test]
    fn a_long_unknown_name_is_shown_by_its_ends() {
        let name = "h".repeat(100_000);
        for text in [
            format!(r#"{{"qubits": 1, "gates": [{{"gate": "{name}", "wires": [0]}}]}}"#),
            format!(r#"{{"qubits": 1, "gates": [{{"gate": "h", "wires": [0], "{name}": 1}}]}}"#),
            format!(r#"{{"qubits": 1, "gates": [], "{name}": 1}}"#),
        ] {
            let err = Template::parse(&text).unwrap_err().to_string();
            assert!(err.len() < 1_000, "{} bytes", err.len());
            assert!(err.contains("(100000 characters)"), "{err}");
        }
    }
}
