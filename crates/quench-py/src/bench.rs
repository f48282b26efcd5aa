//! `quench.bench` and `quench.doctor`: the benchmark's suite runs and device figures from
//! Python (through the `benchmark` crate's [`benchmark::api`]), and `python -m quench`, the
//! benchmark's command line in this process.

use std::path::PathBuf;

use pyo3::prelude::*;

use crate::errors::{Failure, guarded};
use crate::{device, settings};

impl From<benchmark::api::Failure> for Failure {
    fn from(failure: benchmark::api::Failure) -> Self {
        match failure {
            benchmark::api::Failure::Input(message) => Self::Input(message),
            benchmark::api::Failure::Device(message) => Self::Runtime(message),
        }
    }
}

/// Runs a suite (`benchmark run`'s options as arguments; `peers` true runs the PyTorch peers
/// with `python`, or the first Python that imports torch) and returns `(report, stopped)`:
/// the report as JSON text and whether a Ctrl-C, seen between variants, ended it.
#[pyfunction]
#[pyo3(signature = (suite, only, variants, device, precision, repeats, out, peers, python))]
#[allow(clippy::too_many_arguments)] // one per keyword of `quench.bench.run`
pub fn bench_run(
    py: Python<'_>,
    suite: Option<PathBuf>,
    only: Option<Vec<String>>,
    variants: Option<Vec<String>>,
    device: &str,
    precision: Option<String>,
    repeats: Option<usize>,
    out: Option<PathBuf>,
    peers: bool,
    python: Option<PathBuf>,
) -> PyResult<(String, bool)> {
    let spec = device::parse(device)?;
    let request = benchmark::api::SuiteRun {
        suite,
        only,
        variants,
        device: spec,
        precision,
        repeats,
        out,
        peers: peers.then_some(python),
    };
    guarded(py, move || {
        // Python's signal handlers run with the GIL, taken for a moment on this thread
        // (`settings::between_epochs`): a Ctrl-C stops the suite after the variant in flight.
        let (ended, _) = settings::between_epochs(|| {
            benchmark::api::run(&request, &mut quench_support::interrupt::requested)
        });
        let ended = ended?;
        let (report, stopped) = match ended {
            benchmark::api::Ended::Complete(report) => (report, false),
            benchmark::api::Ended::Stopped(report) => (report, true),
        };
        Ok((report.to_string(), stopped))
    })
}

/// The doctor's figures on `device` as JSON text (`machine`, `figures`, `precisions`,
/// `text`).
#[pyfunction]
#[pyo3(signature = (device))]
pub fn doctor(py: Python<'_>, device: &str) -> PyResult<String> {
    let spec = device::parse(device)?;
    guarded(py, move || {
        let found = benchmark::api::doctor(spec)?;
        serde_json::to_string(&found)
            .map_err(|error| Failure::Runtime(format!("the doctor's figures as JSON: {error}")))
    })
}

/// The benchmark's command line run in this process on `args` (without the program's name);
/// returns its exit status. For `python -m quench` only: `run` installs the command line's
/// signal handling, which ends the process on Ctrl-C once the report is kept. The arguments
/// are the operating system's strings, as the binary takes them: a file name that is not UTF-8
/// (which `sys.argv` carries as surrogate escapes) reaches the command line as its bytes.
#[pyfunction]
#[pyo3(signature = (args))]
pub fn cli(py: Python<'_>, args: Vec<std::ffi::OsString>) -> PyResult<u8> {
    guarded(py, move || {
        Ok(benchmark::cli::main(
            std::iter::once(std::ffi::OsString::from("python -m quench")).chain(args),
        ))
    })
}
