//! quench-lindblad's integration tests: the solvers against closed forms, the f64 reference
//! and finite differences.
//!
//! One binary for the crate's integration tests (each file a module): the generic code is
//! compiled and linked once for all of them rather than once per file.

mod accuracy;
mod analytic;
mod common;
mod fidelity;
mod gradients;
mod properties;
