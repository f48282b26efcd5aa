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
    run_suite_command(dir, extra).output().unwrap()
}

/// [`run_suite`]'s command, not yet started (for a test that signals the run).
pub fn run_suite_command(dir: &Path, extra: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_benchmark"));
    command
        .args([
            "run",
            "--suite",
            "suite.toml",
            "--device",
            "cpu",
            "--out",
            "out",
        ])
        .args(extra)
        .current_dir(dir);
    command
}
