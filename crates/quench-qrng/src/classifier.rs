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

use quench_device::Precision;
use quench_kernels::SeededGenerator;
use quench_kernels::reductions::Reduce;
use quench_kernels::views::ReshapeTo;
use quench_kernels::{QuenchBackend, QuenchOps};
use std::convert::Infallible;
use std::fmt;
use std::sync::Arc;

use burn::tensor::{Int, Tensor, TensorData};
use quench_data::{Dataset, Loader, LoaderConfig, Mode};
use quench_kernels::readback::to_host_f32;
use quench_support::stats::max_or_nan;
use serde::{Deserialize, Serialize};

mod fused;

use super::schedule::{PlateauConfig, Plateaus};
use super::split::Split;
use super::{Batching, QrngError, seeded_ensemble, sub_seed};
use quench_kernels::ops::dropout::dropout;
use quench_support::stats::MeanStd;
use quench_train::amp::MixedPrecision;
use quench_train::classify::cross_entropy;
use quench_train::ensemble::{Activation, EnsembleMlp};
use quench_train::epochs::{
    EpochValues, Rates, SeedMembers, active_mask, keep_improved, train_epochs,
};
use quench_train::init::Init;
use quench_train::optim::{AdamConfig, MemberAdam};
use quench_train::params::{clip_member_norms, require_grad, stepping_members};
use quench_train::settings::{Seeded, Valid, Validate};
use quench_train::stopping::{Better, EarlyStopping};

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

impl Validate for ClassifierConfig {
    type Error = QrngError;

    /// Refuses settings no run can use, naming the first.
    fn validate(&self) -> Result<(), QrngError> {
        quench_train::settings::positive(&[("lr", self.lr), ("clip_norm", self.clip_norm)])?;
        quench_train::settings::seeds(&self.seeds)?;
        if !(0.0..1.0).contains(&self.dropout) {
            return Err(QrngError::number(
                "dropout",
                self.dropout,
                "must lie in [0, 1)",
            ));
        }
        if !(self.l1 >= 0.0 && self.l1.is_finite()) {
            return Err(QrngError::number(
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
        quench_train::settings::epochs("max_epochs", self.max_epochs)?;
        Ok(())
    }
}

impl Seeded for ClassifierConfig {
    fn seeds(&self) -> &[u64] {
        &self.seeds
    }

    fn seeds_mut(&mut self) -> &mut Vec<u64> {
        &mut self.seeds
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
    /// In f32, the seam's member-MLP training step without autodiff and dropout masks from
    /// counter-based streams, one per member ([`fused`]); in another precision, or when false
    /// (the original's way), autodiff with masks from the backend's generator.
    pub fused: bool,
}

impl Default for Execution {
    /// One batched program over device-resident data, in f32, with the fused step.
    fn default() -> Self {
        Self {
            batching: Batching::Members,
            loader: Mode::Resident,
            precision: Precision::F32,
            fused: true,
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
/// Refused: a data set too small to split, or a precision that
/// `device` cannot run. Under f16 the gradients go through dynamic loss scaling
/// ([`MixedPrecision`]).
pub fn train_classifier<B: QuenchBackend>(
    data: &Dataset,
    config: &Valid<ClassifierConfig>,
    execution: &Execution,
    device: &B::Device,
) -> Result<ClassifierOutcome, QrngError> {
    execution.precision.check::<B>(device)?;
    check_memory(data, config)?;
    let programs: Vec<&[u64]> = match execution.batching {
        Batching::Members => vec![config.seeds.as_slice()],
        Batching::OneAtATime => config.seeds.chunks(1).collect(),
    };
    let mut outcome = ClassifierOutcome {
        seeds: Vec::with_capacity(config.seeds.len()),
        member_epochs: 0,
    };
    for seeds in programs {
        let program = Program::new(data, seeds, config)?;
        let fused = execution.fused && execution.precision == Precision::F32;
        let (members, epochs) = if fused {
            let weights =
                fused::FusedMembers::<B::InnerBackend>::new(&program, data, execution, device)?;
            program.run(weights)
        } else {
            let weights = TensorMembers::<B>::new(&program, data, execution, device)?;
            program.run(weights)
        };
        outcome.member_epochs += epochs * seeds.len();
        outcome.seeds.extend(members);
    }
    Ok(outcome)
}

/// Refuses seed counts whose members cannot fit in host memory, before anything is allocated
/// ([`quench_support::budget`]). Counted per member: its copy of the lines (f32 features and
/// label) on the host and on the device, and eight parameter-sized buffers (weights,
/// gradients, Adam's two moments, the best weights kept and the step's work buffers). Measured
/// on the CPU backend (maximum resident memory over 2,000 and 6,000 seeds): 291 KB a seed at
/// 180 lines of 100 bits, 456 KB at 360, against 264 KB and 409 KB counted, so the count is a
/// lower bound and refuses only what cannot fit.
fn check_memory(data: &Dataset, config: &ClassifierConfig) -> Result<(), QrngError> {
    let bits = data.sample_len() as u128;
    let widths = [bits, HIDDEN[0] as u128, HIDDEN[1] as u128, 3];
    let parameters: u128 = widths.windows(2).map(|w| w[0] * w[1] + w[1]).sum();
    let lines = (data.len() as u128)
        .saturating_mul(bits + 1)
        .saturating_mul(4 * 2);
    let per_member = lines.saturating_add(parameters * 8 * 4);
    quench_support::budget::check_fits(
        || format!("{} seed(s) on {} lines", config.seeds.len(), data.len()),
        per_member.saturating_mul(config.seeds.len() as u128),
    )?;
    Ok(())
}

/// One batched program: the seeds and their splits, what either form of the members' weights
/// is built from.
struct Program<'a> {
    config: &'a ClassifierConfig,
    seeds: &'a [u64],
    splits: Vec<Split>,
    /// Each member's training part.
    train: Vec<Arc<Dataset>>,
    /// Layer widths, `[bits, hidden..., classes]`; classes is one past the largest label.
    widths: [usize; 4],
}

/// The members' weights and optimiser in one of the two forms a program trains: tensors
/// through autodiff ([`TensorMembers`]) or the seam's member-MLP training step without it
/// ([`fused::FusedMembers`]). An epoch returns each member's validation accuracy and summed
/// batch losses, and cannot fail.
trait Members: SeedMembers<Error = Infallible> {
    /// Accuracy of each member's best weights on its test split.
    fn test_accuracy(&self) -> Vec<f32>;
}

impl<'a> Program<'a> {
    fn new(
        data: &Dataset,
        seeds: &'a [u64],
        config: &'a ClassifierConfig,
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
        let classes = data
            .labels()
            .iter()
            .copied()
            .max()
            .map_or(1, |c| c.max(0) as usize + 1);
        Ok(Self {
            config,
            seeds,
            splits,
            train,
            widths: [data.sample_len(), HIDDEN[0], HIDDEN[1], classes],
        })
    }

    /// The members' training batches, each shuffled from its seed, placed as `mode` says.
    fn loader<B: QuenchOps>(&self, mode: Mode, device: &B::Device) -> Result<Loader<B>, QrngError> {
        let shuffles: Vec<u64> = self
            .seeds
            .iter()
            .map(|&s| sub_seed(s, SHUFFLE_STREAM))
            .collect();
        let config = LoaderConfig {
            batch_size: self.config.batch_size,
            shuffle: true,
            drop_last: false,
            mode,
        };
        Ok(Loader::new(self.train.clone(), &shuffles, &config, device)?)
    }

    /// Freshly initialised members.
    fn network<B: QuenchOps>(&self, device: &B::Device) -> EnsembleMlp<B> {
        let inits: Vec<u64> = self
            .seeds
            .iter()
            .map(|&s| sub_seed(s, INIT_STREAM))
            .collect();
        seeded_ensemble::<B>(
            Init::XavierUniform { gain: 1.0 },
            ACTIVATION,
            &self.widths,
            &inits,
            device,
        )
    }

    /// Trains until every member has stopped or `max_epochs` is reached; returns each
    /// member's outcome and the epochs the program ran.
    fn run(&self, mut weights: impl Members) -> (Vec<SeedOutcome>, usize) {
        let config = self.config;
        let members = self.seeds.len();
        let mut plateaus = Plateaus::new(members, config.lr, config.plateau);
        // The original starts its best accuracy at 0.
        let stopping = EarlyStopping::new(members, config.early_stopping_patience, Better::Higher)
            .starting_from(0.0);
        let trained = match train_epochs(&mut weights, config.max_epochs, stopping, &mut plateaus) {
            Ok(trained) => trained,
            Err(never) => match never {},
        };
        let test = weights.test_accuracy();
        let stopping = &trained.stopping;
        let outcomes = self
            .seeds
            .iter()
            .zip(trained.histories)
            .zip(test)
            .enumerate()
            .map(|(m, ((&seed, history), test))| SeedOutcome {
                seed,
                test_accuracy: f64::from(test),
                best_validation_accuracy: stopping.best(m),
                best_epoch: stopping.improved_ever(m).then(|| stopping.best_epoch(m)),
                epochs: history.len(),
                history: history
                    .into_iter()
                    .map(|e| EpochRecord {
                        validation_accuracy: e.validation,
                        train_loss: e.train_loss,
                        lr: e.lr,
                    })
                    .collect(),
            })
            .collect();
        (outcomes, trained.epochs)
    }
}

/// The members as tensors, trained through autodiff on any backend.
struct TensorMembers<'a, B: QuenchBackend> {
    config: &'a ClassifierConfig,
    /// The forward pass's precision and, under f16, its loss scaler.
    amp: MixedPrecision,
    loader: Loader<B::InnerBackend>,
    validation: Part<B::InnerBackend>,
    test: Part<B::InnerBackend>,
    params: Vec<Tensor<B::InnerBackend, 3>>,
    best: Vec<Tensor<B::InnerBackend, 3>>,
    adam: MemberAdam<B::InnerBackend>,
    /// Dropout masks come from the backend's generator, held for the whole run.
    _dropout_generator: SeededGenerator,
    device: B::Device,
}

/// A split part of every member on the device.
struct Part<B: QuenchOps> {
    /// `[members, samples, bits]`.
    features: Tensor<B, 3>,
    /// `[members, samples, 1]`.
    labels: Tensor<B, 3, Int>,
}

/// The `pick`ed part of each member's split, stacked: features `[members, samples, bits]` and
/// labels `[members, samples]` row-major, and the samples per member.
fn part_values(
    data: &Dataset,
    splits: &[Split],
    pick: fn(&Split) -> &[usize],
) -> (Vec<f32>, Vec<i64>, usize) {
    let samples = splits.first().map_or(0, |s| pick(s).len());
    let mut features = Vec::with_capacity(splits.len() * samples * data.sample_len());
    let mut labels = Vec::with_capacity(splits.len() * samples);
    for split in splits {
        for &i in pick(split) {
            features.extend_from_slice(data.sample(i));
            labels.push(data.labels()[i]);
        }
    }
    (features, labels, samples)
}

impl<B: QuenchOps> Part<B> {
    /// Stacks the `pick`ed part of each member's split.
    fn upload(
        data: &Dataset,
        splits: &[Split],
        pick: fn(&Split) -> &[usize],
        device: &B::Device,
    ) -> Self {
        let (features, labels, samples) = part_values(data, splits, pick);
        let (members, width) = (splits.len(), data.sample_len());
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
            .mean_along(1)
            .reshape_to([members])
    }
}

impl<'a, B: QuenchBackend> TensorMembers<'a, B> {
    fn new(
        program: &Program<'a>,
        data: &Dataset,
        execution: &Execution,
        device: &B::Device,
    ) -> Result<Self, QrngError> {
        let config = program.config;
        let loader = program.loader(execution.loader, device)?;
        let params = program.network::<B::InnerBackend>(device).params();
        let members = program.seeds.len();
        Ok(Self {
            config,
            amp: MixedPrecision::new(execution.precision),
            loader,
            validation: Part::upload(data, &program.splits, |s| s.validation.as_slice(), device),
            test: Part::upload(data, &program.splits, |s| s.test.as_slice(), device),
            best: params.clone(),
            params,
            adam: MemberAdam::new(AdamConfig::default(), members, device),
            _dropout_generator: SeededGenerator::acquire::<B>(
                device,
                program
                    .seeds
                    .iter()
                    .fold(0, |acc, &s| sub_seed(acc ^ s, DROPOUT_STREAM)),
            ),
            device: device.clone(),
        })
    }
}

impl<B: QuenchBackend> SeedMembers for TensorMembers<'_, B> {
    type Error = Infallible;

    fn epoch(
        &mut self,
        epoch: usize,
        rates: &Rates,
        active: Option<&[bool]>,
    ) -> Result<EpochValues, Infallible> {
        let config = self.config;
        let device = self.device.clone();
        let precision = self.amp.precision();
        let members = self.params[0].dims()[0];
        let lr = rates.tensor::<B::InnerBackend>(&device);
        let active = active_mask::<B::InnerBackend>(active, &device);
        let mut loss_sum = Tensor::<B::InnerBackend, 1>::zeros([members], &device);
        for batch in self.loader.epoch(epoch as u64) {
            let x = Tensor::<B, 3>::from_inner(precision.to_compute(batch.features));
            let p = require_grad::<B>(self.params.clone());
            let network = EnsembleMlp::from_params(precision.to_compute_all(&p), ACTIVATION);
            let logits =
                precision.to_master(network.forward_with(x, |h| dropout(h, config.dropout)));
            let penalty = p
                .iter()
                .map(|t| t.clone().abs().sum_along(2).sum_along(1))
                .reduce(|a, b| a + b)
                .unwrap_or_else(|| unreachable!("the network has parameters"))
                .reshape_to([members]);
            let labels = Tensor::<B, 2, Int>::from_inner(batch.labels);
            let loss = cross_entropy(logits, labels) + penalty * config.l1;
            loss_sum = loss_sum + loss.clone().inner();
            let Some(grads) = self.amp.gradients(loss.sum_all(), &p) else {
                continue;
            };
            let grads = clip_member_norms(grads, config.clip_norm);
            let step = stepping_members(active.clone(), &grads, precision);
            self.params = self.adam.step(self.params.clone(), grads, lr.clone(), step);
        }
        // One read per epoch: the schedule needs both.
        Ok(EpochValues::read(
            self.validation.accuracy(&self.params),
            loss_sum,
        ))
    }

    fn keep_best(&mut self, improved: &[bool]) {
        let best = std::mem::take(&mut self.best);
        self.best = keep_improved(best, &self.params, improved, &self.device);
    }

    fn batches(&self) -> usize {
        self.loader.batches()
    }
}

impl<B: QuenchBackend> Members for TensorMembers<'_, B> {
    fn test_accuracy(&self) -> Vec<f32> {
        to_host_f32(self.test.accuracy(&self.best))
    }
}
