//! `quench.circuit`: `<Z_i>` of circuits written as the JSON interface's gate dicts.

use numpy::{IntoPyArray, PyArray2, ndarray::Array2};
use pyo3::prelude::*;
use quench_circuit::json::{Document, JsonError};
use quench_kernels::{OnDevice, QuenchBackend, SelectedDevice, run_on};

use crate::device;
use crate::errors::{Failure, guarded};

/// The simulation of a parsed document on one backend.
struct Expectations {
    document: Document,
    /// Bytes the simulation may take (`None`: no limit).
    limit: Option<u128>,
}

impl OnDevice for Expectations {
    type Output = Result<Vec<Vec<f64>>, JsonError>;

    fn run<B: QuenchBackend>(self, device: &B::Device) -> Self::Output {
        // Nothing is differentiated: the backend without autodiff's bookkeeping.
        self.document
            .expectations::<B::InnerBackend>(device, self.limit)
    }
}

/// `<Z_i>` `[circuits, qubits]` of `document`, the JSON interface's text
/// `{"qubits": n, "circuits": [[{"gate": .., "wires": [..], "angle"?: ..}, ..], ..]}` (the
/// Python side writes it from the caller's lists), on `device`. Parsed and checked by
/// `quench_circuit::json::Document::parse`, so that the errors are its one-line messages
/// naming circuit and gate.
#[pyfunction]
pub fn circuit_expectations<'py>(
    py: Python<'py>,
    document: &str,
    device: &str,
) -> PyResult<Bound<'py, PyArray2<f64>>> {
    let spec = device::parse(device)?;
    let document = document.to_string();
    let (rows, qubits) = guarded(py, move || {
        let document = Document::parse(&document)?;
        let selected = device::open(spec)?;
        // As the command-line example: the host's memory bounds a CPU run; a GPU's memory is
        // not known here, and its allocator reports what does not fit.
        let limit = match selected {
            SelectedDevice::Cpu => {
                quench_support::budget::host_limit().map(|limit| u128::from(limit.bytes))
            }
            SelectedDevice::Cuda(_) | SelectedDevice::Wgpu(_) => None,
        };
        let qubits = document.qubits;
        let rows = run_on(selected, Expectations { document, limit })
            .map_err(|error| Failure::Runtime(error.to_string()))??;
        Ok((rows, qubits))
    })?;
    let circuits = rows.len();
    let flat: Vec<f64> = rows.into_iter().flatten().collect();
    let array = Array2::from_shape_vec((circuits, qubits), flat).map_err(|error| {
        Failure::Runtime(format!("the simulator returned a ragged result: {error}"))
    })?;
    Ok(array.into_pyarray(py))
}
