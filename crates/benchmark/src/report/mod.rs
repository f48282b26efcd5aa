//! The report of a suite run: what `report.json` holds (`docs/report-schema.md`). `render`
//! formats it for people, `plots` draws it, `output` writes it.

pub mod compare;
pub mod plots;
pub mod render;

use std::path::Path;

use crate::peers::PeerReport;
use anyhow::Context;
use quench_device::machine::MachineInfo;
use quench_device::memory::MemoryReading;
use quench_device::{Precision, TimingConfig};
use quench_support::Stats;
use serde::{Deserialize, Serialize};

use crate::workload::{Claim, Quality, RunPrecision};

/// Version of the `report.json` layout; documented in `docs/report-schema.md`.
pub const SCHEMA_VERSION: u32 = 2;

/// The largest `report.json` [`Report::read`] takes: a full suite's report is some tens of KiB.
pub const REPORT_LIMIT: u64 = 64 << 20;

/// The Burn version the workspace pins (`burn = "=0.21.0"`).
pub const BURN_VERSION: &str = "0.21.0";

/// Everything one run of a suite measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// Layout version of this document.
    pub schema: u32,
    /// Version of Quench that ran.
    pub quench_version: String,
    /// Version of Burn it was built with (pinned in the workspace manifest).
    pub burn_version: String,
    /// Git revision of the source tree, `unknown` outside a checkout.
    pub git_revision: String,
    /// When the run started, seconds since the Unix epoch.
    pub started_unix: u64,
    /// The suite file that was run.
    pub suite: String,
    /// Host and device.
    pub machine: MachineInfo,
    /// Why `auto` fell back to the CPU, if it did.
    pub fallback: Option<String>,
    /// The run's `--precision`.
    pub precision: RunPrecision,
    /// Warm-up and repeats of every variant.
    pub timing: TimingConfig,
    /// Whether the run finished; a report on disk is rewritten after every variant.
    #[serde(default)]
    pub status: RunStatus,
    /// The signal that stopped an interrupted run (`SIGINT`, `SIGTERM`, `SIGHUP`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped_by: Option<String>,
    /// One entry per workload run.
    pub workloads: Vec<WorkloadReport>,
}

/// How far a run got.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RunStatus {
    /// Still running: the report holds the variants finished so far.
    Running,
    /// Every selected variant was run (some may have failed: see each workload's `failed`).
    #[default]
    Complete,
    /// Stopped by a signal (Ctrl-C, SIGTERM, SIGHUP; `stopped_by` names it): the report holds
    /// the variants finished before it.
    Interrupted,
    /// Stopped by an error that is not one variant's (a rank lost, the output folder no
    /// longer writable): the report holds the variants finished before it.
    Failed,
}

impl RunStatus {
    /// Its name in `report.json`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Complete => "complete",
            Self::Interrupted => "interrupted",
            Self::Failed => "failed",
        }
    }
}

/// The variants of one workload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkloadReport {
    /// Registered name.
    pub name: String,
    /// What it computes.
    pub summary: String,
    /// Its measured variants, baseline first.
    pub variants: Vec<VariantReport>,
    /// Variants the device could not run, with the reason.
    pub unsupported: Vec<UnsupportedVariant>,
    /// Variants that failed (an error, or a quality that is not finite), with the message.
    #[serde(default)]
    pub failed: Vec<FailedVariant>,
    /// Its PyTorch peer's measurement, when the run asked for peers and one ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer: Option<PeerReport>,
    /// Why the run asked for a peer and has none (no peer written, no Python with torch, the
    /// peer failed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer_missing: Option<String>,
}

/// A variant that failed; the suite went on without it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FailedVariant {
    /// Variant name.
    pub name: String,
    /// What went wrong, with its causes.
    pub error: String,
}

/// A variant that was not run because the device cannot run it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UnsupportedVariant {
    /// Variant name.
    pub name: String,
    /// Why it could not run.
    pub reason: String,
}

/// One measured variant.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VariantReport {
    /// Variant name.
    pub name: String,
    /// What it changes.
    pub description: String,
    /// Whether it is the workload's baseline.
    pub baseline: bool,
    /// What one iteration is.
    pub iteration_unit: String,
    /// Seconds per iteration.
    pub per_iteration_s: Stats,
    /// Seconds per full run (per iteration times iterations per run).
    pub per_run_s: Stats,
    /// Work items per second at the median time.
    pub throughput: f64,
    /// Unit of `throughput`.
    pub throughput_unit: String,
    /// Peak memory during the variant, where it could be read.
    pub peak_memory: Option<MemoryReading>,
    /// The quality metric.
    pub quality: Option<Quality>,
    /// The training loss after the quality run's last step, the mean over its members
    /// (finite: a diverged run is a failed variant); absent for workloads that do not train.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub training_loss: Option<f64>,
    /// Baseline median time per iteration over this one's; `None` without a baseline.
    pub speedup: Option<f64>,
    /// What the guide claimed for this optimisation.
    pub claim: Option<Claim>,
    /// The precision its forward pass computed in.
    pub precision: Precision,
    /// Quality within tolerance of the baseline's; `None` where there is nothing to compare,
    /// or where this size cannot judge it (`parity_note` then says why).
    pub parity: Option<bool>,
    /// Why the variant is worse than the baseline (a loss of quality, or the design reason
    /// the workload gives), or why this size cannot judge its parity; absent at parity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parity_note: Option<String>,
    /// Remarks about this measurement.
    pub notes: Vec<String>,
    /// The PyTorch peer's time over this variant's, per iteration of the same unit (above 1:
    /// faster than PyTorch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vs_pytorch: Option<f64>,
    /// Each rank's share and time where the run was split over MPI ranks (empty in one
    /// process).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ranks: Vec<RankTiming>,
    /// Kernel launches per iteration, where they were counted (`run --count-launches` on a
    /// CubeCL device: wgpu, CUDA).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launches_per_iteration: Option<f64>,
    /// Device-to-host read-backs per iteration (every device; absent in reports from before
    /// they were counted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub readbacks_per_iteration: Option<f64>,
}

impl VariantReport {
    /// What one iteration costs the device besides arithmetic, where launches were counted:
    /// `per epoch: 1,234 kernel launches, 2 read-backs`.
    pub fn counts_line(&self) -> Option<String> {
        let launches = self.launches_per_iteration?;
        let readbacks = self.readbacks_per_iteration.unwrap_or(f64::NAN);
        Some(format!(
            "per {}: {} kernel launches, {} read-backs",
            self.iteration_unit,
            crate::numbers::significant(launches),
            crate::numbers::significant(readbacks)
        ))
    }
}

/// One rank's share of a variant split over the ranks of an MPI run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RankTiming {
    /// The rank.
    pub rank: usize,
    /// Members it ran.
    pub members: usize,
    /// Its median seconds per iteration.
    pub per_iteration_s: f64,
}

impl Report {
    /// Every failed variant as `workload/variant: error`.
    pub fn failures(&self) -> Vec<String> {
        self.workloads
            .iter()
            .flat_map(|w| {
                w.failed
                    .iter()
                    .map(move |f| format!("{}/{}: {}", w.name, f.name, f.error))
            })
            .collect()
    }

    /// Reads a `report.json`: a regular file of at most [`REPORT_LIMIT`] bytes (a leading
    /// UTF-8 byte-order mark is skipped), of a schema this benchmark knows, whose every time
    /// is positive and finite; anything else is an error naming the file and what is wrong.
    pub fn read(path: &Path) -> anyhow::Result<Self> {
        let text = quench_support::files::read_text_bounded(path, REPORT_LIMIT)
            .with_context(|| format!("cannot read report {}", path.display()))?;
        let text = text.strip_prefix('\u{feff}').unwrap_or(&text);
        let report: Self = serde_json::from_str(text)
            .with_context(|| format!("invalid report {}", path.display()))?;
        report
            .check()
            .map_err(|why| anyhow::anyhow!("invalid report {}: {why}", path.display()))?;
        Ok(report)
    }

    /// What makes this report unreadable as one: a schema newer than this benchmark's, a
    /// time that is not positive and finite, or times summarised from no timed run.
    fn check(&self) -> Result<(), String> {
        if self.schema == 0 || self.schema > SCHEMA_VERSION {
            return Err(format!(
                "schema {} (this benchmark reads versions 1 to {SCHEMA_VERSION})",
                self.schema
            ));
        }
        for w in &self.workloads {
            for v in &w.variants {
                for (what, stats) in [
                    ("per_iteration_s", &v.per_iteration_s),
                    ("per_run_s", &v.per_run_s),
                ] {
                    if stats.count == 0 {
                        return Err(format!(
                            "{}/{}: {what}.count = 0, times of no timed run",
                            w.name, v.name
                        ));
                    }
                    let t = stats.median;
                    if !(t.is_finite() && t > 0.0) {
                        return Err(format!(
                            "{}/{}: {what}.median = {}, not a positive time",
                            w.name,
                            v.name,
                            quench_support::numbers::short(t)
                        ));
                    }
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::workload::Tolerance;
    use quench_kernels::SelectedDevice;

    fn stats(x: f64) -> Stats {
        Stats::from_samples(&[x, x * 1.1, x * 0.9]).unwrap()
    }

    pub fn sample_report() -> Report {
        let variant = |name: &str, t: f64, baseline: bool| VariantReport {
            name: name.into(),
            description: "d".into(),
            baseline,
            iteration_unit: "epoch".into(),
            per_iteration_s: stats(t),
            per_run_s: stats(t * 10.0),
            throughput: 1.0 / t,
            throughput_unit: "epochs/s".into(),
            peak_memory: None,
            quality: Some(Quality {
                metric: "accuracy".into(),
                value: 0.57,
                higher_is_better: true,
                tolerance: Tolerance::Absolute(0.015),
                chance: None,
                caveat: None,
            }),
            speedup: (!baseline).then_some(4.0),
            claim: (!baseline).then_some(Claim {
                low: 6.0,
                high: 15.0,
            }),
            parity: (!baseline).then_some(true),
            parity_note: None,
            training_loss: Some(0.7),
            precision: Precision::F32,
            notes: vec![],
            vs_pytorch: Some(0.5 / t),
            ranks: Vec::new(),
            launches_per_iteration: None,
            readbacks_per_iteration: None,
        };
        Report {
            schema: SCHEMA_VERSION,
            quench_version: "0.1.0".into(),
            burn_version: BURN_VERSION.into(),
            git_revision: "abc".into(),
            started_unix: 0,
            suite: "configs/quick.toml".into(),
            machine: MachineInfo::read(SelectedDevice::Cpu),
            fallback: Some("no GPU; using the CPU".into()),
            precision: RunPrecision::Auto,
            timing: TimingConfig::default(),
            status: RunStatus::Complete,
            stopped_by: None,
            workloads: vec![WorkloadReport {
                name: "qrng-classifier".into(),
                summary: "s".into(),
                variants: vec![
                    variant("baseline", 0.4, true),
                    variant("batched", 0.1, false),
                ],
                unsupported: vec![UnsupportedVariant {
                    name: "bf16".into(),
                    reason: "no bf16 on ndarray".into(),
                }],
                peer: Some(PeerReport {
                    python: "python3".into(),
                    torch: "2.15.0".into(),
                    device: "cpu".into(),
                    per_iteration_s: 0.5,
                    iteration_unit: "epoch".into(),
                    quality_metric: "mean test accuracy".into(),
                    quality: 0.47,
                }),
                peer_missing: None,
                failed: vec![FailedVariant {
                    name: "broken".into(),
                    error: "quality NaN is not finite".into(),
                }],
            }],
        }
    }

    #[test]
    fn failures_name_workload_and_variant() {
        assert_eq!(
            sample_report().failures(),
            ["qrng-classifier/broken: quality NaN is not finite"]
        );
    }
}
