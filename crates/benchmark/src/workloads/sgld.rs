//! Workload `sgld` (guide 002): Gibbs-posterior SGLD over a grid of inverse temperatures and
//! repetitions, with per-beta losses, errors and the PAC-Bayes bound.
//!
//! The baseline runs the grid the original's way on purpose: one chain after another, the
//! grid's own batch size, Langevin noise drawn on the host and copied, batches assembled on
//! the host. Every other variant changes one thing, and `all` changes them together. One
//! iteration is one epoch of the grid (every chain still running takes an epoch), so speed-ups
//! are ratios of whole-grid times.

use std::path::{Path, PathBuf};

use burn::tensor::backend::AutodiffBackend;
use quench_device::{OnDevice, Precision, TimingConfig, run_on};
use quench_train::sgld::{Execution, GridConfig, GridData, GridResult, NoiseSource, run_grid};
use serde::Deserialize;

use crate::workload::{
    Claim, Quality, RunContext, TableWorkload, Tolerance, Variant, VariantOutcome, VariantRun,
    time_runs,
};

/// The `sgld` workload.
pub struct SgldGrid;

/// Parameters of the `sgld` workload in a suite.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Params {
    /// The grid (`configs/sgld/*.toml`); a relative path is looked up from the working folder,
    /// then from the source tree.
    config: PathBuf,
    /// Minibatch size of the `bigger-batch` and `all` variants.
    bigger_batch: usize,
}

impl Default for Params {
    fn default() -> Self {
        Self {
            config: PathBuf::from("configs/sgld/synth-test.toml"),
            bigger_batch: 25,
        }
    }
}

/// What a variant changes.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    execution: Execution,
    bigger_batch: bool,
    /// Whether the variant is about its precision, so that a device without it cannot run it.
    precision_required: bool,
}

const ORIGINAL: Execution = Execution::ORIGINAL;

/// A row of the table; only the original's way is the baseline.
const fn variant(
    name: &'static str,
    description: &'static str,
    (execution, bigger_batch, precision_required): (Execution, bool, bool),
    claim: Option<Claim>,
) -> Variant<Plan> {
    Variant {
        name,
        description,
        baseline: !execution.batched
            && matches!(execution.noise, NoiseSource::Host)
            && matches!(execution.precision, Precision::F32)
            && !bigger_batch,
        claim,
        setting: Plan {
            execution,
            bigger_batch,
            precision_required,
        },
    }
}

const fn claim(low: f64, high: f64) -> Option<Claim> {
    Some(Claim { low, high })
}

/// (execution, bigger batch, precision required) of every variant, with guide 002's claims.
const VARIANTS: [Variant<Plan>; 6] = [
    variant(
        "baseline",
        "the original's way: one chain at a time, the grid's batch (10 SYNTH, 128 MNIST), noise \
         drawn on the host and copied, batches assembled on the host",
        (ORIGINAL, false, false),
        None,
    ),
    variant(
        "device-noise",
        "as the baseline, with the Langevin noise drawn on the device",
        (
            Execution {
                noise: NoiseSource::Device,
                ..ORIGINAL
            },
            false,
            false,
        ),
        claim(1.1, 1.3),
    ),
    variant(
        "chains-batched",
        "every (beta, repetition) chain in one batched program, weights and data with a chain \
         axis, finished chains masked and dropped",
        (
            Execution {
                batched: true,
                compact: true,
                ..ORIGINAL
            },
            false,
            false,
        ),
        None,
    ),
    variant(
        "bigger-batch",
        "as the baseline, with the suite's `bigger_batch` samples per minibatch",
        (ORIGINAL, true, false),
        claim(1.2, 1.5),
    ),
    variant(
        "bf16",
        "as the baseline, with a bf16 forward pass (f32 weights, gradients and update)",
        (
            Execution {
                precision: Precision::Bf16,
                ..ORIGINAL
            },
            false,
            true,
        ),
        claim(1.5, 2.0),
    ),
    variant(
        "all",
        "chains batched, device noise, data resident on the device, bigger batches, bf16 where \
         the device has it",
        (
            Execution {
                precision: Precision::Bf16,
                ..Execution::BATCHED
            },
            true,
            false,
        ),
        claim(3.0, 8.0),
    ),
];

impl TableWorkload for SgldGrid {
    type Params = Params;
    type Setting = Plan;
    const NAME: &'static str = "sgld";
    const SUMMARY: &'static str = "guide 002: Gibbs-posterior SGLD over every (beta, repetition) \
                                   chain of a grid, with per-beta losses, errors and the \
                                   PAC-Bayes bound";

    fn table(&self) -> &[Variant<Plan>] {
        &VARIANTS
    }

    fn run_variant(
        &self,
        variant: &Variant<Plan>,
        params: Params,
        ctx: &RunContext,
    ) -> anyhow::Result<VariantRun> {
        let plan = &variant.setting;
        let mut config = grid(&params)?;
        if plan.bigger_batch {
            config.batch_size = params.bigger_batch;
            config.check("the suite's `bigger_batch`")?;
        }
        let data = GridData::load(&config)?;
        let mut outcome = run_on(
            ctx.device,
            Task {
                config: &config,
                data: &data,
                execution: plan.execution,
                precision_required: plan.precision_required,
                timing: ctx.timing,
            },
        )??;
        if let VariantRun::Measured(outcome) = &mut outcome
            && ctx.precision != Precision::F32
        {
            outcome.notes.push(format!(
                "the run's {} policy does not apply: each variant states its own precision",
                ctx.precision
            ));
        }
        Ok(outcome)
    }
}

/// Reads the suite's grid.
fn grid(params: &Params) -> anyhow::Result<GridConfig> {
    let path = if params.config.is_relative() && !params.config.exists() {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../..")
            .join(&params.config)
    } else {
        params.config.clone()
    };
    Ok(GridConfig::load(&path)?)
}

/// One variant of the grid, timed on a device.
struct Task<'a> {
    config: &'a GridConfig,
    data: &'a GridData,
    execution: Execution,
    precision_required: bool,
    timing: TimingConfig,
}

impl OnDevice for Task<'_> {
    type Output = anyhow::Result<VariantRun>;

    fn run<B: AutodiffBackend>(self, device: &B::Device) -> Self::Output {
        let mut execution = self.execution;
        let mut notes = vec![format!("data: {}", self.data.description)];
        if let Err(refusal) = execution.precision.check::<B>(device) {
            if self.precision_required {
                return Ok(VariantRun::Unsupported(refusal.to_string()));
            }
            notes.push(format!("{refusal}: ran in f32"));
            execution.precision = Precision::F32;
        }
        let (result, seconds) = time_runs::<B, _>(device, self.timing, || {
            Ok(run_grid::<B>(self.config, self.data, &execution, device)?)
        })?;
        let epochs = self.config.max_epochs() as f64;
        notes.push(format!(
            "an iteration is one epoch of the grid; a run is {epochs} of them, {} chain-epochs \
             over {} chains at batch {}",
            self.config.chain_epochs(),
            self.config.chains(),
            self.config.batch_size
        ));
        notes.extend(beta_lines(&result));
        Ok(VariantRun::Measured(VariantOutcome {
            per_iteration: seconds.scaled(1.0 / epochs),
            iteration_unit: "grid epoch".into(),
            iterations_per_run: epochs,
            items_per_iteration: self.config.chain_epochs() as f64 / epochs,
            throughput_unit: "chain-epochs/s".into(),
            quality: Some(quality(&result)),
            notes,
        }))
    }
}

/// The quality metric: the mean test 0-1 error over repetitions at the hottest beta, the end
/// point of the grid. Parity is being within the spread over repetitions (their standard
/// deviation), but never tighter than one test point.
fn quality(result: &GridResult) -> Quality {
    let hottest = result
        .betas
        .last()
        .unwrap_or_else(|| unreachable!("a checked grid has at least one beta"));
    Quality {
        metric: format!(
            "test 0-1 error at beta {} (mean of {} repetitions)",
            hottest.beta,
            result.chains.len() / result.betas.len()
        ),
        value: hottest.test_error.mean,
        higher_is_better: false,
        tolerance: Tolerance::Absolute(hottest.test_error.std.max(1.0 / result.n_test as f64)),
    }
}

/// One note per beta with its statistics, for reading the per-beta parity.
fn beta_lines(result: &GridResult) -> Vec<String> {
    result
        .betas
        .iter()
        .map(|b| {
            format!(
                "beta {} ({} epochs): test error {}, train error {}, test loss {}, train loss {}, \
                 loss gap {}, KL {:.3}, bound {:.4}",
                b.beta,
                b.epochs,
                b.test_error,
                b.train_error,
                b.test_loss,
                b.train_loss,
                b.loss_gap,
                b.bound.kl,
                b.bound.gap
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::Workload;

    fn variant(name: &str) -> crate::workload::VariantInfo {
        SgldGrid
            .variants()
            .into_iter()
            .find(|v| v.name == name)
            .unwrap()
    }

    #[test]
    fn one_baseline_and_the_guides_claims() {
        let variants = SgldGrid.variants();
        let names: Vec<_> = variants.iter().map(|v| v.name).collect();
        assert_eq!(
            names,
            [
                "baseline",
                "device-noise",
                "chains-batched",
                "bigger-batch",
                "bf16",
                "all"
            ]
        );
        assert_eq!(variants.iter().filter(|v| v.baseline).count(), 1);
        assert!(variants[0].baseline);
        assert_eq!(
            variant("all").claim.map(|c| (c.low, c.high)),
            Some((3.0, 8.0))
        );
        assert!(variant("chains-batched").claim.is_none());
    }

    #[test]
    fn bad_parameters_and_missing_grids_are_refused() {
        let unknown: toml::Table = toml::from_str("grid = 'x'").unwrap();
        assert!(SgldGrid.check_params(&unknown).is_err());
        SgldGrid.check_params(&toml::Table::new()).unwrap();
        let missing: toml::Table = toml::from_str("config = 'configs/sgld/none.toml'").unwrap();
        let err = SgldGrid
            .run(&variant("baseline"), &missing, &RunContext::quick_cpu())
            .unwrap_err();
        assert!(format!("{err:#}").contains("none.toml"), "{err:#}");
    }

    #[test]
    fn the_test_grid_runs_and_bf16_is_refused_on_the_cpu() {
        let (params, ctx) = (toml::Table::new(), RunContext::quick_cpu());
        let VariantRun::Measured(outcome) = SgldGrid
            .run(&variant("chains-batched"), &params, &ctx)
            .unwrap()
        else {
            panic!("the CPU runs f32");
        };
        assert_eq!(outcome.iterations_per_run, 50.0);
        assert!((outcome.items_per_iteration - 122.0 / 50.0).abs() < 1e-12);
        let quality = outcome.quality.unwrap();
        assert!(quality.metric.contains("beta 10"), "{}", quality.metric);
        assert!(quality.value < 0.5, "{}", quality.value);
        assert!(outcome.notes.iter().any(|n| n.starts_with("beta 0 ")));
        let refused = SgldGrid.run(&variant("bf16"), &params, &ctx).unwrap();
        assert!(matches!(refused, VariantRun::Unsupported(ref r) if r.contains("bf16")));
        let VariantRun::Measured(all) = SgldGrid.run(&variant("all"), &params, &ctx).unwrap()
        else {
            panic!("`all` falls back to f32");
        };
        assert!(
            all.notes.iter().any(|n| n.contains("ran in f32")),
            "{:?}",
            all.notes
        );
    }
}
