//! What a step costs an asynchronous device besides its arithmetic: kernel launches and host
//! read-backs. On a GPU these, not the flops of Quench's small tensors, set the time of a step,
//! so the benchmark counts them per iteration (`benchmark run --count-launches`).
//!
//! - Read-backs: every device-to-host copy Quench makes goes through
//!   [`quench_kernels::readback`], which counts it ([`quench_kernels::readback::readbacks`]).
//! - Launches: CubeCL (the runtime of Burn's wgpu and CUDA backends) writes one line per kernel
//!   it launches when its profiling log is at `minimal`; [`log_launches`] turns that on into a
//!   file and [`launches`] counts its lines. Fused kernels count once. The CPU backend launches
//!   no kernels: there the count is `None`.
//! - Compilations: CubeCL's compilation log, in the same file, names each kernel a process
//!   compiles ([`compilations`]): what a cold start costs, and what the kernel cache saves.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use quench_kernels::readback::readbacks;

use crate::error::DeviceError;

/// Where CubeCL writes its launch log, once [`log_launches`] turned it on.
static LAUNCH_LOG: OnceLock<PathBuf> = OnceLock::new();

/// Turns on CubeCL's log of every kernel launch, and of every kernel compiled where
/// `compilations` (on wgpu CubeCL then runs its instance with debugging and validation, about
/// twice as slow on lavapipe), written to `path` (replaced). It must come before the first
/// CubeCL device is used: CubeCL reads its configuration once. The rest of
/// the configuration is as [`quench_platform::kernel_cache`] makes it (the kernel and autotune caches
/// stay on).
///
/// # Errors
/// In a build without a CubeCL backend (`wgpu`, `cuda`), and when CubeCL's configuration was
/// already read (a device was used first).
pub fn log_launches(path: &Path, compilations: bool) -> Result<(), DeviceError> {
    #[cfg(any(feature = "wgpu", feature = "cuda"))]
    {
        quench_platform::kernel_cache::install(Some(path), compilations)?;
        LAUNCH_LOG.set(path.to_path_buf()).map_err(|_| {
            quench_platform::BackendError::LaunchCount("the launch log is already on".into()).into()
        })
    }
    #[cfg(not(any(feature = "wgpu", feature = "cuda")))]
    {
        let _ = (path, compilations, &LAUNCH_LOG);
        Err(quench_platform::BackendError::LaunchCount(
            "this binary has no GPU backend to count launches on (build with --features wgpu or cuda)"
                .into(),
        )
        .into())
    }
}

/// Kernel launches logged since [`log_launches`] turned the log on; `None` when it is off.
/// Call it after synchronising the device: CubeCL writes its log from a thread of its own, so
/// this waits until the count has stood still for 20 ms (at most 2 s).
pub fn launches() -> Option<u64> {
    logged(b"Executing ")
}

/// Kernels compiled by this process since [`log_launches`] turned the log on with
/// `compilations` (CubeCL's compilation log, in the same file); `None` when the log is off,
/// 0 without `compilations`. A kernel found in the compilation cache is not compiled and not
/// counted; each one compiled is distinct (CubeCL compiles a kernel once per process).
pub fn compilations() -> Option<u64> {
    logged(b"[Compiling kernel]")
}

/// The lines of the launch log that start with `prefix`, once their count stood still.
fn logged(prefix: &[u8]) -> Option<u64> {
    let path = LAUNCH_LOG.get()?;
    let count = || -> u64 {
        std::fs::read(path).map_or(0, |bytes| {
            bytes
                .split(|&b| b == b'\n')
                .filter(|line| line.starts_with(prefix))
                .count() as u64
        })
    };
    let mut last = count();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
    loop {
        std::thread::sleep(std::time::Duration::from_millis(20));
        let now = count();
        if now == last || std::time::Instant::now() > deadline {
            return Some(now);
        }
        last = now;
    }
}

/// Launches and read-backs at one moment, to subtract from a later one.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Counts {
    /// Kernel launches ([`launches`]); `None` where they are not counted.
    pub launches: Option<u64>,
    /// Device-to-host copies ([`quench_kernels::readback::readbacks`]).
    pub readbacks: u64,
}

impl Counts {
    /// The counts now (after the caller synchronised the device).
    pub fn now() -> Self {
        Self {
            launches: launches(),
            readbacks: readbacks(),
        }
    }

    /// What happened between `earlier` and `self`, per one of `calls` calls.
    pub fn per_call_since(&self, earlier: &Counts, calls: f64) -> CallCounts {
        CallCounts {
            launches: self
                .launches
                .zip(earlier.launches)
                .map(|(now, then)| now.saturating_sub(then) as f64 / calls),
            readbacks: self.readbacks.saturating_sub(earlier.readbacks) as f64 / calls,
        }
    }
}

/// Launches and read-backs of one call (a timed run, an iteration), as means over the calls
/// counted.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct CallCounts {
    /// Kernel launches; `None` where they are not counted (the launch log is off, the CPU).
    pub launches: Option<f64>,
    /// Device-to-host copies.
    pub readbacks: f64,
}

impl CallCounts {
    /// The counts of one of the `parts` a call is made of (a run's iterations).
    pub fn per(self, parts: f64) -> Self {
        Self {
            launches: self.launches.map(|l| l / parts),
            readbacks: self.readbacks / parts,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_readback_is_counted_and_launches_are_not_without_the_log() {
        let before = Counts::now();
        let device = Default::default();
        let x =
            burn::tensor::Tensor::<quench_kernels::CpuBackend, 1>::from_floats([1.0, 2.0], &device);
        assert_eq!(
            quench_kernels::readback::to_host_f32(x.clone()),
            vec![1.0, 2.0]
        );
        let _ = quench_kernels::readback::to_host_f64(x);
        let counts = Counts::now().per_call_since(&before, 1.0);
        // Other tests of this process may read back meanwhile: at least these two.
        assert!(counts.readbacks >= 2.0, "{counts:?}");
        assert_eq!(counts.launches, None);
        let half = counts.per(2.0);
        assert_eq!(half.readbacks, counts.readbacks / 2.0);
    }
}
