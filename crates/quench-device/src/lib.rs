//! Choosing and measuring a device: selection with probing and `auto`'s fallback
//! ([`select`]), the precision policy ([`precision`], [`run_precision`]), timing
//! ([`timing`]), kernel launches and read-backs per step ([`counters`]), memory
//! ([`memory`]), the machine's description ([`machine`]), the doctor's diagnostics
//! ([`diagnostics`]).
//!
//! The backends, the operations on them and the dispatch of generic work onto a device are
//! `quench_kernels`; this crate decides which device and measures what it does.

#[cfg(test)]
mod agreement;
pub mod counters;
pub mod diagnostics;
pub mod error;
pub mod machine;
pub mod memory;
pub mod precision;
pub mod run_precision;
pub mod select;
pub mod timing;

pub use error::DeviceError;

pub use precision::{LossScaler, LossScalerConfig, Precision, StepDecision};
pub use select::{Selection, select, select_announced};
pub use timing::{Measurement, TimingConfig, measure, measure_on};

#[cfg(test)]
quench_support::aligned_allocator!();
