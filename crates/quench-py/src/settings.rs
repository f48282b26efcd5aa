//! A training call's settings as Python gives them: a configuration file's path, or the same
//! settings as a dict (which the Python half writes as JSON text), read into the crate's
//! configuration type and checked by its `Validate` before any work.

use std::fmt::Display;
use std::path::Path;

use pyo3::prelude::*;
use quench_kernels::SelectedDevice;
use quench_train::settings::{Valid, Validate};
use serde::de::DeserializeOwned;

use crate::device;
use crate::errors::{Failure, guarded};

/// A training entry point: `device` parsed before any work, then without the GIL the settings
/// (the file at `path` or the JSON text `settings`) read and checked, the device opened, and
/// `work` run on both; its JSON text is what Python gets.
pub fn call<C, F>(
    py: Python<'_>,
    path: Option<&str>,
    settings: Option<&str>,
    device: &str,
    work: F,
) -> PyResult<String>
where
    C: DeserializeOwned + Validate,
    C::Error: Display,
    F: FnOnce(Valid<C>, SelectedDevice) -> Result<String, Failure> + Send,
{
    let spec = device::parse(device)?;
    let (path, settings) = (path.map(str::to_owned), settings.map(str::to_owned));
    guarded(py, move || {
        let config = checked::<C>(path, settings)?;
        work(config, device::open(spec)?)
    })
}

/// The configuration of the TOML file at `path`, or of `settings` (JSON text), exactly one of
/// the two, checked. Errors are bad input naming the file (or `config`) and the field.
fn checked<C>(path: Option<String>, settings: Option<String>) -> Result<Valid<C>, Failure>
where
    C: DeserializeOwned + Validate,
    C::Error: Display,
{
    let (config, origin) = read::<C>(path.as_deref(), settings.as_deref())?;
    Valid::new(config).map_err(|error| Failure::input(&origin, error))
}

/// A call's `data` argument (JSON text of `T`, written from the caller's dict) read as a dict
/// of settings is ([`quench_support::config::from_json_settings`]: a refusal names `data` and
/// the setting's path); `None` takes `T`'s default.
pub fn data<T: DeserializeOwned + Default>(data: Option<&str>) -> Result<T, Failure> {
    data.map_or_else(
        || Ok(T::default()),
        |text| {
            quench_support::config::from_json_settings(text)
                .map_err(|error| Failure::input("data", error))
        },
    )
}

/// The settings of the TOML file at `path`, or of `settings` (JSON text), exactly one of the
/// two, read into `T`, with where they came from (the file, or `config`) for later errors.
pub fn read<T: DeserializeOwned>(
    path: Option<&str>,
    settings: Option<&str>,
) -> Result<(T, String), Failure> {
    match (path, settings) {
        (Some(path), None) => Ok((
            quench_support::load_toml(Path::new(path))
                .map_err(|error| Failure::Input(error.to_string()))?,
            path.to_string(),
        )),
        (None, Some(text)) => Ok((
            quench_support::config::from_json_settings(text)
                .map_err(|error| Failure::input("config", error))?,
            "config".to_string(),
        )),
        _ => Err(Failure::input(
            "config",
            "a TOML file's path or a dict of its settings, one of the two",
        )),
    }
}

/// Runs `work` with Ctrl-C honoured between its training epochs; returns its result and
/// whether a Ctrl-C came during the call. Python's pending signals are checked (the GIL taken
/// for a moment) on this thread, Python's: every 20 ms while a CPU run works in the runs'
/// pool, the request relayed to the run (`quench_support::interrupt::relayed`), else where the
/// run asks [`quench_support::interrupt::requested`]. The run stops at its next epoch
/// boundary, keeping every member's best weights so far and scored on them; a Ctrl-C after
/// its last epoch still reports `true` with the whole run's result.
pub fn between_epochs<T>(work: impl FnOnce() -> T) -> (T, bool) {
    quench_support::interrupt::checked(|| Python::attach(|py| py.check_signals().is_err()), work)
}
