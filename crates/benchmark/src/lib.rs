//! The Quench benchmark: suites of workloads timed variant by variant, the guides' claimed
//! speed-ups printed beside the measured ones, with the quality metric checked beside the
//! speed; the device's figures (`doctor`) and the numerical checks (`verify`).
//!
//! The `benchmark` binary is [`cli::main`]; [`api`] is what a program calls to run a suite or
//! the doctor and get their results as values (the Python package's `quench.bench`).

pub mod api;
mod checks;
mod child;
pub mod cli;
mod error_line;
mod npy;
mod numbers;
mod peers;
mod report;
mod run;
mod workload;
mod workloads;
