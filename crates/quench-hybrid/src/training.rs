//! Training of the hybrid classifier: every seed a member of one batched program.

use quench_device::Precision;
use quench_kernels::SeededGenerator;
use quench_kernels::ops::view::ViewTo;
use quench_kernels::reductions::Reduce;
use quench_kernels::views::ReshapeTo;
use quench_kernels::{QuenchBackend, QuenchOps};
use std::sync::Arc;

use burn::tensor::{Int, Tensor, TensorData};
use quench_circuit::Circuit;
use quench_data::{Dataset, Loader, LoaderConfig, Mode, check_mnist_images};
use quench_kernels::readback::{float_tensor, to_host_f32};
use rand::SeedableRng;
use rand::rngs::StdRng;
use rand_distr::{Distribution, Normal};
use serde::{Deserialize, Serialize};

use super::HybridError;
use super::data::{HybridData, backbone_features};
use super::model::{CircuitMode, ENCODER, HEAD, HybridModel};
use crate::resnet::{Inference, ResNet18};
use quench_support::stats::MeanStd;
use quench_train::amp::MixedPrecision;
use quench_train::classify::cross_entropy;
use quench_train::ensemble::{Activation, seeded_ensemble};
use quench_train::epochs::{
    EpochValues, Rates, SeedMembers, active_mask, keep_improved, train_epochs,
};
use quench_train::init::{Init, sub_seed};
use quench_train::optim::{AdamConfig, MemberAdam};
use quench_train::params::{clip_member_norms, require_grad, stepping_members};
use quench_train::settings::{self, Seeded, Valid, Validate};
use quench_train::stopping::{Better, EarlyStopping};

/// Purpose tags of a seed's random streams (see [`sub_seed`]).
const ENCODER_STREAM: u64 = 11;
const HEAD_STREAM: u64 = 12;
const CIRCUIT_STREAM: u64 = 13;
const SHUFFLE_STREAM: u64 = 14;
const DROPOUT_STREAM: u64 = 15;

/// Settings of the hybrid classifier; the defaults are the original's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HybridConfig {
    /// One member per seed: initialisation, circuit weights, dropout and shuffle.
    pub seeds: Vec<u64>,
    /// Most epochs (the original: 50).
    pub epochs: usize,
    /// Samples per batch (the original: 64); the last partial batch is dropped.
    pub batch_size: usize,
    /// Adam's learning rate at the start.
    pub learning_rate: f64,
    /// Adam's (coupled, PyTorch) weight decay.
    pub weight_decay: f64,
    /// StepLR: the rate is multiplied by `gamma` every `step_size` epochs.
    pub step_size: usize,
    /// StepLR's factor.
    pub gamma: f64,
    /// Early stopping: a member stops after this many epochs without a better validation
    /// accuracy; its best weights are the ones tested.
    pub patience: usize,
    /// Gradient-norm clip per member.
    pub clip_norm: f64,
    /// Dropout rate after every hidden ReLU.
    pub dropout: f64,
    /// Variational layers of the circuit (RY on every qubit and a CNOT ring each).
    pub layers: usize,
    /// Standard deviation of the circuit weights' normal initialisation.
    pub weight_std: f64,
}

impl Default for HybridConfig {
    fn default() -> Self {
        Self {
            seeds: vec![42],
            epochs: 50,
            batch_size: 64,
            learning_rate: 1e-3,
            weight_decay: 1e-4,
            step_size: 10,
            gamma: 0.1,
            patience: 10,
            clip_norm: 1.0,
            dropout: 0.2,
            layers: 3,
            weight_std: 0.01,
        }
    }
}

impl Validate for HybridConfig {
    type Error = HybridError;

    /// Refuses settings no run can use, naming the first, and circuit depths and batches whose
    /// states cannot fit in memory.
    fn validate(&self) -> Result<(), HybridError> {
        settings::seeds(&self.seeds)?;
        settings::at_least_one(&[
            ("epochs", self.epochs),
            ("batch_size", self.batch_size),
            ("step_size", self.step_size),
            ("patience", self.patience),
            ("layers", self.layers),
        ])?;
        settings::positive(&[
            ("learning_rate", self.learning_rate),
            ("clip_norm", self.clip_norm),
        ])?;
        settings::non_negative(&[
            ("weight_decay", self.weight_decay),
            ("gamma", self.gamma),
            ("weight_std", self.weight_std),
        ])?;
        settings::rate(&[("dropout", self.dropout)])?;
        settings::epochs("epochs", self.epochs)?;
        self.check_memory()
    }
}

impl Seeded for HybridConfig {
    fn seeds(&self) -> &[u64] {
        &self.seeds
    }

    fn seeds_mut(&mut self) -> &mut Vec<u64> {
        &mut self.seeds
    }
}

impl HybridConfig {
    /// Refuses circuit depths, batches and seed counts whose states cannot fit in host
    /// memory, before anything is allocated ([`quench_support::budget`]): autodiff keeps each
    /// gate's output, 16 complex f32 amplitudes per sample and member, and its gradient (a
    /// layer is 8 gates: an RY per qubit and the CNOT ring); and each member's parameters
    /// (encoder, circuit, head: about 70,000) with their gradient and Adam's two moments.
    fn check_memory(&self) -> Result<(), HybridError> {
        let dense = |widths: &[usize]| -> u128 {
            widths
                .windows(2)
                .map(|w| (w[0] * w[1] + w[1]) as u128)
                .sum()
        };
        let parameters = dense(&crate::model::ENCODER)
            + dense(&crate::model::HEAD)
            + (self.layers as u128).saturating_mul(4);
        let states = (self.seeds.len() as u128)
            .saturating_mul(self.batch_size as u128)
            .saturating_mul(self.layers as u128)
            .saturating_mul(8 * 16 * 2 * 2);
        let values = states.saturating_add(
            parameters
                .saturating_mul(4)
                .saturating_mul(self.seeds.len() as u128),
        );
        quench_support::budget::check_fits(
            || {
                format!(
                    "the circuit's states and the parameters for layers = {}, {} seed(s) at \
                     batch {}",
                    self.layers,
                    self.seeds.len(),
                    self.batch_size
                )
            },
            values.saturating_mul(4),
        )?;
        Ok(())
    }
}

/// Where the frozen backbone runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FeatureMode {
    /// On every batch, as the original does.
    PerBatch,
    /// Once per image before training; the features stay on the device.
    Precomputed,
}

/// How a run computes: the circuit, the backbone and the precision of the classical layers.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Execution {
    /// How the circuit runs (or the identity, for the ablation).
    pub circuit: CircuitMode,
    /// Where the backbone runs.
    pub features: FeatureMode,
    /// Precision of the encoder and head (the circuit stays in f32).
    pub precision: Precision,
}

/// One seed's result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SeedOutcome {
    /// The seed.
    pub seed: u64,
    /// Test accuracy of the best-validation weights.
    pub test_accuracy: f64,
    /// Best validation accuracy and the epoch (from 0) it was reached.
    pub best_validation_accuracy: f64,
    /// Epoch of the best validation accuracy.
    pub best_epoch: usize,
    /// Mean training loss of every epoch it trained.
    pub train_loss: Vec<f64>,
}

/// The result of a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HybridOutcome {
    /// Every seed's result, in the order of the configuration.
    pub seeds: Vec<SeedOutcome>,
    /// Epochs the program ran (until every member stopped or the limit).
    pub epochs: usize,
    /// Training batches of one epoch.
    pub batches_per_epoch: usize,
    /// Steps skipped by f16 loss scaling.
    pub skipped_steps: u64,
}

impl HybridOutcome {
    /// Mean and spread of the test accuracy over seeds.
    pub fn test_accuracy(&self) -> MeanStd {
        MeanStd::of(
            &self
                .seeds
                .iter()
                .map(|s| s.test_accuracy)
                .collect::<Vec<_>>(),
        )
    }
}

/// Trains the hybrid classifier on `data` (images `[784]`, normalised) with the frozen
/// `backbone`, one member per seed of `config`, as `execution` says.
pub fn train_hybrid<B: QuenchBackend>(
    data: &HybridData,
    backbone: &ResNet18<B::InnerBackend>,
    config: &Valid<HybridConfig>,
    execution: &Execution,
    device: &B::Device,
) -> Result<HybridOutcome, HybridError> {
    execution.precision.check::<B>(device)?;
    let parts = match execution.features {
        FeatureMode::PerBatch => data.clone(),
        FeatureMode::Precomputed => data.features(backbone, device)?,
    };
    parts.check(config.batch_size)?;
    let circuit = Circuit::angle_encoded_ring(ENCODER[3], config.layers)?;
    let model = HybridModel::<B>::new(circuit, execution.circuit, device)?;
    let members = config.seeds.len();
    let resident_validation = match execution.features {
        FeatureMode::Precomputed => Some(encode(
            &parts.validation,
            execution.features,
            backbone,
            &mut Inference::default(),
            device,
        )?),
        FeatureMode::PerBatch => {
            check_mnist_images(&parts.train, "training images")?;
            None
        }
    };
    let shuffles: Vec<u64> = config
        .seeds
        .iter()
        .map(|&s| sub_seed(s, SHUFFLE_STREAM))
        .collect();
    let train = Arc::new(parts.train.clone());
    let loader = Loader::<B::InnerBackend>::new(
        vec![train; members],
        &shuffles,
        &LoaderConfig {
            batch_size: config.batch_size,
            shuffle: true,
            drop_last: true,
            mode: Mode::Resident,
        },
        device,
    )?;
    let params = initial_params::<B::InnerBackend, B>(&model, config, device);
    let adam = MemberAdam::<B::InnerBackend>::new(
        AdamConfig {
            weight_decay: config.weight_decay,
            ..AdamConfig::default()
        },
        members,
        device,
    );
    let _dropout_generator = SeededGenerator::acquire::<B>(
        device,
        config
            .seeds
            .iter()
            .fold(0, |acc, &s| sub_seed(acc ^ s, DROPOUT_STREAM)),
    );
    let mut trainer = Members {
        model,
        config,
        execution,
        backbone,
        validation: &parts.validation,
        resident_validation,
        loader,
        best: params.clone(),
        params,
        adam,
        amp: MixedPrecision::new(execution.precision),
        kept: Inference::default(),
        device: device.clone(),
    };
    let stopping = EarlyStopping::new(members, config.patience, Better::Higher);
    let mut step_lr =
        |epoch: usize| config.learning_rate * config.gamma.powi((epoch / config.step_size) as i32);
    let trained = train_epochs(&mut trainer, config.epochs, stopping, &mut step_lr)?;
    let test_features = encode(
        &parts.test,
        execution.features,
        backbone,
        &mut trainer.kept,
        device,
    )?;
    let test = to_host_f32(accuracy(
        &trainer.model,
        &trainer.best,
        test_features,
        &parts.test,
    ));
    Ok(HybridOutcome {
        seeds: config
            .seeds
            .iter()
            .enumerate()
            .map(|(m, &seed)| SeedOutcome {
                seed,
                test_accuracy: f64::from(test[m]),
                best_validation_accuracy: trained.stopping.best(m),
                best_epoch: trained.stopping.best_epoch(m),
                train_loss: trained.histories[m].iter().map(|e| e.train_loss).collect(),
            })
            .collect(),
        epochs: trained.epochs,
        batches_per_epoch: trainer.loader.batches(),
        skipped_steps: trainer.amp.skipped_steps(),
    })
}

/// A part's features `[samples, 512]`: uploaded once when pre-computed; through the backbone
/// at every use otherwise, as the original evaluates its whole model.
fn encode<B: QuenchOps>(
    dataset: &Dataset,
    features: FeatureMode,
    backbone: &ResNet18<B>,
    kept: &mut Inference<B>,
    device: &B::Device,
) -> Result<Tensor<B, 2>, HybridError> {
    Ok(match features {
        FeatureMode::Precomputed => {
            float_tensor(dataset.features().to_vec(), [dataset.len(), 512], device)
        }
        FeatureMode::PerBatch => backbone_features(dataset, backbone, kept, device)?,
    })
}

/// The seeds' weights, optimiser and data as the shared epoch loop trains them.
struct Members<'a, B: QuenchBackend> {
    model: HybridModel<B>,
    config: &'a HybridConfig,
    execution: &'a Execution,
    backbone: &'a ResNet18<B::InnerBackend>,
    validation: &'a Dataset,
    /// The validation part's features when they are pre-computed.
    resident_validation: Option<Tensor<B::InnerBackend, 2>>,
    loader: Loader<B::InnerBackend>,
    params: Vec<Tensor<B::InnerBackend, 3>>,
    best: Vec<Tensor<B::InnerBackend, 3>>,
    adam: MemberAdam<B::InnerBackend>,
    amp: MixedPrecision,
    /// The backbone's product weights (each convolution's weights permuted into patch order,
    /// BatchNorm folded), made at the first batch and kept for the run, as PyTorch keeps a
    /// frozen convolution's weights in the layout its kernel reads: made again for every
    /// batch, they were a twentieth of the baseline's time.
    kept: Inference<B::InnerBackend>,
    device: B::Device,
}

impl<B: QuenchBackend> SeedMembers for Members<'_, B> {
    type Error = HybridError;

    /// Every batch through the backbone (unless pre-computed), encoder, circuit and head;
    /// then the validation accuracy `[members]` and the summed losses, read back once.
    fn epoch(
        &mut self,
        epoch: usize,
        rates: &Rates,
        active: Option<&[bool]>,
    ) -> Result<EpochValues, HybridError> {
        let (config, device) = (self.config, &self.device);
        let members = config.seeds.len();
        let precision = self.execution.precision;
        let lr = rates.tensor::<B::InnerBackend>(device);
        let active = active_mask::<B::InnerBackend>(active, device);
        let mut loss_sum = Tensor::<B::InnerBackend, 1>::zeros([members], device);
        for batch in self.loader.epoch(epoch as u64) {
            let size = batch.features.dims()[1];
            let features = match self.execution.features {
                FeatureMode::Precomputed => batch.features,
                FeatureMode::PerBatch => self
                    .backbone
                    .forward_kept(
                        batch.features.view_to([members * size, 1, 28, 28]),
                        &mut self.kept,
                    )
                    .view_to([members, size, 512]),
            };
            let p = require_grad::<B>(self.params.clone());
            let logits =
                self.model
                    .forward(&p, Tensor::from_inner(features), config.dropout, precision);
            let loss = cross_entropy(logits, Tensor::<B, 2, Int>::from_inner(batch.labels));
            loss_sum = loss_sum + loss.clone().inner();
            let Some(grads) = self.amp.gradients(loss.sum_all(), &p) else {
                continue;
            };
            let grads = clip_member_norms(grads, config.clip_norm);
            let step = stepping_members(active.clone(), &grads, precision);
            self.params = self.adam.step(self.params.clone(), grads, lr.clone(), step);
        }
        let validation_features = match &self.resident_validation {
            Some(features) => features.clone(),
            None => encode(
                self.validation,
                self.execution.features,
                self.backbone,
                &mut self.kept,
                device,
            )?,
        };
        let validation = accuracy(
            &self.model,
            &self.params,
            validation_features,
            self.validation,
        );
        Ok(EpochValues::read(validation, loss_sum))
    }

    fn keep_best(&mut self, improved: &[bool]) {
        let best = std::mem::take(&mut self.best);
        self.best = keep_improved(best, &self.params, improved, &self.device);
    }

    fn batches(&self) -> usize {
        self.loader.batches()
    }
}

/// Encoder, circuit weights and head of every member, each drawn from its seed alone:
/// PyTorch's default `nn.Linear` initialisation and circuit weights `N(0, weight_std^2)`.
fn initial_params<B: QuenchOps, M: QuenchOps>(
    model: &HybridModel<M>,
    config: &HybridConfig,
    device: &B::Device,
) -> Vec<Tensor<B, 3>> {
    let streams =
        |purpose| -> Vec<u64> { config.seeds.iter().map(|&s| sub_seed(s, purpose)).collect() };
    let ensemble = |widths: &[usize], purpose| {
        seeded_ensemble::<B>(
            Init::TorchDefault,
            Activation::Relu,
            widths,
            &streams(purpose),
            device,
        )
        .params()
    };
    let mut params = ensemble(&ENCODER, ENCODER_STREAM);
    if model.has_circuit() {
        let n = model.circuit.weights();
        let mut weights = Vec::with_capacity(config.seeds.len() * n);
        for stream in streams(CIRCUIT_STREAM) {
            let mut rng = StdRng::seed_from_u64(stream);
            match Normal::new(0.0, config.weight_std) {
                Ok(normal) => weights.extend((0..n).map(|_| normal.sample(&mut rng) as f32)),
                Err(_) => weights.extend(std::iter::repeat_n(0.0, n)),
            }
        }
        params.push(float_tensor(weights, [config.seeds.len(), 1, n], device));
    }
    params.extend(ensemble(&HEAD, HEAD_STREAM));
    params
}

/// Accuracy of every member on `features` `[samples, 512]` with labels of `part`: `[members]`.
fn accuracy<B: QuenchBackend>(
    model: &HybridModel<B>,
    params: &[Tensor<B::InnerBackend, 3>],
    features: Tensor<B::InnerBackend, 2>,
    part: &Dataset,
) -> Tensor<B::InnerBackend, 1> {
    let members = params[0].dims()[0];
    let [samples, width] = features.dims();
    let device = features.device();
    let params: Vec<Tensor<B, 3>> = params.iter().cloned().map(Tensor::from_inner).collect();
    let features = Tensor::<B, 3>::from_inner(
        features
            .reshape_to([1, samples, width])
            .repeat_dim(0, members),
    );
    let logits = model
        .forward(&params, features, 0.0, Precision::F32)
        .inner();
    let labels = Tensor::<B::InnerBackend, 3, Int>::from_data(
        TensorData::new(part.labels().to_vec(), [1, samples, 1]),
        &device,
    )
    .repeat_dim(0, members);
    logits
        .argmax(2)
        .equal(labels)
        .float()
        .mean_along(1)
        .reshape_to([members])
}
