//! Evolves the tasks of a pulse document and prints the final states as JSON.
//!
//! `cargo run --release -p quench-lindblad --example evolve -- INPUT.json [--max-hours H]`
//!
//! The document format is described in the crate documentation; an example is
//! `configs/lindblad/evolve-example.json`. Runs in f64 on the CPU. Any error (unreadable
//! file, malformed document, a `dt` needing more than `max_substeps` substeps) is printed to
//! stderr, naming the field, with exit status 1. Amplitudes beyond `control_bound` are
//! clamped, each with a warning line on stderr (the first 20, then a count). `--max-hours` raises
//! the work limit a long document is refused beyond (24 hours).

quench_support::aligned_allocator!();

use std::process::ExitCode;

use burn::backend::NdArray;
use quench_lindblad::Job;

/// Warning lines about clamped amplitudes before the rest are only counted, so that a
/// document of a million out-of-bound amplitudes does not bury the output.
const MAX_WARNINGS: usize = 20;

fn run(path: &str) -> Result<String, String> {
    // A regular file of bounded size: a FIFO or /dev/urandom is refused, not read forever.
    let text =
        quench_support::files::read_text_bounded(path.as_ref(), quench_support::files::DATA_LIMIT)
            .map_err(|e| format!("{path}: cannot read: {e}"))?;
    let job = Job::from_json(&text).map_err(|e| format!("{path}: {e}"))?;
    let clamped = job.clamped_amplitudes();
    for amplitude in clamped.iter().take(MAX_WARNINGS) {
        eprintln!("warning: {path}: {amplitude}");
    }
    if clamped.len() > MAX_WARNINGS {
        eprintln!(
            "warning: {path}: {} more amplitudes beyond control_bound = {} are clamped",
            clamped.len() - MAX_WARNINGS,
            job.solver.control_bound
        );
    }
    let report = job
        .run::<NdArray<f64>>(&Default::default())
        .map_err(|e| format!("{path}: {e}"))?;
    serde_json::to_string_pretty(&report).map_err(|e| format!("writing the report: {e}"))
}

const USAGE: &str = "usage: evolve INPUT.json [--max-hours H]";

fn main() -> ExitCode {
    let args = match quench_support::cli::example_flags(std::env::args().skip(1).collect(), USAGE) {
        Ok(args) => args,
        Err(code) => return code,
    };
    let [path] = &args[..] else {
        eprintln!(
            "{}",
            quench_support::cli::unexpected_arguments(&args, USAGE)
        );
        return ExitCode::from(2);
    };
    match run(path) {
        Ok(json) => {
            println!("{json}");
            ExitCode::SUCCESS
        }
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::FAILURE
        }
    }
}
