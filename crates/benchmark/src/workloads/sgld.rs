//! Workload `sgld` (guide 002): Gibbs-posterior SGLD over a grid of inverse temperatures and
//! repetitions, with per-beta losses, errors and the PAC-Bayes bound.
//!
//! The baseline runs the grid the original's way on purpose: one chain after another, the
//! grid's own batch size, Langevin noise drawn on the host and copied, batches assembled on
//! the host. Every other variant changes one thing, and `all` changes them together. One
//! iteration is one epoch of the grid (every chain still running takes an epoch), so speed-ups
//! are ratios of whole-grid times.

use quench_kernels::QuenchBackend;
use std::path::{Path, PathBuf};

use quench_data::MnistSource;
use quench_sgld::{
    BoundedLoss, DatasetKind, Execution, GridConfig, GridData, GridResult, LossScale, NoiseSource,
    run_grid_shard,
};
use quench_support::files::in_working_folder_or_source_tree;
use quench_train::settings::Valid;
use serde::Deserialize;

use crate::peers::Peer;
use crate::workload::{
    Claim, PrecisionRole, Quality, QualityCaveat, Sharded, TableWorkload, Tolerance, Variant,
    VariantContext, VariantOutcome, claimed, final_training_loss, majority_share, time_runs,
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

/// `sgld` prepared for a suite.
pub struct PreparedGrid {
    /// The grid as its file sets it (the baseline's batch).
    config: Valid<GridConfig>,
    /// The grid at the suite's `bigger_batch`.
    bigger: Valid<GridConfig>,
    /// The data the grid names.
    data: GridData,
}

/// What a variant changes; its precision comes from the run (`Execution::precision` is set
/// from the variant's context).
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    execution: Execution,
    bigger_batch: bool,
}

const ORIGINAL: Execution = Execution::ORIGINAL;

/// A row of the table; only the original's way is the baseline.
const fn variant(
    name: &'static str,
    description: &'static str,
    (execution, bigger_batch): (Execution, bool),
    (precision, claim): (PrecisionRole, Option<Claim>),
) -> Variant<Plan> {
    Variant {
        name,
        description,
        baseline: !execution.batched
            && matches!(execution.noise, NoiseSource::Host)
            && matches!(precision, PrecisionRole::F32)
            && !bigger_batch,
        claim,
        precision,
        setting: Plan {
            execution,
            bigger_batch,
        },
    }
}

const F32: PrecisionRole = PrecisionRole::F32;

/// (execution, bigger batch) and (precision, claim) of every variant, with guide 002's claims.
const VARIANTS: [Variant<Plan>; 7] = [
    variant(
        "baseline",
        "the original's way: one chain at a time, the grid's batch (10 SYNTH, 128 MNIST), noise \
         drawn on the host and copied, batches assembled on the host",
        (ORIGINAL, false),
        (F32, None),
    ),
    variant(
        "device-noise",
        "as the baseline, with the Langevin noise drawn where the step runs, from counter-based \
         per-chain streams",
        (
            Execution {
                noise: NoiseSource::Device,
                ..ORIGINAL
            },
            false,
        ),
        (F32, claimed(1.1, 1.3)),
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
        ),
        (F32, None),
    ),
    variant(
        "fused-step",
        "chains batched as in `chains-batched`, with counter-based noise and the step's \
         gradients derived by hand, noise and update fused in (one pass per chain on the CPU)",
        (
            Execution {
                batched: true,
                compact: true,
                noise: NoiseSource::Device,
                fused_step: true,
                ..ORIGINAL
            },
            false,
        ),
        (F32, None),
    ),
    variant(
        "bigger-batch",
        "as the baseline, with the suite's `bigger_batch` samples per minibatch",
        (ORIGINAL, true),
        (F32, claimed(1.2, 1.5)),
    ),
    variant(
        "mixed-precision",
        "as the baseline, with the forward pass in the run's low precision (f32 weights, \
         gradients and update)",
        (ORIGINAL, false),
        (PrecisionRole::Mixed, claimed(1.5, 2.0)),
    ),
    variant(
        "all",
        "chains batched, counter-based noise, the fused step, data resident on the device, \
         bigger batches, mixed precision where the run has it (which takes the autodiff step)",
        (Execution::BATCHED, true),
        (PrecisionRole::MixedWhereAvailable, claimed(3.0, 8.0)),
    ),
];

impl TableWorkload for SgldGrid {
    type Params = Params;
    type Prepared = PreparedGrid;
    type Setting = Plan;
    const NAME: &'static str = "sgld";
    /// Chains are dealt over the ranks as `sgld_grid` deals them (`shard_chains`).
    const SHARDS: bool = true;
    const SUMMARY: &'static str = "guide 002: Gibbs-posterior SGLD over every (beta, repetition) \
                                   chain of a grid, with per-beta losses, errors and the \
                                   PAC-Bayes bound";

    fn table(&self) -> &[Variant<Plan>] {
        &VARIANTS
    }

    /// The grid file and the suite's `bigger_batch` checked, and the data the grid names read
    /// or drawn once for every variant.
    fn prepare(&self, params: Params) -> anyhow::Result<PreparedGrid> {
        let config = grid(&params)?;
        let bigger = Valid::new(GridConfig {
            batch_size: params.bigger_batch,
            ..GridConfig::clone(&config)
        })
        .map_err(|refused| refused.with_origin("the suite's `bigger_batch`"))?;
        let data = GridData::load(&config)?;
        Ok(PreparedGrid {
            config,
            bigger,
            data,
        })
    }

    /// The grid's chains one at a time through autograd. SYNTH: the peer draws its own points
    /// from the same distribution. MNIST: the peer reads the IDX files Quench finds and draws
    /// the same number of images per class; where no data set is installed, no peer.
    fn peer(&self, prepared: &PreparedGrid, _inputs: &Path) -> anyhow::Result<Option<Peer>> {
        Ok(peer_of(&prepared.config))
    }

    fn run_variant<B: QuenchBackend>(
        &self,
        variant: &Variant<Plan>,
        prepared: &PreparedGrid,
        ctx: &VariantContext,
        device: &B::Device,
    ) -> anyhow::Result<VariantOutcome> {
        let plan = &variant.setting;
        let baseline_batch = prepared.config.batch_size;
        let config = if plan.bigger_batch {
            &prepared.bigger
        } else {
            &prepared.config
        };
        let data = &prepared.data;
        let execution = Execution {
            precision: ctx.precision,
            ..plan.execution
        };
        let shard = ctx.world.shard();
        let (chains, seconds, counts) = time_runs::<B, _>(device, ctx.timing, || {
            Ok(run_grid_shard::<B>(
                config, data, &execution, shard, device,
            )?)
        })?;
        let hottest = config.betas.len() - 1;
        let hot: Vec<f64> = chains
            .iter()
            .filter(|c| c.beta_index == hottest)
            .map(|c| c.test_error)
            .collect();
        let chain_epochs: usize = chains.iter().map(|c| config.epochs[c.beta_index]).sum();
        // The tolerance is the spread over repetitions, at least one test point (`quality`).
        let sharded = (shard.ranks > 1)
            .then(|| Sharded::of(chains.len(), &hot, Some(1.0 / data.n_test() as f64)));
        let result = GridResult::new(config, data, chains);
        let epochs = config.max_epochs() as f64;
        let mut notes = vec![
            format!("data: {}", data.description),
            format!(
                "an iteration is one epoch of the grid; a run is {epochs} of them, {} chain-epochs \
                 over {} chains at batch {}",
                config.chain_epochs(),
                config.chains(),
                config.batch_size
            ),
        ];
        notes.push(match config.loss {
            LossScale::Unit => "loss: the bounded loss mapped onto [0, 1], the bound's loss \
                                (`loss = \"raw\"` trains on nats as the original did, each beta \
                                then acting about l_max times its nominal value)"
                .into(),
            LossScale::Raw => format!(
                "loss: raw nats, as the original (each beta acts about {:.1}x its nominal \
                 value on the bound's [0, 1] loss)",
                BoundedLoss {
                    l_max: config.l_max
                }
                .training_factor(LossScale::Unit)
                .recip()
            ),
        });
        if sharded.is_none() {
            notes.extend(beta_lines(&result));
        }
        Ok(VariantOutcome {
            training_loss: final_training_loss(result.chains.iter().map(|c| Some(c.train_loss))),
            sharded,
            per_iteration: seconds.scaled(1.0 / epochs),
            counts: Some(counts.per(epochs)),
            iteration_unit: "grid epoch".into(),
            iterations_per_run: epochs,
            items_per_iteration: chain_epochs as f64 / epochs,
            throughput_unit: "chain-epochs/s".into(),
            quality: Some(Quality {
                caveat: QualityCaveat::fewer_steps(
                    config.batch_size,
                    baseline_batch,
                    config.max_epochs(),
                ),
                ..quality(&result, data, config.repetitions)
            }),
            notes,
        })
    }
}

/// The peer of the grid `config`: its chains one at a time through autograd (see
/// [`TableWorkload::peer`]); none for an MNIST grid without IDX files.
fn peer_of(config: &GridConfig) -> Option<Peer> {
    let list = |values: Vec<String>| values.join(",");
    let mut args = vec![
        "--betas".into(),
        list(config.betas.iter().map(f64::to_string).collect()),
        "--epochs".into(),
        list(config.epochs.iter().map(usize::to_string).collect()),
        "--a0".into(),
        list(config.a0.iter().map(f64::to_string).collect()),
        "--repetitions".into(),
        config.repetitions.to_string(),
        "--batch-size".into(),
        config.batch_size.to_string(),
        "--hidden".into(),
        config.hidden.to_string(),
        "--l-max".into(),
        config.l_max.to_string(),
        "--loss".into(),
        match config.loss {
            LossScale::Unit => "unit".into(),
            LossScale::Raw => "raw".into(),
        },
        "--prior-sigma".into(),
        config.prior_sigma.to_string(),
        "--seed".into(),
        config.seed.to_string(),
    ];
    match config.dataset {
        DatasetKind::Synth => {
            args.extend([
                "--train".into(),
                config.synth.train.to_string(),
                "--test".into(),
                config.synth.test.to_string(),
            ]);
            if config.synth.random_labels {
                args.push("--random-labels".into());
            }
        }
        DatasetKind::Mnist => {
            // The peer reads the IDX files; it has no synthetic stand-in.
            let source = MnistSource::locate(config.mnist.dir.as_deref()).ok()?;
            let dir = source.dir()?;
            args.extend([
                "--mnist-dir".into(),
                dir.display().to_string(),
                "--per-class".into(),
                config.mnist.per_class.to_string(),
                "--mean".into(),
                config.mnist.mean.to_string(),
                "--std".into(),
                config.mnist.std.to_string(),
            ]);
        }
    }
    Some(Peer {
        script: "sgld.py",
        args,
        repeats: None,
    })
}

/// Reads the suite's grid.
fn grid(params: &Params) -> anyhow::Result<Valid<GridConfig>> {
    Ok(GridConfig::load(&in_working_folder_or_source_tree(
        &params.config,
    ))?)
}

/// The quality metric: the mean test 0-1 error over repetitions at the hottest beta, the end
/// point of the grid. Parity is being within the spread over repetitions (their standard
/// deviation), but never tighter than one test point. Its chance level is the error of always
/// predicting each repetition's most frequent test label, averaged over the repetitions.
fn quality(result: &GridResult, data: &GridData, repetitions: usize) -> Quality {
    let hottest = result
        .betas
        .last()
        .unwrap_or_else(|| unreachable!("a checked grid has at least one beta"));
    Quality {
        metric: format!(
            "test 0-1 error at beta {} (mean of {repetitions} repetitions)",
            hottest.beta,
        ),
        value: hottest.test_error.mean,
        higher_is_better: false,
        tolerance: Tolerance::Absolute(hottest.test_error.std.max(1.0 / result.n_test as f64)),
        chance: majority_error(data, repetitions),
        caveat: None,
    }
}

/// One minus the most frequent test label's share, averaged over the test sets of the
/// `repetitions` (one shared set or one each); `None` without test points.
fn majority_error(data: &GridData, repetitions: usize) -> Option<f64> {
    let sets = data.test_sets(&(0..repetitions).collect::<Vec<_>>());
    let shares = sets
        .iter()
        .map(|set| majority_share(set.labels()))
        .collect::<Option<Vec<f64>>>()?;
    (!shares.is_empty()).then(|| 1.0 - shares.iter().sum::<f64>() / shares.len() as f64)
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
    use crate::workload::{PrepareAndRun, RunContext, VariantRun, Workload};

    fn variant(name: &str) -> crate::workload::VariantInfo {
        SgldGrid
            .variants()
            .into_iter()
            .find(|v| v.name == name)
            .unwrap()
    }

    #[test]
    fn the_peer_takes_the_grid_and_the_data_quench_reads() {
        let params = |config: &str| {
            let table: toml::Table = format!("config = \"{config}\"").parse().unwrap();
            table
        };
        let unused = Path::new("unused");
        let peer = PrepareAndRun::peer(&SgldGrid, &params("configs/sgld/synth-test.toml"), unused)
            .unwrap()
            .unwrap();
        assert_eq!(peer.script, "sgld.py");
        let args = peer.args.join(" ");
        assert!(
            args.contains("--betas 0,1,10 --epochs 1,10,50 --a0 0.0000001,0.0000001,0.1"),
            "{args}"
        );
        assert!(
            args.contains("--loss unit") && !args.contains("--random-labels"),
            "{args}"
        );
        let err = format!(
            "{:#}",
            PrepareAndRun::peer(&SgldGrid, &params("/nonexistent.toml"), unused).unwrap_err()
        );
        assert!(err.contains("/nonexistent.toml"), "{err}");

        let dir = tempfile::tempdir().unwrap();
        let grid = dir.path().join("mnist.toml");
        let text = std::fs::read_to_string(in_working_folder_or_source_tree(
            "configs/sgld/mnist-test.toml".as_ref(),
        ))
        .unwrap()
        .replace(
            "[mnist]",
            &format!("[mnist]\ndir = {:?}", dir.path().join("idx")),
        );
        std::fs::write(&grid, text).unwrap();
        // The peer of an MNIST grid (the prepared run reads its IDX files first).
        let peer = peer_of(&GridConfig::load(&grid).unwrap()).unwrap();
        let args = peer.args.join(" ");
        let expected = format!("--mnist-dir {}", dir.path().join("idx").display());
        assert!(
            args.contains(&expected) && args.contains("--per-class 5000 --mean 0.1307"),
            "{args}"
        );
        assert!(!args.contains("--train "), "{args}");
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
                "fused-step",
                "bigger-batch",
                "mixed-precision",
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
        let err = SgldGrid.check_params(&missing).unwrap_err();
        assert!(format!("{err:#}").contains("none.toml"), "{err:#}");
        let err = SgldGrid
            .run(&variant("baseline"), &missing, &RunContext::quick_cpu())
            .unwrap_err();
        assert!(format!("{err:#}").contains("none.toml"), "{err:#}");
    }

    #[test]
    fn the_test_grid_runs_and_mixed_precision_is_refused_on_the_cpu() {
        let (params, ctx) = (toml::Table::new(), RunContext::quick_cpu());
        let VariantRun::Measured(outcome, _) = SgldGrid
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
        let refused = SgldGrid
            .run(&variant("mixed-precision"), &params, &ctx)
            .unwrap();
        assert!(matches!(refused, VariantRun::Unsupported(ref r) if r.contains("bf16")));
        let VariantRun::Measured(all, precision) =
            SgldGrid.run(&variant("all"), &params, &ctx).unwrap()
        else {
            panic!("`all` falls back to f32");
        };
        assert_eq!(precision, quench_device::Precision::F32);
        assert!(
            all.notes.iter().any(|n| n.contains("ran in f32")),
            "{:?}",
            all.notes
        );
    }
}
