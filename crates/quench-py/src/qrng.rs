//! `quench.qrng`: guide 000's analyses of quantum random-number sources from their
//! configurations (a file of `configs/qrng/` or the same settings as a dict) and their data (the
//! shipped recording, another file of the original's format, or the synthetic stand-in
//! sources), trained on a device the product's way (every seed or match one batched program,
//! the seam's fused member-MLP step); the outcomes come back as JSON text.

use pyo3::prelude::*;
use quench_kernels::{OnDevice, QuenchBackend};
use quench_qrng::classifier::{ClassifierConfig, ClassifierOutcome, Execution, train_classifier};
use quench_qrng::gan::{GanConfig, GanTournament, gan_tournament};
use quench_qrng::recording::DataSettings;
use quench_qrng::{Batching, QrngError};
use quench_train::settings::Valid;
use serde_json::json;

use crate::device;
use crate::errors::Failure;
use crate::settings;

/// Whether a failure of the analysis is the device's (one that cannot run it); the data's and
/// the settings' are the caller's.
fn on_device(error: &QrngError) -> bool {
    matches!(error, QrngError::Device(_))
}

/// A checked classifier configuration and its lines, to train on one backend.
struct Classify {
    config: Valid<ClassifierConfig>,
    data: quench_data::Dataset,
}

impl OnDevice for Classify {
    type Output = Result<ClassifierOutcome, QrngError>;

    fn run<B: QuenchBackend>(self, device: &B::Device) -> Self::Output {
        train_classifier::<B>(&self.data, &self.config, &Execution::default(), device)
    }
}

/// A checked tournament configuration and its lines, to play on one backend.
struct Tournament {
    config: Valid<GanConfig>,
    strings: quench_data::BitStrings,
}

impl OnDevice for Tournament {
    type Output = Result<GanTournament, QrngError>;

    fn run<B: QuenchBackend>(self, device: &B::Device) -> Self::Output {
        gan_tournament::<B>(&self.strings, &self.config, Batching::Members, device)
    }
}

/// Trains the classifier of the TOML file at `path`, or of `settings` (JSON text), on the
/// lines `data` names (JSON text of the `data` table; `None`: the shipped recording), on
/// `device`, Ctrl-C honoured between epochs; returns `{"data", "seeds", "test_accuracy",
/// "member_epochs", "interrupted"}` as JSON text.
#[pyfunction]
#[pyo3(signature = (path, settings, data, device))]
pub fn qrng_classify(
    py: Python<'_>,
    path: Option<&str>,
    settings: Option<&str>,
    data: Option<&str>,
    device: &str,
) -> PyResult<String> {
    let data: DataSettings = settings::data(data)?;
    settings::call::<ClassifierConfig, _>(py, path, settings, device, move |config, selected| {
        let recording = data.load().map_err(|error| Failure::input("data", error))?;
        let task = Classify {
            config,
            data: recording.strings.to_dataset(),
        };
        let (outcome, interrupted) =
            settings::between_epochs(|| device::run_sorted(selected, task, on_device));
        let outcome = outcome?;
        let (mean, std) = outcome.test_accuracy();
        Ok(json!({
            "data": recording.note,
            "seeds": outcome.seeds,
            "test_accuracy": { "mean": mean, "std": std },
            "member_epochs": outcome.member_epochs,
            "interrupted": interrupted,
        })
        .to_string())
    })
}

/// Plays the GAN tournament of the TOML file at `path`, or of `settings` (JSON text), between
/// the sources of `data` (as for [`qrng_classify`]) on `device`; returns `{"data", "matches",
/// "pairs", "mean_final_kl"}` as JSON text.
#[pyfunction]
#[pyo3(signature = (path, settings, data, device))]
pub fn qrng_tournament(
    py: Python<'_>,
    path: Option<&str>,
    settings: Option<&str>,
    data: Option<&str>,
    device: &str,
) -> PyResult<String> {
    let data: DataSettings = settings::data(data)?;
    settings::call::<GanConfig, _>(py, path, settings, device, move |config, selected| {
        let recording = data.load().map_err(|error| Failure::input("data", error))?;
        let task = Tournament {
            config,
            strings: recording.strings,
        };
        let outcome = device::run_sorted(selected, task, on_device)?;
        Ok(json!({
            "data": recording.note,
            "matches": outcome.matches,
            "pairs": outcome.table(),
            "mean_final_kl": outcome.mean_final_kl(),
        })
        .to_string())
    })
}
