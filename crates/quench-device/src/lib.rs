//! Backend selection, precision policy, timing, memory and diagnostics.
//!
//! This is the one crate that knows about concrete backends. Everything above it is generic
//! over `B: Backend` / `B: AutodiffBackend`; [`run_on`] maps the run-time device choice onto
//! `burn_ndarray::NdArray`, `burn_cuda::Cuda` (cargo feature `cuda`) or `burn_wgpu::Wgpu`
//! (cargo feature `wgpu`) and runs a caller's generic [`OnDevice`] task there.

pub mod adapters;
pub mod allocator;
pub mod backend;
pub mod budget;
pub mod config;
pub mod counters;
pub mod diagnostics;
pub mod error;
pub mod files;
pub mod generator;
mod host_adam;
mod host_attention;
mod host_batch_norm;
mod host_buffers;
mod host_conv;
pub mod host_gemm;
mod host_layers;
mod host_lstm;
mod host_math;
mod host_sgld;
mod host_tensor;
pub mod kernel_cache;
pub mod lanes;
pub mod machine;
pub mod memory;
pub mod ops;
pub mod precision;
pub mod readback;
pub mod reductions;
pub mod run_precision;
pub mod simd;
pub mod spec;
pub mod stats;
pub mod testing;
pub mod threefry;
pub mod timing;
pub mod views;

/// The Burn this crate is built on, for [`device_test!`]'s expansion in other crates.
pub use burn;

#[cfg(feature = "cuda")]
pub use backend::CudaBackend;
#[cfg(feature = "wgpu")]
pub use backend::WgpuBackend;
pub use backend::{
    CpuBackend, OnDevice, SelectedDevice, Selection, WgpuAdapter, host_lanes, run_on, select,
    select_announced,
};
pub use config::{ConfigError, load_toml};
pub use error::DeviceError;
pub use generator::SeededGenerator;
pub use ops::{QuenchBackend, QuenchOps, precise_matmul};
pub use precision::{LossScaler, LossScalerConfig, Precision, StepDecision};
pub use spec::DeviceSpec;
pub use stats::Stats;
pub use timing::{Measurement, TimingConfig, measure, measure_on};
