//! `<Z_i>` of every circuit of a JSON file, computed in f64 on the CPU:
//! `cargo run --release -p quench-circuit --example expectations -- FILE.json`.
//! The format is in `quench_circuit::json`; errors are one line naming the circuit and gate,
//! with exit status 1.

use std::process::ExitCode;

use burn::backend::NdArray;
use quench_circuit::json::{Document, render};

/// Memory the simulation may use: `MemAvailable` of `/proc/meminfo`, where there is one.
fn available_bytes() -> Option<u128> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u128 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let (Some(path), None) = (args.next(), args.next()) else {
        eprintln!("usage: expectations FILE.json");
        return ExitCode::from(2);
    };
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) => {
            eprintln!("{path}: cannot read: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = Document::parse(&text).and_then(|document| {
        document.expectations::<NdArray<f64>>(&Default::default(), available_bytes())
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
