//! Errors of meta-learning runs.

use quench_lindblad::LindbladError;
use thiserror::Error;

use super::policy::PolicyFileError;

/// What can stop a meta-learning run.
#[derive(Debug, Error)]
pub enum MetaError {
    /// The simulator refused its input (a shape, a bound, a rate).
    #[error(transparent)]
    Lindblad(#[from] LindbladError),
    /// Saving or loading the policy failed.
    #[error(transparent)]
    Policy(#[from] PolicyFileError),
    /// A configuration value that cannot be used.
    #[error("invalid meta-learning configuration: {field} = {value}: {reason}")]
    Config {
        /// The configuration field.
        field: &'static str,
        /// Its value.
        value: String,
        /// Why it is refused.
        reason: String,
    },
    /// Training reached a state it cannot continue from: every task's gradient was not
    /// finite, or a loss was not a number.
    #[error("meta-iteration {iteration}: {reason}; nothing was written")]
    Diverged {
        /// The meta-iteration (from 1).
        iteration: usize,
        /// What was not finite.
        reason: String,
    },
    /// Writing the history failed.
    #[error("cannot write {path}: {source}")]
    Write {
        /// The file.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
}

impl MetaError {
    /// A [`MetaError::Config`] for `field`.
    pub fn config(field: &'static str, value: impl ToString, reason: impl ToString) -> Self {
        Self::Config {
            field,
            value: value.to_string(),
            reason: reason.to_string(),
        }
    }
}
