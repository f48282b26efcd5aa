//! What goes wrong, as Python sees it, and the wrapper every entry point runs its work in.

use std::panic::{AssertUnwindSafe, catch_unwind};

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use quench_circuit::json::JsonError;
use quench_lindblad::LindbladError;

/// A failure of a call: bad input (`ValueError`) or a failure of the device or of Quench
/// itself (`RuntimeError`). The message is the library's one line, unchanged.
#[derive(Debug)]
pub enum Failure {
    /// The caller's input is wrong; the message names the argument or field.
    Input(String),
    /// The device failed, or Quench did (a panic, a read-back).
    Runtime(String),
}

impl Failure {
    /// Bad input named `field`: `field: message`.
    pub fn input(field: &str, message: impl std::fmt::Display) -> Self {
        Self::Input(format!("{field}: {message}"))
    }
}

impl From<Failure> for PyErr {
    fn from(failure: Failure) -> Self {
        match failure {
            Failure::Input(message) => PyValueError::new_err(message),
            Failure::Runtime(message) => PyRuntimeError::new_err(message),
        }
    }
}

/// Whether a simulator's refusal is a runtime failure: the device could not hand the results
/// back. Every other one is about the caller's input.
pub fn lindblad_failed_at_run(error: &LindbladError) -> bool {
    matches!(error, LindbladError::ReadBack { .. })
}

impl From<LindbladError> for Failure {
    fn from(error: LindbladError) -> Self {
        if lindblad_failed_at_run(&error) {
            Self::Runtime(error.to_string())
        } else {
            Self::Input(error.to_string())
        }
    }
}

impl From<JsonError> for Failure {
    fn from(error: JsonError) -> Self {
        Self::Input(error.to_string())
    }
}

/// Runs `work` without the GIL, turning a panic into [`Failure::Runtime`].
///
/// The work holds no Python object (the callers copy their arrays into Rust first), so other
/// Python threads may run while it computes. A panic is caught here rather than by pyo3,
/// whose `PanicException` derives from `BaseException` and so escapes `except Exception`.
pub fn guarded<T, F>(py: Python<'_>, work: F) -> PyResult<T>
where
    T: Send,
    F: FnOnce() -> Result<T, Failure> + Send,
{
    // Unwind safety: nothing the closure touches outlives a panic but the library's caches,
    // which are rebuilt per call.
    let outcome = py.detach(|| catch_unwind(AssertUnwindSafe(work)));
    match outcome {
        Ok(result) => result.map_err(PyErr::from),
        Err(payload) => {
            let what = payload
                .downcast_ref::<&str>()
                .map(|s| (*s).to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "(no message)".to_string());
            Err(PyRuntimeError::new_err(format!(
                "internal error in quench (a Rust panic, please report it): {what}"
            )))
        }
    }
}
