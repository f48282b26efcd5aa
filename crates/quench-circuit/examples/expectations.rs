//! `<Z_i>` of every circuit of a JSON file, computed in f64 on the CPU:
//! `cargo run --release -p quench-circuit --example expectations -- FILE.json`.
//! The format is in `quench_circuit::json`; errors are one line naming the circuit and gate,
//! with exit status 1.

quench_support::aligned_allocator!();

use std::process::ExitCode;

use burn::backend::NdArray;
use quench_circuit::json::{Document, render};

const USAGE: &str = "usage: expectations FILE.json";

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
    // A regular file of bounded size: a FIFO or /dev/urandom is refused, not read forever.
    let read =
        quench_support::files::read_text_bounded(path.as_ref(), quench_support::files::DATA_LIMIT);
    let text = match read {
        Ok(text) => text,
        Err(e) => {
            eprintln!("{path}: cannot read: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = Document::parse(&text).and_then(|document| {
        // Memory the simulation may use: the host's limit (available memory, `ulimit -v`).
        let limit = quench_support::budget::host_limit().map(|limit| u128::from(limit.bytes));
        document.expectations::<NdArray<f64>>(&Default::default(), limit)
    });
    match result {
        Ok(rows) => {
            println!("{}", render(&rows));
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{path}: {e}");
            ExitCode::FAILURE
        }
    }
}
