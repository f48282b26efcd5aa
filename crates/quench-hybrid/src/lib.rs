//! The hybrid quantum-classical classifier of guide 003: frozen ResNet18 features, an encoder
//! to 4 angles, a 4-qubit variational circuit and a small head, trained with Adam, StepLR,
//! gradient clipping and early stopping on a validation split.
//!
//! The seeds are members of one batched program: each has its own initialisation, circuit
//! weights, dropout masks and shuffle, so the spread of the test accuracy over seeds is the
//! spread of independent runs. The backbone is frozen and shared (it runs on the inner
//! backend, outside the autodiff graph), either on every batch, as the original does, or once
//! per image beforehand ([`FeatureMode::Precomputed`]). [`resnet`] is that backbone: seeded random
//! weights, BatchNorm calibration and loading of torchvision weights.

pub mod data;
pub mod model;
pub mod resnet;
pub mod setup;
pub mod training;

// The classifier end to end through its public items, in the unit-test binary so the generic code is compiled once for both.
#[cfg(test)]
mod end_to_end;

pub use data::{HybridData, Sizes};
pub use model::{CircuitMode, HybridModel};
pub use training::{
    Execution, FeatureMode, HybridConfig, HybridOutcome, SeedOutcome, train_hybrid,
};

use quench_circuit::CircuitError;
use quench_data::DataError;
use quench_device::DeviceError;
use thiserror::Error;

/// What can stop a hybrid training run before it starts.
#[derive(Debug, Error)]
pub enum HybridError {
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
    /// The circuit's settings are refused.
    #[error(transparent)]
    Circuit(#[from] CircuitError),
    /// The settings need more memory than the host has.
    #[error(transparent)]
    TooLarge(#[from] quench_support::budget::TooLarge),
    /// The settings would run longer than the work limit allows.
    #[error(transparent)]
    TooLong(#[from] quench_support::budget::TooLong),
    /// The backbone's weight file cannot be used (the error names it).
    #[error("backbone_weights: {0}")]
    Backbone(#[from] resnet::ResNetError),
}

impl From<quench_train::settings::Refusal> for HybridError {
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
