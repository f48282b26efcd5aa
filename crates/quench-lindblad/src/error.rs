//! The error type of the crate.

use quench_support::numbers::short;
use thiserror::Error;

/// Everything that can be wrong with the input of this crate: operators, noise parameters,
/// solver settings, tensor shapes and pulse documents. Each variant names what was wrong.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum LindbladError {
    /// A run whose work, estimated before it starts, exceeds the process's limit
    /// (`quench_support::budget::max_hours`): a step so small that the run would not end.
    #[error(transparent)]
    TooLong(#[from] quench_support::budget::TooLong),
    /// The evolution would need more memory than the host has.
    #[error(transparent)]
    TooLarge(#[from] quench_support::budget::TooLarge),
    /// An operator of the wrong dimension, or a matrix that is not square.
    #[error("{name}: expected a {expected} x {expected} matrix, found {found}")]
    Dimension {
        /// The operator, e.g. `controls[1]`.
        name: String,
        /// The dimension it must have.
        expected: usize,
        /// What was found, e.g. `3 rows` or `a row of 2 entries`.
        found: String,
    },
    /// An operator that must be Hermitian is not.
    #[error("{name}: not Hermitian (largest |A_ij - conj(A_ji)| is {deviation:e})")]
    NotHermitian {
        /// The operator, e.g. `drift`.
        name: String,
        /// The largest deviation from Hermiticity.
        deviation: f64,
    },
    /// A scalar setting or parameter outside its valid range.
    #[error("{name} = {}: {reason}", short(*.value))]
    InvalidValue {
        /// The setting, e.g. `dt` or `tasks[2].rates[0]`.
        name: String,
        /// The value given.
        value: f64,
        /// What it must be instead.
        reason: &'static str,
    },
    /// An input tensor holding a NaN or an infinity (in the tensor's precision: an f64 value
    /// beyond 3.4e38 becomes infinite in f32).
    #[error(
        "{name}: holds values that are not finite numbers in the tensor's precision (NaN, \
         infinite, or beyond its range: 3.4e38 in f32)"
    )]
    NotFinite {
        /// The input, e.g. `amplitudes`.
        name: &'static str,
    },
    /// A run's final state is not a density matrix: the step was too large for the pulse, or
    /// the numbers overflowed.
    #[error("task {task}: the final state is not physical ({reason}); {hint}")]
    Unphysical {
        /// The task's index in the document.
        task: usize,
        /// What is wrong with it.
        reason: String,
        /// What to change.
        hint: &'static str,
    },
    /// An `euler` or `rk4` run that would take more substeps than
    /// [`Solver::max_substeps`](crate::Solver::max_substeps) allows.
    #[error(
        "dt = {}: {method} would take floor(t_seg / dt) = {} substeps per segment \
         (t_seg = t_total / segments = {}) x {segments} segments = {} substeps \
         (x {tasks} tasks = {} task-substeps), more than max_substeps = {limit}; \
         use a larger dt or the exact method, or raise max_substeps",
        short(*.dt),
        short(*.per_segment),
        short(*.t_segment),
        short(*.total),
        short(*.total * *.tasks as f64)
    )]
    TooManySubsteps {
        /// `euler` or `rk4`.
        method: &'static str,
        /// The requested step.
        dt: f64,
        /// The length of one segment.
        t_segment: f64,
        /// Substeps per segment, `max(1, floor(t_seg / dt))` (a float: it may exceed any
        /// integer type).
        per_segment: f64,
        /// Segments of the pulse.
        segments: usize,
        /// Substeps of the whole call, `per_segment x segments`.
        total: f64,
        /// Tasks of the batch; each substep advances all of them.
        tasks: usize,
        /// The limit in force.
        limit: u64,
    },
    /// A differentiated `euler` or `rk4` run whose autodiff graph would outgrow
    /// [`Solver::max_graph_bytes`](crate::Solver::max_graph_bytes).
    #[error(
        "dt = {}: {method} under autodiff would keep about {} in its graph for {substeps} \
         substeps x {tasks} tasks (2.8 kB a substep plus the states), more than \
         max_graph_bytes = {limit}; use a larger dt or the exact method, or raise \
         max_graph_bytes",
        short(*.dt),
        gigabytes(*.bytes)
    )]
    GraphTooLarge {
        /// `euler` or `rk4`.
        method: &'static str,
        /// The requested step.
        dt: f64,
        /// Substeps of the whole call.
        substeps: usize,
        /// Tasks of the batch.
        tasks: usize,
        /// The estimate, in bytes.
        bytes: f64,
        /// The limit in force.
        limit: u64,
    },
    /// A device tensor of the wrong shape.
    #[error("{name}: expected shape {expected}, found {found:?}")]
    Shape {
        /// The tensor, e.g. `amplitudes`.
        name: &'static str,
        /// The expected shape, e.g. `[tasks, segments, 2]`.
        expected: String,
        /// The shape given.
        found: Vec<usize>,
    },
    /// A malformed field of a pulse document (see the crate documentation).
    #[error("{field}: {message}")]
    Input {
        /// The path of the field, e.g. `tasks[3].amplitudes[0]`.
        field: String,
        /// What is wrong with it.
        message: String,
    },
    /// Reading a result back from the device failed.
    #[error("reading {what} back from the device failed: {message}")]
    ReadBack {
        /// What was read, e.g. `states`.
        what: &'static str,
        /// The backend's message.
        message: String,
    },
    /// A pulse document that is not valid JSON.
    #[error("invalid JSON at line {line}, column {column}: {message}")]
    Json {
        /// Line of the error (1-based).
        line: usize,
        /// Column of the error (1-based).
        column: usize,
        /// The parser's message.
        message: String,
    },
}

/// `bytes` in gigabytes (10^9), to three decimals.
fn gigabytes(bytes: f64) -> String {
    format!("{:.3} GB", bytes / 1e9)
}

/// [`LindbladError::Unphysical`]'s reason for a state with a NaN or infinite entry, whether
/// the host's check or the solver's on the device finds it.
pub(crate) const NOT_FINITE_STATE: &str = "it has entries that are not finite numbers";

impl LindbladError {
    /// Shorthand for [`LindbladError::InvalidValue`].
    pub(crate) fn invalid(name: impl Into<String>, value: f64, reason: &'static str) -> Self {
        Self::InvalidValue {
            name: name.into(),
            value,
            reason,
        }
    }

    /// Shorthand for [`LindbladError::Input`].
    pub(crate) fn input(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self::Input {
            field: field.into(),
            message: message.into(),
        }
    }
}
