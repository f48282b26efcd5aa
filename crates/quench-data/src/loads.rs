//! One `debug` event for every data set quench-data reads from a file or draws from a seed, so
//! that a user sees what a run loaded (`RUST_LOG=quench_data::load=debug`), and a test can
//! count that a suite loads each workload's data once.

/// The target of the events.
pub const LOAD_TARGET: &str = "quench_data::load";

/// Says that `what` was read or drawn.
pub(crate) fn loaded(what: std::fmt::Arguments<'_>) {
    tracing::debug!(target: LOAD_TARGET, "loaded {what}");
}
