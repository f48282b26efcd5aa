//! Backend selection, precision policy, timing, memory and diagnostics.
//!
//! This is the one crate that knows about concrete backends. Everything above it is generic
//! over `B: Backend` / `B: AutodiffBackend`; [`run_on`] maps the run-time device choice onto
//! `burn_ndarray::NdArray` or `burn_cuda::Cuda` (cargo feature `cuda`) and runs a caller's
//! generic [`OnDevice`] task there.

pub mod allocator;
pub mod backend;
pub mod config;
pub mod diagnostics;
pub mod error;
pub mod files;
pub mod generator;
pub mod lanes;
pub mod machine;
pub mod memory;
pub mod precision;
pub mod readback;
pub mod simd;
pub mod spec;
pub mod stats;
pub mod threefry;
pub mod timing;

#[cfg(feature = "cuda")]
pub use backend::CudaBackend;
pub use backend::{
    CpuBackend, OnDevice, SelectedDevice, Selection, host_lanes, is_plain_host, run_on,
    runs_on_host, select, select_announced,
};
pub use config::{ConfigError, load_toml};
pub use error::DeviceError;
pub use generator::SeededGenerator;
pub use precision::{LossScaler, LossScalerConfig, Precision, StepDecision};
pub use spec::DeviceSpec;
pub use stats::Stats;
pub use timing::{Measurement, TimingConfig, measure, measure_on};
