//! The workload registry's contract: named variants, each timed and scored.

use std::fmt;
use std::path::Path;

use crate::peers::Peer;
use anyhow::Context;
use burn::tensor::backend::Backend;
use quench_device::counters::CallCounts;
pub use quench_device::run_precision::{CheckedPrecision, PrecisionRole, RunPrecision};
use quench_device::{Precision, TimingConfig};
use quench_kernels::{OnDevice, QuenchBackend, SelectedDevice, run_on};
use quench_scale::World;
use quench_support::Stats;
use quench_train::settings::{Seeded, Valid};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// A speed-up range that a guide promised, e.g. 6-15x.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Claim {
    /// Lower end of the promised speed-up.
    pub low: f64,
    /// Upper end of the promised speed-up.
    pub high: f64,
}

/// A claimed range, for variant tables: `claimed(6.0, 15.0)`.
pub const fn claimed(low: f64, high: f64) -> Option<Claim> {
    Some(Claim { low, high })
}

/// One way of running a workload: the original's way (the baseline), or one optimisation, or all together.
#[derive(Debug, Clone, PartialEq)]
pub struct VariantInfo {
    /// Short name used by `--only` style selections and in reports.
    pub name: &'static str,
    /// What the variant changes, in one line.
    pub description: &'static str,
    /// Whether this is the original's way, the reference of speed-ups.
    pub baseline: bool,
    /// The speed-up its guide claimed for this optimisation, if it claimed one.
    pub claim: Option<Claim>,
    /// How it follows the run's `--precision`.
    pub precision: PrecisionRole,
}

/// How a quality metric is compared with the baseline's.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Tolerance {
    /// Parity when `|value - baseline| <= x`.
    Absolute(f64),
    /// Parity when `|value - baseline| <= x |baseline|`.
    Relative(f64),
    /// Parity when the value does not exceed this bound (baseline-free metrics such as an
    /// error against an f64 reference).
    AtMost(f64),
}

impl fmt::Display for Tolerance {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Absolute(x) => write!(f, "{}", crate::numbers::significant(*x)),
            Self::Relative(x) => write!(f, "{} %", crate::numbers::significant(100.0 * x)),
            Self::AtMost(x) => write!(f, "at most {}", crate::numbers::significant(*x)),
        }
    }
}

/// A quality metric reported beside the speed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Quality {
    /// The metric's name, e.g. `test accuracy` or `max relative error`.
    pub metric: String,
    /// Its value.
    pub value: f64,
    /// Whether larger values are better.
    pub higher_is_better: bool,
    /// How close to the baseline's value counts as parity.
    pub tolerance: Tolerance,
    /// What a model that learned nothing scores on this metric: always predicting the most
    /// frequent class (its share of the test set for an accuracy, one minus it for an error,
    /// the macro-F1 of that constant prediction). Where the baseline is not better than this by
    /// more than the tolerance, two variants "at parity" agree about nothing, and no verdict
    /// is given ([`Quality::verdict`]). `None` where the metric has no such level.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chance: Option<f64>,
    /// What the workload knows about comparing this value with the baseline's at this size,
    /// where it differs for a reason other than the variant's optimisation. The report keeps
    /// the verdict it leads to ([`crate::report::VariantReport::parity_note`]), not this.
    #[serde(skip)]
    pub caveat: Option<QualityCaveat>,
}

/// Why a variant's quality may fall short of the baseline's for a reason the workload knows.
#[derive(Debug, Clone, PartialEq)]
pub enum QualityCaveat {
    /// Parity cannot be judged at this size (fewer optimiser steps in the same epochs, a
    /// one-seed metric whose trajectory departs from the baseline's): a shortfall is reported
    /// as "not judged" with this reason, not as a loss.
    Unjudged(String),
    /// The variant computes less accurately by design (the guide's coarser solver, say): a
    /// shortfall is a real loss of quality, and this is its reason.
    Explained(String),
}

impl QualityCaveat {
    /// A variant that trains as many epochs as the baseline at a larger batch takes fewer
    /// optimiser steps; at a size where training ends at its epoch limit, a shortfall says
    /// nothing about the variant. `None` where the batch is not larger.
    pub fn fewer_steps(batch: usize, baseline_batch: usize, epochs: usize) -> Option<Self> {
        (batch > baseline_batch).then(|| {
            Self::Unjudged(format!(
                "batch {batch} takes {}x fewer optimiser steps than the baseline's batch \
                 {baseline_batch} in the same {epochs} epoch(s), and training ended at that \
                 limit; judge parity at the full setting",
                crate::numbers::factor(batch as f64 / baseline_batch as f64)
            ))
        })
    }
}

/// The mean of the members' last training losses (`None` for a member that took no step),
/// over the members that have one; a non-finite member's makes the mean non-finite, so a
/// diverged member is not averaged away. `None` where no member has one.
pub fn final_training_loss(per_member: impl IntoIterator<Item = Option<f64>>) -> Option<f64> {
    let losses: Vec<f64> = per_member.into_iter().flatten().collect();
    (!losses.is_empty()).then(|| losses.iter().sum::<f64>() / losses.len() as f64)
}

/// The share of `labels` held by the most frequent label: the accuracy of always predicting
/// it, a classifier's chance level ([`Quality::chance`]). `None` for no labels.
pub fn majority_share(labels: &[i64]) -> Option<f64> {
    let mut counts = std::collections::BTreeMap::<i64, usize>::new();
    for &label in labels {
        *counts.entry(label).or_default() += 1;
    }
    let most = counts.values().max()?;
    Some(*most as f64 / labels.len() as f64)
}

/// The parity verdict of a variant, and its reason where it is not plain parity.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    /// At parity (`Some(true)`), worse (`Some(false)`), or not judged (`None`: no baseline,
    /// no quality, or a shortfall the size cannot judge).
    pub parity: Option<bool>,
    /// Why a variant is worse or not judged; `None` at parity or where nothing was compared.
    pub note: Option<String>,
}

impl Quality {
    /// The verdict against `baseline`: [`Quality::at_parity_with`], with a shortfall
    /// explained by the caveat where the workload gave one, else named as a loss of quality
    /// with the two values and the tolerance.
    ///
    /// No verdict where the baseline (or, for the baseline's own row and where the baseline
    /// failed, this value) is at chance ([`Quality::at_chance`]): a model that learned nothing
    /// agrees with every other such model, so parity there is no evidence.
    pub fn verdict(&self, baseline: Option<&Quality>) -> Verdict {
        let reference = baseline.unwrap_or(self);
        if let Some(chance) = reference.at_chance() {
            return Verdict {
                parity: None,
                note: Some(format!(
                    "not judged: at chance, {} {}{} is not above the chance level {} (always \
                     the most frequent class) by more than the tolerance {}",
                    if baseline.is_some() {
                        "the baseline's"
                    } else {
                        "its"
                    },
                    reference.metric,
                    format_args!(" {}", crate::numbers::significant(reference.value)),
                    crate::numbers::significant(chance),
                    reference.tolerance
                )),
            };
        }
        let parity = self.at_parity_with(baseline);
        if parity != Some(false) {
            return Verdict { parity, note: None };
        }
        match &self.caveat {
            Some(QualityCaveat::Unjudged(why)) => Verdict {
                parity: None,
                note: Some(format!("not judged at this size: {why}")),
            },
            Some(QualityCaveat::Explained(why)) => Verdict {
                parity,
                note: Some(format!("worse: {why}")),
            },
            None => {
                let against = match (self.tolerance, baseline) {
                    (Tolerance::AtMost(bound), _) => format!("above the bound {bound}"),
                    (tolerance, Some(base)) => format!(
                        "against the baseline's {} (tolerance {})",
                        crate::numbers::significant(base.value),
                        tolerance
                    ),
                    (_, None) => "without a baseline".into(),
                };
                Verdict {
                    parity,
                    note: Some(format!(
                        "worse: a loss of quality, {} {} {against}",
                        self.metric,
                        crate::numbers::significant(self.value)
                    )),
                }
            }
        }
    }

    /// The chance level where this value does not beat it by more than the tolerance (not
    /// finite values included); `None` where it does or the metric has no chance level.
    pub fn at_chance(&self) -> Option<f64> {
        let chance = self.chance?;
        let margin = match self.tolerance {
            Tolerance::Absolute(x) => x,
            Tolerance::Relative(x) => x * chance.abs(),
            Tolerance::AtMost(_) => return None,
        };
        let gain = if self.higher_is_better {
            self.value - chance
        } else {
            chance - self.value
        };
        // A NaN gain compares false: a non-finite value is judged worse, not at chance.
        (gain <= margin).then_some(chance)
    }

    /// Whether this value is at parity with `baseline` under the stated tolerance; a value that
    /// is better than the baseline is always at parity.
    pub fn at_parity_with(&self, baseline: Option<&Quality>) -> Option<bool> {
        if !self.value.is_finite() {
            return Some(false);
        }
        if let Tolerance::AtMost(bound) = self.tolerance {
            return Some(self.value <= bound);
        }
        let base = baseline?.value;
        let better = if self.higher_is_better {
            self.value >= base
        } else {
            self.value <= base
        };
        let allowed = match self.tolerance {
            Tolerance::Absolute(x) => x,
            Tolerance::Relative(x) => x * base.abs(),
            Tolerance::AtMost(_) => unreachable!("handled above"),
        };
        Some(better || (self.value - base).abs() <= allowed)
    }
}

/// What a workload measured for one variant.
#[derive(Debug, Clone, PartialEq)]
pub struct VariantOutcome {
    /// Seconds per iteration (one call, epoch or meta-iteration: see `iteration_unit`).
    pub per_iteration: Stats,
    /// Kernel launches and host read-backs per iteration, where the harness counted them.
    pub counts: Option<CallCounts>,
    /// What one iteration is.
    pub iteration_unit: String,
    /// Iterations in one full run of the workload at this suite's size.
    pub iterations_per_run: f64,
    /// Work items per iteration, for the throughput.
    pub items_per_iteration: f64,
    /// The unit of the throughput, e.g. `tasks/s`, `GFLOP/s`.
    pub throughput_unit: String,
    /// The quality metric, where the workload has one.
    pub quality: Option<Quality>,
    /// The training loss after the last step of the quality run, the mean over its members
    /// ([`final_training_loss`]); `None` for a workload that does not train. A non-finite one
    /// (a diverged run) makes the variant failed, whatever its quality.
    pub training_loss: Option<f64>,
    /// Anything the reader should know about this measurement.
    pub notes: Vec<String>,
    /// This rank's share, where the workload split its members over the ranks of the run:
    /// what the report needs to join the ranks' measurements. `None` in one process.
    pub sharded: Option<Sharded>,
}

/// What a sharding workload returns on a rank whose share of the members is empty (more ranks
/// than members): the rank sits the variant out, and the others' shares make the report.
#[derive(Debug, Clone, PartialEq)]
pub struct NoMembers {
    /// What the members are (`seeds`, `matches`).
    pub what: String,
}

impl fmt::Display for NoMembers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "no {} left for this rank (more ranks than members)",
            self.what
        )
    }
}

impl std::error::Error for NoMembers {}

/// One rank's share of a variant whose members were split over ranks. Every quality a
/// sharding workload reports is a mean over members (seeds, chains, matches), so the ranks'
/// sums and counts give the whole run's.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Sharded {
    /// Members this rank ran.
    pub members: usize,
    /// The sum, over this rank's members, of the member values whose mean is the quality.
    pub quality_sum: f64,
    /// The sum of their squares.
    pub quality_sq_sum: f64,
    /// How many member values went into `quality_sum`.
    pub quality_count: usize,
    /// Where the quality's tolerance is the members' (population) standard deviation, at
    /// least this: the join recomputes it over every rank's members.
    pub spread_floor: Option<f64>,
}

impl Sharded {
    /// The share of `members` members whose quality is the mean of `values`; with
    /// `spread_floor`, the tolerance is their spread, at least the floor.
    pub fn of(members: usize, values: &[f64], spread_floor: Option<f64>) -> Self {
        Self {
            members,
            quality_sum: values.iter().sum(),
            quality_sq_sum: values.iter().map(|v| v * v).sum(),
            quality_count: values.len(),
            spread_floor,
        }
    }
}

/// The result of asking a workload to run a variant.
// One is made per variant run and moved once into the report: boxing the outcome buys nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum VariantRun {
    /// It ran and was measured, computing in this precision.
    Measured(VariantOutcome, Precision),
    /// The device cannot run it (bf16 on a CPU backend, say); the reason is reported.
    Unsupported(String),
}

/// Where and how a suite's variants run.
#[derive(Debug, Clone)]
pub struct RunContext<'w> {
    /// The device chosen for the run.
    pub device: SelectedDevice,
    /// The run's `--precision`, checked on the device.
    pub precision: CheckedPrecision,
    /// Warm-up and repeats.
    pub timing: TimingConfig,
    /// Whether `timing.repeats` is the command line's `--repeats`, which overrides a
    /// workload's own count too ([`VariantContext::timing_with`]).
    pub repeats_given: bool,
    /// The processes of the run: one, or the ranks of an MPI launch, among which a workload
    /// that [shards](Workload::shards) splits its members.
    pub world: &'w World,
}

#[cfg(test)]
impl RunContext<'static> {
    /// The CPU, `--precision auto`, no warm-up and one repeat, one process: what workload
    /// tests run with.
    pub fn quick_cpu() -> Self {
        // A World is not `Sync` (it may hold an MPI communicator), so it cannot be a static;
        // a test's context lives as long as the test process.
        let alone: &'static World = Box::leak(Box::new(World::alone()));
        Self {
            device: SelectedDevice::Cpu,
            precision: RunPrecision::Auto
                .check_on(SelectedDevice::Cpu)
                .expect("the CPU runs --precision auto"),
            timing: TimingConfig {
                warmup: 0,
                repeats: 1,
            },
            repeats_given: false,
            world: alone,
        }
    }
}

/// How one variant runs, resolved by the shared code before the workload sees it.
#[derive(Debug, Clone, Copy)]
pub struct VariantContext<'w> {
    /// The precision this variant computes in (f32 unless it follows `--precision`).
    pub precision: Precision,
    /// Warm-up and repeats.
    pub timing: TimingConfig,
    /// Whether `timing.repeats` is the command line's `--repeats` ([`RunContext`]).
    pub repeats_given: bool,
    /// The processes of the run; a workload that shards runs the members of
    /// `world.shard()` and says so in [`VariantOutcome::sharded`].
    pub world: &'w World,
}

impl VariantContext<'_> {
    /// `config` with the members this rank runs, still valid: all of its seeds in one
    /// process, else the rank's share ([`quench_scale::Shard::members`]). A rank left without
    /// any gets [`NoMembers`], and sits the variant out.
    pub fn my_share<C: Seeded + Clone>(
        &self,
        what: &str,
        config: &Valid<C>,
    ) -> anyhow::Result<Valid<C>> {
        let picked = self.world.shard().members(config.seeds().len());
        config.with_members(&picked).ok_or_else(|| {
            NoMembers {
                what: what.to_string(),
            }
            .into()
        })
    }

    /// This rank's share for the report to join (`None` in one process): `members` members
    /// and the member values whose mean is the quality.
    pub fn share(&self, members: usize, values: &[f64]) -> Option<Sharded> {
        (self.world.shard().ranks > 1).then(|| Sharded::of(members, values, None))
    }

    /// The suite's timing with the workload's own count of timed runs, where its parameters
    /// set one (a run of a training workload is a whole training; checked at prepare by
    /// [`check_repeats`]) and the command line gave no `--repeats`, which overrides both.
    pub fn timing_with(&self, repeats: Option<usize>) -> TimingConfig {
        match repeats {
            Some(repeats) if !self.repeats_given => TimingConfig {
                repeats,
                ..self.timing
            },
            _ => self.timing,
        }
    }
}

/// Refuses a workload's own count of timed runs (its table's `repeats`) that is 0 or above
/// [`quench_device::timing::MAX_RUNS`], before the workload's data is read.
pub fn check_repeats(repeats: Option<usize>) -> anyhow::Result<()> {
    if let Some(repeats) = repeats {
        TimingConfig { repeats, warmup: 0 }.check("repeats", "warmup")?;
    }
    Ok(())
}

/// A registered workload, as the suite runner sees it; implemented through [`TableWorkload`].
pub trait Workload: Sync {
    /// Its name in suites and reports.
    fn name(&self) -> &'static str;
    /// One line on what it computes and which guide it comes from.
    fn summary(&self) -> &'static str;
    /// Its variants; at most one is the baseline.
    fn variants(&self) -> Vec<VariantInfo>;
    /// Parses and validates the suite's parameters for this workload and loads or draws its
    /// data, once per run and before anything runs: what every variant and the peer share.
    fn prepare(&self, params: &toml::Table) -> anyhow::Result<Box<dyn PreparedWorkload + '_>>;
    /// Whether it splits its members over the ranks of an MPI run; a workload that does not
    /// runs on rank 0 alone.
    fn shards(&self) -> bool;
}

/// A workload ready to run a suite's variants: its parameters validated, its data loaded.
pub trait PreparedWorkload {
    /// Runs the variant at `row` of [`Workload::variants`].
    fn run(&self, row: usize, ctx: &RunContext) -> anyhow::Result<VariantRun>;
    /// Its PyTorch peer at the suite's size, if one is written for these parameters. A peer
    /// that trains on what Quench draws (its windows, its tasks, its initial weights) finds
    /// them in files the workload writes into `inputs`, a folder of its own; an error says
    /// why they could not be written.
    fn peer(&self, inputs: &Path) -> anyhow::Result<Option<Peer>>;
    /// Refuses, before any variant runs, the variant at `row` where what it needs of the
    /// prepared data is not there (a batch larger than the training part, say): the checks
    /// that depend on the suite's choice of variants.
    fn check(&self, row: usize) -> anyhow::Result<()>;
}

/// What workload tests do in one call: prepare the parameters and run a variant, or make the
/// peer, as a suite does.
#[cfg(test)]
pub trait PrepareAndRun {
    /// Prepares `params` and runs `variant`.
    fn run(
        &self,
        variant: &VariantInfo,
        params: &toml::Table,
        ctx: &RunContext,
    ) -> anyhow::Result<VariantRun>;
    /// Prepares `params` and makes the peer.
    fn peer(&self, params: &toml::Table, inputs: &Path) -> anyhow::Result<Option<Peer>>;
    /// Prepares `params`, and nothing else.
    fn check_params(&self, params: &toml::Table) -> anyhow::Result<()>;
}

#[cfg(test)]
impl<W: Workload + ?Sized> PrepareAndRun for W {
    fn run(
        &self,
        variant: &VariantInfo,
        params: &toml::Table,
        ctx: &RunContext,
    ) -> anyhow::Result<VariantRun> {
        let row = self
            .variants()
            .iter()
            .position(|v| v.name == variant.name)
            .with_context(|| format!("no variant `{}`", variant.name))?;
        let prepared = self.prepare(params)?;
        prepared.check(row)?;
        prepared.run(row, ctx)
    }

    fn peer(&self, params: &toml::Table, inputs: &Path) -> anyhow::Result<Option<Peer>> {
        self.prepare(params)?.peer(inputs)
    }

    fn check_params(&self, params: &toml::Table) -> anyhow::Result<()> {
        self.prepare(params).map(drop)
    }
}

/// One row of a workload's variant table: what the variant is, and the setting it runs with.
#[derive(Debug, Clone, PartialEq)]
pub struct Variant<S> {
    /// Short name used in suites and reports.
    pub name: &'static str,
    /// What the variant changes, in one line.
    pub description: &'static str,
    /// Whether this is the original's way, the reference of speed-ups.
    pub baseline: bool,
    /// The speed-up its guide claimed, if it claimed one.
    pub claim: Option<Claim>,
    /// How it follows the run's `--precision`.
    pub precision: PrecisionRole,
    /// How the workload runs this variant.
    pub setting: S,
}

/// The validated configuration of every variant of a table, made when the workload is
/// prepared, so that a variant runs what was checked before the suite began.
pub struct PerVariant<C>(Vec<(&'static str, Valid<C>)>);

impl<C> PerVariant<C> {
    /// `make`'s configuration for each row of `table`. The first refusal names its variant,
    /// unless every variant is refused alike: then the suite's setting is at fault, whichever
    /// variants it runs (a suite running `all` alone was told of `baseline`).
    pub fn new<S>(
        table: &[Variant<S>],
        mut make: impl FnMut(&Variant<S>) -> anyhow::Result<Valid<C>>,
    ) -> anyhow::Result<Self> {
        let mut made: Vec<(&'static str, anyhow::Result<Valid<C>>)> =
            table.iter().map(|v| (v.name, make(v))).collect();
        let refusals: Vec<String> = made
            .iter()
            .filter_map(|(_, r)| r.as_ref().err().map(|e| format!("{e:#}")))
            .collect();
        let alike = refusals.len() == made.len() && refusals.windows(2).all(|w| w[0] == w[1]);
        if let Some(at) = made.iter().position(|(_, r)| r.is_err())
            && let (name, Err(err)) = made.swap_remove(at)
        {
            return Err(if alike {
                err
            } else {
                err.context(format!("variant `{name}`"))
            });
        }
        Ok(Self(
            made.into_iter()
                .filter_map(|(name, made)| made.ok().map(|config| (name, config)))
                .collect(),
        ))
    }

    /// The configuration of `variant`.
    pub fn of<S>(&self, variant: &Variant<S>) -> anyhow::Result<&Valid<C>> {
        self.0
            .iter()
            .find(|(name, _)| *name == variant.name)
            .map(|(_, config)| config)
            .with_context(|| format!("no configuration prepared for variant `{}`", variant.name))
    }
}

/// A workload described by its parameter type and a table of variants. Implementing it
/// implements [`Workload`]: names, the parsing of parameters, the variant look-up, the choice of
/// the variant's precision and the one dispatch onto a backend live here once, so a workload is
/// written once, generically.
pub trait TableWorkload: Sync {
    /// The workload's parameters in a suite (`deny_unknown_fields`, defaults for every field).
    type Params: DeserializeOwned;
    /// The parameters validated into the configurations the variants run, and the data they
    /// share, loaded or drawn once ([`TableWorkload::prepare`]).
    type Prepared: Sync;
    /// What distinguishes one variant from another.
    type Setting: Sync;
    /// Its name in suites and reports.
    const NAME: &'static str;
    /// One line on what it computes and which guide it comes from.
    const SUMMARY: &'static str;
    /// Whether `run_variant` runs only the members of `ctx.world.shard()` (and fills
    /// [`VariantOutcome::sharded`]); false: its members are not independent, or it has none.
    const SHARDS: bool = false;

    /// Its variants, at most one of them the baseline.
    fn table(&self) -> &[Variant<Self::Setting>];

    /// Validates `params` into the configurations of every variant and loads or draws the
    /// data (configuration and data files read here), once per suite run and before its first
    /// timed run, so that a suite fails before any work rather than after its first workloads.
    fn prepare(&self, params: Self::Params) -> anyhow::Result<Self::Prepared>;

    /// Runs one variant on backend `B` with what [`TableWorkload::prepare`] made, in the
    /// precision and with the timing of `ctx`.
    fn run_variant<B: QuenchBackend>(
        &self,
        variant: &Variant<Self::Setting>,
        prepared: &Self::Prepared,
        ctx: &VariantContext,
        device: &B::Device,
    ) -> anyhow::Result<VariantOutcome>;

    /// Refuses `variant` where the prepared data cannot serve it, before any variant of the
    /// suite runs (called for the chosen variants only); nothing to check by default.
    fn check_variant(
        &self,
        _variant: &Variant<Self::Setting>,
        _prepared: &Self::Prepared,
    ) -> anyhow::Result<()> {
        Ok(())
    }

    /// The PyTorch peer (`peers/`) of the prepared run; none by default, or where the
    /// parameters have no equivalent there (synthetic data, say). Files the peer reads are
    /// written into `inputs` ([`PreparedWorkload::peer`]).
    fn peer(&self, _prepared: &Self::Prepared, _inputs: &Path) -> anyhow::Result<Option<Peer>> {
        Ok(None)
    }
}

impl<T: TableWorkload> Workload for T {
    fn name(&self) -> &'static str {
        T::NAME
    }

    fn summary(&self) -> &'static str {
        T::SUMMARY
    }

    fn variants(&self) -> Vec<VariantInfo> {
        self.table()
            .iter()
            .map(|v| VariantInfo {
                name: v.name,
                description: v.description,
                baseline: v.baseline,
                claim: v.claim,
                precision: v.precision,
            })
            .collect()
    }

    fn prepare(&self, params: &toml::Table) -> anyhow::Result<Box<dyn PreparedWorkload + '_>> {
        let parsed = parse_params::<T::Params>(T::NAME, params)?;
        let prepared = TableWorkload::prepare(self, parsed)
            .with_context(|| format!("workload `{}`", T::NAME))?;
        Ok(Box::new(Prepared {
            workload: self,
            prepared,
        }))
    }

    fn shards(&self) -> bool {
        T::SHARDS
    }
}

/// A table workload with what its `prepare` made.
struct Prepared<'a, T: TableWorkload> {
    workload: &'a T,
    prepared: T::Prepared,
}

impl<T: TableWorkload> Prepared<'_, T> {
    /// The variant at `row` of the table.
    fn variant(&self, row: usize) -> anyhow::Result<&Variant<T::Setting>> {
        self.workload
            .table()
            .get(row)
            .with_context(|| format!("workload `{}` has no variant at row {row}", T::NAME))
    }
}

impl<T: TableWorkload> PreparedWorkload for Prepared<'_, T> {
    fn run(&self, row: usize, ctx: &RunContext) -> anyhow::Result<VariantRun> {
        let variant = self.variant(row)?;
        run_on(
            ctx.device,
            Dispatch {
                workload: self.workload,
                variant,
                prepared: &self.prepared,
                ctx,
            },
        )?
    }

    fn peer(&self, inputs: &Path) -> anyhow::Result<Option<Peer>> {
        TableWorkload::peer(self.workload, &self.prepared, inputs)
            .with_context(|| format!("workload `{}`: the PyTorch peer's inputs", T::NAME))
    }

    fn check(&self, row: usize) -> anyhow::Result<()> {
        let variant = self.variant(row)?;
        self.workload
            .check_variant(variant, &self.prepared)
            .with_context(|| format!("workload `{}`, variant `{}`", T::NAME, variant.name))
    }
}

/// One variant of a table workload, on whichever backend [`run_on`] picks.
struct Dispatch<'a, T: TableWorkload> {
    workload: &'a T,
    variant: &'a Variant<T::Setting>,
    prepared: &'a T::Prepared,
    ctx: &'a RunContext<'a>,
}

impl<T: TableWorkload> OnDevice for Dispatch<'_, T> {
    type Output = anyhow::Result<VariantRun>;

    fn run<B: QuenchBackend>(self, device: &B::Device) -> Self::Output {
        let (precision, fell_back) = match self.ctx.precision.resolve(self.variant.precision) {
            Ok(resolved) => resolved,
            Err(why) => return Ok(VariantRun::Unsupported(why)),
        };
        let ctx = VariantContext {
            precision,
            timing: self.ctx.timing,
            repeats_given: self.ctx.repeats_given,
            world: self.ctx.world,
        };
        let mut outcome =
            self.workload
                .run_variant::<B>(self.variant, self.prepared, &ctx, device)?;
        outcome.notes.extend(fell_back);
        Ok(VariantRun::Measured(outcome, precision))
    }
}

/// Times `work` (one full run of a workload) on backend `B` with the harness: the last run's
/// output, the seconds per run and the launches and read-backs per run. A failing run fails
/// the measurement.
pub fn time_runs<B: Backend, T>(
    device: &B::Device,
    timing: TimingConfig,
    mut work: impl FnMut() -> anyhow::Result<T>,
) -> anyhow::Result<(T, Stats, CallCounts)> {
    let mut failure = None;
    let m = quench_device::measure_on::<B, _>(device, timing, || match work() {
        Ok(out) => Some(out),
        Err(err) => {
            failure.get_or_insert(err);
            None
        }
    })?;
    match (failure, m.output) {
        (Some(err), _) => Err(err),
        (None, Some(out)) => Ok((out, m.seconds, m.counts)),
        (None, None) => anyhow::bail!("the timed run produced no output"),
    }
}

/// A suite's settings table `name` (e.g. `training`) as `T`, with `T`'s defaults where a key is
/// not given. The keys in `set_by_variant` are refused, named: each variant sets them, so a
/// value the suite gave would be ignored without a word.
pub fn suite_settings<T: DeserializeOwned>(
    name: &str,
    table: toml::Table,
    set_by_variant: &[&str],
) -> Result<T, String> {
    refuse_set_by_variant(name, &table, set_by_variant)?;
    T::deserialize(toml::Value::Table(table))
        .map_err(|err| quench_support::config::located(&err.to_string(), name))
}

/// Refuses, naming it, a key of the suite's table `name` that each variant sets.
pub fn refuse_set_by_variant(
    name: &str,
    table: &toml::Table,
    set_by_variant: &[&str],
) -> Result<(), String> {
    match set_by_variant.iter().find(|key| table.contains_key(**key)) {
        Some(key) => Err(format!(
            "{name}.{key}: set by each variant, not by the suite; remove it (`benchmark list` \
             shows the variants)"
        )),
        None => Ok(()),
    }
}

/// [`suite_settings`] as a field's `deserialize_with`: a table named `name` whose keys in
/// `set_by_variant` are refused.
pub fn deserialize_suite_settings<'de, D, T>(
    deserializer: D,
    name: &str,
    set_by_variant: &[&str],
) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: DeserializeOwned,
{
    let table = toml::Table::deserialize(deserializer)?;
    suite_settings(name, table, set_by_variant).map_err(serde::de::Error::custom)
}

/// Parses a workload's parameter table into its configuration type, naming the workload on
/// error; unknown keys are refused by the type's `deny_unknown_fields`.
pub fn parse_params<C: DeserializeOwned>(
    workload: &str,
    params: &toml::Table,
) -> anyhow::Result<C> {
    C::deserialize(toml::Value::Table(params.clone()))
        .with_context(|| format!("invalid parameters of workload `{workload}`"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn quality(value: f64, tolerance: Tolerance) -> Quality {
        Quality {
            metric: "accuracy".into(),
            value,
            higher_is_better: true,
            tolerance,
            chance: None,
            caveat: None,
        }
    }

    /// A batch size a variant's configuration is made of: at least 1.
    struct Batch(usize);

    impl quench_train::settings::Validate for Batch {
        type Error = String;

        fn validate(&self) -> Result<(), String> {
            (self.0 >= 1)
                .then_some(())
                .ok_or(format!("batch = {}", self.0))
        }
    }

    #[test]
    fn a_refusal_names_its_variant_unless_every_variant_shares_it() {
        let variant = |name: &'static str, setting: usize| Variant {
            name,
            description: "",
            baseline: false,
            claim: None,
            precision: PrecisionRole::F32,
            setting,
        };
        let table = [variant("baseline", 8), variant("all", 0)];
        let made = |scale: usize| {
            PerVariant::new(&table, |v| {
                Valid::new(Batch(v.setting * scale)).map_err(anyhow::Error::msg)
            })
        };
        let one = made(1).err().map(|e| format!("{e:#}"));
        assert_eq!(one.as_deref(), Some("variant `all`: batch = 0"));
        // The suite's own setting (a scale of 0) refuses every variant alike: no variant named.
        let every = made(0).err().map(|e| format!("{e:#}"));
        assert_eq!(every.as_deref(), Some("batch = 0"));
        let table = [variant("baseline", 8), variant("all", 256)];
        let both = PerVariant::new(&table, |v| {
            Valid::new(Batch(v.setting)).map_err(anyhow::Error::msg)
        });
        assert!(both.is_ok_and(|p| p.of(&table[1]).is_ok()));
    }

    #[test]
    fn a_workloads_own_repeats_give_way_to_the_command_lines_only() {
        let world = World::alone();
        let ctx = |repeats_given| VariantContext {
            precision: Precision::F32,
            timing: TimingConfig {
                warmup: 1,
                repeats: 3,
            },
            repeats_given,
            world: &world,
        };
        assert_eq!(ctx(false).timing_with(Some(1)).repeats, 1);
        assert_eq!(ctx(false).timing_with(None).repeats, 3);
        assert_eq!(
            ctx(true).timing_with(Some(1)).repeats,
            3,
            "--repeats 3 wins"
        );
        assert_eq!(ctx(true).timing_with(Some(1)).warmup, 1);
    }

    #[test]
    fn a_shortfall_is_named_explained_or_left_unjudged_by_the_caveat() {
        let base = quality(0.57, Tolerance::Absolute(0.015));
        let worse = quality(0.50, Tolerance::Absolute(0.015));
        assert_eq!(
            quality(0.56, Tolerance::Absolute(0.015)).verdict(Some(&base)),
            Verdict {
                parity: Some(true),
                note: None
            }
        );
        let plain = worse.verdict(Some(&base));
        assert_eq!(plain.parity, Some(false));
        let note = plain.note.unwrap();
        assert!(
            note.contains("loss of quality") && note.contains("0.5000") && note.contains("0.5700"),
            "{note}"
        );
        let unjudged = Quality {
            caveat: QualityCaveat::fewer_steps(128, 8, 2),
            ..worse.clone()
        }
        .verdict(Some(&base));
        assert_eq!(unjudged.parity, None);
        let note = unjudged.note.unwrap();
        assert!(
            note.starts_with("not judged at this size: batch 128 takes 16x"),
            "{note}"
        );
        let explained = Quality {
            caveat: Some(QualityCaveat::Explained("a coarser solver".into())),
            ..worse.clone()
        }
        .verdict(Some(&base));
        assert_eq!(explained.parity, Some(false));
        assert_eq!(explained.note.as_deref(), Some("worse: a coarser solver"));
        // A caveat changes nothing at parity, and a batch no larger has none.
        assert_eq!(
            Quality {
                caveat: QualityCaveat::fewer_steps(128, 8, 2),
                ..base.clone()
            }
            .verdict(Some(&base))
            .note,
            None
        );
        assert_eq!(QualityCaveat::fewer_steps(8, 8, 2), None);
    }

    /// Issue 53, item 12: four-class models at 0.25 (chance) "agreed" and were judged `ok`.
    #[test]
    fn no_verdict_where_the_baseline_is_at_chance() {
        let with_chance = |value, chance| Quality {
            chance: Some(chance),
            ..quality(value, Tolerance::Absolute(0.02))
        };
        assert_eq!(majority_share(&[0, 1, 1, 3]), Some(0.5));
        assert_eq!(majority_share(&[]), None);
        // The baseline at chance (and below it): no verdict for the variants, nor for itself.
        for base in [
            with_chance(0.25, 0.25),
            with_chance(0.13, 0.25),
            // Within the tolerance (0.27 would sit on it, and f64's 0.27 - 0.25 is above 0.02).
            with_chance(0.265, 0.25),
        ] {
            let verdict = with_chance(0.25, 0.25).verdict(Some(&base));
            assert_eq!(verdict.parity, None, "{base:?}");
            let note = verdict.note.unwrap();
            assert!(
                note.starts_with("not judged: at chance, the baseline's")
                    && note.contains("chance level 0.2500"),
                "{note}"
            );
            let own = base.verdict(None);
            assert_eq!(own.parity, None);
            assert!(own.note.unwrap().starts_with("not judged: at chance, its"));
        }
        // Above chance by more than the tolerance: judged as before, both ways.
        let learned = with_chance(0.30, 0.25);
        assert_eq!(
            with_chance(0.29, 0.25).verdict(Some(&learned)).parity,
            Some(true)
        );
        assert_eq!(
            with_chance(0.25, 0.25).verdict(Some(&learned)).parity,
            Some(false)
        );
        // An error: below chance is learning.
        let error = |value| Quality {
            higher_is_better: false,
            ..with_chance(value, 0.5)
        };
        assert_eq!(error(0.26).at_chance(), None);
        assert_eq!(error(0.49).at_chance(), Some(0.5));
        // A non-finite value is worse, not at chance.
        assert_eq!(with_chance(f64::NAN, 0.25).at_chance(), None);
    }

    #[test]
    fn parity_within_and_outside_the_tolerance() {
        let base = quality(0.57, Tolerance::Absolute(0.015));
        assert_eq!(
            quality(0.56, Tolerance::Absolute(0.015)).at_parity_with(Some(&base)),
            Some(true)
        );
        assert_eq!(
            quality(0.55, Tolerance::Absolute(0.015)).at_parity_with(Some(&base)),
            Some(false)
        );
        assert_eq!(
            quality(0.70, Tolerance::Absolute(0.015)).at_parity_with(Some(&base)),
            Some(true)
        );
        assert_eq!(
            quality(0.56, Tolerance::Relative(0.1)).at_parity_with(Some(&base)),
            Some(true)
        );
        assert_eq!(
            quality(0.56, Tolerance::Absolute(0.1)).at_parity_with(None),
            None
        );
        assert_eq!(
            quality(f64::NAN, Tolerance::Absolute(1.0)).at_parity_with(Some(&base)),
            Some(false)
        );
    }

    #[test]
    fn lower_is_better_metrics_and_absolute_bounds() {
        let mut kl = quality(1.1, Tolerance::Relative(0.1));
        kl.higher_is_better = false;
        let mut base = kl.clone();
        base.value = 0.95;
        assert_eq!(kl.at_parity_with(Some(&base)), Some(false));
        kl.value = 1.04;
        assert_eq!(kl.at_parity_with(Some(&base)), Some(true));
        let err = quality(2e-4, Tolerance::AtMost(1e-3));
        assert_eq!(err.at_parity_with(None), Some(true));
        assert_eq!(
            quality(2e-3, Tolerance::AtMost(1e-3)).at_parity_with(None),
            Some(false)
        );
    }
}
