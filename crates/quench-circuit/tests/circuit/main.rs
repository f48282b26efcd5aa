//! quench-circuit's integration tests: the simulator against known states and the f64
//! reference, and its JSON interface.
//!
//! One binary for the crate's integration tests (each file a module): the generic code is
//! compiled and linked once for all of them rather than once per file.

quench_support::aligned_allocator!();

mod agreement;
mod analytic;
mod json;
