//! Errors of device selection, precision and measurement.

use thiserror::Error;

/// Everything that can go wrong while choosing, probing or using a device.
#[derive(Debug, Error)]
pub enum DeviceError {
    /// A CUDA device was asked for explicitly and cannot be used.
    #[error("CUDA device {index} is not usable: {reason}")]
    CudaUnavailable {
        /// The device ordinal that was asked for.
        index: usize,
        /// What the probe found (no driver, no device, failed initialisation).
        reason: String,
    },
    /// A wgpu adapter was asked for explicitly and cannot be used.
    #[error("wgpu device `{spec}` is not usable: {reason}")]
    WgpuUnavailable {
        /// What was asked for (`wgpu`, `wgpu:N`).
        spec: String,
        /// What the probe found (no loader, no driver, no such adapter, a failing device).
        reason: String,
    },
    /// A device name, a backend this build lacks, the kernel cache or the launch log
    /// ([`quench_platform::BackendError`]).
    #[error(transparent)]
    Backend(#[from] quench_platform::BackendError),
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
    #[error("{setting} = 0: a measurement needs at least one repeat")]
    NoRepeats {
        /// Where the count came from (`--repeats`, `[timing] repeats`, ...).
        setting: String,
    },
    /// A measurement was asked for with more warm-up runs or repeats than
    /// [`crate::timing::MAX_RUNS`].
    #[error("{setting} = {value}: at most {max} runs of one measurement")]
    TooManyRuns {
        /// Where the count came from (`--repeats`, `[timing] repeats`, ...).
        setting: String,
        /// The count asked for.
        value: usize,
        /// The most allowed.
        max: usize,
    },
}

impl DeviceError {
    /// Whether the error says a device or a precision cannot be used, rather than that a
    /// measurement's own counts are out of range ([`DeviceError::NoRepeats`],
    /// [`DeviceError::TooManyRuns`]): the benchmark gives the first its own exit status.
    pub fn is_unusable_device(&self) -> bool {
        !matches!(self, Self::NoRepeats { .. } | Self::TooManyRuns { .. })
    }
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
    use std::any::Any;

    use super::panic_text;

    #[test]
    fn panic_payloads_give_their_text() {
        // The payloads `panic!` makes (a `&str` for a literal, a `String` when formatted) and
        // another type, made without panicking: a panic in this test would reach the
        // process-wide hook `select::silently` holds while another test of this binary runs.
        let literal: Box<dyn Any + Send> = Box::new("a literal");
        assert_eq!(panic_text(literal.as_ref()), Some("a literal"));
        let formatted: Box<dyn Any + Send> = Box::new(format!("{} and {}", 1, 2));
        assert_eq!(panic_text(formatted.as_ref()), Some("1 and 2"));
        let other: Box<dyn Any + Send> = Box::new(7_u8);
        assert_eq!(panic_text(other.as_ref()), None);
    }
}
