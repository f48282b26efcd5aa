//! quench-lindblad's end-to-end tests: the solvers against closed forms, the f64 reference
//! and finite differences.

mod accuracy;
mod analytic;
mod common;
mod fidelity;
mod gradients;
mod properties;
