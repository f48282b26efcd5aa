//! The operations Quench adds to Burn's backends and their kernels: the [`QuenchOps`] seam,
//! one folder per operation under [`ops`] holding the operation, its default composition of
//! Burn ops (which the GPU backends run), its CPU host kernel and, where it has one, its CubeCL
//! kernel side by side; the counter-based generator ([`threefry`]); reshapes, reductions and
//! read-backs every backend computes right and Burn's seeded generator held by one caller at a
//! time ([`views`], [`reductions`], [`readback`], [`generator`]: `quench_tensor`'s, forwarded);
//! the backends themselves and
//! the dispatch of generic work onto a named device ([`backends`]); and the tests' device
//! ([`testing`], [`device_test!`]). The host kernels' shared support is `quench_host`; the
//! names of devices, wgpu's adapters and CubeCL's kernel cache are `quench_platform`.
//!
//! Everything above this crate is generic over `B: QuenchBackend`. The trait and every
//! backend's implementation of it live here (Rust's orphan rule), so this crate carries the
//! `cuda` and `wgpu` features.

pub mod backends;
pub mod ops;
pub mod testing;

/// Burn tensor helpers (`quench_tensor`), under the names every crate uses.
pub use quench_tensor::{generator, readback, reductions, views};

/// The counter-based generator, shared with the host kernels (`quench_host::threefry`).
pub use quench_host::threefry;

/// The Burn this crate is built on, for [`device_test!`]'s expansion in other crates.
pub use burn;

#[cfg(feature = "cuda")]
pub use backends::CudaBackend;
#[cfg(feature = "wgpu")]
pub use backends::WgpuBackend;
pub use backends::{CpuBackend, OnDevice, SelectedDevice, WgpuAdapter, host_lanes, run_on};
pub use generator::SeededGenerator;
pub use ops::{QuenchBackend, QuenchOps, precise_matmul};

#[cfg(test)]
quench_support::aligned_allocator!();
