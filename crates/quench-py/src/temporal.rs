//! `quench.temporal`: guide 004's direction classifiers (LSTM, Transformer, MLP) on windows of
//! market bars, every seed a member of one batched program, trained the product's way (the
//! fused LSTM, windows resident on the device); the outcome comes back as JSON text.

use pyo3::prelude::*;
use quench_kernels::{OnDevice, QuenchBackend};
use quench_temporal::data::MarketSettings;
use quench_temporal::{Execution, ModelKind, TemporalConfig, TemporalError, TemporalOutcome};
use quench_train::settings::Valid;
use serde_json::{Value, json};

use crate::device;
use crate::errors::{Failure, guarded};
use crate::settings;

/// A checked configuration and its windows, to train on one backend.
struct Train {
    config: Valid<TemporalConfig>,
    data: quench_data::MarketData,
}

impl OnDevice for Train {
    type Output = Result<TemporalOutcome, TemporalError>;

    fn run<B: QuenchBackend>(self, device: &B::Device) -> Self::Output {
        quench_temporal::train_temporal::<B>(
            &self.data,
            &self.config,
            &Execution::default(),
            device,
        )
    }
}

/// The model's default settings with `overrides` (a table's keys) laid over them, as the
/// benchmark suites merge theirs: `origin` names where they came from in errors.
fn merged(
    model: ModelKind,
    overrides: toml::Table,
    origin: &str,
) -> Result<Valid<TemporalConfig>, Failure> {
    if overrides.contains_key("model") {
        return Err(Failure::input(
            origin,
            "model: given by the `model` argument, not the settings",
        ));
    }
    let config =
        quench_support::config::overridden(&TemporalConfig::for_model(model), overrides, "")
            .map_err(|error| Failure::input(origin, error))?;
    Valid::new(config).map_err(|error| Failure::input(origin, error))
}

/// Trains `model` (`lstm`, `transformer`, `mlp`) with its default settings overridden by the
/// TOML file at `path` or by `settings` (JSON text), on the windows `data` names (JSON text of
/// [`MarketSettings`]; `None`: the default synthetic market), on `device`, Ctrl-C honoured
/// between epochs; returns the outcome with `data` (where the bars came from) and
/// `interrupted` as JSON text.
#[pyfunction]
#[pyo3(signature = (model, path, settings, data, device))]
pub fn temporal_train(
    py: Python<'_>,
    model: &str,
    path: Option<&str>,
    settings: Option<&str>,
    data: Option<&str>,
    device: &str,
) -> PyResult<String> {
    let spec = device::parse(device)?;
    let model: ModelKind = serde_json::from_value(Value::String(model.to_string()))
        .map_err(|error| Failure::input("model", error))?;
    let data: MarketSettings = settings::data(data)?;
    let (path, settings) = (path.map(str::to_owned), settings.map(str::to_owned));
    guarded(py, move || {
        let (overrides, origin) =
            settings::read::<toml::Table>(path.as_deref(), settings.as_deref())?;
        let config = merged(model, overrides, &origin)?;
        let market = data.load().map_err(|error| Failure::input("data", error))?;
        let selected = device::open(spec)?;
        let (outcome, interrupted) = settings::between_epochs(|| {
            device::run_sorted(
                selected,
                Train {
                    config,
                    data: market.data,
                },
                |e| matches!(e, TemporalError::Device(_)),
            )
        });
        let outcome = outcome?;
        let mut result = serde_json::to_value(outcome)
            .map_err(|error| Failure::Runtime(format!("the outcome as JSON: {error}")))?;
        if let Value::Object(fields) = &mut result {
            fields.insert("data".into(), json!(market.note));
            fields.insert("interrupted".into(), json!(interrupted));
        }
        Ok(result.to_string())
    })
}
