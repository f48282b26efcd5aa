//! `quench.hybrid`: guide 003's hybrid quantum-classical classifier (a frozen ResNet18, a
//! 4-qubit variational circuit, a head) on Fashion-MNIST (or its stand-in), every seed a
//! member of one batched program, trained the product's way (the backbone's features computed
//! once per image, the circuit read out by the seam's fused operation, f32); the outcome
//! comes back as JSON text.

use pyo3::prelude::*;
use quench_device::Precision;
use quench_hybrid::setup::{HybridImages, HybridSetup};
use quench_hybrid::{
    CircuitMode, Execution, FeatureMode, HybridConfig, HybridError, HybridOutcome, train_hybrid,
};
use quench_kernels::{OnDevice, QuenchBackend};
use quench_train::settings::Valid;
use serde_json::{Value, json};

use crate::device;
use crate::errors::Failure;
use crate::settings;

/// A checked configuration, its images and setup, to train on one backend.
struct Train {
    config: Valid<HybridConfig>,
    setup: HybridSetup,
    images: HybridImages,
}

impl OnDevice for Train {
    /// The outcome and the line naming the backbone.
    type Output = Result<(HybridOutcome, String), HybridError>;

    fn run<B: QuenchBackend>(self, device: &B::Device) -> Self::Output {
        let (backbone, note) = self
            .setup
            .backbone::<B::InnerBackend>(&self.images, device)?;
        let execution = Execution {
            circuit: CircuitMode::Fused,
            features: FeatureMode::Precomputed,
            precision: Precision::F32,
        };
        let outcome = train_hybrid::<B>(
            &self.images.data,
            &backbone,
            &self.config,
            &execution,
            device,
        )?;
        Ok((outcome, note))
    }
}

/// Trains the hybrid classifier with the settings of the TOML file at `path`, or of
/// `settings` (JSON text), on the images and backbone `data` names (JSON text of
/// [`HybridSetup`]; `None`: the original's sizes and a random calibrated backbone), on
/// `device`, Ctrl-C honoured between epochs; returns the outcome with `data` and `backbone`
/// lines and `interrupted` as JSON text.
#[pyfunction]
#[pyo3(signature = (path, settings, data, device))]
pub fn hybrid_train(
    py: Python<'_>,
    path: Option<&str>,
    settings: Option<&str>,
    data: Option<&str>,
    device: &str,
) -> PyResult<String> {
    let setup: HybridSetup = settings::data(data)?;
    settings::call::<HybridConfig, _>(py, path, settings, device, move |config, selected| {
        let images = setup
            .images()
            .map_err(|error| Failure::input("data", error))?;
        let source = images.source.to_string();
        let (trained, interrupted) = settings::between_epochs(|| {
            device::run_sorted(
                selected,
                Train {
                    config,
                    setup,
                    images,
                },
                |e| matches!(e, HybridError::Device(_)),
            )
        });
        let (outcome, backbone) = trained?;
        let mut result = serde_json::to_value(outcome)
            .map_err(|error| Failure::Runtime(format!("the outcome as JSON: {error}")))?;
        if let Value::Object(fields) = &mut result {
            fields.insert("data".into(), json!(source));
            fields.insert("backbone".into(), json!(backbone));
            fields.insert("interrupted".into(), json!(interrupted));
        }
        Ok(result.to_string())
    })
}
