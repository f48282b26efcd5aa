//! The error type of the crate.

use thiserror::Error;

/// What can be wrong with a circuit or its inputs. Gate errors name the gate's index in the
/// circuit (from 0); the JSON interface adds the circuit's index.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum CircuitError {
    /// A qubit count outside `1..=MAX_QUBITS`.
    #[error("qubits = {0}: must be between 1 and {max}", max = crate::limits::MAX_QUBITS)]
    QubitCount(usize),
    /// More qubits than the simulation can hold.
    #[error(
        "qubits = {qubits}: a batch of {batch} states and the simulator's tables need about \
         {needed_mib} MiB, more than the {available_mib} MiB available"
    )]
    TooLarge {
        /// Qubits asked for.
        qubits: usize,
        /// Circuits in the batch.
        batch: usize,
        /// Estimated memory of the simulation, MiB.
        needed_mib: u64,
        /// Memory available, MiB.
        available_mib: u64,
    },
    /// A gate name this crate does not know.
    #[error(
        "gate {gate}: unknown gate \"{name}\" (known: h, x, y, z, rx, ry, rz, phase, cnot, cz, swap)"
    )]
    UnknownGate {
        /// Index of the gate.
        gate: usize,
        /// The name given.
        name: String,
    },
    /// A gate acting on the wrong number of wires.
    #[error("gate {gate} ({name}): acts on {expected} wire(s), {found} given")]
    WireCount {
        /// Index of the gate.
        gate: usize,
        /// The gate's name.
        name: &'static str,
        /// Wires it acts on.
        expected: usize,
        /// Wires given.
        found: usize,
    },
    /// A wire beyond the circuit's qubits.
    #[error("gate {gate} ({name}): wire {wire} out of range for {qubits} qubits")]
    WireOutOfRange {
        /// Index of the gate.
        gate: usize,
        /// The gate's name.
        name: &'static str,
        /// The wire given.
        wire: usize,
        /// Qubits of the circuit.
        qubits: usize,
    },
    /// A two-qubit gate given the same wire twice.
    #[error("gate {gate} ({name}): wire {wire} given twice")]
    RepeatedWire {
        /// Index of the gate.
        gate: usize,
        /// The gate's name.
        name: &'static str,
        /// The repeated wire.
        wire: usize,
    },
    /// A rotation without its angle.
    #[error("gate {gate} ({name}): missing angle")]
    MissingAngle {
        /// Index of the gate.
        gate: usize,
        /// The gate's name.
        name: &'static str,
    },
    /// An angle given to a gate that takes none.
    #[error("gate {gate} ({name}): takes no angle")]
    UnexpectedAngle {
        /// Index of the gate.
        gate: usize,
        /// The gate's name.
        name: &'static str,
    },
    /// A fixed angle that is NaN or infinite, in f32 (the devices' arithmetic).
    #[error(
        "gate {gate} ({name}): angle {} is not finite in f32, the device's precision",
        quench_support::numbers::short(*value)
    )]
    NonFiniteAngle {
        /// Index of the gate.
        gate: usize,
        /// The gate's name.
        name: &'static str,
        /// The angle given.
        value: f64,
    },
    /// An angle index beyond [`crate::limits::MAX_ANGLES`] (an input or weight column).
    #[error(
        "gate {gate} ({name}): angle index {index} is beyond the {max} angles a circuit may read",
        max = crate::limits::MAX_ANGLES
    )]
    AngleIndex {
        /// Index of the gate.
        gate: usize,
        /// The gate's name.
        name: &'static str,
        /// The index given.
        index: usize,
    },
    /// A run of no circuits.
    #[error("batch = 0: a run needs at least one circuit")]
    EmptyBatch,
    /// A tensor argument of the wrong shape.
    #[error("{name}: expected shape {expected}, found {found:?}")]
    Shape {
        /// The argument, e.g. `inputs`.
        name: &'static str,
        /// The shape it must have, e.g. `[batch, 4]`.
        expected: String,
        /// The shape found.
        found: Vec<usize>,
    },
}
