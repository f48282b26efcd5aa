//! `quench.sgld`: a Gibbs-posterior SGLD grid (guide 002) from its TOML file or the same
//! settings as a dict, run on a device as the benchmark's batched way runs it (every chain in
//! one program, counter-based noise, the fused step), its results handed back as JSON text
//! that the Python half turns into dicts and lists.

use pyo3::prelude::*;
use quench_kernels::{OnDevice, QuenchBackend};
use quench_sgld::{Execution, GridConfig, GridData, GridResult, MeanStd, SgldError, run_grid};
use quench_train::settings::Valid;
use serde_json::{Value, json};

use crate::device;
use crate::errors::Failure;
use crate::settings;

/// A checked grid and its data, to run on one backend.
struct Grid {
    config: Valid<GridConfig>,
    data: GridData,
}

impl OnDevice for Grid {
    type Output = Result<GridResult, SgldError>;

    fn run<B: QuenchBackend>(self, device: &B::Device) -> Self::Output {
        run_grid::<B>(&self.config, &self.data, &Execution::BATCHED, device)
    }
}

/// A mean and spread as `{"mean", "std"}`.
fn spread(m: MeanStd) -> Value {
    json!({ "mean": m.mean, "std": m.std })
}

/// What a grid produced, as the Python API returns it (see `quench/sgld.py`).
fn to_json(result: &GridResult) -> Value {
    let betas: Vec<Value> = result
        .betas
        .iter()
        .map(|b| {
            json!({
                "beta": b.beta,
                "epochs": b.epochs,
                "a0": b.a0,
                "train_loss": spread(b.train_loss),
                "test_loss": spread(b.test_loss),
                "train_error": spread(b.train_error),
                "test_error": spread(b.test_error),
                "loss_gap": spread(b.loss_gap),
                "error_gap": spread(b.error_gap),
                "bound": {
                    "integral": b.bound.integral,
                    "kl": b.bound.kl,
                    "inner": b.bound.inner,
                    "gap": b.bound.gap,
                },
            })
        })
        .collect();
    json!({
        "data": result.data,
        "n_train": result.n_train,
        "n_test": result.n_test,
        "chains": result.chains,
        "betas": betas,
    })
}

/// Runs the grid of the TOML file at `path`, or of `settings` (the same settings as JSON
/// text, which the Python side writes from the caller's dict), on `device`; returns the
/// results as JSON text. A refused file or setting is bad input naming it; a failure while
/// the chains run is the device's.
#[pyfunction]
#[pyo3(signature = (path, settings, device))]
pub fn sgld_run_grid(
    py: Python<'_>,
    path: Option<&str>,
    settings: Option<&str>,
    device: &str,
) -> PyResult<String> {
    settings::call::<GridConfig, _>(py, path, settings, device, |config, selected| {
        let data = GridData::load(&config).map_err(|error| Failure::Input(error.to_string()))?;
        let result = device::run(selected, Grid { config, data })?;
        Ok(to_json(&result).to_string())
    })
}
