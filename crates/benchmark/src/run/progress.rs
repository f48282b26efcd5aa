//! What a running suite shows while it runs: a bar on a terminal; anywhere else (a log file,
//! a batch job's output, a lent GPU's log) a line on standard error as each variant and peer
//! starts and ends, with the seconds since the suite started, so that a run stopped by a time
//! limit still says where it was and how long each part took (indicatif draws nothing when
//! standard error is not a terminal).

use std::time::Instant;

use indicatif::{ProgressBar, ProgressStyle};

/// The suite's progress over its `total` variants.
pub struct Progress {
    bar: ProgressBar,
    /// Lines instead of the bar: standard error is not a terminal.
    lines: bool,
    started: Instant,
}

impl Progress {
    /// Progress over `total` variants, shown by the root rank only (`shown`).
    pub fn new(total: usize, shown: bool) -> Self {
        let bar = if shown {
            ProgressBar::new(total as u64)
        } else {
            ProgressBar::hidden()
        };
        bar.set_style(
            ProgressStyle::with_template("{bar:30} {pos}/{len} {elapsed} {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        let lines = shown && bar.is_hidden();
        Self {
            bar,
            lines,
            started: Instant::now(),
        }
    }

    /// `what` (`workload/variant`, `workload/pytorch`) starts.
    pub fn start(&self, what: &str) {
        self.bar.set_message(what.to_string());
        self.line(&format!("{what}: started"));
    }

    /// A variant ended (its share of the bar).
    pub fn variant_ended(&self) {
        self.bar.inc(1);
    }

    /// A message above the bar, or a line of its own.
    pub fn println(&self, text: &str) {
        if self.lines {
            self.line(text);
        } else {
            self.bar.println(text);
        }
    }

    /// A line with the seconds since the start, where lines replace the bar.
    pub fn line(&self, text: &str) {
        if self.lines {
            eprintln!("[{:.1} s] {text}", self.started.elapsed().as_secs_f64());
        }
    }

    /// The bar cleared at the end of a complete run.
    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}
