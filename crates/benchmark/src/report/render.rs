//! The report for people: `report.md` and the terminal table.

use std::fmt::Write as _;

use quench_device::Precision;

use crate::numbers::{factor, seconds, significant};
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
                let by = self
                    .stopped_by
                    .as_ref()
                    .map_or(String::new(), |signal| format!(" by {signal}"));
                let _ = writeln!(
                    md,
                    "- status: interrupted{by}; the variants finished before it"
                );
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
                .flat_map(|v| {
                    let parity = v
                        .parity_note
                        .iter()
                        .map(|n| format!("- {}: parity {n}", v.name));
                    parity.chain(v.notes.iter().map(move |n| format!("- {}: {n}", v.name)))
                })
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

    /// The terminal report, within [`TERMINAL_WIDTH`] columns: per workload a line naming
    /// the unit of time and the quality metric, then one line per variant (time per iteration,
    /// speed-up, claimed, quality, parity verdict, against PyTorch), footnotes with the reason
    /// of every verdict other than parity; then the launch counts, the failures, the missing
    /// peers and where each workload's data came from. [`Report::wide_table`] has every column.
    pub fn table(&self) -> String {
        let header: [String; 7] = [
            "workload / variant",
            "time",
            "speed-up",
            "claimed",
            "quality",
            "parity",
            "vs PyTorch",
        ]
        .map(String::from);
        // Per workload: its title line, its rows, and the notes its verdicts point to.
        let mut groups: Vec<(String, Vec<[String; 7]>, Vec<String>)> = Vec::new();
        let mut numbered = 0;
        for w in &self.workloads {
            let unit = w.variants.first().map(|v| v.iteration_unit.as_str());
            let metric = w.variants.iter().find_map(|v| v.quality.as_ref());
            let mut title = w.name.clone();
            if let Some(unit) = unit {
                let _ = write!(title, ": time per {unit}");
            }
            if let Some(q) = metric {
                let better = if q.higher_is_better {
                    "higher"
                } else {
                    "lower"
                };
                let _ = write!(title, "; quality: {} ({better} is better)", q.metric);
            }
            let timed = |s: f64, of: &str| match unit {
                Some(unit) if unit == of => seconds(s),
                _ => format!("{} /{of}", seconds(s)),
            };
            let mut rows = Vec::new();
            let mut notes = Vec::new();
            for v in &w.variants {
                let quality = v.quality.as_ref().map_or("-".into(), |q| {
                    if metric.is_some_and(|m| m.metric == q.metric) {
                        significant(q.value)
                    } else {
                        format!("{} {}", q.metric, significant(q.value))
                    }
                });
                // The cells both tables share, as the wide table formats them.
                let mut cells = Row::of(v);
                if let Some(note) = &v.parity_note {
                    numbered += 1;
                    let _ = write!(cells.parity, " [{numbered}]");
                    notes.push(format!("[{numbered}] {}: {note}", v.name));
                }
                rows.push([
                    format!("  {}", clipped(&cells.name, NAME_WIDTH)),
                    timed(v.per_iteration_s.median, &v.iteration_unit),
                    cells.speedup,
                    v.claim.map_or("-".into(), |c| {
                        format!("{}-{}x", factor(c.low), factor(c.high))
                    }),
                    quality,
                    cells.parity,
                    cells.vs_pytorch,
                ]);
            }
            if let Some(p) = &w.peer {
                rows.push([
                    format!("  pytorch [{}]", p.device),
                    timed(p.per_iteration_s, &p.iteration_unit),
                    "-".into(),
                    "-".into(),
                    significant(p.quality),
                    "-".into(),
                    "1x".into(),
                ]);
            }
            groups.push((title, rows, notes));
        }
        // A time with its own unit (a workload whose variants differ in unit, as `device`'s)
        // overflows its column on its own line rather than widening every line.
        let caps = [
            NAME_WIDTH + 2,
            TIME_WIDTH,
            usize::MAX,
            usize::MAX,
            usize::MAX,
            usize::MAX,
            usize::MAX,
        ];
        let widths: Vec<usize> = (0..header.len())
            .map(|c| {
                std::iter::once(&header)
                    .chain(groups.iter().flat_map(|(_, rows, _)| rows))
                    .map(|r| r[c].chars().count())
                    .max()
                    .unwrap_or(0)
                    .min(caps[c])
            })
            .collect();
        // The PyTorch column only where a peer ran.
        let columns = if self
            .workloads
            .iter()
            .any(|w| w.peer.is_some() || w.variants.iter().any(|v| v.vs_pytorch.is_some()))
        {
            header.len()
        } else {
            header.len() - 1
        };
        let line = |row: &[String; 7]| {
            let cells: Vec<String> = row[..columns]
                .iter()
                .zip(&widths)
                .map(|(cell, &w)| format!("{cell:<w$}"))
                .collect();
            let mut text = fitted(cells.join("  ").trim_end());
            text.push('\n');
            text
        };
        let mut out = line(&header);
        for (title, rows, notes) in &groups {
            out.push_str(&wrapped(title, "    "));
            for row in rows {
                out.push_str(&line(row));
            }
            for note in notes {
                out.push_str(&wrapped(&format!("  {note}"), "      "));
            }
        }
        out.push_str(&self.table_tail());
        out
    }

    /// The terminal table with every column of `report.md` (`benchmark run --wide`): one line
    /// per variant, columns aligned, then the launch counts, the failures, the missing peers
    /// and where each workload's data came from.
    pub fn wide_table(&self) -> String {
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
        out.push_str(&self.table_tail());
        out
    }

    /// What both terminal tables end with, each line within [`TERMINAL_WIDTH`]: the launch
    /// counts, the failures, the missing peers and where each workload's data came from.
    fn table_tail(&self) -> String {
        let mut out = String::new();
        for w in &self.workloads {
            for v in &w.variants {
                if let Some(line) = v.counts_line() {
                    out.push_str(&wrapped(&format!("{}/{}: {line}", w.name, v.name), "    "));
                }
            }
        }
        for failure in self.failures() {
            out.push_str(&wrapped(&format!("FAILED {failure}"), "    "));
        }
        for w in &self.workloads {
            if let Some(why) = &w.peer_missing {
                out.push_str(&wrapped(
                    &format!("{}/pytorch not run: {why}", w.name),
                    "    ",
                ));
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
                out.push_str(&wrapped(&format!("{} data: {source}", w.name), "    "));
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
            parity: match (v.parity, &v.parity_note) {
                (Some(true), _) => "ok".into(),
                (Some(false), _) => "WORSE".into(),
                (None, Some(_)) => "not judged".into(),
                (None, None) => "-".into(),
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

/// The columns the terminal report keeps to without `--wide`.
pub const TERMINAL_WIDTH: usize = 100;

/// `text` as lines within [`TERMINAL_WIDTH`], broken between words, its own leading spaces
/// kept on the first line and every later line starting with `indent`; a word longer than a
/// line (a path) is cut across lines.
fn wrapped(text: &str, indent: &str) -> String {
    let body = text.trim_start_matches(' ');
    let mut line = text[..text.len() - body.len()].to_string();
    let mut out = String::new();
    for word in body.split(' ') {
        let started = !line.trim().is_empty();
        if started && line.chars().count() + 1 + word.chars().count() > TERMINAL_WIDTH {
            out.push_str(line.trim_end());
            out.push('\n');
            line = indent.to_string();
        } else if started {
            line.push(' ');
        }
        for c in word.chars() {
            if line.chars().count() == TERMINAL_WIDTH {
                out.push_str(&line);
                out.push('\n');
                line = indent.to_string();
            }
            line.push(c);
        }
    }
    out.push_str(line.trim_end());
    out.push('\n');
    out
}

/// The widest variant name the compact table shows whole; a longer one is cut (its footnote,
/// `--wide` and report.md give it whole), so that the other columns stay on the line.
const NAME_WIDTH: usize = 30;

/// The time column's width: a median and its unit prefix (`123.456 ms`).
const TIME_WIDTH: usize = 10;

/// `text` cut to `width` characters, ending in `~` where something was cut.
fn clipped(text: &str, width: usize) -> String {
    if text.chars().count() <= width {
        return text.to_string();
    }
    let mut cut: String = text.chars().take(width - 1).collect();
    cut.push('~');
    cut
}

/// A table line cut to [`TERMINAL_WIDTH`], ending in `~` where something was cut (`--wide`
/// and report.md have all of it).
fn fitted(line: &str) -> String {
    clipped(line, TERMINAL_WIDTH)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::tests::sample_report;

    #[test]
    fn the_terminal_report_fits_100_columns_and_footnotes_every_verdict() {
        let mut report = sample_report();
        let w = &mut report.workloads[0];
        w.variants[1].name = "a-variant-with-a-long-name-for-the-table".into();
        w.variants[1].parity = None;
        w.variants[1].parity_note = Some(format!(
            "not judged at this size: batch 128 takes 16x fewer optimiser steps {}",
            "and so on ".repeat(20)
        ));
        w.variants[0]
            .notes
            .push(format!("data: {}", "/a/long/path".repeat(20)));
        w.failed[0].error = "x".repeat(300);
        let table = report.table();
        for line in table.lines() {
            assert!(line.chars().count() <= TERMINAL_WIDTH, "{line}");
        }
        let lines: Vec<_> = table.lines().collect();
        assert!(lines[0].starts_with("workload / variant"), "{table}");
        assert!(
            lines[1].starts_with("qrng-classifier: time per epoch; quality: accuracy"),
            "{table}"
        );
        assert!(lines[2].starts_with("  baseline") && lines[2].contains("baseline"));
        assert!(lines[3].contains("4.00x") && lines[3].contains("6-15x"));
        // The long name is cut, not the columns after it.
        assert!(
            lines[3].starts_with("  a-variant-with-a-long-name-fo~")
                && lines[3].contains("not judged [1]")
                && lines[3].trim_end().ends_with("5.00x"),
            "{}",
            lines[3]
        );
        assert!(lines[4].starts_with("  pytorch [cpu]"), "{table}");
        assert!(lines[5].starts_with(
            "  [1] a-variant-with-a-long-name-for-the-table: not judged at this size"
        ));
        assert!(lines[6].starts_with("      "), "{table}");
        // A word longer than a line goes on lines of its own, cut across them.
        assert!(
            table.contains("FAILED qrng-classifier/broken:\n    xxx"),
            "{table}"
        );
        let cut: usize = table
            .split("FAILED qrng-classifier/broken:\n")
            .nth(1)
            .unwrap_or_default()
            .lines()
            .take_while(|l| l.starts_with("    x"))
            .map(|l| l.trim().len())
            .sum();
        assert_eq!(cut, 300, "{table}");
    }

    #[test]
    fn without_peers_there_is_no_pytorch_column_and_a_long_unit_widens_only_its_line() {
        let mut report = sample_report();
        let w = &mut report.workloads[0];
        w.peer = None;
        for v in &mut w.variants {
            v.vs_pytorch = None;
        }
        w.variants[1].iteration_unit = "1 x 1024x1024 product".into();
        let table = report.table();
        let lines: Vec<_> = table.lines().collect();
        assert!(!lines[0].contains("vs PyTorch"), "{table}");
        // The baseline's columns sit where the header's do.
        let col = lines[0].find("speed-up").unwrap();
        assert!(lines[2][col..].starts_with("baseline"), "{table}");
        assert!(
            lines[3].contains("100.000 ms /1 x 1024x1024 product"),
            "{table}"
        );
        assert!(lines.iter().all(|l| l.chars().count() <= TERMINAL_WIDTH));
    }

    #[test]
    fn lines_are_wrapped_between_words_and_long_words_are_cut() {
        let text = format!("{} {}", "word ".repeat(30).trim_end(), "y".repeat(150));
        let out = wrapped(&text, "  ");
        let lines: Vec<_> = out.lines().collect();
        assert!(
            lines.iter().all(|l| l.chars().count() <= TERMINAL_WIDTH),
            "{out}"
        );
        assert!(
            lines[1].starts_with("  word") || lines[1].starts_with("  y"),
            "{out}"
        );
        assert_eq!(out.matches('y').count(), 150);
        assert_eq!(wrapped("short", "  "), "short\n");
        assert_eq!(wrapped("  [1] note", "    "), "  [1] note\n");
    }

    #[test]
    fn wide_table_has_one_aligned_line_per_variant() {
        let table = sample_report().wide_table();
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
}
