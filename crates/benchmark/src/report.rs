//! The report of a suite run: `report.json`, `report.md` and the terminal table.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::Context;
use quench_device::files::write_atomically;
use quench_device::machine::MachineInfo;
use quench_device::memory::MemoryReading;
use quench_device::{Precision, Stats, TimingConfig};
use serde::{Deserialize, Serialize};

use crate::workload::{Claim, Quality, RunPrecision};

/// Version of the `report.json` layout; documented in `docs/report-schema.md`.
pub const SCHEMA_VERSION: u32 = 2;

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
    /// Stopped by Ctrl-C: the report holds the variants finished before it.
    Interrupted,
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
    /// Baseline median time per iteration over this one's; `None` without a baseline.
    pub speedup: Option<f64>,
    /// What the guide claimed for this optimisation.
    pub claim: Option<Claim>,
    /// The precision its forward pass computed in.
    pub precision: Precision,
    /// Quality within tolerance of the baseline's; `None` where there is nothing to compare.
    pub parity: Option<bool>,
    /// Remarks about this measurement.
    pub notes: Vec<String>,
}

impl Report {
    /// Writes `report.json`, `report.md` and the SVG plots into `dir`, creating it; the reports
    /// are written to a temporary name first and renamed, so an interrupted run leaves no
    /// half-written report.
    pub fn write(&self, dir: &Path) -> anyhow::Result<()> {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("cannot create output folder {}", dir.display()))?;
        let json = serde_json::to_string_pretty(self).context("cannot serialise the report")?;
        for (name, text) in [("report.json", json), ("report.md", self.markdown())] {
            let path = dir.join(name);
            write_atomically(&path, text.as_bytes())
                .with_context(|| format!("cannot write {}", path.display()))?;
        }
        crate::plots::write_plots(&self.workloads, dir)?;
        Ok(())
    }

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

    /// Reads a `report.json`.
    pub fn read(path: &Path) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read report {}", path.display()))?;
        serde_json::from_str(&text).with_context(|| format!("invalid report {}", path.display()))
    }

    /// The report as Markdown: the machine, then one table per workload.
    pub fn markdown(&self) -> String {
        let mut md = String::new();
        let m = &self.machine;
        let _ = writeln!(md, "# Quench benchmark report\n");
        let _ = writeln!(
            md,
            "- machine: {} ({} cores); device {} = {} (backend {})",
            m.cpu_model, m.cores, m.device, m.device_name, m.backend
        );
        if let Some(why) = &self.fallback {
            let _ = writeln!(md, "- fallback: {why}");
        }
        match self.status {
            RunStatus::Complete => {}
            RunStatus::Running => {
                let _ = writeln!(md, "- status: running; the variants finished so far");
            }
            RunStatus::Interrupted => {
                let _ = writeln!(md, "- status: interrupted; the variants finished before it");
            }
        }
        let _ = writeln!(
            md,
            "- precision {}; warm-up {}, repeats {}; suite `{}`; quench {} at {}, burn {}\n",
            self.precision,
            self.timing.warmup,
            self.timing.repeats,
            self.suite,
            self.quench_version,
            self.git_revision,
            self.burn_version
        );
        for w in &self.workloads {
            let _ = writeln!(md, "## {}\n\n{}\n", w.name, w.summary);
            let _ = writeln!(
                md,
                "| variant | per iteration (median [min-max]) | per run | throughput | peak memory | quality | speed-up | claimed | parity |"
            );
            let _ = writeln!(md, "|---|---|---|---|---|---|---|---|---|");
            for v in &w.variants {
                let row = Row::of(v);
                let _ = writeln!(
                    md,
                    "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                    row.name,
                    row.per_iteration,
                    row.per_run,
                    row.throughput,
                    row.memory,
                    row.quality,
                    row.speedup,
                    row.claim,
                    row.parity
                );
            }
            let notes: Vec<_> = w
                .variants
                .iter()
                .flat_map(|v| v.notes.iter().map(move |n| format!("- {}: {n}", v.name)))
                .collect();
            let skipped = w
                .unsupported
                .iter()
                .map(|u| format!("- {}: not run: {}", u.name, u.reason));
            let failed = w
                .failed
                .iter()
                .map(|f| format!("- {}: FAILED: {}", f.name, f.error));
            let notes: Vec<_> = notes.into_iter().chain(skipped).chain(failed).collect();
            if !notes.is_empty() {
                let _ = writeln!(md, "\n{}", notes.join("\n"));
            }
            md.push('\n');
        }
        md
    }

    /// The terminal table: one line per variant, columns aligned.
    pub fn table(&self) -> String {
        let header = Row {
            name: "workload/variant".into(),
            per_iteration: "per iteration".into(),
            per_run: "per run".into(),
            throughput: "throughput".into(),
            memory: "peak mem".into(),
            quality: "quality".into(),
            speedup: "speed-up".into(),
            claim: "claimed".into(),
            parity: "parity".into(),
        };
        let mut rows = vec![header];
        for w in &self.workloads {
            for v in &w.variants {
                let mut row = Row::of(v);
                row.name = format!("{}/{}", w.name, v.name);
                rows.push(row);
            }
        }
        let cells: Vec<[String; 9]> = rows.into_iter().map(Row::cells).collect();
        let widths: Vec<usize> = (0..9)
            .map(|c| {
                cells
                    .iter()
                    .map(|r| r[c].chars().count())
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let mut out = String::new();
        for row in &cells {
            let line: Vec<String> = row
                .iter()
                .zip(&widths)
                .map(|(cell, &w)| format!("{cell:<w$}"))
                .collect();
            let _ = writeln!(out, "{}", line.join("  ").trim_end());
        }
        for failure in self.failures() {
            let _ = writeln!(out, "FAILED {failure}");
        }
        // Where each workload's data came from, so a stand-in is never mistaken for the data set.
        for w in &self.workloads {
            let mut sources: Vec<&str> = w
                .variants
                .iter()
                .flat_map(|v| &v.notes)
                .filter_map(|n| n.strip_prefix("data: "))
                .collect();
            sources.dedup();
            for source in sources {
                let _ = writeln!(out, "{} data: {source}", w.name);
            }
        }
        out
    }
}

/// One variant's cells, formatted for people.
struct Row {
    name: String,
    per_iteration: String,
    per_run: String,
    throughput: String,
    memory: String,
    quality: String,
    speedup: String,
    claim: String,
    parity: String,
}

impl Row {
    fn of(v: &VariantReport) -> Self {
        let s = &v.per_iteration_s;
        Self {
            name: if v.precision == Precision::F32 {
                v.name.clone()
            } else {
                format!("{} [{}]", v.name, v.precision)
            },
            per_iteration: format!(
                "{} [{}-{}] /{}",
                seconds(s.median),
                seconds(s.min),
                seconds(s.max),
                v.iteration_unit
            ),
            per_run: seconds(v.per_run_s.median),
            throughput: format!("{} {}", significant(v.throughput), v.throughput_unit),
            memory: v.peak_memory.map_or("-".into(), |m| {
                format!("{:.0} MiB", m.bytes as f64 / 1048576.0)
            }),
            quality: v.quality.as_ref().map_or("-".into(), |q| {
                format!("{} {}", q.metric, significant(q.value))
            }),
            speedup: match (v.baseline, v.speedup) {
                (true, _) => "baseline".into(),
                (false, Some(x)) => format!("{x:.2}x"),
                (false, None) => "-".into(),
            },
            claim: v.claim.map_or("-".into(), |c| {
                format!("{}-{}x", significant(c.low), significant(c.high))
            }),
            parity: match v.parity {
                Some(true) => "ok".into(),
                Some(false) => "WORSE".into(),
                None => "-".into(),
            },
        }
    }

    fn cells(self) -> [String; 9] {
        [
            self.name,
            self.per_iteration,
            self.per_run,
            self.throughput,
            self.memory,
            self.quality,
            self.speedup,
            self.claim,
            self.parity,
        ]
    }
}

/// A duration with a unit that keeps three significant figures readable.
pub fn seconds(s: f64) -> String {
    if !s.is_finite() {
        return "-".into();
    }
    let a = s.abs();
    if a >= 1.0 {
        format!("{s:.3} s")
    } else if a >= 1e-3 {
        format!("{:.3} ms", s * 1e3)
    } else {
        format!("{:.3} us", s * 1e6)
    }
}

/// A number with about four significant figures, in plain or scientific notation.
pub fn significant(x: f64) -> String {
    let a = x.abs();
    if x == 0.0 {
        "0".into()
    } else if (1e-3..1e6).contains(&a) {
        let decimals = (3 - a.log10().floor() as i32).clamp(0, 6) as usize;
        format!("{x:.decimals$}")
    } else {
        format!("{x:.3e}")
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::workload::Tolerance;
    use quench_device::SelectedDevice;

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
            }),
            speedup: (!baseline).then_some(4.0),
            claim: (!baseline).then_some(Claim {
                low: 6.0,
                high: 15.0,
            }),
            parity: (!baseline).then_some(true),
            precision: Precision::F32,
            notes: vec![],
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
                failed: vec![FailedVariant {
                    name: "broken".into(),
                    error: "quality NaN is not finite".into(),
                }],
            }],
        }
    }

    #[test]
    fn json_round_trips_through_files() {
        let dir = std::env::temp_dir().join(format!("quench-report-{}", std::process::id()));
        let report = sample_report();
        report.write(&dir).unwrap();
        assert_eq!(Report::read(&dir.join("report.json")).unwrap(), report);
        let md = std::fs::read_to_string(dir.join("report.md")).unwrap();
        assert!(
            md.contains("| batched | 100.000 ms [90.000 ms-110.000 ms] /epoch"),
            "{md}"
        );
        assert!(md.contains("4.00x") && md.contains("6.000-15.00x"), "{md}");
        assert!(md.contains("- bf16: not run: no bf16 on ndarray"), "{md}");
        assert!(
            md.contains("- broken: FAILED: quality NaN is not finite"),
            "{md}"
        );
        assert_eq!(
            std::fs::read_dir(&dir)
                .unwrap()
                .filter(|e| e
                    .as_ref()
                    .unwrap()
                    .path()
                    .extension()
                    .is_some_and(|x| x == "tmp"))
                .count(),
            0,
            "no temporary file is left"
        );
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn table_has_one_aligned_line_per_variant() {
        let table = sample_report().table();
        let lines: Vec<_> = table.lines().collect();
        assert_eq!(lines.len(), 4, "{table}");
        assert!(lines[1].starts_with("qrng-classifier/baseline"));
        assert_eq!(
            lines[3],
            "FAILED qrng-classifier/broken: quality NaN is not finite"
        );
        assert!(lines[1].contains("baseline") && lines[2].contains("4.00x"));
        let col = lines[0].find("per iteration").unwrap();
        assert_eq!(lines[2].find("100.000 ms"), Some(col));
    }

    #[test]
    fn numbers_are_formatted_readably() {
        assert_eq!(seconds(2.5), "2.500 s");
        assert_eq!(seconds(0.0125), "12.500 ms");
        assert_eq!(seconds(3e-6), "3.000 us");
        assert_eq!(significant(1234.5678), "1235");
        assert_eq!(significant(0.57), "0.5700");
        assert_eq!(significant(1e-7), "1.000e-7");
    }
}
