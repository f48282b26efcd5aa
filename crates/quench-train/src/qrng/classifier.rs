//! The source classifier ("optimize_best_model"): an MLP `bits -> 30 -> 20 -> classes` with
//! ReLU and dropout, cross-entropy plus an L1 penalty, Adam with per-member gradient-norm
//! clipping, and model selection on a validation split.
//!
//! The seeds are members of one batched program. Each member has its own split (drawn from its
//! seed, as the original's `random_split` after seeding), shuffle, initialisation, learning
//! rate (reduce-on-plateau) and early stopping; a stopped member is a mask on the member axis,
//! and each member's best weights are kept on the device with `mask_where`. Per epoch the host
//! reads one `[2 members]` vector (validation accuracy and mean training loss), which the
//! schedule needs.

use std::fmt;
use std::sync::Arc;

use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{Bool, Int, Tensor, TensorData};
use quench_data::{Dataset, Loader, LoaderConfig, Mode};
use quench_device::readback::to_host_f32;
use quench_device::stats::max_or_nan;
use quench_device::{Precision, SeededGenerator};
use serde::{Deserialize, Serialize};

use super::schedule::{MemberSchedule, PlateauConfig};
use super::split::Split;
use super::{Batching, QrngError, seeded_ensemble, sub_seed};
use crate::amp::MixedPrecision;
use crate::classify::{cross_entropy, dropout, member_mask, member_tensor};
use crate::ensemble::{Activation, EnsembleMlp};
use crate::init::Init;
use crate::optim::{AdamConfig, MemberAdam};
use crate::params::{clip_member_norms, replace_members, require_grad, stepping_members};
use crate::stats::MeanStd;

/// Hidden widths of the classifier.
const HIDDEN: [usize; 2] = [30, 20];
/// Its nonlinearity.
const ACTIVATION: Activation = Activation::Relu;
/// Purpose tags of a seed's random streams (see [`sub_seed`]).
const INIT_STREAM: u64 = 2;
const SHUFFLE_STREAM: u64 = 3;
const DROPOUT_STREAM: u64 = 4;

/// Settings of the classifier; the defaults are the original's, except that model selection
/// uses a validation split carved from the training part instead of the test split.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ClassifierConfig {
    /// One training run per seed; the seed draws its split, shuffles, initialisation and
    /// dropout masks.
    pub seeds: Vec<u64>,
    /// Dropout rate after each hidden layer.
    pub dropout: f64,
    /// Coefficient of the L1 penalty `sum |p|` over all parameters, added to the loss.
    pub l1: f64,
    /// Initial Adam learning rate.
    pub lr: f64,
    /// Largest L2 norm of a member's whole gradient.
    pub clip_norm: f64,
    /// Reduce-on-plateau of the learning rate on validation accuracy.
    pub plateau: PlateauConfig,
    /// Epochs without a better validation accuracy before a member stops.
    pub early_stopping_patience: usize,
    /// Most epochs a member trains.
    pub max_epochs: usize,
    /// Samples per batch and member (the original's 8; its guide says 128).
    pub batch_size: usize,
    /// Fraction of the samples held out as the test split.
    pub test_fraction: f64,
    /// Fraction of the training part held out for validation.
    pub validation_fraction: f64,
}

impl Default for ClassifierConfig {
    fn default() -> Self {
        Self {
            seeds: vec![89, 90, 91, 92],
            dropout: 0.2,
            l1: 0.002,
            lr: 1e-3,
            clip_norm: 1.0,
            plateau: PlateauConfig::default(),
            early_stopping_patience: 100,
            max_epochs: 1_000,
            batch_size: 8,
            test_fraction: 0.2,
            validation_fraction: 0.2,
        }
    }
}

impl ClassifierConfig {
    fn validate(&self) -> Result<(), QrngError> {
        let positive = |field, value: f64| {
            if value > 0.0 && value.is_finite() {
                Ok(())
            } else {
                Err(QrngError::config(
                    field,
                    value,
                    "must be positive and finite",
                ))
            }
        };
        positive("lr", self.lr)?;
        positive("clip_norm", self.clip_norm)?;
        if self.seeds.is_empty() {
            return Err(QrngError::config("seeds", "[]", "needs at least one seed"));
        }
        if !(0.0..1.0).contains(&self.dropout) {
            return Err(QrngError::config(
                "dropout",
                self.dropout,
                "must lie in [0, 1)",
            ));
        }
        if !(self.l1 >= 0.0 && self.l1.is_finite()) {
            return Err(QrngError::config(
                "l1",
                self.l1,
                "must be non-negative and finite",
            ));
        }
        if !(self.plateau.factor > 0.0 && self.plateau.factor < 1.0) {
            return Err(QrngError::config(
                "plateau.factor",
                self.plateau.factor,
                "must lie strictly between 0 and 1",
            ));
        }
        if self.max_epochs == 0 {
            return Err(QrngError::config("max_epochs", 0, "must be at least 1"));
        }
        Ok(())
    }
}

/// How a training run executes; none of it changes what is computed, except the precision of
/// the forward pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Execution {
    /// The seeds as one batched program, or one after another.
    pub batching: Batching,
    /// How batches reach the device: streamed from the host or gathered from device memory.
    pub loader: Mode,
    /// Arithmetic of the forward pass; weights, optimiser state and the loss stay f32.
    pub precision: Precision,
}

impl Default for Execution {
    /// One batched program over device-resident data, in f32.
    fn default() -> Self {
        Self {
            batching: Batching::Members,
            loader: Mode::Resident,
            precision: Precision::F32,
        }
    }
}

/// One epoch of one member.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct EpochRecord {
    /// Accuracy on the member's validation split, in `[0, 1]`.
    pub validation_accuracy: f64,
    /// Mean of the batch losses (cross-entropy plus penalty) over the epoch.
    pub train_loss: f64,
    /// Learning rate the epoch trained with.
    pub lr: f64,
}

/// The outcome of one seed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SeedOutcome {
    /// The seed.
    pub seed: u64,
    /// Accuracy of the best weights on the untouched test split, in `[0, 1]`.
    pub test_accuracy: f64,
    /// The best validation accuracy, whose weights were kept.
    pub best_validation_accuracy: f64,
    /// Epoch (from 0) of the best validation accuracy.
    pub best_epoch: Option<usize>,
    /// Epochs trained before stopping early or reaching the limit.
    pub epochs: usize,
    /// Every epoch trained.
    pub history: Vec<EpochRecord>,
}

/// The outcome of every seed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ClassifierOutcome {
    /// One entry per seed, in the configuration's order.
    pub seeds: Vec<SeedOutcome>,
    /// Member-epochs computed: for each program, its epochs times its members (a batched
    /// program keeps computing stopped members until the last one stops).
    pub member_epochs: usize,
}

impl ClassifierOutcome {
    /// Mean and population standard deviation of the test accuracy over the seeds.
    pub fn test_accuracy(&self) -> (f64, f64) {
        let accuracies: Vec<f64> = self.seeds.iter().map(|s| s.test_accuracy).collect();
        let s = MeanStd::of(&accuracies);
        (s.mean, s.std)
    }

    /// The largest difference between every epoch's training loss here and in `reference`,
    /// seed by seed, relative to the reference's: what must stay rounding-sized when two
    /// executions of one configuration differ only in scheduling. NaN when any loss is,
    /// infinite when seeds or epochs do not pair up.
    pub fn max_train_loss_difference(&self, reference: &Self) -> f64 {
        let paired = self.seeds.len() == reference.seeds.len()
            && self
                .seeds
                .iter()
                .zip(&reference.seeds)
                .all(|(a, b)| a.seed == b.seed && a.history.len() == b.history.len());
        if !paired {
            return f64::INFINITY;
        }
        max_or_nan(self.seeds.iter().zip(&reference.seeds).flat_map(|(a, b)| {
            a.history
                .iter()
                .zip(&b.history)
                .map(|(x, y)| (x.train_loss - y.train_loss).abs() / y.train_loss.abs())
        }))
    }
}

impl fmt::Display for ClassifierOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{:>6} {:>10} {:>10} {:>10} {:>7}",
            "seed", "test acc", "best val", "best epoch", "epochs"
        )?;
        for s in &self.seeds {
            writeln!(
                f,
                "{:>6} {:>9.2}% {:>9.2}% {:>10} {:>7}",
                s.seed,
                100.0 * s.test_accuracy,
                100.0 * s.best_validation_accuracy,
                s.best_epoch.map_or("-".to_string(), |e| e.to_string()),
                s.epochs
            )?;
        }
        let (mean, std) = self.test_accuracy();
        writeln!(
            f,
            "test accuracy {:.2} % +- {:.2} %",
            100.0 * mean,
            100.0 * std
        )
    }
}

/// Trains the classifier on `data` (features `[len, bits]`, labels `0..classes`) once per seed
/// of `config`, as `execution` says, and reports each seed's test accuracy.
///
/// Refused: an invalid configuration, a data set too small to split, or a precision that
/// `device` cannot run. Under f16 the gradients go through dynamic loss scaling
/// ([`MixedPrecision`]).
pub fn train_classifier<B: AutodiffBackend>(
    data: &Dataset,
    config: &ClassifierConfig,
    execution: &Execution,
    device: &B::Device,
) -> Result<ClassifierOutcome, QrngError> {
    config.validate()?;
    execution.precision.check::<B>(device)?;
    let programs: Vec<&[u64]> = match execution.batching {
        Batching::Members => vec![config.seeds.as_slice()],
        Batching::OneAtATime => config.seeds.chunks(1).collect(),
    };
    let mut outcome = ClassifierOutcome {
        seeds: Vec::with_capacity(config.seeds.len()),
        member_epochs: 0,
    };
    for seeds in programs {
        let (members, epochs) = Program::<B>::new(data, seeds, config, execution, device)?.run();
        outcome.member_epochs += epochs * seeds.len();
        outcome.seeds.extend(members);
    }
    Ok(outcome)
}

/// One batched program: the seeds' data, parameters and schedules.
struct Program<'a, B: AutodiffBackend> {
    config: &'a ClassifierConfig,
    /// The forward pass's precision and, under f16, its loss scaler.
    amp: MixedPrecision,
    seeds: &'a [u64],
    /// Output width: one past the largest label of the data.
    classes: usize,
    loader: Loader<B::InnerBackend>,
    validation: Part<B::InnerBackend>,
    test: Part<B::InnerBackend>,
    device: B::Device,
}

/// A split part of every member on the device.
struct Part<B: Backend> {
    /// `[members, samples, bits]`.
    features: Tensor<B, 3>,
    /// `[members, samples, 1]`.
    labels: Tensor<B, 3, Int>,
}

impl<B: Backend> Part<B> {
    /// Stacks the `pick`ed part of each member's split.
    fn upload(
        data: &Dataset,
        splits: &[Split],
        pick: fn(&Split) -> &[usize],
        device: &B::Device,
    ) -> Self {
        let (members, samples, width) = (splits.len(), pick(&splits[0]).len(), data.sample_len());
        let mut features = Vec::with_capacity(members * samples * width);
        let mut labels = Vec::with_capacity(members * samples);
        for split in splits {
            for &i in pick(split) {
                features.extend_from_slice(data.sample(i));
                labels.push(data.labels()[i]);
            }
        }
        Self {
            features: Tensor::from_data(
                TensorData::new(features, [members, samples, width]),
                device,
            ),
            labels: Tensor::from_data(TensorData::new(labels, [members, samples, 1]), device),
        }
    }

    /// Accuracy of each member's network on its own samples: `[members]`.
    fn accuracy(&self, params: &[Tensor<B, 3>]) -> Tensor<B, 1> {
        let logits =
            EnsembleMlp::from_params(params.to_vec(), ACTIVATION).forward(self.features.clone());
        let members = logits.dims()[0];
        logits
            .argmax(2)
            .equal(self.labels.clone())
            .float()
            .mean_dim(1)
            .reshape([members])
    }
}

impl<'a, B: AutodiffBackend> Program<'a, B> {
    fn new(
        data: &Dataset,
        seeds: &'a [u64],
        config: &'a ClassifierConfig,
        execution: &Execution,
        device: &B::Device,
    ) -> Result<Self, QrngError> {
        let splits = seeds
            .iter()
            .map(|&seed| {
                Split::draw(
                    data.len(),
                    config.test_fraction,
                    config.validation_fraction,
                    seed,
                )
            })
            .collect::<Result<Vec<_>, _>>()?;
        let train = splits
            .iter()
            .map(|s| data.subset(&s.train).map(Arc::new))
            .collect::<Result<Vec<_>, _>>()?;
        let shuffles: Vec<u64> = seeds.iter().map(|&s| sub_seed(s, SHUFFLE_STREAM)).collect();
        let loader = Loader::new(
            train,
            &shuffles,
            &LoaderConfig {
                batch_size: config.batch_size,
                shuffle: true,
                drop_last: false,
                mode: execution.loader,
            },
            device,
        )?;
        Ok(Self {
            config,
            amp: MixedPrecision::new(execution.precision),
            seeds,
            classes: data
                .labels()
                .iter()
                .copied()
                .max()
                .map_or(1, |c| c.max(0) as usize + 1),
            loader,
            validation: Part::upload(data, &splits, |s| s.validation.as_slice(), device),
            test: Part::upload(data, &splits, |s| s.test.as_slice(), device),
            device: device.clone(),
        })
    }

    /// Trains until every member has stopped or `max_epochs` is reached; returns each
    /// member's outcome and the epochs the program ran.
    fn run(mut self) -> (Vec<SeedOutcome>, usize) {
        let config = self.config;
        let device = self.device.clone();
        let members = self.seeds.len();
        let widths = [
            self.validation.features.dims()[2],
            HIDDEN[0],
            HIDDEN[1],
            self.classes,
        ];
        let inits: Vec<u64> = self
            .seeds
            .iter()
            .map(|&s| sub_seed(s, INIT_STREAM))
            .collect();
        let mut params = seeded_ensemble::<B::InnerBackend>(
            Init::XavierUniform { gain: 1.0 },
            ACTIVATION,
            &widths,
            &inits,
            &device,
        )
        .params();
        let mut best = params.clone();
        let mut adam = MemberAdam::<B::InnerBackend>::new(AdamConfig::default(), members, &device);
        let mut schedules: Vec<MemberSchedule> = self
            .seeds
            .iter()
            .map(|_| MemberSchedule::new(config.lr))
            .collect();
        let mut histories: Vec<Vec<EpochRecord>> = vec![Vec::new(); members];
        // Dropout masks come from the backend's generator, held for the whole run.
        let _dropout_generator = SeededGenerator::acquire::<B>(
            &device,
            self.seeds
                .iter()
                .fold(0, |acc, &s| sub_seed(acc ^ s, DROPOUT_STREAM)),
        );
        let mut epochs = 0;
        while epochs < config.max_epochs && schedules.iter().any(|s| !s.stopped) {
            let lr =
                member_tensor::<B::InnerBackend>(schedules.iter().map(|s| s.lr as f32), &device);
            let active = schedules.iter().any(|s| s.stopped).then(|| {
                member_mask::<B::InnerBackend>(schedules.iter().map(|s| !s.stopped), &device)
            });
            let loss_sum = self.train_epoch(epochs, &mut params, &mut adam, lr, active);
            let batches = self.loader.batches() as f64;
            let read: Vec<f32> = to_host_f32(Tensor::cat(
                vec![self.validation.accuracy(&params), loss_sum],
                0,
            ));
            let mut improved = vec![false; members];
            for (m, schedule) in schedules.iter_mut().enumerate() {
                if schedule.stopped {
                    continue;
                }
                let accuracy = f64::from(read[m]);
                histories[m].push(EpochRecord {
                    validation_accuracy: accuracy,
                    train_loss: f64::from(read[members + m]) / batches,
                    lr: schedule.lr,
                });
                improved[m] = schedule
                    .observe(
                        epochs,
                        accuracy,
                        &config.plateau,
                        config.early_stopping_patience,
                    )
                    .improved;
            }
            if improved.iter().any(|&i| i) {
                let mask = member_mask::<B::InnerBackend>(improved.into_iter(), &device);
                best = replace_members(best, &params, mask);
            }
            epochs += 1;
        }
        let test: Vec<f32> = to_host_f32(self.test.accuracy(&best));
        let outcomes = self
            .seeds
            .iter()
            .zip(schedules)
            .zip(histories)
            .zip(test)
            .map(|(((&seed, schedule), history), test)| SeedOutcome {
                seed,
                test_accuracy: f64::from(test),
                best_validation_accuracy: schedule.best,
                best_epoch: schedule.best_epoch,
                epochs: history.len(),
                history,
            })
            .collect();
        (outcomes, epochs)
    }

    /// One epoch of every member; returns the sum of each member's batch losses, `[members]`.
    fn train_epoch(
        &mut self,
        epoch: usize,
        params: &mut Vec<Tensor<B::InnerBackend, 3>>,
        adam: &mut MemberAdam<B::InnerBackend>,
        lr: Tensor<B::InnerBackend, 3>,
        active: Option<Tensor<B::InnerBackend, 3, Bool>>,
    ) -> Tensor<B::InnerBackend, 1> {
        let config = self.config;
        let precision = self.amp.precision();
        let members = self.seeds.len();
        let mut loss_sum = Tensor::<B::InnerBackend, 1>::zeros([members], &self.device);
        for batch in self.loader.epoch(epoch as u64) {
            let x = Tensor::<B, 3>::from_inner(precision.to_compute(batch.features));
            let p = require_grad::<B>(params.clone());
            let network = EnsembleMlp::from_params(precision.to_compute_all(&p), ACTIVATION);
            let logits = precision
                .to_master(network.forward_with(x, |h| dropout(h, config.dropout, precision)));
            let penalty = p
                .iter()
                .map(|t| t.clone().abs().sum_dim(2).sum_dim(1))
                .reduce(|a, b| a + b)
                .unwrap_or_else(|| unreachable!("the network has parameters"))
                .reshape([members]);
            let labels = Tensor::<B, 2, Int>::from_inner(batch.labels);
            let loss = cross_entropy(logits, labels) + penalty * config.l1;
            loss_sum = loss_sum + loss.clone().inner();
            let Some(grads) = self.amp.gradients(loss.sum(), &p) else {
                continue;
            };
            let grads = clip_member_norms(grads, config.clip_norm);
            let step = stepping_members(active.clone(), &grads, precision);
            *params = adam.step(params.clone(), grads, lr.clone(), step);
        }
        loss_sum
    }
}
