//! The workload registry's contract: named variants, each timed and scored.

use anyhow::Context;
use burn::tensor::backend::Backend;
use quench_device::{Precision, SelectedDevice, Stats, TimingConfig};
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

/// One way of running a workload: the seed's baseline, or one optimisation, or all together.
#[derive(Debug, Clone, PartialEq)]
pub struct VariantInfo {
    /// Short name used by `--only` style selections and in reports.
    pub name: &'static str,
    /// What the variant changes, in one line.
    pub description: &'static str,
    /// Whether this is the seed's own way, the reference of speed-ups.
    pub baseline: bool,
    /// The speed-up its guide claimed for this optimisation, if it claimed one.
    pub claim: Option<Claim>,
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
}

impl Quality {
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
    /// Anything the reader should know about this measurement.
    pub notes: Vec<String>,
}

/// The result of asking a workload to run a variant.
#[derive(Debug, Clone, PartialEq)]
pub enum VariantRun {
    /// It ran and was measured.
    Measured(VariantOutcome),
    /// The device cannot run it (bf16 on a CPU backend, say); the reason is reported.
    Unsupported(String),
}

/// Where and how variants run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RunContext {
    /// The device chosen for the run.
    pub device: SelectedDevice,
    /// The precision policy asked for.
    pub precision: Precision,
    /// Warm-up and repeats.
    pub timing: TimingConfig,
}

#[cfg(test)]
impl RunContext {
    /// The CPU, f32, no warm-up and one repeat: what workload tests run with.
    pub fn quick_cpu() -> Self {
        Self {
            device: SelectedDevice::Cpu,
            precision: Precision::F32,
            timing: TimingConfig {
                warmup: 0,
                repeats: 1,
            },
        }
    }
}

/// A registered workload.
pub trait Workload: Sync {
    /// Its name in suites and reports.
    fn name(&self) -> &'static str;
    /// One line on what it computes and which guide it comes from.
    fn summary(&self) -> &'static str;
    /// Its variants; at most one is the baseline.
    fn variants(&self) -> Vec<VariantInfo>;
    /// Checks the suite's parameters for this workload before anything runs.
    fn check_params(&self, params: &toml::Table) -> anyhow::Result<()>;
    /// Runs one variant with the suite's parameters.
    fn run(
        &self,
        variant: &VariantInfo,
        params: &toml::Table,
        ctx: &RunContext,
    ) -> anyhow::Result<VariantRun>;
}

/// One row of a workload's variant table: what the variant is, and the setting it runs with.
#[derive(Debug, Clone, PartialEq)]
pub struct Variant<S> {
    /// Short name used in suites and reports.
    pub name: &'static str,
    /// What the variant changes, in one line.
    pub description: &'static str,
    /// Whether this is the seed's own way, the reference of speed-ups.
    pub baseline: bool,
    /// The speed-up its guide claimed, if it claimed one.
    pub claim: Option<Claim>,
    /// How the workload runs this variant.
    pub setting: S,
}

/// A workload described by its parameter type and a table of variants. Implementing it
/// implements [`Workload`]: names, parameter checks and the variant look-up live here once.
pub trait TableWorkload: Sync {
    /// The workload's parameters in a suite (`deny_unknown_fields`, defaults for every field).
    type Params: DeserializeOwned;
    /// What distinguishes one variant from another.
    type Setting: Sync;
    /// Its name in suites and reports.
    const NAME: &'static str;
    /// One line on what it computes and which guide it comes from.
    const SUMMARY: &'static str;

    /// Its variants, at most one of them the baseline.
    fn table(&self) -> &[Variant<Self::Setting>];

    /// Runs one variant with the parsed parameters.
    fn run_variant(
        &self,
        variant: &Variant<Self::Setting>,
        params: Self::Params,
        ctx: &RunContext,
    ) -> anyhow::Result<VariantRun>;
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
            })
            .collect()
    }

    fn check_params(&self, params: &toml::Table) -> anyhow::Result<()> {
        parse_params::<T::Params>(T::NAME, params).map(drop)
    }

    fn run(
        &self,
        variant: &VariantInfo,
        params: &toml::Table,
        ctx: &RunContext,
    ) -> anyhow::Result<VariantRun> {
        let row = self
            .table()
            .iter()
            .find(|v| v.name == variant.name)
            .with_context(|| format!("workload `{}` has no variant `{}`", T::NAME, variant.name))?;
        self.run_variant(row, parse_params(T::NAME, params)?, ctx)
    }
}

/// Times `work` (one full run of a workload) on backend `B` with the harness: the last run's
/// output and the seconds per run. A failing run fails the measurement.
pub fn time_runs<B: Backend, T>(
    device: &B::Device,
    timing: TimingConfig,
    mut work: impl FnMut() -> anyhow::Result<T>,
) -> anyhow::Result<(T, Stats)> {
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
        (None, Some(out)) => Ok((out, m.seconds)),
        (None, None) => anyhow::bail!("the timed run produced no output"),
    }
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
        }
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
