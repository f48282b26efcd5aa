//! The compute platforms a Quench run names and sets up before any work runs: the names of
//! devices ([`spec`]: `auto`, `cpu`, `cuda:N`, `wgpu:N`), wgpu's adapters ([`adapters`]), CubeCL's
//! persistent kernel cache ([`kernel_cache`]) and what can go wrong with them ([`error`]).
//!
//! No Quench operation lives here: the backends that run the operations, and the dispatch of
//! generic work onto a named device, are `quench_kernels::backends`; which device a run takes
//! and how it measures it are `quench_device`.

pub mod adapters;
pub mod error;
pub mod kernel_cache;
pub mod spec;

pub use error::BackendError;
pub use spec::DeviceSpec;
