//! Training of the temporal classifiers: every seed a member of one batched program, AdamW,
//! linear warm-up then cosine decay, label smoothing or class weights, per-member gradient
//! clipping and early stopping on the validation loss.

use quench_device::Precision;
use quench_kernels::SeededGenerator;
use quench_kernels::ops::view::ViewTo;
use quench_kernels::views::ReshapeTo;
use quench_kernels::{QuenchBackend, QuenchOps};
use std::borrow::Cow;
use std::sync::Arc;

use burn::tensor::{Int, Tensor, TensorData};
use quench_data::{Dataset, Loader, LoaderConfig, MarketData, MarketPart, Mode};
use quench_kernels::readback::float_tensor;
use serde::{Deserialize, Serialize};

use super::TemporalError;
use super::lstm::LstmCore;
use super::metrics::{Baselines, Scores, baselines};
use super::model::{CLASSES, ModelKind, TemporalNet, Widths};
use super::step::{Objective, step_gradients};
use quench_train::amp::MixedPrecision;
use quench_train::classify::{member_mask, smoothed_cross_entropy};
use quench_train::epochs::{EpochValues, Rates, SeedMembers, active_mask, train_epochs};
use quench_train::init::sub_seed;
use quench_train::optim::{AdamConfig, MemberAdam};
use quench_train::params::{clip_member_norms, replace_members, stepping_members};
use quench_train::settings::{self, Seeded, Valid, Validate};
use quench_train::stopping::{Better, EarlyStopping};

/// Purpose tags of a seed's random streams (see [`sub_seed`]).
const SHUFFLE_STREAM: u64 = 42;
const DROPOUT_STREAM: u64 = 43;
/// Windows evaluated per pass, bounding the evaluation's memory.
const EVALUATION_CHUNK: usize = 2048;

/// Settings of one model's training; [`TemporalConfig::for_model`] gives the original's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TemporalConfig {
    /// Which network.
    pub model: ModelKind,
    /// One member per seed: initialisation, dropout and shuffle.
    pub seeds: Vec<u64>,
    /// Most epochs.
    pub epochs: usize,
    /// Windows per batch; the last partial batch is kept, as PyTorch's `DataLoader` does.
    pub batch_size: usize,
    /// Peak learning rate.
    pub learning_rate: f64,
    /// AdamW's decoupled weight decay (0: Adam).
    pub weight_decay: f64,
    /// Epochs of linear warm-up from `learning_rate / warmup_epochs`.
    pub warmup_epochs: usize,
    /// Cosine decay to zero over the epochs after the warm-up; constant rate otherwise.
    pub cosine: bool,
    /// Label smoothing of the cross-entropy.
    pub label_smoothing: f64,
    /// Class weights `n / (3 n_c)` from the training labels (sklearn's "balanced").
    pub class_weighted: bool,
    /// Gradient-norm clip per member (0: none).
    pub clip_norm: f64,
    /// Early stopping: a member stops after this many epochs without a lower validation loss;
    /// its best weights are the ones tested.
    pub patience: usize,
    /// Dropout rate.
    pub dropout: f64,
    /// Network sizes.
    #[serde(default)]
    pub widths: Widths,
}

impl TemporalConfig {
    /// The original's settings for `model`.
    pub fn for_model(model: ModelKind) -> Self {
        let recurrent = Self {
            model,
            seeds: vec![42],
            epochs: 50,
            batch_size: 256,
            learning_rate: 5e-4,
            weight_decay: 5e-4,
            warmup_epochs: 5,
            cosine: true,
            label_smoothing: 0.1,
            class_weighted: false,
            clip_norm: 0.5,
            patience: 15,
            dropout: 0.4,
            widths: Widths::default(),
        };
        match model {
            ModelKind::Lstm => recurrent,
            ModelKind::Transformer => Self {
                learning_rate: 3e-4,
                dropout: 0.2,
                ..recurrent
            },
            ModelKind::Mlp => Self {
                epochs: 60,
                batch_size: 512,
                learning_rate: 1e-3,
                weight_decay: 0.0,
                warmup_epochs: 0,
                cosine: false,
                label_smoothing: 0.0,
                class_weighted: true,
                clip_norm: 0.0,
                dropout: 0.3,
                ..recurrent
            },
        }
    }

    /// Refuses widths and seeds whose training cannot fit in host memory, before anything is
    /// allocated, with the estimate and the limit in the message
    /// ([`quench_support::budget`]): per member, the parameters with their gradients, Adam's
    /// two moments and the best weights kept (five f32 copies), and the activations of a
    /// batch of windows `[window, features]`.
    pub fn check_memory(&self, window: usize, features: usize) -> Result<(), TemporalError> {
        let w = &self.widths;
        let per_member = self
            .widths
            .parameters(self.model, features)
            .saturating_mul(5)
            .saturating_add(w.activations(self.model, self.batch_size, window));
        let values = per_member.saturating_mul(self.seeds.len() as u128);
        quench_support::budget::check_fits(
            || {
                format!(
                    "the {} network with widths {w:?} for {} seed(s) at batch {} on windows of \
                     {window} bars",
                    self.model.name(),
                    self.seeds.len(),
                    self.batch_size,
                )
            },
            values.saturating_mul(4),
        )?;
        Ok(())
    }

    /// The learning rate of `epoch` (from 0): linear warm-up over `warmup_epochs`, then a
    /// cosine from the peak to zero at `epochs` (PyTorch's `LambdaLR` of the original).
    pub fn learning_rate_at(&self, epoch: usize) -> f64 {
        if epoch < self.warmup_epochs {
            return self.learning_rate * (epoch + 1) as f64 / self.warmup_epochs as f64;
        }
        if !self.cosine {
            return self.learning_rate;
        }
        let span = self.epochs.saturating_sub(self.warmup_epochs).max(1) as f64;
        let progress = (epoch - self.warmup_epochs) as f64 / span;
        0.5 * self.learning_rate * (1.0 + (std::f64::consts::PI * progress).cos())
    }
}

impl Validate for TemporalConfig {
    type Error = TemporalError;

    /// Refuses settings no run can use, naming the first.
    fn validate(&self) -> Result<(), TemporalError> {
        settings::seeds(&self.seeds)?;
        settings::at_least_one(&[
            ("epochs", self.epochs),
            ("batch_size", self.batch_size),
            ("patience", self.patience),
        ])?;
        settings::positive(&[("learning_rate", self.learning_rate)])?;
        settings::non_negative(&[
            ("weight_decay", self.weight_decay),
            ("clip_norm", self.clip_norm),
        ])?;
        settings::rate(&[
            ("label_smoothing", self.label_smoothing),
            ("dropout", self.dropout),
        ])?;
        self.widths.check()?;
        settings::epochs("epochs", self.epochs)?;
        Ok(())
    }
}

impl Seeded for TemporalConfig {
    fn seeds(&self) -> &[u64] {
        &self.seeds
    }

    fn seeds_mut(&mut self) -> &mut Vec<u64> {
        &mut self.seeds
    }
}

/// How a run computes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Execution {
    /// The LSTM's recurrence (ignored by the other models).
    pub core: LstmCore,
    /// Where the training windows live: resident on the device, gathered per batch, or
    /// assembled on the host per sample (the original's `DataLoader`).
    pub data: Mode,
    /// Precision of the network's arithmetic.
    pub precision: Precision,
}

impl Default for Execution {
    fn default() -> Self {
        Self {
            core: LstmCore::Fused,
            data: Mode::Resident,
            precision: Precision::F32,
        }
    }
}

/// One seed's result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SeedOutcome {
    /// The seed.
    pub seed: u64,
    /// Validation scores of the best weights.
    pub validation: Scores,
    /// Test scores of the best weights.
    pub test: Scores,
    /// Epoch (from 0) of the lowest validation loss.
    pub best_epoch: usize,
    /// Mean training loss of every epoch it trained.
    pub train_loss: Vec<f64>,
    /// Validation loss (unsmoothed, unweighted cross-entropy) of every epoch it trained.
    pub validation_loss: Vec<f64>,
}

/// The result of one model's run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TemporalOutcome {
    /// The model.
    pub model: ModelKind,
    /// Every seed's result, in the order of the configuration.
    pub seeds: Vec<SeedOutcome>,
    /// Epochs the program ran (until every member stopped or the limit).
    pub epochs: usize,
    /// Training batches of one epoch.
    pub batches_per_epoch: usize,
    /// Training windows.
    pub train_windows: usize,
    /// What predicting without a model scores on the same parts.
    pub baselines: Baselines,
    /// Steps skipped by f16 loss scaling.
    pub skipped_steps: u64,
}

/// Trains `config.model` on `data`, one member per seed, as `execution` says.
pub fn train_temporal<B: QuenchBackend>(
    data: &MarketData,
    config: &Valid<TemporalConfig>,
    execution: &Execution,
    device: &B::Device,
) -> Result<TemporalOutcome, TemporalError> {
    execution.precision.check::<B>(device)?;
    let [window, features] = window_shape(&data.train.windows)?;
    config.check_memory(window, features)?;
    for (name, part) in [
        ("train", &data.train),
        ("validation", &data.validation),
        ("test", &data.test),
    ] {
        if part.windows.is_empty() {
            return Err(TemporalError::InvalidValue {
                name,
                value: "0 windows".into(),
                reason: "every part needs at least one window",
            });
        }
        if part.windows.sample_shape() != [window, features] {
            return Err(TemporalError::InvalidValue {
                name,
                value: format!("windows of shape {:?}", part.windows.sample_shape()),
                reason: "must match the training part's windows",
            });
        }
    }
    let members = config.seeds.len();
    let class_weights = config
        .class_weighted
        .then(|| balanced_weights(data.train.windows.labels()));
    let net = TemporalNet::<B>::new(
        config.model,
        config.widths.clone(),
        features,
        execution.core,
    );
    let eval_net = TemporalNet::<B::InnerBackend>::new(
        config.model,
        config.widths.clone(),
        features,
        execution.core,
    );
    let (params, state) = eval_net.initial_params(&config.seeds, device);
    let shuffles: Vec<u64> = config
        .seeds
        .iter()
        .map(|&s| sub_seed(s, SHUFFLE_STREAM))
        .collect();
    // Resident data, the product's path, holds only the bars the model reads: the MLP reads
    // each window's last bar, a twentieth of the window at the default size, so its gathers
    // and evaluation copies shrink alike.
    let last_bar_only = execution.data == Mode::Resident && config.model == ModelKind::Mlp;
    let read_window = if last_bar_only { 1 } else { window };
    let train = Arc::new(model_inputs(&data.train.windows, last_bar_only)?.into_owned());
    let loader = Loader::<B::InnerBackend>::new(
        vec![train; members],
        &shuffles,
        &LoaderConfig {
            batch_size: config.batch_size,
            shuffle: true,
            drop_last: false,
            mode: execution.data,
        },
        device,
    )?;
    let validation = EvaluationPart::<B::InnerBackend>::upload(
        &*model_inputs(&data.validation.windows, last_bar_only)?,
        device,
    );
    let adam = MemberAdam::<B::InnerBackend>::new(
        AdamConfig {
            weight_decay: config.weight_decay,
            decoupled: true,
            ..AdamConfig::default()
        },
        members,
        device,
    );
    let precision = execution.precision;
    let objective = Objective {
        smoothing: config.label_smoothing,
        class_weights: class_weights.as_deref(),
        dropout: config.dropout,
        precision,
        lanes: quench_kernels::host_lanes::<B>(),
    };
    let _dropout_generator = SeededGenerator::acquire::<B>(
        device,
        config
            .seeds
            .iter()
            .fold(0, |acc, &s| sub_seed(acc ^ s, DROPOUT_STREAM)),
    );
    let mut trainer = Members {
        net,
        eval_net: &eval_net,
        config,
        objective,
        validation,
        loader,
        best_params: params.clone(),
        best_state: state.clone(),
        validation_predictions: Vec::new(),
        best_validation: vec![None; members],
        params,
        state,
        adam,
        amp: MixedPrecision::new(execution.precision),
        shape: [read_window, features],
        device: device.clone(),
    };
    let stopping = EarlyStopping::new(members, config.patience, Better::Lower);
    let mut rate = |epoch: usize| config.learning_rate_at(epoch);
    let trained = train_epochs(&mut trainer, config.epochs, stopping, &mut rate)?;
    let score = |part: &MarketPart| -> Result<Vec<Scores>, TemporalError> {
        let resident = EvaluationPart::<B::InnerBackend>::upload(
            &*model_inputs(&part.windows, last_bar_only)?,
            device,
        );
        let (_, predictions) = resident.evaluate(
            &eval_net,
            &trainer.best_params,
            &trainer.best_state,
            members,
        );
        Ok(predictions
            .chunks(part.windows.len())
            .map(|p| Scores::of(p, part.windows.labels()))
            .collect())
    };
    // The validation part was scored with each member's best weights in the epoch that made
    // them its best: those predictions are the scores' (a member that never improved is
    // scored now, as the test part is).
    let validation_scores =
        match kept_scores(&trainer.best_validation, data.validation.windows.labels()) {
            Some(scores) => scores,
            None => score(&data.validation)?,
        };
    let test_scores = score(&data.test)?;
    Ok(TemporalOutcome {
        model: config.model,
        seeds: config
            .seeds
            .iter()
            .enumerate()
            .map(|(m, &seed)| SeedOutcome {
                seed,
                validation: validation_scores[m],
                test: test_scores[m],
                best_epoch: trained.stopping.best_epoch(m),
                train_loss: trained.histories[m].iter().map(|e| e.train_loss).collect(),
                validation_loss: trained.histories[m].iter().map(|e| e.validation).collect(),
            })
            .collect(),
        epochs: trained.epochs,
        batches_per_epoch: trainer.loader.batches(),
        train_windows: data.train.windows.len(),
        baselines: baselines(data),
        skipped_steps: trainer.amp.skipped_steps(),
    })
}

/// The seeds' weights, optimiser and data as the shared epoch loop trains them.
struct Members<'a, B: QuenchBackend> {
    net: TemporalNet<B>,
    /// The same network without dropout, on the inner backend, for evaluation.
    eval_net: &'a TemporalNet<B::InnerBackend>,
    config: &'a TemporalConfig,
    objective: Objective<'a>,
    validation: EvaluationPart<B::InnerBackend>,
    loader: Loader<B::InnerBackend>,
    params: Vec<Tensor<B::InnerBackend, 3>>,
    /// Non-trained state of every member (the normalisation's running statistics).
    state: Vec<Tensor<B::InnerBackend, 3>>,
    /// Each member's best weights and state so far.
    best_params: Vec<Tensor<B::InnerBackend, 3>>,
    best_state: Vec<Tensor<B::InnerBackend, 3>>,
    /// The last epoch's validation predictions, member-major `[members, windows]`.
    validation_predictions: Vec<i64>,
    /// Each member's validation predictions with its best weights, once it has had some.
    best_validation: Vec<Option<Vec<i64>>>,
    adam: MemberAdam<B::InnerBackend>,
    amp: MixedPrecision,
    /// `[window, features]` of a window.
    shape: [usize; 2],
    device: B::Device,
}

impl<B: QuenchBackend> SeedMembers for Members<'_, B> {
    type Error = TemporalError;

    /// Every batch through the network's step; then the validation loss `[members]` and the
    /// summed training losses, read back once.
    fn epoch(
        &mut self,
        epoch: usize,
        rates: &Rates,
        active: Option<&[bool]>,
    ) -> Result<EpochValues, TemporalError> {
        let device = &self.device;
        let members = self.config.seeds.len();
        let [window, features] = self.shape;
        let lr = rates.tensor::<B::InnerBackend>(device);
        let active = active_mask::<B::InnerBackend>(active, device);
        let mut loss_sum = Tensor::<B::InnerBackend, 1>::zeros([members], device);
        for batch in self.loader.epoch(epoch as u64) {
            let size = batch.features.dims()[1];
            let x = batch.features.view_to([members, size, window, features]);
            let step = step_gradients::<B>(
                &self.net,
                &self.params,
                &self.state,
                x,
                batch.labels,
                &self.objective,
                &mut self.amp,
            );
            loss_sum = loss_sum + step.loss;
            let Some(grads) = step.gradients else {
                continue;
            };
            let grads = if self.config.clip_norm > 0.0 {
                clip_member_norms(grads, self.config.clip_norm)
            } else {
                grads
            };
            let stepping = stepping_members(active.clone(), &grads, self.objective.precision);
            self.params = self
                .adam
                .step(self.params.clone(), grads, lr.clone(), stepping.clone());
            self.state = match stepping {
                Some(mask) => replace_members(self.state.clone(), &step.state, mask),
                None => step.state,
            };
        }
        let (validation_loss, predictions) =
            self.validation
                .evaluate(self.eval_net, &self.params, &self.state, members);
        self.validation_predictions = predictions;
        Ok(EpochValues::read(validation_loss, loss_sum))
    }

    fn keep_best(&mut self, improved: &[bool]) {
        let mask = member_mask::<B::InnerBackend>(improved.iter().copied(), &self.device);
        self.best_params = replace_members(
            std::mem::take(&mut self.best_params),
            &self.params,
            mask.clone(),
        );
        self.best_state = replace_members(std::mem::take(&mut self.best_state), &self.state, mask);
        keep_improved_predictions(
            &mut self.best_validation,
            &self.validation_predictions,
            improved,
        );
    }

    fn batches(&self) -> usize {
        self.loader.batches()
    }
}

/// `windows` as the model reads them: cut to their last bars where `last_bar_only`, else
/// borrowed whole.
fn model_inputs(windows: &Dataset, last_bar_only: bool) -> Result<Cow<'_, Dataset>, TemporalError> {
    Ok(if last_bar_only {
        Cow::Owned(last_bars(windows)?)
    } else {
        Cow::Borrowed(windows)
    })
}

/// Each window of `windows` `[len, window, features]` cut to its last bar, `[len, 1,
/// features]`, labels kept.
fn last_bars(windows: &Dataset) -> Result<Dataset, quench_data::DataError> {
    let [window, features] = [windows.sample_shape()[0], windows.sample_shape()[1]];
    let last = windows
        .features()
        .chunks_exact(window * features)
        .flat_map(|w| &w[(window - 1) * features..]);
    Dataset::new(
        last.copied().collect(),
        windows.labels().to_vec(),
        vec![1, features],
    )
}

/// `[window, features]` of a part's windows.
fn window_shape(windows: &Dataset) -> Result<[usize; 2], TemporalError> {
    match windows.sample_shape() {
        &[window, features] => Ok([window, features]),
        shape => Err(TemporalError::InvalidValue {
            name: "train",
            value: format!("windows of shape {shape:?}"),
            reason: "must be [window, features]",
        }),
    }
}

/// `n / (classes n_c)` per class from `labels`, 0 for an absent class.
fn balanced_weights(labels: &[i64]) -> Vec<f32> {
    let mut counts = [0usize; CLASSES];
    for &l in labels {
        if let Some(c) = usize::try_from(l).ok().and_then(|l| counts.get_mut(l)) {
            *c += 1;
        }
    }
    counts
        .iter()
        .map(|&c| {
            if c == 0 {
                0.0
            } else {
                labels.len() as f32 / (CLASSES * c) as f32
            }
        })
        .collect()
}

/// Each member's part of `latest` (member-major predictions `[members, windows]`) kept in
/// `best` where `improved`.
fn keep_improved_predictions(best: &mut [Option<Vec<i64>>], latest: &[i64], improved: &[bool]) {
    let windows = latest.len() / best.len().max(1);
    for ((best, latest), _) in best
        .iter_mut()
        .zip(latest.chunks(windows.max(1)))
        .zip(improved)
        .filter(|(_, improved)| **improved)
    {
        *best = Some(latest.to_vec());
    }
}

/// Every member's scores against `labels` from its `kept` predictions, if each has some.
fn kept_scores(kept: &[Option<Vec<i64>>], labels: &[i64]) -> Option<Vec<Scores>> {
    kept.iter()
        .map(|p| p.as_deref().map(|p| Scores::of(p, labels)))
        .collect()
}

/// An evaluation part uploaded once: windows `[n, window, features]` and labels `[n]`.
struct EvaluationPart<B: QuenchOps> {
    windows: Tensor<B, 3>,
    labels: Tensor<B, 1, Int>,
}

impl<B: QuenchOps> EvaluationPart<B> {
    /// `windows` `[len, window, features]` on `device`.
    fn upload(windows: &Dataset, device: &B::Device) -> Self {
        let [window, features] = [windows.sample_shape()[0], windows.sample_shape()[1]];
        Self {
            windows: float_tensor(
                windows.features().to_vec(),
                [windows.len(), window, features],
                device,
            ),
            labels: Tensor::from_data(
                TensorData::new(windows.labels().to_vec(), [windows.len()]),
                device,
            ),
        }
    }

    /// Every member's mean cross-entropy `[members]` (on the device) and predicted classes
    /// (on the host, member-major), in chunks of [`EVALUATION_CHUNK`] windows.
    fn evaluate(
        &self,
        net: &TemporalNet<B>,
        params: &[Tensor<B, 3>],
        state: &[Tensor<B, 3>],
        members: usize,
    ) -> (Tensor<B, 1>, Vec<i64>) {
        let [n, window, features] = self.windows.dims();
        let device = self.windows.device();
        let mut loss = Tensor::<B, 1>::zeros([members], &device);
        let mut predictions = Vec::with_capacity(members);
        for start in (0..n).step_by(EVALUATION_CHUNK) {
            let end = (start + EVALUATION_CHUNK).min(n);
            let size = end - start;
            let x = self
                .windows
                .clone()
                .narrow(0, start, size)
                .view_to([1, size, window, features])
                .repeat_dim(0, members);
            let labels = self
                .labels
                .clone()
                .narrow(0, start, size)
                .reshape_to([1, size])
                .repeat_dim(0, members);
            let (logits, _) = net.forward(params, state, x, None, Precision::F32);
            loss = loss + smoothed_cross_entropy(logits.clone(), labels, 0.0, None) * (size as f64);
            predictions.push(logits.argmax(2).reshape_to([members, size]));
        }
        let predicted = quench_kernels::readback::to_host_i64(Tensor::cat(predictions, 1));
        (loss / n as f64, predicted)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validation_predictions_are_kept_with_each_members_best_weights_only() {
        let labels = [0, 1, 2];
        let mut best = vec![None; 2];
        // Epoch 1: both improve; epoch 2: only the second.
        keep_improved_predictions(&mut best, &[0, 1, 2, 2, 2, 2], &[true, true]);
        keep_improved_predictions(&mut best, &[1, 1, 1, 0, 1, 2], &[false, true]);
        assert_eq!(best, [Some(vec![0, 1, 2]), Some(vec![0, 1, 2])]);
        let scores = kept_scores(&best, &labels).expect("both kept");
        assert_eq!(scores[0].accuracy, 1.0);
        // A member that never improved has nothing kept: the caller evaluates instead.
        let mut partial = vec![None; 2];
        keep_improved_predictions(&mut partial, &[0, 1, 2, 2, 2, 2], &[false, true]);
        assert_eq!(partial[1], Some(vec![2, 2, 2]));
        assert!(kept_scores(&partial, &labels).is_none());
    }

    #[test]
    fn the_rate_warms_up_linearly_then_follows_a_cosine_to_zero() {
        let config = TemporalConfig {
            epochs: 15,
            warmup_epochs: 5,
            learning_rate: 1.0,
            ..TemporalConfig::for_model(ModelKind::Lstm)
        };
        let rates: Vec<f64> = (0..15).map(|e| config.learning_rate_at(e)).collect();
        for (e, want) in [0.2, 0.4, 0.6, 0.8, 1.0].into_iter().enumerate() {
            assert!(
                (rates[e] - want).abs() < 1e-12,
                "warm-up epoch {e}: {}",
                rates[e]
            );
        }
        // Cosine over the 10 epochs after the warm-up: half way at epoch 10.
        assert!((rates[10] - 0.5).abs() < 1e-12, "{}", rates[10]);
        assert!(rates[5..].windows(2).all(|w| w[1] < w[0]));
        assert!(rates[14] > 0.0 && rates[14] < 0.03);
        let constant = TemporalConfig {
            cosine: false,
            warmup_epochs: 0,
            ..config
        };
        assert!((0..15).all(|e| constant.learning_rate_at(e) == 1.0));
    }
}
