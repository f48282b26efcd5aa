//! The `device` argument: parsed as the command-line tools parse `--device`, selected as they
//! select it (probing GPUs without panicking, `auto` falling back to the CPU).

use std::sync::{Mutex, PoisonError};

use quench_device::select::select;
use quench_kernels::{OnDevice, SelectedDevice, run_on};
use quench_platform::DeviceSpec;

use crate::errors::Failure;

/// Parses `text` (`auto`, `cpu`, `cuda`, `cuda:N`, `wgpu`, `wgpu:N`); a malformed string is
/// bad input naming the `device` argument. Done before the rest of the work so that a typo
/// fails fast.
pub fn parse(text: &str) -> Result<DeviceSpec, Failure> {
    text.parse::<DeviceSpec>()
        .map_err(|error| Failure::input("device", error))
}

/// The device `spec` names, opened and probed. A well-formed request this machine or build
/// cannot serve (`cuda` without the feature or without a GPU) is a device failure, a
/// `RuntimeError`: the string itself was right.
///
/// A successful selection is remembered for the life of the process: probing a GPU opens it
/// and runs a computation, which every call would otherwise repeat. Failures are not
/// remembered (a GPU may become free).
pub fn open(spec: DeviceSpec) -> Result<SelectedDevice, Failure> {
    static OPENED: Mutex<Vec<(DeviceSpec, SelectedDevice)>> = Mutex::new(Vec::new());
    // A panic while the lock was held cannot leave the list inconsistent (pushes only).
    let remembered = |opened: &[(DeviceSpec, SelectedDevice)]| {
        opened.iter().find(|(s, _)| *s == spec).map(|(_, d)| *d)
    };
    if let Some(device) = remembered(&OPENED.lock().unwrap_or_else(PoisonError::into_inner)) {
        return Ok(device);
    }
    let device = select(spec)
        .map(|selection| selection.device)
        .map_err(|error| Failure::Runtime(format!("device `{spec}`: {error}")))?;
    OPENED
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push((spec, device));
    Ok(device)
}

/// `task` run on `selected`, for a task whose own failures (a diverged run, say) are not the
/// caller's input: a failure of the backend or of the task is a runtime failure.
pub fn run<T, O, E>(selected: SelectedDevice, task: T) -> Result<O, Failure>
where
    T: OnDevice<Output = Result<O, E>>,
    E: std::fmt::Display,
{
    run_sorted(selected, task, |_| true)
}

/// `task` run on `selected`, for a task whose own failures are mostly the caller's settings
/// or data (a run too large for the host, data that cannot be windowed): those for which
/// `on_device` says no are bad input, the rest and a failure of the backend runtime failures.
pub fn run_sorted<T, O, E>(
    selected: SelectedDevice,
    task: T,
    on_device: impl Fn(&E) -> bool,
) -> Result<O, Failure>
where
    T: OnDevice<Output = Result<O, E>>,
    E: std::fmt::Display,
{
    run_on(selected, task)
        .map_err(|error| Failure::Runtime(error.to_string()))?
        .map_err(|error| {
            if on_device(&error) {
                Failure::Runtime(error.to_string())
            } else {
                Failure::Input(error.to_string())
            }
        })
}

/// The devices this build can use, as `device` strings (see `quench.devices`).
pub fn available() -> Vec<String> {
    let mut names = vec!["cpu".to_string()];
    if cfg!(feature = "cuda") {
        // Ordinals are dense: the first that does not open ends the list.
        names.extend(
            (0..)
                .map_while(|index| open(DeviceSpec::Cuda(Some(index))).ok())
                .map(|device| device.to_string()),
        );
    }
    // Empty in a build without the `wgpu` feature.
    names.extend(
        quench_platform::adapters::adapters()
            .iter()
            .map(|adapter| format!("wgpu:{}", adapter.index)),
    );
    names
}
