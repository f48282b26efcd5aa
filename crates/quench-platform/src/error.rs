//! Errors of naming a device, running on a backend this build lacks and setting up CubeCL.

use thiserror::Error;

/// What can go wrong before any work runs: a device name that cannot be parsed, a backend
/// this binary was built without, a kernel cache or launch log that cannot be set up.
#[derive(Debug, Error)]
pub enum BackendError {
    /// The device specification string could not be parsed.
    #[error("invalid device `{spec}`: {reason} (expected auto, cpu, cuda, cuda:N, wgpu or wgpu:N)")]
    BadSpec {
        /// The text that was given.
        spec: String,
        /// Why it was refused.
        reason: String,
    },
    /// CUDA was asked for but this binary was compiled without the `cuda` cargo feature.
    #[error(
        "this binary was built without CUDA support; rebuild with `--features cuda` to use `{spec}`"
    )]
    CudaNotCompiled {
        /// The specification that asked for CUDA.
        spec: String,
    },
    /// wgpu was asked for but this binary was compiled without the `wgpu` cargo feature.
    #[error(
        "this binary was built without wgpu support; rebuild with `--features wgpu` to use `{spec}`"
    )]
    WgpuNotCompiled {
        /// The specification that asked for wgpu.
        spec: String,
    },
    /// The kernel cache folder that was named cannot be used.
    #[error("kernel cache folder {}: {reason}", dir.display())]
    KernelCache {
        /// The folder.
        dir: std::path::PathBuf,
        /// Why it cannot be used.
        reason: String,
    },
    /// Kernel launches cannot be counted in this run.
    #[error("cannot count kernel launches: {0}")]
    LaunchCount(String),
}
