//! The report for people: `report.md` and the terminal table, and the number formats both use.

use std::fmt::Write as _;

use quench_device::Precision;

use crate::peers::PeerReport;
use crate::report::{Report, RunStatus, VariantReport};

impl Report {
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
            RunStatus::Failed => {
                let _ = writeln!(
                    md,
                    "- status: failed (see the run's error); the variants finished before it"
                );
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
                "| variant | per iteration (median [min-max]) | per run | throughput | peak memory | quality | speed-up | claimed | parity | vs PyTorch |"
            );
            let _ = writeln!(md, "|---|---|---|---|---|---|---|---|---|---|");
            let peer = w.peer.as_ref().map(Row::of_peer);
            for row in w.variants.iter().map(Row::of).chain(peer) {
                let _ = writeln!(md, "| {} |", row.cells().join(" | "));
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
            let no_peer = w
                .peer_missing
                .iter()
                .map(|why| format!("- pytorch: not run: {why}"));
            let counted = w
                .variants
                .iter()
                .filter_map(|v| v.counts_line().map(|line| format!("- {}: {line}", v.name)));
            let notes: Vec<_> = notes
                .into_iter()
                .chain(counted)
                .chain(skipped)
                .chain(failed)
                .chain(no_peer)
                .collect();
            if !notes.is_empty() {
                let _ = writeln!(md, "\n{}", notes.join("\n"));
            }
            md.push('\n');
        }
        md
    }

    /// The terminal table: one line per variant, columns aligned, then the launch counts, the
    /// failures, the missing peers and where each workload's data came from.
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
            vs_pytorch: "vs PyTorch".into(),
        };
        let mut rows = vec![header];
        for w in &self.workloads {
            let peer = w.peer.as_ref().map(Row::of_peer);
            for mut row in w.variants.iter().map(Row::of).chain(peer) {
                row.name = format!("{}/{}", w.name, row.name);
                rows.push(row);
            }
        }
        let columns = Row::COLUMNS;
        let cells: Vec<[String; Row::COLUMNS]> = rows.into_iter().map(Row::cells).collect();
        let widths: Vec<usize> = (0..columns)
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
        for w in &self.workloads {
            for v in &w.variants {
                if let Some(line) = v.counts_line() {
                    let _ = writeln!(out, "{}/{}: {line}", w.name, v.name);
                }
            }
        }
        for failure in self.failures() {
            let _ = writeln!(out, "FAILED {failure}");
        }
        for w in &self.workloads {
            if let Some(why) = &w.peer_missing {
                let _ = writeln!(out, "{}/pytorch not run: {why}", w.name);
            }
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
    vs_pytorch: String,
}

impl Row {
    /// Cells in a row.
    const COLUMNS: usize = 10;

    /// The PyTorch peer's row: its time and quality.
    fn of_peer(p: &PeerReport) -> Self {
        Self {
            name: format!("pytorch [torch {}, {}]", p.torch, p.device),
            per_iteration: format!("{} /{}", seconds(p.per_iteration_s), p.iteration_unit),
            per_run: "-".into(),
            throughput: "-".into(),
            memory: "-".into(),
            quality: format!("{} {}", p.quality_metric, significant(p.quality)),
            speedup: "-".into(),
            claim: "-".into(),
            parity: "-".into(),
            vs_pytorch: "1x".into(),
        }
    }

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
            vs_pytorch: v.vs_pytorch.map_or("-".into(), |x| format!("{x:.2}x")),
        }
    }

    fn cells(self) -> [String; Row::COLUMNS] {
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
            self.vs_pytorch,
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
mod tests {
    use super::*;
    use crate::report::tests::sample_report;

    #[test]
    fn table_has_one_aligned_line_per_variant() {
        let table = sample_report().table();
        let lines: Vec<_> = table.lines().collect();
        assert_eq!(lines.len(), 5, "{table}");
        assert!(lines[1].starts_with("qrng-classifier/baseline"));
        assert!(lines[3].starts_with("qrng-classifier/pytorch [torch 2.15.0, cpu]"));
        assert_eq!(
            lines[4],
            "FAILED qrng-classifier/broken: quality NaN is not finite"
        );
        assert!(lines[1].contains("baseline") && lines[2].contains("4.00x"));
        // PyTorch's 0.5 s against the batched variant's 0.1 s.
        assert!(lines[2].trim_end().ends_with("5.00x"), "{}", lines[2]);
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
