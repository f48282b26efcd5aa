//! The one error type of the SGLD workload.

use quench_data::DataError;
use quench_device::DeviceError;
use quench_support::ConfigError;
use thiserror::Error;

/// A grid that cannot run: a bad configuration value, unreadable data, or a device that
/// cannot run the requested precision.
#[derive(Debug, Error)]
pub enum SgldError {
    /// A configuration value is out of its range.
    #[error("{origin}: `{field}` = {value}: {reason}")]
    Invalid {
        /// Where the value came from: a file path or `grid configuration`.
        origin: String,
        /// The field.
        field: &'static str,
        /// The offending value.
        value: String,
        /// What it must be.
        reason: String,
    },
    /// The configuration file could not be read or parsed.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The data could not be read or assembled.
    #[error(transparent)]
    Data(#[from] DataError),
    /// The device refused the requested precision.
    #[error(transparent)]
    Device(#[from] DeviceError),
}

impl SgldError {
    /// The same error, a refused value said to come from `origin` (a file, a suite's
    /// parameter) rather than from where it was checked.
    pub fn with_origin(self, origin: impl Into<String>) -> Self {
        match self {
            Self::Invalid {
                field,
                value,
                reason,
                ..
            } => Self::Invalid {
                origin: origin.into(),
                field,
                value,
                reason,
            },
            other => other,
        }
    }
}
