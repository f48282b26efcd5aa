//! The error type of the crate.

use thiserror::Error;

/// Everything that can be wrong with the input of this crate: operators, noise parameters,
/// solver settings, tensor shapes and pulse documents. Each variant names what was wrong.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum LindbladError {
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
    #[error("{name} = {value}: {reason}")]
    InvalidValue {
        /// The setting, e.g. `dt` or `tasks[2].rates[0]`.
        name: String,
        /// The value given.
        value: f64,
        /// What it must be instead.
        reason: &'static str,
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
