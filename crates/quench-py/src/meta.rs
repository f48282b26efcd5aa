//! `quench.meta`: meta-learning of control pulses (guide 001) from a configuration file of
//! `configs/lindblad/` or the same settings as a dict, trained on a device; the history comes
//! back as JSON text. Ctrl-C is honoured between meta-iterations: the run stops after the
//! iteration in flight and hands back what finished.

use pyo3::prelude::*;
use quench_kernels::{OnDevice, QuenchBackend};
use quench_lindblad::OperatorCache;
use quench_meta::{MetaConfig, MetaError, MetaRun};
use quench_scale::World;
use quench_train::settings::Valid;
use serde_json::json;

use crate::device;
use crate::errors::lindblad_failed_at_run;
use crate::settings;

/// A checked configuration, to train on one backend.
struct Train {
    config: Valid<MetaConfig>,
}

impl OnDevice for Train {
    /// The history of the iterations that finished.
    type Output = Result<quench_meta::History, MetaError>;

    fn run<B: QuenchBackend>(self, device: &B::Device) -> Self::Output {
        let mut run = MetaRun::<B>::new(&self.config, &mut OperatorCache::new(), device)?;
        // The caller's requests (`settings::between_epochs`: a Ctrl-C, relayed to this run)
        // are read between iterations.
        run.train_while(&World::alone(), |_, _| {
            !quench_support::interrupt::requested()
        })
    }
}

/// Trains the configuration in the TOML file at `path`, or in `settings` (the same settings as
/// JSON text, written by the Python side from the caller's dict), on `device`; returns
/// `{"history": .., "interrupted": bool}` as JSON text. A refused file or setting is bad input
/// naming it; a diverged run or a device failure is a runtime failure.
#[pyfunction]
#[pyo3(signature = (path, settings, device))]
pub fn meta_train(
    py: Python<'_>,
    path: Option<&str>,
    settings: Option<&str>,
    device: &str,
) -> PyResult<String> {
    settings::call::<MetaConfig, _>(py, path, settings, device, |config, selected| {
        // A setting the system refuses (its controls, its bounds) is the caller's input; a
        // diverged run, a write or a device that fails is not.
        let (run, interrupted) = settings::between_epochs(|| {
            device::run_sorted(selected, Train { config }, |error| match error {
                MetaError::Config { .. } | MetaError::Policy(_) => false,
                MetaError::Lindblad(error) => lindblad_failed_at_run(error),
                MetaError::Diverged { .. } | MetaError::Write { .. } => true,
            })
        });
        let history = run?;
        Ok(json!({ "history": history, "interrupted": interrupted }).to_string())
    })
}
