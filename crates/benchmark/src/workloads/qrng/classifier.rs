//! Workload `qrng-classifier`: the 100-30-20-3 MLP naming the source of a line, four seeds with
//! early stopping; the baseline trains the seeds one at a time at batch 8 in f32 with data
//! streamed from the host, as the original did.

use quench_kernels::QuenchBackend;
use std::path::Path;

use anyhow::Context;

use quench_data::{Dataset, Mode};
use quench_qrng::Batching;
use quench_qrng::classifier::{ClassifierConfig, Execution, train_classifier};
use quench_qrng::split::Split;
use quench_train::settings::Valid;
use serde::Deserialize;

use crate::peers::Peer;
use crate::workload::{
    Claim, PerVariant, PrecisionRole, Quality, QualityCaveat, TableWorkload, Tolerance, Variant,
    VariantContext, VariantOutcome, final_training_loss, majority_share, time_runs,
};
use quench_qrng::recording::{DataSettings, Recording};

/// Guide 000's claim for neural-network training: 6-15x.
const NN_CLAIM: Claim = Claim {
    low: 6.0,
    high: 15.0,
};
/// Guide 000's claim for mixed precision alone ("2x faster").
const AMP_CLAIM: Claim = Claim {
    low: 2.0,
    high: 2.0,
};

/// Workload `qrng-classifier`.
pub struct QrngClassifier;

/// Parameters of `qrng-classifier`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ClassifierParams {
    /// The bit strings.
    data: DataSettings,
    /// The classifier's settings; `batch_size` is set by the variant.
    #[serde(deserialize_with = "training")]
    training: ClassifierConfig,
}

/// The suite's `training` table, without the key each variant sets.
fn training<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<ClassifierConfig, D::Error> {
    crate::workload::deserialize_suite_settings(deserializer, "training", &["batch_size"])
}

/// `qrng-classifier` prepared for a suite.
pub struct PreparedClassifier {
    params: ClassifierParams,
    /// The lines as features and source labels.
    data: Dataset,
    /// Where they came from, for the notes.
    note: String,
    /// Each variant's training settings.
    configs: PerVariant<ClassifierConfig>,
}

/// What a classifier variant changes.
pub struct Setting {
    batch_size: usize,
    batching: Batching,
    resident: bool,
    /// [`Execution::fused`].
    fused: bool,
}

const CLASSIFIER_VARIANTS: [Variant<Setting>; 7] = [
    Variant {
        name: "baseline",
        description: "batch 8, one seed at a time, f32, data streamed from the host (the original's way)",
        baseline: true,
        claim: None,
        precision: PrecisionRole::F32,
        setting: Setting {
            batch_size: 8,
            batching: Batching::OneAtATime,
            resident: false,
            fused: false,
        },
    },
    Variant {
        name: "batch-128",
        description: "batch 128 (the guide's), otherwise the baseline",
        baseline: false,
        claim: None,
        precision: PrecisionRole::F32,
        setting: Setting {
            batch_size: 128,
            batching: Batching::OneAtATime,
            resident: false,
            fused: false,
        },
    },
    Variant {
        name: "seeds-batched",
        description: "the seeds as members of one batched program, otherwise the baseline",
        baseline: false,
        claim: None,
        precision: PrecisionRole::F32,
        setting: Setting {
            batch_size: 8,
            batching: Batching::Members,
            resident: false,
            fused: false,
        },
    },
    Variant {
        name: "fused-step",
        description: "seeds batched at batch 8 with the hand-derived step (the seam's member-MLP step: a host kernel on the CPU, CubeCL kernels on a GPU), otherwise the baseline",
        baseline: false,
        claim: None,
        precision: PrecisionRole::F32,
        setting: Setting {
            batch_size: 8,
            batching: Batching::Members,
            resident: false,
            fused: true,
        },
    },
    Variant {
        name: "device-resident",
        description: "data uploaded once and batches gathered on the device, otherwise the baseline",
        baseline: false,
        claim: None,
        precision: PrecisionRole::F32,
        setting: Setting {
            batch_size: 8,
            batching: Batching::OneAtATime,
            resident: true,
            fused: false,
        },
    },
    Variant {
        name: "mixed-precision",
        description: "forward pass in the run's low precision with f32 master weights, otherwise the baseline",
        baseline: false,
        claim: Some(AMP_CLAIM),
        precision: PrecisionRole::Mixed,
        setting: Setting {
            batch_size: 8,
            batching: Batching::OneAtATime,
            resident: false,
            fused: false,
        },
    },
    Variant {
        name: "all",
        description: "batch 128, seeds batched, device-resident data, mixed precision where the run has it, else the hand-derived step",
        baseline: false,
        claim: Some(NN_CLAIM),
        precision: PrecisionRole::MixedWhereAvailable,
        setting: Setting {
            batch_size: 128,
            batching: Batching::Members,
            resident: true,
            fused: true,
        },
    },
];

impl TableWorkload for QrngClassifier {
    type Params = ClassifierParams;
    type Prepared = PreparedClassifier;
    type Setting = Setting;
    const NAME: &'static str = "qrng-classifier";
    /// Seeds are dealt over the ranks.
    const SHARDS: bool = true;
    const SUMMARY: &'static str =
        "guide 000: 100-30-20-3 MLP naming the qRNG source of a line, 4 seeds, early stopping";

    fn table(&self) -> &[Variant<Setting>] {
        &CLASSIFIER_VARIANTS
    }

    /// The recording read (or the synthetic one drawn) once; each variant's training settings
    /// checked.
    fn prepare(&self, params: ClassifierParams) -> anyhow::Result<PreparedClassifier> {
        let configs = PerVariant::new(&CLASSIFIER_VARIANTS, |variant| {
            let config = ClassifierConfig {
                batch_size: variant.setting.batch_size,
                ..params.training.clone()
            };
            Valid::new(config).context("training")
        })?;
        let Recording { strings, note } = params.data.load()?;
        let t = &params.training;
        // The split is made per seed at run time; fractions that leave a part empty are
        // refused now, before any variant runs.
        Split::sizes(strings.len(), t.test_fraction, t.validation_fraction).context("training")?;
        Ok(PreparedClassifier {
            data: strings.to_dataset(),
            note,
            configs,
            params,
        })
    }

    /// The original's way at batch 8, one seed at a time; a peer of the default schedule
    /// only (its learning-rate plateau and fractions are the defaults').
    fn peer(&self, prepared: &PreparedClassifier, _inputs: &Path) -> anyhow::Result<Option<Peer>> {
        let params = &prepared.params;
        let t = &params.training;
        let defaults = ClassifierConfig::default();
        let schedule_is_default = t.plateau == defaults.plateau
            && t.lr == defaults.lr
            && t.l1 == defaults.l1
            && t.clip_norm == defaults.clip_norm
            && t.test_fraction == defaults.test_fraction
            && t.validation_fraction == defaults.validation_fraction;
        if !schedule_is_default {
            return Ok(None);
        }
        let seeds: Vec<String> = t.seeds.iter().map(u64::to_string).collect();
        let Some(mut args) = super::peer_args(&params.data) else {
            return Ok(None);
        };
        args.extend([
            "--seeds".into(),
            seeds.join(","),
            "--max-epochs".into(),
            t.max_epochs.to_string(),
            "--patience".into(),
            t.early_stopping_patience.to_string(),
            "--batch-size".into(),
            "8".into(),
            "--dropout".into(),
            t.dropout.to_string(),
        ]);
        Ok(Some(Peer {
            script: "qrng_classifier.py",
            args,
            repeats: None,
        }))
    }

    fn run_variant<B: QuenchBackend>(
        &self,
        variant: &Variant<Setting>,
        prepared: &PreparedClassifier,
        ctx: &VariantContext,
        device: &B::Device,
    ) -> anyhow::Result<VariantOutcome> {
        let setting = &variant.setting;
        let data = &prepared.data;
        let config = ctx.my_share("seeds", prepared.configs.of(variant)?)?;
        let precision = ctx.precision;
        let execution = Execution {
            batching: setting.batching,
            loader: if setting.resident {
                Mode::Resident
            } else {
                Mode::ON_CALLER
            },
            precision,
            fused: setting.fused,
        };
        let (outcome, seconds, counts) = time_runs::<B, _>(device, ctx.timing, || {
            Ok(train_classifier::<B>(data, &config, &execution, device)?)
        })?;
        let seeds = config.seeds.len() as f64;
        let iterations = outcome.member_epochs as f64 / seeds;
        let (train_samples, _, _) =
            Split::sizes(data.len(), config.test_fraction, config.validation_fraction)?;
        let (mean, std) = outcome.test_accuracy();
        let mut notes = vec![
            format!(
                "test accuracy {:.2} % +- {:.2} % over seeds {:?} (original: 57.2 % +- 1.8 %, selected on its test split)",
                100.0 * mean,
                100.0 * std,
                config.seeds
            ),
            outcome
                .seeds
                .iter()
                .map(|s| {
                    format!(
                        "seed {}: {:.2} % after {} epochs",
                        s.seed,
                        100.0 * s.test_accuracy,
                        s.epochs
                    )
                })
                .collect::<Vec<_>>()
                .join("; "),
            format!(
                "at most {} epochs (the full setting: 1,000), early-stopping patience {}, precision {precision}",
                config.max_epochs, config.early_stopping_patience
            ),
        ];
        let at_limit = outcome.seeds.iter().all(|s| s.epochs == config.max_epochs);
        if at_limit {
            notes.push(format!(
                "no seed stopped early: every run ended at the limit of {} epochs, so the \
                 accuracies may not have converged",
                config.max_epochs
            ));
        }
        let baseline_batch = CLASSIFIER_VARIANTS[0].setting.batch_size;
        let caveat = at_limit
            .then(|| {
                QualityCaveat::fewer_steps(config.batch_size, baseline_batch, config.max_epochs)
            })
            .flatten();
        notes.push(prepared.note.clone());
        let accuracies: Vec<f64> = outcome.seeds.iter().map(|s| s.test_accuracy).collect();
        Ok(VariantOutcome {
            training_loss: final_training_loss(
                outcome
                    .seeds
                    .iter()
                    .map(|s| s.history.last().map(|h| h.train_loss)),
            ),
            sharded: ctx.share(outcome.seeds.len(), &accuracies),
            per_iteration: seconds.scaled(1.0 / iterations.max(1.0)),
            counts: Some(counts.per(iterations.max(1.0))),
            iteration_unit: "epoch (all seeds)".into(),
            iterations_per_run: iterations,
            items_per_iteration: seeds * train_samples as f64,
            throughput_unit: "samples/s".into(),
            quality: Some(Quality {
                metric: "mean test accuracy".into(),
                value: mean,
                higher_is_better: true,
                tolerance: Tolerance::Absolute(0.015),
                // The test split is a random sample of the lines: their most frequent source's
                // share is its expected chance level.
                chance: majority_share(data.labels()),
                caveat,
            }),
            notes,
        })
    }
}
