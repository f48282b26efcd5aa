//! The pulse policy: task features in, piecewise-constant control amplitudes out.

use quench_kernels::QuenchOps;
use quench_kernels::views::ReshapeTo;
use std::path::Path;

use burn::module::{Module, Param};
use burn::record::{FullPrecisionSettings, NamedMpkFileRecorder, Recorder};
use burn::tensor::Tensor;
use serde::{Deserialize, Serialize};

use quench_train::ensemble::{Activation, EnsembleMlp};
use quench_train::init::{Init, LayerValues, draw_mlp};

/// The policy's architecture.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PolicyShape {
    /// Hidden widths (tanh after each).
    pub hidden: Vec<usize>,
    /// Piecewise-constant segments of the pulse.
    pub segments: usize,
    /// Control channels.
    pub controls: usize,
    /// The raw output is multiplied by this before it becomes amplitudes.
    pub output_scale: f64,
    /// Gain of the orthogonal initialisation (biases start at zero).
    pub init_gain: f64,
}

impl Default for PolicyShape {
    fn default() -> Self {
        Self {
            hidden: vec![128, 128, 128],
            segments: 20,
            controls: 2,
            output_scale: 2.0,
            init_gain: 0.5,
        }
    }
}

impl PolicyShape {
    /// Layer widths from `task_dim` inputs to `segments * controls` outputs.
    pub fn widths(&self, task_dim: usize) -> Vec<usize> {
        std::iter::once(task_dim)
            .chain(self.hidden.iter().copied())
            .chain(std::iter::once(self.segments * self.controls))
            .collect()
    }

    /// A freshly initialised policy with one member (the meta-parameters).
    pub fn init<B: QuenchOps>(
        &self,
        task_dim: usize,
        seed: u64,
        device: &B::Device,
    ) -> EnsembleMlp<B> {
        EnsembleMlp::new(
            self.init_scheme(),
            Activation::Tanh,
            1,
            &self.widths(task_dim),
            seed,
            device,
        )
    }

    /// The values [`init`](Self::init) uploads, on the host: weight `[1, in, out]` and bias
    /// `[1, 1, out]` of every layer, input first.
    pub fn initial_layers(&self, task_dim: usize, seed: u64) -> Vec<LayerValues> {
        draw_mlp(self.init_scheme(), 1, &self.widths(task_dim), seed)
    }

    fn init_scheme(&self) -> Init {
        Init::Orthogonal {
            gain: self.init_gain,
        }
    }

    /// Amplitudes `[tasks, segments, controls]` of a policy whose members are either one
    /// shared network or one network per task, for features `[tasks, 1, task_dim]`.
    pub fn amplitudes<B: QuenchOps>(
        &self,
        policy: &EnsembleMlp<B>,
        features: Tensor<B, 3>,
    ) -> Tensor<B, 3> {
        let tasks = features.dims()[0];
        (policy.forward(features) * self.output_scale).reshape_to([
            tasks,
            self.segments,
            self.controls,
        ])
    }
}

/// The meta-policy's parameters as a Burn module, so that Burn's recorders save and load it.
#[derive(Module, Debug)]
pub struct PolicyRecord<B: QuenchOps> {
    /// Weight then bias of every layer, `[1, in, out]` and `[1, 1, out]`.
    pub params: Vec<Param<Tensor<B, 3>>>,
}

/// Errors of saving and loading a policy.
#[derive(Debug, thiserror::Error)]
pub enum PolicyFileError {
    /// Burn's recorder failed.
    #[error("policy file {path}: {message}")]
    Record {
        /// The file.
        path: String,
        /// What the recorder said.
        message: String,
    },
    /// The file holds a policy of another architecture.
    #[error(
        "policy file {path}: expected {expected} parameter tensors of the configured shape, found {found}"
    )]
    Shape {
        /// The file.
        path: String,
        /// Tensors the configured architecture has.
        expected: usize,
        /// Tensors the file had.
        found: usize,
    },
}

/// Saves the meta-policy with Burn's named MessagePack recorder (`.mpk` is appended).
pub fn save_policy<B: QuenchOps>(
    policy: &EnsembleMlp<B>,
    path: &Path,
) -> Result<(), PolicyFileError> {
    let record = PolicyRecord {
        params: policy
            .params()
            .into_iter()
            .map(Param::from_tensor)
            .collect(),
    };
    record
        .save_file(path, &NamedMpkFileRecorder::<FullPrecisionSettings>::new())
        .map_err(|e| PolicyFileError::Record {
            path: path.display().to_string(),
            message: e.to_string(),
        })
}

/// Loads a policy saved by [`save_policy`] into the architecture of `template`; a file of
/// another architecture is an error, checked before anything is applied.
pub fn load_policy<B: QuenchOps>(
    template: &EnsembleMlp<B>,
    path: &Path,
    device: &B::Device,
) -> Result<EnsembleMlp<B>, PolicyFileError> {
    let record: PolicyRecordRecord<B> = NamedMpkFileRecorder::<FullPrecisionSettings>::new()
        .load(path.to_path_buf(), device)
        .map_err(|e| PolicyFileError::Record {
            path: path.display().to_string(),
            message: e.to_string(),
        })?;
    let params: Vec<Tensor<B, 3>> = record.params.into_iter().map(|p| p.val()).collect();
    let expected = template.params();
    let shapes_match = params.len() == expected.len()
        && params
            .iter()
            .zip(&expected)
            .all(|(a, b)| a.dims() == b.dims());
    if !shapes_match {
        return Err(PolicyFileError::Shape {
            path: path.display().to_string(),
            expected: expected.len(),
            found: params.len(),
        });
    }
    Ok(template.with_params(params))
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::NdArray;

    type Cpu = NdArray<f32>;

    #[test]
    fn guide_policy_maps_tasks_to_segment_amplitudes() {
        let device = Default::default();
        let shape = PolicyShape::default();
        assert_eq!(shape.widths(3), vec![3, 128, 128, 128, 40]);
        let policy = shape.init::<Cpu>(3, 1, &device);
        let amps = shape.amplitudes(&policy, Tensor::ones([5, 1, 3], &device));
        assert_eq!(amps.dims(), [5, 20, 2]);
        let biases_zero = policy
            .layers
            .iter()
            .all(|l| l.bias.clone().abs().max().into_scalar() == 0.0);
        assert!(biases_zero);
    }

    #[test]
    fn saved_policies_load_back_identically_and_refuse_other_shapes() {
        let device = Default::default();
        let dir = std::env::temp_dir().join(format!("quench-policy-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("policy");
        let shape = PolicyShape {
            hidden: vec![8],
            ..PolicyShape::default()
        };
        let policy = shape.init::<Cpu>(3, 4, &device);
        save_policy(&policy, &path).unwrap();
        let fresh = shape.init::<Cpu>(3, 99, &device);
        let loaded = load_policy(&fresh, &path, &device).unwrap();
        for (a, b) in loaded.params().into_iter().zip(policy.params()) {
            assert_eq!(a.into_data(), b.into_data());
        }
        let other = PolicyShape {
            hidden: vec![8, 8],
            ..PolicyShape::default()
        }
        .init::<Cpu>(3, 1, &device);
        assert!(load_policy(&other, &path, &device).is_err());
        let missing = load_policy(&fresh, &dir.join("absent"), &device).unwrap_err();
        assert!(missing.to_string().contains("absent"), "{missing}");
        std::fs::remove_dir_all(dir).unwrap();
    }
}
