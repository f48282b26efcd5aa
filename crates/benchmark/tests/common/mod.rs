//! What the binary's integration tests share: running the release binary in a folder.

use std::path::Path;
use std::process::{Command, Output};

/// The benchmark binary with `args`, in `dir`.
pub fn benchmark(args: &[&str], dir: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_benchmark"))
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap()
}

/// `benchmark run` of `dir/suite.toml` on the CPU into `dir/out`, with `extra` options.
pub fn run_suite(dir: &Path, extra: &[&str]) -> Output {
    let mut args = vec![
        "run",
        "--suite",
        "suite.toml",
        "--device",
        "cpu",
        "--out",
        "out",
    ];
    args.extend_from_slice(extra);
    benchmark(&args, dir)
}
