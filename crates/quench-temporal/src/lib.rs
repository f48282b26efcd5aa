//! The temporal direction classifiers of guide 004 on market windows: a bidirectional LSTM
//! with attention pooling, a pre-norm Transformer and a gated MLP, each predicting whether the
//! close `horizon` bars ahead is up, flat or down.
//!
//! The seeds are members of one batched program (each its own initialisation, dropout masks
//! and shuffle). The LSTM's recurrence runs fused ([`LstmCore::Fused`]: one input projection
//! for every step, one recurrent matmul per step for both directions and all members) or
//! through `burn::nn::Lstm` ([`LstmCore::Burn`], the reference it is tested against). The
//! data, from `quench_data::market_windows`, is windows `[window, features]` split
//! chronologically, normalised on the training part alone.

pub mod data;
pub mod lstm;
pub mod metrics;
pub mod model;
pub mod step;
pub mod training;

// The models end to end through their public items, in the unit-test binary so the generic code is compiled once for both.
#[cfg(test)]
mod end_to_end;

pub use lstm::LstmCore;
pub use metrics::{Baselines, Scores};
pub use model::{CLASSES, ModelKind, TemporalNet, Widths};
pub use training::{Execution, SeedOutcome, TemporalConfig, TemporalOutcome, train_temporal};

use quench_data::DataError;
use quench_device::DeviceError;
use thiserror::Error;

/// What can stop a temporal training run before it starts.
#[derive(Debug, Error)]
pub enum TemporalError {
    /// A setting outside its valid range.
    #[error("{name} = {value}: {reason}")]
    InvalidValue {
        /// The setting, e.g. `batch_size`.
        name: &'static str,
        /// The value given.
        value: String,
        /// What it must be.
        reason: &'static str,
    },
    /// The data cannot be used.
    #[error(transparent)]
    Data(#[from] DataError),
    /// The device cannot run the precision asked for.
    #[error(transparent)]
    Device(#[from] DeviceError),
    /// The settings need more memory than the host has.
    #[error(transparent)]
    TooLarge(#[from] quench_support::budget::TooLarge),
    /// The settings would run longer than the work limit allows.
    #[error(transparent)]
    TooLong(#[from] quench_support::budget::TooLong),
}

impl From<quench_train::settings::Refusal> for TemporalError {
    fn from(r: quench_train::settings::Refusal) -> Self {
        Self::InvalidValue {
            name: r.name,
            value: r.value,
            reason: r.reason,
        }
    }
}

#[cfg(test)]
quench_support::aligned_allocator!();
