//! The native half of the Python package `quench`: the extension module `quench._native`.
//!
//! The Python half (`python/quench/`) turns the caller's objects into contiguous numpy arrays
//! of the right dtype, naming the argument when it cannot, and holds the docstrings users
//! read; this half checks shapes, builds the library's types (whose constructors do the
//! validation: [`quench_lindblad::System::new`], [`quench_lindblad::states`],
//! [`quench_circuit::json::Document::parse`]), runs the work on the device the caller named
//! and hands numpy arrays back.
//!
//! Every entry point runs its work through [`guarded`]: without the GIL (other Python threads
//! run meanwhile) and with any Rust panic turned into a `RuntimeError`, so that no panic
//! crosses into Python as pyo3's `PanicException` (a `BaseException`, which `except
//! Exception` does not catch).

mod arrays;
mod bench;
mod circuit;
mod device;
mod errors;
mod hybrid;
mod lindblad;
mod meta;
mod qrng;
mod settings;
mod sgld;
mod temporal;

use pyo3::prelude::*;

use crate::errors::{Failure, guarded};

// Buffers of the CPU backend start on a vector boundary, so that results do not depend on
// where the allocator puts them (see `quench_support::allocator`). This changes only the
// allocations Rust makes in this module; Python's own allocator is untouched.
quench_support::aligned_allocator!();

/// The devices this build can use, as the `device` arguments name them: always `"cpu"`;
/// `"cuda:N"` for each CUDA device that opens, in a build with the `cuda` feature; `"wgpu:N"`
/// for each wgpu adapter the driver lists, in a build with the `wgpu` feature.
#[pyfunction]
fn devices(py: Python<'_>) -> PyResult<Vec<String>> {
    guarded(py, || Ok(device::available()))
}

/// A hidden test hook: panics inside the same wrapper every entry point uses, so that the
/// tests can check that a Rust panic reaches Python as a `RuntimeError` and the interpreter
/// survives. Not part of the API.
#[pyfunction]
fn _panic_for_test(py: Python<'_>) -> PyResult<()> {
    guarded(py, || -> Result<(), Failure> {
        panic!("quench._panic_for_test: a deliberate panic inside the Rust wrapper")
    })
}

/// Refuses `estimate` bytes of host memory for `what` (`amplitudes: shape [..] as float64`)
/// with the library's own check (`quench_support::budget::check_fits`: the smaller of the
/// memory available and what is left under `ulimit -v`), so that the Python half sizes a copy
/// by the same rule as the native calls before making it.
#[pyfunction]
fn check_host_memory(what: String, estimate: u128) -> PyResult<()> {
    quench_support::budget::check_fits(|| what, estimate)
        .map_err(|too_large| Failure::Input(too_large.to_string()).into())
}

/// Sets the longest run one setting may ask for, in hours, for this process (what
/// `benchmark --max-hours` sets), and returns the limit that held before. Refused: a value
/// that is not finite and positive.
#[pyfunction]
fn set_max_hours(hours: f64) -> PyResult<f64> {
    let before = quench_support::budget::max_hours();
    quench_support::budget::set_max_hours(hours).map_err(|why| Failure::input("hours", why))?;
    Ok(before)
}

/// The extension module `quench._native`.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_function(wrap_pyfunction!(devices, m)?)?;
    m.add_function(wrap_pyfunction!(_panic_for_test, m)?)?;
    m.add_function(wrap_pyfunction!(check_host_memory, m)?)?;
    m.add_function(wrap_pyfunction!(set_max_hours, m)?)?;
    m.add_class::<lindblad::NativeSystem>()?;
    m.add_function(wrap_pyfunction!(lindblad::lindblad_run, m)?)?;
    m.add_function(wrap_pyfunction!(lindblad::lindblad_native_seconds, m)?)?;
    m.add_function(wrap_pyfunction!(circuit::circuit_expectations, m)?)?;
    m.add_function(wrap_pyfunction!(circuit::circuit_run, m)?)?;
    m.add_function(wrap_pyfunction!(sgld::sgld_run_grid, m)?)?;
    m.add_function(wrap_pyfunction!(meta::meta_train, m)?)?;
    m.add_function(wrap_pyfunction!(qrng::qrng_classify, m)?)?;
    m.add_function(wrap_pyfunction!(qrng::qrng_tournament, m)?)?;
    m.add_function(wrap_pyfunction!(temporal::temporal_train, m)?)?;
    m.add_function(wrap_pyfunction!(hybrid::hybrid_train, m)?)?;
    m.add_function(wrap_pyfunction!(bench::bench_run, m)?)?;
    m.add_function(wrap_pyfunction!(bench::doctor, m)?)?;
    m.add_function(wrap_pyfunction!(bench::cli, m)?)?;
    Ok(())
}
