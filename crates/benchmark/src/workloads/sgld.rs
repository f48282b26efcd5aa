//! Workload `sgld` (guide 002): Gibbs-posterior SGLD over a grid of inverse temperatures and
//! repetitions, with per-beta losses, errors and the PAC-Bayes bound.
//!
//! The baseline runs the grid the original's way on purpose: one chain after another, the
//! grid's own batch size, Langevin noise drawn on the host and copied, batches assembled on
//! the host. Every other variant changes one thing, and `all` changes them together. One
//! iteration is one epoch of the grid (every chain still running takes an epoch), so speed-ups
//! are ratios of whole-grid times.

use std::path::{Path, PathBuf};

use anyhow::Context;
use burn::tensor::backend::AutodiffBackend;
use quench_device::{OnDevice, Precision, TimingConfig, measure_on, run_on};
use quench_train::sgld::{Execution, GridConfig, GridData, GridResult, NoiseSource, run_grid};
use serde::Deserialize;

use crate::workload::{
    Claim, Quality, RunContext, Tolerance, VariantInfo, VariantOutcome, VariantRun, Workload,
    parse_params,
};

/// The `sgld` workload.
pub struct SgldGrid;

/// Parameters of the `sgld` workload in a suite.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct Params {
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
struct Plan {
    execution: Execution,
    bigger_batch: bool,
    /// Whether the variant is about its precision, so that a device without it cannot run it.
    precision_required: bool,
}

const ORIGINAL: Execution = Execution::ORIGINAL;

/// The variants: name, description, plan, guide 002's claim.
const VARIANTS: [(&str, &str, Plan, Option<Claim>); 6] = [
    (
        "baseline",
        "the original's way: one chain at a time, the grid's batch (10 SYNTH, 128 MNIST), noise \
         drawn on the host and copied, batches assembled on the host",
        Plan {
            execution: ORIGINAL,
            bigger_batch: false,
            precision_required: false,
        },
        None,
    ),
    (
        "device-noise",
        "as the baseline, with the Langevin noise drawn on the device",
        Plan {
            execution: Execution {
                noise: NoiseSource::Device,
                ..ORIGINAL
            },
            bigger_batch: false,
            precision_required: false,
        },
        Some(Claim {
            low: 1.1,
            high: 1.3,
        }),
    ),
    (
        "chains-batched",
        "every (beta, repetition) chain in one batched program, weights and data with a chain \
         axis, finished chains masked and dropped",
        Plan {
            execution: Execution {
                batched: true,
                compact: true,
                ..ORIGINAL
            },
            bigger_batch: false,
            precision_required: false,
        },
        None,
    ),
    (
        "bigger-batch",
        "as the baseline, with the suite's `bigger_batch` samples per minibatch",
        Plan {
            execution: ORIGINAL,
            bigger_batch: true,
            precision_required: false,
        },
        Some(Claim {
            low: 1.2,
            high: 1.5,
        }),
    ),
    (
        "bf16",
        "as the baseline, with a bf16 forward pass (f32 weights, gradients and update)",
        Plan {
            execution: Execution {
                precision: Precision::Bf16,
                ..ORIGINAL
            },
            bigger_batch: false,
            precision_required: true,
        },
        Some(Claim {
            low: 1.5,
            high: 2.0,
        }),
    ),
    (
        "all",
        "chains batched, device noise, data resident on the device, bigger batches, bf16 where \
         the device has it",
        Plan {
            execution: Execution {
                precision: Precision::Bf16,
                ..Execution::BATCHED
            },
            bigger_batch: true,
            precision_required: false,
        },
        Some(Claim {
            low: 3.0,
            high: 8.0,
        }),
    ),
];

impl Workload for SgldGrid {
    fn name(&self) -> &'static str {
        "sgld"
    }

    fn summary(&self) -> &'static str {
        "guide 002: Gibbs-posterior SGLD over every (beta, repetition) chain of a grid, with \
         per-beta losses, errors and the PAC-Bayes bound"
    }

    fn variants(&self) -> Vec<VariantInfo> {
        VARIANTS
            .iter()
            .map(|(name, description, _, claim)| VariantInfo {
                name,
                description,
                baseline: *name == "baseline",
                claim: *claim,
            })
            .collect()
    }

    fn check_params(&self, params: &toml::Table) -> anyhow::Result<()> {
        let params: Params = parse_params(self.name(), params)?;
        grid(&params).map(drop)
    }

    fn run(
        &self,
        variant: &VariantInfo,
        params: &toml::Table,
        ctx: &RunContext,
    ) -> anyhow::Result<VariantRun> {
        let params: Params = parse_params(self.name(), params)?;
        let (_, _, plan, _) = VARIANTS
            .iter()
            .find(|(name, ..)| *name == variant.name)
            .with_context(|| format!("workload `sgld` has no variant `{}`", variant.name))?;
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
        let measured = measure_on::<B, _>(device, self.timing, || {
            run_grid::<B>(self.config, self.data, &execution, device)
        })?;
        let result = measured.output?;
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
            per_iteration: measured.seconds.scaled(1.0 / epochs),
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
    use quench_device::SelectedDevice;

    fn ctx() -> RunContext {
        RunContext {
            device: SelectedDevice::Cpu,
            precision: Precision::F32,
            timing: TimingConfig {
                warmup: 0,
                repeats: 1,
            },
        }
    }

    fn variant(name: &str) -> VariantInfo {
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
    fn parameters_are_checked_before_running() {
        let unknown: toml::Table = toml::from_str("grid = 'x'").unwrap();
        assert!(SgldGrid.check_params(&unknown).is_err());
        let missing: toml::Table = toml::from_str("config = 'configs/sgld/none.toml'").unwrap();
        let err = format!("{:#}", SgldGrid.check_params(&missing).unwrap_err());
        assert!(err.contains("none.toml"), "{err}");
        SgldGrid.check_params(&toml::Table::new()).unwrap();
    }

    #[test]
    fn the_test_grid_runs_and_bf16_is_refused_on_the_cpu() {
        let params = toml::Table::new();
        let VariantRun::Measured(outcome) = SgldGrid
            .run(&variant("chains-batched"), &params, &ctx())
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
        let refused = SgldGrid.run(&variant("bf16"), &params, &ctx()).unwrap();
        assert!(matches!(refused, VariantRun::Unsupported(ref r) if r.contains("bf16")));
        let VariantRun::Measured(all) = SgldGrid.run(&variant("all"), &params, &ctx()).unwrap()
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
