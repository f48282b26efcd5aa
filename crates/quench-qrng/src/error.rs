//! The error type of the qRNG analyses.

use quench_data::DataError;
use quench_device::DeviceError;
use thiserror::Error;

/// A failure of a qRNG analysis: unusable data, an impossible configuration, or a precision
/// that the device refuses.
#[derive(Debug, Error)]
pub enum QrngError {
    /// Reading, generating or batching the data failed.
    #[error(transparent)]
    Data(#[from] DataError),
    /// The device cannot run the requested precision.
    #[error(transparent)]
    Device(#[from] DeviceError),
    /// A run whose memory, estimated before it starts, exceeds the host's.
    #[error(transparent)]
    TooLarge(#[from] quench_support::budget::TooLarge),
    /// A run whose work, estimated before it starts, exceeds the process's limit.
    #[error(transparent)]
    TooLong(#[from] quench_support::budget::TooLong),
    /// A declared source has no line in the recording.
    #[error("source {label}: no line carries this label")]
    NoLines {
        /// The label.
        label: u32,
    },
    /// A recorded file in which a declared source has no line.
    #[error("{}: no line has label {label}; every source {classes:?} needs lines", path.display())]
    MissingSource {
        /// The file.
        path: std::path::PathBuf,
        /// The label without lines.
        label: u32,
        /// The sources declared.
        classes: Vec<u32>,
    },
    /// The analysis reads more leading bits than a line holds.
    #[error("bits = {bits}: the lines hold only {available} bits")]
    TooFewBits {
        /// Leading bits asked for.
        bits: usize,
        /// Bits per line.
        available: usize,
    },
    /// A tournament needs at least two sources.
    #[error("{found} source(s): a tournament needs at least two")]
    TooFewDevices {
        /// Sources in the recording.
        found: usize,
    },
    /// A pair's frequency-difference grid is flat (every frequency of each source equal), so
    /// it has no target distribution.
    #[error("sources {}v{}: flat frequency-difference grid, no target distribution", sources.0, sources.1)]
    FlatGrid {
        /// Labels of the two sources.
        sources: (u32, u32),
    },
    /// A configuration field is out of its range.
    #[error("{field} = {value}: {reason}")]
    Config {
        /// The field.
        field: &'static str,
        /// Its value.
        value: String,
        /// What it must be.
        reason: &'static str,
    },
}

impl QrngError {
    /// A refused number, written as a user would (`1e308`, not its 309 digits).
    pub(crate) fn number(field: &'static str, value: f64, reason: &'static str) -> Self {
        Self::config(field, quench_support::numbers::short(value), reason)
    }

    /// Shorthand for [`QrngError::Config`].
    pub(crate) fn config(field: &'static str, value: impl ToString, reason: &'static str) -> Self {
        Self::Config {
            field,
            value: value.to_string(),
            reason,
        }
    }
}

impl From<quench_train::settings::Refusal> for QrngError {
    fn from(refused: quench_train::settings::Refusal) -> Self {
        Self::Config {
            field: refused.name,
            value: refused.value,
            reason: refused.reason,
        }
    }
}
