//! The GAN tournament: for each pair of sources `(a, b)` a generator learns the distribution
//! `grid[i, j] ∝ f_b[j] - f_a[i] - min` over a `bits x bits` grid of points in `[0, 1]^2`,
//! against a discriminator on those points; the final `KL(p_real || g)` scores the pair.
//!
//! Every pair and seed is one member of a single batched program: generators
//! `[members, ...]`, discriminators `[members, ...]`, one backward pass and one Adam step per
//! epoch for all of them. The KL history stays on the device until the end.

use quench_kernels::reductions::Reduce;
use quench_kernels::views::ReshapeTo;
use quench_kernels::{QuenchBackend, QuenchOps};
use std::fmt;

use burn::tensor::activation::{sigmoid, softmax};
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::{Tensor, TensorData};
use quench_data::BitStrings;
use quench_kernels::ops::mlp::{self, MlpObjective};
use quench_kernels::ops::random::NormalStreams;
use quench_kernels::readback::{float_tensor, to_host_f32};
use quench_scale::Shard;
use rand::SeedableRng;
use rand::rngs::StdRng;
use rand_distr::{Distribution as _, StandardNormal};
use serde::{Deserialize, Serialize};

use super::features::{check_some_bits, frequencies, source_bits};
use super::{Batching, QrngError, pairs, seeded_ensemble, sub_seed};
use quench_support::stats::MeanStd;
use quench_train::ensemble::{Activation, EnsembleMlp};
use quench_train::init::Init;
use quench_train::optim::{AdamConfig, MemberAdam, Regularisation};
use quench_train::params::{gradients, require_grad};
use quench_train::settings::{Valid, Validate};

/// Hidden widths of the generator, between its `bits^2` noise inputs and `bits^2` outputs.
const GENERATOR_HIDDEN: [usize; 2] = [128, 256];
/// Hidden width of the discriminator on 2-d points.
const DISCRIMINATOR_HIDDEN: usize = 20;
/// The generator's hidden nonlinearity.
const GENERATOR_ACTIVATION: Activation = Activation::Relu;
/// The discriminator's hidden nonlinearity, LeakyReLU with slope 0.2.
const DISCRIMINATOR_ACTIVATION: Activation = Activation::LeakyRelu(0.2);
/// Added inside the logarithms of the weighted binary cross-entropy.
const LOG_EPSILON: f64 = 1e-8;
/// Floor of both distributions before the KL metric renormalises them.
const KL_FLOOR: f64 = 1e-10;
/// Purposes of a member's random streams (see [`GanMember::stream`]).
const GENERATOR_STREAM: u64 = 0;
const DISCRIMINATOR_STREAM: u64 = 1;
const NOISE_STREAM: u64 = 2;

/// Where the generator's fresh noise `z ~ N(0, I)` comes from each epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Noise {
    /// Drawn where the step runs from counter-based streams (`quench_kernels::threefry`), one
    /// per member: no transfer, and a member's run is the same alone or batched.
    #[default]
    Device,
    /// Drawn on the host from each member's own seed and uploaded every epoch (the original
    /// draws `torch.randn` on the CPU): a member's run is the same alone or batched.
    Host,
}

/// Settings of the GAN tournament; the defaults are the original's (100 epochs, its "quick"
/// setting; the full one has 1,000).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GanConfig {
    /// Epochs; each takes one generator step and one discriminator step.
    pub epochs: usize,
    /// Seeds; every pair is trained once per seed (each a member).
    pub seeds: Vec<u64>,
    /// Leading bits whose frequencies span the grid; the grid has `bits^2` points.
    pub bits: usize,
    /// Learning rate of both players.
    pub lr: f64,
    /// Adam constants of both players (PyTorch's coupled weight decay).
    pub adam: AdamConfig,
    /// Where the generator's noise is drawn.
    pub noise: Noise,
    /// Take both players' loss gradients by hand and step each player with the seam's
    /// member-MLP training step (`QuenchOps::mlp_train_step`: on the CPU backend its backward
    /// pass fused with Adam); when false (the original's way), autodiff and a separate Adam
    /// pass. Same initialisation, noise and formulas.
    pub fused: bool,
}

impl Default for GanConfig {
    fn default() -> Self {
        Self {
            epochs: 100,
            seeds: vec![42],
            bits: 64,
            lr: 0.01,
            adam: AdamConfig {
                beta1: 0.7,
                beta2: 0.999,
                eps: 1e-8,
                weight_decay: 0.005,
                decoupled: false,
            },
            noise: Noise::Device,
            fused: true,
        }
    }
}

impl Validate for GanConfig {
    type Error = QrngError;

    /// Refuses settings no run can use, naming the first.
    fn validate(&self) -> Result<(), QrngError> {
        if self.epochs == 0 {
            return Err(QrngError::config("epochs", 0, "must be at least 1"));
        }
        quench_train::settings::seeds(&self.seeds)?;
        check_some_bits(self.bits)?;
        quench_train::settings::positive(&[("lr", self.lr)])?;
        Ok(quench_train::settings::adam(&self.adam)?)
    }
}

/// A lower bound of one match's epoch, seconds, for the work budget: a generator and a
/// discriminator step, each a forward and a backward pass of a few launches or host kernels;
/// the fastest measured, the H200's batched epoch of 3 matches, took 10 ms (3 ms a match).
pub const MATCH_EPOCH_SECONDS: f64 = 1e-4;

/// Refuses a tournament of `members` matches whose work or parameters cannot fit: `epochs x
/// members` match-epochs at [`MATCH_EPOCH_SECONDS`] against the work budget, and each
/// member's generator (`bits^2 -> 128 -> 256 -> bits^2`) with its gradient and Adam's two
/// moments, f32, against the host's memory.
fn check_budget(config: &GanConfig, members: usize) -> Result<(), QrngError> {
    let epochs = config.epochs as f64 * members as f64;
    quench_support::budget::check_work(
        || {
            format!(
                "epochs = {} x {members} matches (pairs x seeds)",
                config.epochs
            )
        },
        epochs,
        MATCH_EPOCH_SECONDS,
    )?;
    let points = (config.bits as u128).saturating_mul(config.bits as u128);
    let [first, second] = GENERATOR_HIDDEN.map(|w| w as u128);
    let generator = points
        .saturating_mul(first + second)
        .saturating_add(first * second);
    quench_support::budget::check_fits(
        || {
            format!(
                "{members} matches (pairs x seeds) of bits = {}",
                config.bits
            )
        },
        generator
            .saturating_mul(4 * 4)
            .saturating_mul(members as u128),
    )?;
    Ok(())
}

/// One member of the tournament: a pair of sources (indices into the recording's classes)
/// and a seed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GanMember {
    /// Indices `(a, b)` of the two sources.
    pub pair: (usize, usize),
    /// The seed of its initialisation (and of its noise under [`Noise::Host`]).
    pub seed: u64,
}

impl GanMember {
    /// The member's own seed for `purpose`, derived from its seed and pair.
    fn stream(&self, purpose: u64) -> u64 {
        let pair = sub_seed(sub_seed(self.seed, self.pair.0 as u64), self.pair.1 as u64);
        sub_seed(pair, purpose)
    }
}

/// One trained match.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GanMatch {
    /// Labels of the two sources.
    pub sources: (u32, u32),
    /// The seed.
    pub seed: u64,
    /// `KL(p_real || g)` in nats at every epoch, of the generator that epoch started with.
    pub kl_history: Vec<f64>,
    /// `KL(p_real || uniform)`: the score of a generator that puts equal mass everywhere, the
    /// reference that tells learning from no learning.
    pub uniform_kl: f64,
}

impl GanMatch {
    /// The last epoch's KL, the match's score.
    pub fn final_kl(&self) -> f64 {
        self.kl_history.last().copied().unwrap_or(f64::NAN)
    }
}

/// Final KL of one pair over the seeds.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PairKl {
    /// Labels of the two sources.
    pub sources: (u32, u32),
    /// Final KL per seed, in the order of [`GanConfig::seeds`].
    pub final_kl: Vec<f64>,
    /// `KL(p_real || uniform)` of the pair.
    pub uniform_kl: f64,
    /// Their mean.
    pub mean: f64,
    /// Their population standard deviation.
    pub std: f64,
}

/// The tournament's outcome: every match with its KL history.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GanTournament {
    /// The matches, pair-major: for each pair of [`pairs`], each seed.
    pub matches: Vec<GanMatch>,
}

impl GanTournament {
    /// One row per pair, final KL over the seeds.
    pub fn table(&self) -> Vec<PairKl> {
        let mut rows: Vec<PairKl> = Vec::new();
        for m in &self.matches {
            match rows.iter_mut().find(|r| r.sources == m.sources) {
                Some(row) => row.final_kl.push(m.final_kl()),
                None => rows.push(PairKl {
                    sources: m.sources,
                    final_kl: vec![m.final_kl()],
                    uniform_kl: m.uniform_kl,
                    mean: 0.0,
                    std: 0.0,
                }),
            }
        }
        for row in &mut rows {
            let s = MeanStd::of(&row.final_kl);
            (row.mean, row.std) = (s.mean, s.std);
        }
        rows
    }

    /// Mean final KL over every match.
    pub fn mean_final_kl(&self) -> f64 {
        let finals: Vec<f64> = self.matches.iter().map(GanMatch::final_kl).collect();
        MeanStd::of(&finals).mean
    }
}

impl fmt::Display for GanTournament {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{:<8} {:>12} {:>10} {:>12}  final KL per seed",
            "pair", "mean KL", "std", "uniform KL"
        )?;
        for row in self.table() {
            let seeds: Vec<String> = row.final_kl.iter().map(|k| format!("{k:.4}")).collect();
            writeln!(
                f,
                "{:<8} {:>12.4} {:>10.4} {:>12.4}  {}",
                format!("{}v{}", row.sources.0, row.sources.1),
                row.mean,
                row.std,
                row.uniform_kl,
                seeds.join(" ")
            )?;
        }
        Ok(())
    }
}

/// Runs the tournament on every pair of `strings`' sources, once per seed, as one batched
/// program or one member at a time.
pub fn gan_tournament<B: QuenchBackend>(
    strings: &BitStrings,
    config: &Valid<GanConfig>,
    batching: Batching,
    device: &B::Device,
) -> Result<GanTournament, QrngError> {
    gan_tournament_shard::<B>(strings, config, batching, Shard::ALONE, device)
}

/// The matches of the tournament that rank `shard` plays: the matches in
/// [`GanTournament::matches`]' order (pair-major, then seed), dealt round-robin
/// ([`Shard::members`]). Each match's initialisation and noise come from its own pair and
/// seed, so every rank's matches together are the whole tournament's.
pub fn gan_tournament_shard<B: QuenchBackend>(
    strings: &BitStrings,
    config: &Valid<GanConfig>,
    batching: Batching,
    shard: Shard,
    device: &B::Device,
) -> Result<GanTournament, QrngError> {
    let sources = source_bits(strings, config.bits)?;
    if sources.len() < 2 {
        return Err(QrngError::TooFewDevices {
            found: sources.len(),
        });
    }
    let freqs: Vec<f32> = to_host_f32(frequencies::<B::InnerBackend>(&sources, device));
    let bits = config.bits;
    let members: Vec<GanMember> = pairs(sources.len())
        .into_iter()
        .flat_map(|pair| {
            config
                .seeds
                .iter()
                .map(move |&seed| GanMember { pair, seed })
        })
        .collect();
    let members: Vec<GanMember> = shard
        .members(members.len())
        .into_iter()
        .map(|i| members[i])
        .collect();
    check_budget(config, members.len())?;
    let targets = members
        .iter()
        .map(|m| {
            let row = |s: usize| &freqs[s * bits..(s + 1) * bits];
            pair_target(row(m.pair.0), row(m.pair.1)).ok_or(QrngError::FlatGrid {
                sources: (sources[m.pair.0].label, sources[m.pair.1].label),
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let histories = match batching {
        Batching::Members => train_gan::<B>(&members, &targets, config, device),
        Batching::OneAtATime => members
            .iter()
            .zip(&targets)
            .flat_map(|(member, target)| {
                train_gan::<B>(
                    std::slice::from_ref(member),
                    std::slice::from_ref(target),
                    config,
                    device,
                )
            })
            .collect(),
    };
    let matches = members
        .iter()
        .zip(histories)
        .zip(&targets)
        .map(|((m, kl_history), target)| GanMatch {
            sources: (sources[m.pair.0].label, sources[m.pair.1].label),
            seed: m.seed,
            kl_history,
            uniform_kl: kl_to_uniform(target),
        })
        .collect();
    Ok(GanTournament { matches })
}

/// The target distribution of a pair, `[bits^2]` row-major over `(i, j)`:
/// `f_b[j] - f_a[i]`, shifted by its minimum and normalised to sum 1. `None` when the grid is
/// flat (all of `f_a` equal and all of `f_b` equal), where it has no distribution.
pub fn pair_target(f_a: &[f32], f_b: &[f32]) -> Option<Vec<f32>> {
    let grid: Vec<f64> = f_a
        .iter()
        .flat_map(|&a| f_b.iter().map(move |&b| f64::from(b) - f64::from(a)))
        .collect();
    let min = grid.iter().copied().fold(f64::INFINITY, f64::min);
    let sum: f64 = grid.iter().map(|g| g - min).sum();
    (sum > 0.0).then(|| grid.iter().map(|g| ((g - min) / sum) as f32).collect())
}

/// `KL(p || uniform)` in nats of a target, floored and renormalised as the KL metric does.
pub fn kl_to_uniform(target: &[f32]) -> f64 {
    let floored: Vec<f64> = target.iter().map(|&p| f64::from(p).max(KL_FLOOR)).collect();
    let (sum, k) = (floored.iter().sum::<f64>(), floored.len() as f64);
    floored.iter().map(|p| p / sum * (p / sum * k).ln()).sum()
}

/// The grid's points: point `i bits + j` sits at `(x_j, y_i)` with `x, y` evenly spaced over
/// `[0, 1]` (the original's `tile`/`repeat` of `linspace(0, 1, bits)`): `[bits^2, 2]`
/// row-major.
fn grid_coordinates(bits: usize) -> Vec<f32> {
    let step = 1.0 / (bits.max(2) - 1) as f32;
    (0..bits)
        .flat_map(|i| (0..bits).flat_map(move |j| [j as f32 * step, i as f32 * step]))
        .collect()
}

/// Freshly initialised players of `members`: the generator and the discriminator.
fn players<B: QuenchOps>(
    members: &[GanMember],
    bits: usize,
    device: &B::Device,
) -> (EnsembleMlp<B>, EnsembleMlp<B>) {
    let points = bits * bits;
    let streams = |purpose| {
        members
            .iter()
            .map(|x| x.stream(purpose))
            .collect::<Vec<_>>()
    };
    let generator = seeded_ensemble::<B>(
        Init::TorchDefault,
        GENERATOR_ACTIVATION,
        &[points, GENERATOR_HIDDEN[0], GENERATOR_HIDDEN[1], points],
        &streams(GENERATOR_STREAM),
        device,
    );
    let discriminator = seeded_ensemble::<B>(
        Init::TorchDefault,
        DISCRIMINATOR_ACTIVATION,
        &[2, DISCRIMINATOR_HIDDEN, 1],
        &streams(DISCRIMINATOR_STREAM),
        device,
    );
    (generator, discriminator)
}

/// The targets as one tensor, `[members, 1, points]`.
fn target_tensor<B: QuenchOps>(targets: &[Vec<f32>], device: &B::Device) -> Tensor<B, 3> {
    let points = targets.first().map_or(0, Vec::len);
    let flat: Vec<f32> = targets.iter().flatten().copied().collect();
    float_tensor(flat, [targets.len(), 1, points], device)
}

/// Epochs whose KL the fused path computes at once. The metric is a dozen small operations, on
/// a GPU as many launches as an eighth of the fused epoch, and an epoch's KL needs only that
/// epoch's generator output (kept until it is computed: `[members, 1, points]` each).
const KL_EPOCHS_PER_FLUSH: usize = 32;

/// Each member's KL against its target per epoch, from the generator's outputs, computed
/// `per_flush` epochs at a time: [`kl_metric`] on the outputs stacked along the member axis,
/// each row the same operations as alone (the values agree to rounding: a reduction's order
/// may follow the tensor's shape).
struct KlHistory<B: QuenchOps> {
    /// The targets, `[members, 1, points]`.
    target: Tensor<B, 3>,
    per_flush: usize,
    /// The generator's outputs `[members, 1, points]` of the epochs not yet computed.
    outputs: Vec<Tensor<B, 3>>,
    /// The KLs computed so far, `[epochs of the flush x members]` each, epoch-major.
    computed: Vec<Tensor<B, 1>>,
    /// Epochs pushed.
    epochs: usize,
}

impl<B: QuenchOps> KlHistory<B> {
    fn new(target: Tensor<B, 3>, per_flush: usize) -> Self {
        Self {
            target,
            per_flush: per_flush.max(1),
            outputs: Vec::new(),
            computed: Vec::new(),
            epochs: 0,
        }
    }

    /// Keeps one epoch's generator output `[members, 1, points]`.
    fn push(&mut self, output: Tensor<B, 3>) {
        self.outputs.push(output);
        self.epochs += 1;
        if self.outputs.len() == self.per_flush {
            self.flush();
        }
    }

    /// The KL of the kept epochs.
    fn flush(&mut self) {
        let kl = match <[Tensor<B, 3>; 1]>::try_from(std::mem::take(&mut self.outputs)) {
            // One epoch, as the original computed it: no stacking (a copy on every backend).
            Ok([output]) => kl_metric(self.target.clone(), output),
            Err(outputs) if outputs.is_empty() => return,
            Err(outputs) => {
                let epochs = outputs.len();
                kl_metric(
                    self.target.clone().repeat_dim(0, epochs),
                    Tensor::cat(outputs, 0),
                )
            }
        };
        self.computed.push(kl);
    }

    /// Each member's history, `[members][epochs]`, read back at once.
    fn finish(mut self) -> Vec<Vec<f64>> {
        self.flush();
        let (members, epochs) = (self.target.dims()[0], self.epochs);
        if self.computed.is_empty() || members == 0 {
            return vec![Vec::new(); members];
        }
        let kl: Vec<f32> = to_host_f32(Tensor::cat(self.computed, 0));
        debug_assert_eq!(kl.len(), epochs * members);
        (0..members)
            .map(|member| {
                (0..epochs)
                    .map(|e| f64::from(kl[e * members + member]))
                    .collect()
            })
            .collect()
    }
}

/// Trains `members` (each with its target `[bits^2]`) as one batched program and returns each
/// member's KL history, `[members][epochs]`.
fn train_gan<B: QuenchBackend>(
    members: &[GanMember],
    targets: &[Vec<f32>],
    config: &GanConfig,
    device: &B::Device,
) -> Vec<Vec<f64>> {
    if config.fused {
        return train_gan_fused::<B::InnerBackend>(members, targets, config, device);
    }
    type Inner<B> = <B as AutodiffBackend>::InnerBackend;
    let m = members.len();
    let points = config.bits * config.bits;
    let (generator, discriminator) = players::<Inner<B>>(members, config.bits, device);
    let generator = generator.into_params();
    let generator_params = generator.len();
    let mut params = [generator, discriminator.into_params()].concat();
    let mut adam = MemberAdam::<Inner<B>>::new(config.adam, m, device);
    let lr = Tensor::<Inner<B>, 3>::full([1, 1, 1], config.lr, device);
    let target = target_tensor::<Inner<B>>(targets, device);
    let coords = Tensor::<B, 3>::from_data(
        TensorData::new(grid_coordinates(config.bits), [1, points, 2]),
        device,
    )
    .expand([m, points, 2]);
    let mut noise = NoiseSource::new(config.noise, members, points);
    // Every epoch's KL in its epoch, as the original computed it.
    let mut history = KlHistory::new(target.clone(), 1);
    for _ in 0..config.epochs {
        let z = Tensor::<B, 3>::from_inner(noise.draw::<Inner<B>>(device));
        let p = require_grad::<B>(params.clone());
        let (g_params, d_params) = p.split_at(generator_params);
        let g = softmax(
            EnsembleMlp::from_params(g_params.to_vec(), GENERATOR_ACTIVATION).forward(z),
            2,
        );
        let d = sigmoid(
            EnsembleMlp::from_params(d_params.to_vec(), DISCRIMINATOR_ACTIVATION)
                .forward(coords.clone()),
        )
        .reshape_to([m, 1, points]);
        let log_real = d.clone().add_scalar(LOG_EPSILON).log();
        let log_fake = d.neg().add_scalar(1.0 + LOG_EPSILON).log();
        let real = Tensor::<B, 3>::from_inner(target.clone());
        // Generator step L(D, 1, g) with D held fixed; discriminator step
        // (L(D, 1, p_real) + L(D, 0, g)) / 2 with g held fixed. Each loss reaches only its own
        // player's parameters, so one backward pass of the sum serves both steps.
        let generator_loss = (g.clone() * log_real.clone().detach()).sum_all().neg();
        let discriminator_loss =
            ((real * log_real).sum_all() + (g.clone().detach() * log_fake).sum_all()).neg() / 2.0;
        let grads = (generator_loss + discriminator_loss).backward();
        history.push(g.inner());
        params = adam.step(params, gradients(&p, &grads), lr.clone(), None);
    }
    history.finish()
}

/// [`train_gan`] with [`GanConfig::fused`], on a backend without autodiff: the losses'
/// gradients at the players' outputs derived by hand (below), each player stepped by the
/// seam's member-MLP training step. On the CPU backend that step fuses the backward pass with
/// Adam: the generator's step is memory-bound (its 1.6M weights and their moments are read and
/// written once), which the op-by-op form made nine streams and a graph of copies.
fn train_gan_fused<B: QuenchOps>(
    members: &[GanMember],
    targets: &[Vec<f32>],
    config: &GanConfig,
    device: &B::Device,
) -> Vec<Vec<f64>> {
    let m = members.len();
    let points = config.bits * config.bits;
    let (generator, discriminator) = players::<B>(members, config.bits, device);
    let mut players = [
        (generator.into_params(), GENERATOR_ACTIVATION),
        (discriminator.into_params(), DISCRIMINATOR_ACTIVATION),
    ];
    let mut adams = [(); 2].map(|_| MemberAdam::<B>::new(config.adam, m, device));
    let lr = Tensor::<B, 3>::full([1, 1, 1], config.lr, device);
    let target = target_tensor::<B>(targets, device);
    let coords = Tensor::<B, 3>::from_data(
        TensorData::new(grid_coordinates(config.bits), [1, points, 2]),
        device,
    )
    .expand([m, points, 2]);
    let mut noise = NoiseSource::new(config.noise, members, points);
    let mut history = KlHistory::new(target.clone(), KL_EPOCHS_PER_FLUSH);
    for _ in 0..config.epochs {
        let [(g_params, g_activation), (d_params, d_activation)] = &players;
        let g_tape = mlp::forward(g_params, *g_activation, noise.draw(device), vec![]);
        let d_tape = mlp::forward(d_params, *d_activation, coords.clone(), vec![]);
        let g = softmax(g_tape.output.clone(), 2);
        history.push(g.clone());
        let d = sigmoid(d_tape.output.clone().reshape_to([m, 1, points]));
        // Generator: L = -sum g_k log(d_k + eps) through the softmax,
        // dL/do_j = g_j (sum_k g_k r_k - r_j) with r = log(d + eps).
        let shifted = d.clone().add_scalar(LOG_EPSILON);
        let r = shifted.clone().log();
        let mean = (g.clone() * r.clone()).sum_along(2);
        let generator_grad = g.clone() * (mean - r);
        // Discriminator: L = -(sum p_k log(d_k + eps) + sum g_k log(1 + eps - d_k)) / 2,
        // through the sigmoid d = s(x), ds/dx = d (1 - d).
        let by_d = (target.clone() / shifted - g / d.clone().neg().add_scalar(1.0 + LOG_EPSILON))
            .div_scalar(-2.0);
        let slope = d.clone() * d.neg().add_scalar(1.0);
        let discriminator_grad = (by_d * slope).reshape_to([m, points, 1]);
        let steps = [(g_tape, generator_grad), (d_tape, discriminator_grad)];
        for (((params, activation), adam), (tape, upstream)) in
            players.iter_mut().zip(&mut adams).zip(steps)
        {
            let taken = std::mem::take(params);
            let objective = MlpObjective::Upstream(upstream);
            let regularisation = Regularisation::default();
            *params = adam
                .step_mlp(
                    taken,
                    *activation,
                    tape,
                    objective,
                    regularisation,
                    lr.clone(),
                    None,
                )
                .0;
        }
    }
    history.finish()
}

/// `KL(p || g)` per member after flooring both at 1e-10 and renormalising (the original's
/// `scipy.stats.entropy(p_real, g)`): `p`, `g` `[members, 1, k]` to `[members]`.
fn kl_metric<B: QuenchOps>(p: Tensor<B, 3>, g: Tensor<B, 3>) -> Tensor<B, 1> {
    let normalise = |x: Tensor<B, 3>| {
        let x = x.clamp(KL_FLOOR, 1.0);
        x.clone() / x.sum_along(2)
    };
    let (p, g) = (normalise(p), normalise(g));
    let m = p.dims()[0];
    (p.clone() * (p.log() - g.log()))
        .sum_along(2)
        .reshape_to([m])
}

/// The generator's noise, `[members, 1, points]` per draw.
enum NoiseSource {
    /// Counter-based streams, one per member, drawn where the step runs: a member's noise is
    /// the same whichever members share its program.
    Device {
        streams: NormalStreams,
        points: usize,
    },
    Host {
        rngs: Vec<StdRng>,
        points: usize,
    },
}

impl NoiseSource {
    fn new(noise: Noise, members: &[GanMember], points: usize) -> Self {
        let seeds: Vec<u64> = members.iter().map(|m| m.stream(NOISE_STREAM)).collect();
        match noise {
            Noise::Device => Self::Device {
                streams: NormalStreams::new(&seeds),
                points,
            },
            Noise::Host => Self::Host {
                rngs: seeds.iter().map(|&s| StdRng::seed_from_u64(s)).collect(),
                points,
            },
        }
    }

    /// The next draw as a tensor on `device`.
    fn draw<B: QuenchOps>(&mut self, device: &B::Device) -> Tensor<B, 3> {
        match self {
            Self::Device { streams, points } => {
                let shape = [streams.members(), 1, *points];
                streams.next::<B>(*points, device).reshape_to(shape)
            }
            Self::Host { rngs, points } => {
                let shape = [rngs.len(), 1, *points];
                let values: Vec<f32> = rngs
                    .iter_mut()
                    .flat_map(|rng| {
                        (0..*points)
                            .map(|_| StandardNormal.sample(rng))
                            .collect::<Vec<f32>>()
                    })
                    .collect();
                float_tensor(values, shape, device)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::NdArray;

    type Cpu = NdArray<f32>;

    /// `[members, 1, points]` of positive values from a fixed sequence, different per call.
    fn distribution(members: usize, points: usize, offset: usize) -> Tensor<Cpu, 3> {
        let values = (0..members * points)
            .map(|i| 0.05 + ((i * 7 + offset * 13) % 17) as f32 / 17.0)
            .collect();
        float_tensor(values, [members, 1, points], &Default::default())
    }

    #[test]
    fn kl_computed_several_epochs_at_once_is_each_epochs_own() {
        let (members, points, epochs) = (2, 16, 7);
        let target = distribution(members, points, 0);
        let outputs: Vec<_> = (1..=epochs)
            .map(|e| distribution(members, points, e))
            .collect();
        // The error of a sum of n terms is at most (n - 1) eps times the sum of their sizes;
        // with the target renormalised (sum p = 1) and both floored at 1e-10, the sizes
        // p |log p - log g| sum to at most log(1e10) ~ 23.
        let tolerance = points as f64 * 23.0 * f64::from(f32::EPSILON);
        let want: Vec<Vec<f64>> = (0..members)
            .map(|member| {
                outputs
                    .iter()
                    .map(|output| {
                        let kl = kl_metric(
                            target.clone().narrow(0, member, 1),
                            output.clone().narrow(0, member, 1),
                        );
                        f64::from(to_host_f32(kl)[0])
                    })
                    .collect()
            })
            .collect();
        // The epochs differ, so an epoch read from the wrong row would show.
        assert!((want[0][0] - want[0][1]).abs() > 10.0 * tolerance);
        // One at a time, in flushes that leave a partial one, one that divides the epochs,
        // and more than all of them.
        for per_flush in 1..=8 {
            let mut history = KlHistory::new(target.clone(), per_flush);
            for output in &outputs {
                history.push(output.clone());
            }
            let got = history.finish();
            assert_eq!(got.len(), members);
            for (got, want) in got.iter().zip(&want) {
                assert_eq!(got.len(), epochs, "per_flush {per_flush}");
                for (g, w) in got.iter().zip(want) {
                    assert!((g - w).abs() <= tolerance, "per_flush {per_flush}: {got:?}");
                }
            }
        }
    }
}
