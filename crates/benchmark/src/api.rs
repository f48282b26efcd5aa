//! The benchmark called from a program rather than a shell (the Python package's
//! `quench.bench.run` and `quench.doctor`): a suite run that hands its report back as JSON and
//! can be stopped between variants, and the doctor's figures as values. The command line's
//! signal handling is not installed here: the caller owns the process and its signals.

use std::path::PathBuf;

use quench_device::diagnostics::DiagnosticsConfig;
use quench_device::{DeviceError, select_announced};
use quench_platform::DeviceSpec;
use quench_scale::World;

use crate::error_line::one_line;
use crate::report::RunStatus;
use crate::run::output::Output;
use crate::run::{RunRequest, run_suite};
use crate::workload::RunPrecision;

pub use crate::checks::doctor::Doctor;

/// What went wrong, sorted as a caller reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// The request itself: a suite file that cannot be read or is invalid, an unknown
    /// workload or variant, a precision that does not parse, an output folder that cannot be
    /// used. The message names the file, field or value.
    Input(String),
    /// The device named cannot be used or failed (a GPU absent, a precision it cannot run).
    Device(String),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Input(message) | Self::Device(message) => f.write_str(message),
        }
    }
}

impl std::error::Error for Failure {}

/// A device or precision that cannot be used is the device's (as the command line's exit
/// status 2 says); anything else stopping a run before or between its variants (the suite,
/// its selections and counts, the output folder) is the request's.
fn sorted(err: &anyhow::Error) -> Failure {
    let message = one_line(err);
    let unusable = |cause: &(dyn std::error::Error + 'static)| {
        cause
            .downcast_ref::<DeviceError>()
            .is_some_and(DeviceError::is_unusable_device)
    };
    if err.chain().any(unusable) {
        Failure::Device(message)
    } else {
        Failure::Input(message)
    }
}

/// A suite run as `benchmark run` takes it.
#[derive(Debug, Clone, Default)]
pub struct SuiteRun {
    /// The suite file (`None`: `configs/quick.toml` in the working folder).
    pub suite: Option<PathBuf>,
    /// Only these workloads.
    pub only: Option<Vec<String>>,
    /// Only the variants of these names (`--variants`).
    pub variants: Option<Vec<String>>,
    /// The device, as `--device` names it.
    pub device: DeviceSpec,
    /// `--precision` (`auto`, `f32`, `tf32`, `bf16`, `f16`; `None`: `auto`).
    pub precision: Option<String>,
    /// Timed repeats of every variant (`None`: the suite's).
    pub repeats: Option<usize>,
    /// Where report.json, report.md and the plots are written after every variant (`None`:
    /// nowhere; the report is only returned).
    pub out: Option<PathBuf>,
    /// Run each workload's PyTorch peer with this Python (`Some(None)`: the first of
    /// `$QUENCH_PYTHON`, python3, python that imports torch; where none does, the report says
    /// so and the run goes on). A named Python that cannot import torch is refused.
    pub peers: Option<Option<PathBuf>>,
}

/// How a suite run ended.
#[derive(Debug, Clone)]
pub enum Ended {
    /// Every selected variant ran (some may have failed: the report's `failed` lists say).
    Complete(serde_json::Value),
    /// `stop` asked to stop: the report holds the variants that finished, marked
    /// `interrupted`.
    Stopped(serde_json::Value),
}

/// Marks the kept report of a run that `stop` ended.
#[derive(Debug)]
struct StopAsked;

impl std::fmt::Display for StopAsked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("stopped by the caller")
    }
}

impl std::error::Error for StopAsked {}

/// Runs `request` in this process; `stop` is asked after every variant and peer, and a `true`
/// ends the run there, what finished kept. The report is `report.json`'s content.
///
/// # Errors
/// [`Failure::Input`] for a request that cannot run (refused before any work, or an output
/// folder that fails while the run goes on); [`Failure::Device`] for a device that cannot be
/// used.
pub fn run(request: &SuiteRun, stop: &mut dyn FnMut() -> bool) -> Result<Ended, Failure> {
    let precision: RunPrecision = request
        .precision
        .as_deref()
        .unwrap_or("auto")
        .parse()
        .map_err(|err| Failure::Input(format!("precision: {err}")))?;
    let selection =
        select_announced(request.device).map_err(|err| sorted(&anyhow::Error::from(err)))?;
    let precision = precision
        .check_on(selection.device)
        .map_err(|err| sorted(&anyhow::Error::from(err)))?;
    let suite_path = request
        .suite
        .clone()
        .unwrap_or_else(crate::run::suite::default_suite_path);
    let output = request
        .out
        .as_deref()
        .map(Output::new)
        .transpose()
        .map_err(|err| sorted(&err))?;
    // Without an output folder the peers' input files live as long as this call.
    let scratch = tempfile::tempdir().map_err(|err| {
        Failure::Input(format!("a temporary folder for the peers' inputs: {err}"))
    })?;
    let peer_inputs = request
        .out
        .as_deref()
        .unwrap_or(scratch.path())
        .join("peer-inputs");
    let world = World::alone();
    let peers = match &request.peers {
        None => None,
        Some(python) => {
            let found =
                crate::peers::find_python(python.as_deref(), crate::peers::DEFAULT_PEER_TIMEOUT);
            // A Python the caller named that cannot run the peers is the caller's to fix; one
            // looked for is recorded as missing and the run goes on, as on the command line.
            if let (Some(path), Err(why)) = (python, &found) {
                return Err(Failure::Input(format!("python {}: {why}", path.display())));
            }
            Some(found)
        }
    };
    let mut stopped: Option<crate::report::Report> = None;
    let mut keep = |report: &crate::report::Report| -> anyhow::Result<()> {
        if stopped.is_some() {
            // The run is unwinding after a stop: the interrupted report stands.
            return Ok(());
        }
        if let Some(output) = &output {
            output.keep(report)?;
        }
        if report.status == RunStatus::Running && stop() {
            let mut last = report.clone();
            last.status = RunStatus::Interrupted;
            last.stopped_by = Some("the caller".into());
            if let Some(output) = &output {
                output.keep(&last)?;
            }
            stopped = Some(last);
            return Err(StopAsked.into());
        }
        Ok(())
    };
    let outcome = run_suite(
        &RunRequest {
            suite_path: &suite_path,
            only: request.only.clone(),
            variants: request.variants.clone(),
            selection,
            precision,
            repeats: request.repeats,
            peers,
            peer_inputs,
            world: &world,
        },
        &mut keep,
    );
    let json = |report: &crate::report::Report| {
        serde_json::to_value(report)
            .map_err(|err| Failure::Input(format!("the report as JSON: {err}")))
    };
    match (outcome, stopped) {
        (_, Some(report)) => Ok(Ended::Stopped(json(&report)?)),
        (Ok(report), None) => {
            if let Some(output) = &output {
                output.keep(&report).map_err(|err| sorted(&err))?;
            }
            Ok(Ended::Complete(json(&report)?))
        }
        (Err(err), None) => {
            if let Some(output) = output {
                output.remove_if_unused();
            }
            Err(sorted(&err))
        }
    }
}

/// The doctor's figures for `device` (what `benchmark doctor` prints, and its values).
///
/// # Errors
/// [`Failure::Device`] when the device cannot be used or a measurement fails on it.
pub fn doctor(device: DeviceSpec) -> Result<Doctor, Failure> {
    let selection = select_announced(device).map_err(|err| Failure::Device(err.to_string()))?;
    crate::checks::doctor::doctor(&selection, DiagnosticsConfig::default())
        .map_err(|err| Failure::Device(one_line(&err)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn devices_suite(only: &[&str]) -> SuiteRun {
        SuiteRun {
            suite: Some(PathBuf::from(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../../configs/devices.toml"
            ))),
            only: Some(only.iter().map(|s| (*s).to_string()).collect()),
            device: DeviceSpec::Cpu,
            repeats: Some(1),
            ..SuiteRun::default()
        }
    }

    #[test]
    fn a_run_asked_to_stop_after_its_first_variant_keeps_it_and_says_so() {
        let out = tempfile::tempdir().unwrap();
        let request = SuiteRun {
            out: Some(out.path().join("run")),
            ..devices_suite(&["qrng-gan", "sgld"])
        };
        // Asked before the first workload and after each variant: stop at the second ask.
        let mut asked = 0;
        let ended = run(&request, &mut || {
            asked += 1;
            asked == 2
        })
        .unwrap();
        let Ended::Stopped(report) = ended else {
            panic!("the run did not stop: {ended:?}")
        };
        assert_eq!(report["status"], "interrupted");
        let workloads = report["workloads"].as_array().unwrap();
        assert_eq!(workloads.len(), 1, "{report}");
        assert_eq!(workloads[0]["variants"].as_array().unwrap().len(), 1);
        let written: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(out.path().join("run/report.json")).unwrap(),
        )
        .unwrap();
        assert_eq!(written, report);
    }

    #[test]
    fn refusals_are_sorted_for_the_caller() {
        let unknown = run(&devices_suite(&["no-such-workload"]), &mut || false).unwrap_err();
        assert!(
            matches!(&unknown, Failure::Input(m) if m.contains("no-such-workload")),
            "{unknown:?}"
        );
        let precision = SuiteRun {
            precision: Some("f99".into()),
            ..devices_suite(&["sgld"])
        };
        let refused = run(&precision, &mut || false).unwrap_err();
        assert!(
            matches!(&refused, Failure::Input(m) if m.contains("f99")),
            "{refused:?}"
        );
        let bf16 = SuiteRun {
            precision: Some("bf16".into()),
            ..devices_suite(&["sgld"])
        };
        let refused = run(&bf16, &mut || false).unwrap_err();
        assert!(matches!(refused, Failure::Device(_)), "{refused:?}");
    }
}
