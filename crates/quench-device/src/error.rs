//! Errors of device selection, precision and measurement.

use thiserror::Error;

/// Everything that can go wrong while choosing, probing or using a device.
#[derive(Debug, Error)]
pub enum DeviceError {
    /// The device specification string could not be parsed.
    #[error("invalid device `{spec}`: {reason} (expected auto, cpu, cuda, cuda:N, wgpu or wgpu:N)")]
    BadSpec {
        /// The text that was given.
        spec: String,
        /// Why it was refused.
        reason: String,
    },
    /// A CUDA device was asked for explicitly and cannot be used.
    #[error("CUDA device {index} is not usable: {reason}")]
    CudaUnavailable {
        /// The device ordinal that was asked for.
        index: usize,
        /// What the probe found (no driver, no device, failed initialisation).
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
    /// A wgpu adapter was asked for explicitly and cannot be used.
    #[error("wgpu device `{spec}` is not usable: {reason}")]
    WgpuUnavailable {
        /// What was asked for (`wgpu`, `wgpu:N`).
        spec: String,
        /// What the probe found (no loader, no driver, no such adapter, a failing device).
        reason: String,
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
    /// The precision string could not be parsed.
    #[error("invalid precision `{given}` (expected {expected})")]
    BadPrecision {
        /// The text that was given.
        given: String,
        /// The accepted values.
        expected: &'static str,
    },
    /// The backend cannot compute in the requested precision.
    #[error("precision {precision} is not supported on {backend}: {reason}")]
    UnsupportedPrecision {
        /// The requested precision.
        precision: String,
        /// The backend's name.
        backend: String,
        /// Why it is refused.
        reason: String,
    },
    /// Waiting for the device to finish its queued work failed.
    #[error("device synchronisation failed: {0}")]
    Sync(String),
    /// A measurement was asked for with no repeats.
    #[error("a measurement needs at least one repeat")]
    NoRepeats,
}

/// The text of a caught panic's payload (`panic!` with a literal or a formatted message), or
/// `None` for a payload of another type.
pub fn panic_text(payload: &(dyn std::any::Any + Send)) -> Option<&str> {
    payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
}

#[cfg(test)]
mod tests {
    use super::panic_text;

    #[test]
    fn panic_payloads_give_their_text() {
        let literal = std::panic::catch_unwind(|| panic!("a literal")).unwrap_err();
        assert_eq!(panic_text(literal.as_ref()), Some("a literal"));
        let formatted = std::panic::catch_unwind(|| panic!("{} and {}", 1, 2)).unwrap_err();
        assert_eq!(panic_text(formatted.as_ref()), Some("1 and 2"));
        let other = std::panic::catch_unwind(|| std::panic::panic_any(7_u8)).unwrap_err();
        assert_eq!(panic_text(other.as_ref()), None);
    }
}
