//! Workloads `qrng-distinguish`, `qrng-gan` and `qrng-classifier` (guide 000): the qRNG
//! distinguishability tournament, the GAN tournament and the source classifier on the
//! recorded bit strings (or on synthetic stand-in sources).
//!
//! The baselines reproduce the original's way on purpose (GAN matches one at a time with noise
//! drawn on the host; classifier seeds one at a time at batch 8 in f32, data streamed from the
//! host); every other variant changes one thing, and `all` changes them together.

use std::path::PathBuf;

use burn::tensor::backend::AutodiffBackend;
use quench_data::{BitStrings, Mode, QRNG_LABELS};
use quench_device::files::in_working_folder_or_source_tree;
use quench_train::qrng::classifier::{ClassifierConfig, Execution, train_classifier};
use quench_train::qrng::distinguish::{DistinguishConfig, distinguish};
use quench_train::qrng::gan::{GanConfig, Noise, gan_tournament};
use quench_train::qrng::split::Split;
use quench_train::qrng::{Batching, synthetic_recording};
use serde::Deserialize;

use crate::workload::{
    Claim, PrecisionRole, Quality, TableWorkload, Tolerance, Variant, VariantContext,
    VariantOutcome, time_runs,
};

/// Guide 000's claim for neural-network training: 6-15x.
const NN_CLAIM: Claim = Claim {
    low: 6.0,
    high: 15.0,
};
/// Guide 000's claim for the GAN tournament: 3-5x.
const GAN_CLAIM: Claim = Claim {
    low: 3.0,
    high: 5.0,
};
/// Guide 000's claim for mixed precision alone ("2x faster").
const AMP_CLAIM: Claim = Claim {
    low: 2.0,
    high: 2.0,
};

/// Where the bit strings come from: the `data` table of each qRNG workload.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct DataParams {
    /// `recorded` (the file at `path`) or `synthetic` (quench-data's stand-in sources).
    source: Source,
    /// The recorded file; a relative path is looked up from the working folder, then from the
    /// source tree.
    path: PathBuf,
    /// Lines per source of a synthetic recording.
    synthetic_lines: usize,
    /// Seed of a synthetic recording.
    synthetic_seed: u64,
}

impl Default for DataParams {
    fn default() -> Self {
        Self {
            source: Source::Recorded,
            path: PathBuf::from("data/qrng/AI_2qubits_training_data.txt"),
            synthetic_lines: 2_000,
            synthetic_seed: 1,
        }
    }
}

/// The two data sources.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
enum Source {
    Recorded,
    Synthetic,
}

impl DataParams {
    /// Reads or generates the bit strings, and says which in a note.
    fn load(&self) -> anyhow::Result<(BitStrings, String)> {
        match self.source {
            Source::Recorded => {
                let path = in_working_folder_or_source_tree(&self.path);
                let strings = BitStrings::read(&path, &QRNG_LABELS)?;
                Ok((strings, format!("data: {}", self.path.display())))
            }
            Source::Synthetic => Ok((
                synthetic_recording(self.synthetic_lines, self.synthetic_seed)?,
                format!(
                    "data: synthetic sources, {} lines each (seed {})",
                    self.synthetic_lines, self.synthetic_seed
                ),
            )),
        }
    }
}

/// Workload `qrng-distinguish`.
pub struct QrngDistinguish;

/// Parameters of `qrng-distinguish`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DistinguishParams {
    /// The bit strings.
    data: DataParams,
    /// The tournament's settings.
    tournament: DistinguishConfig,
}

const DISTINGUISH_VARIANTS: [Variant<()>; 1] = [Variant {
    name: "tournament",
    description: "three feature sets per source and every pair's divergences in one batched \
                  program on the device",
    baseline: false,
    claim: None,
    precision: PrecisionRole::F32,
    setting: (),
}];

impl TableWorkload for QrngDistinguish {
    type Params = DistinguishParams;
    type Setting = ();
    const NAME: &'static str = "qrng-distinguish";
    const SUMMARY: &'static str =
        "guide 000: symmetric-KL distinguishability of every pair of qRNG sources, no training";

    fn table(&self) -> &[Variant<()>] {
        &DISTINGUISH_VARIANTS
    }

    fn run_variant<B: AutodiffBackend>(
        &self,
        _variant: &Variant<()>,
        params: DistinguishParams,
        ctx: &VariantContext,
        device: &B::Device,
    ) -> anyhow::Result<VariantOutcome> {
        let (strings, source) = params.data.load()?;
        let (table, seconds) = time_runs::<B, _>(device, ctx.timing, || {
            Ok(distinguish::<B::InnerBackend>(
                &strings,
                &params.tournament,
                device,
            )?)
        })?;
        let mut notes: Vec<String> = table
            .pairs
            .iter()
            .map(|p| {
                format!(
                    "{}v{}: KL bits {:.6}, KL pattern {:.6}, KL diff {:.6}, composite {:.6}",
                    p.devices.0, p.devices.1, p.kl_bits, p.kl_pattern, p.kl_diff, p.composite
                )
            })
            .collect();
        if let Some(best) = table.most_distinguishable() {
            notes.push(format!(
                "most distinguishable: {}v{}",
                best.devices.0, best.devices.1
            ));
        }
        notes.push(source);
        Ok(VariantOutcome {
            per_iteration: seconds,
            iteration_unit: "tournament".into(),
            iterations_per_run: 1.0,
            items_per_iteration: table.pairs.len() as f64,
            throughput_unit: "pairs/s".into(),
            quality: None,
            notes,
        })
    }
}

/// Workload `qrng-gan`.
pub struct QrngGan;

/// Parameters of `qrng-gan`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GanParams {
    /// The bit strings.
    data: DataParams,
    /// The tournament's settings; `noise` is set by the variant.
    tournament: GanConfig,
}

const GAN_VARIANTS: [Variant<(Batching, Noise)>; 2] = [
    Variant {
        name: "baseline",
        description: "matches (pairs x seeds) one at a time, noise drawn on the host (the \
                      original's way)",
        baseline: true,
        claim: None,
        precision: PrecisionRole::F32,
        setting: (Batching::OneAtATime, Noise::Host),
    },
    Variant {
        name: "batched",
        description: "every match a member of one batched program, noise drawn on the device",
        baseline: false,
        claim: Some(GAN_CLAIM),
        precision: PrecisionRole::F32,
        setting: (Batching::Members, Noise::Device),
    },
];

impl TableWorkload for QrngGan {
    type Params = GanParams;
    type Setting = (Batching, Noise);
    const NAME: &'static str = "qrng-gan";
    const SUMMARY: &'static str =
        "guide 000: GAN tournament, a 4096-128-256-4096 generator per pair of qRNG sources";

    fn table(&self) -> &[Variant<(Batching, Noise)>] {
        &GAN_VARIANTS
    }

    fn run_variant<B: AutodiffBackend>(
        &self,
        variant: &Variant<(Batching, Noise)>,
        params: GanParams,
        ctx: &VariantContext,
        device: &B::Device,
    ) -> anyhow::Result<VariantOutcome> {
        let (strings, source) = params.data.load()?;
        let (batching, noise) = variant.setting;
        let config = GanConfig {
            noise,
            ..params.tournament
        };
        let (tournament, seconds) = time_runs::<B, _>(device, ctx.timing, || {
            Ok(gan_tournament::<B>(&strings, &config, batching, device)?)
        })?;
        let epochs = config.epochs as f64;
        let mut notes: Vec<String> = tournament
            .table()
            .iter()
            .map(|row| {
                format!(
                    "{}v{}: final KL {:.4} +- {:.4} over {} seed(s); a uniform generator scores {:.4}",
                    row.devices.0,
                    row.devices.1,
                    row.mean,
                    row.std,
                    row.final_kl.len(),
                    row.uniform_kl
                )
            })
            .collect();
        notes.push(format!(
            "{} epochs, {} match(es); the original's quick setting is 100 epochs, its full one 1,000",
            config.epochs,
            tournament.matches.len()
        ));
        notes.push(source);
        Ok(VariantOutcome {
            per_iteration: seconds.scaled(1.0 / epochs),
            iteration_unit: "epoch (all matches)".into(),
            iterations_per_run: epochs,
            items_per_iteration: tournament.matches.len() as f64,
            throughput_unit: "match-epochs/s".into(),
            quality: Some(Quality {
                metric: "mean final KL(p_real || g)".into(),
                value: tournament.mean_final_kl(),
                higher_is_better: false,
                tolerance: Tolerance::Relative(0.1),
            }),
            notes,
        })
    }
}

/// Workload `qrng-classifier`.
pub struct QrngClassifier;

/// Parameters of `qrng-classifier`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ClassifierParams {
    /// The bit strings.
    data: DataParams,
    /// The classifier's settings; `batch_size` is set by the variant.
    training: ClassifierConfig,
}

/// What a classifier variant changes.
pub struct Setting {
    batch_size: usize,
    batching: Batching,
    resident: bool,
}

const CLASSIFIER_VARIANTS: [Variant<Setting>; 6] = [
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
        },
    },
    Variant {
        name: "all",
        description: "batch 128, seeds batched, device-resident data, mixed precision where the run has it",
        baseline: false,
        claim: Some(NN_CLAIM),
        precision: PrecisionRole::MixedWhereAvailable,
        setting: Setting {
            batch_size: 128,
            batching: Batching::Members,
            resident: true,
        },
    },
];

impl TableWorkload for QrngClassifier {
    type Params = ClassifierParams;
    type Setting = Setting;
    const NAME: &'static str = "qrng-classifier";
    const SUMMARY: &'static str =
        "guide 000: 100-30-20-3 MLP naming the qRNG source of a line, 4 seeds, early stopping";

    fn table(&self) -> &[Variant<Setting>] {
        &CLASSIFIER_VARIANTS
    }

    fn run_variant<B: AutodiffBackend>(
        &self,
        variant: &Variant<Setting>,
        params: ClassifierParams,
        ctx: &VariantContext,
        device: &B::Device,
    ) -> anyhow::Result<VariantOutcome> {
        let setting = &variant.setting;
        let (strings, source) = params.data.load()?;
        let data = strings.to_dataset();
        let config = ClassifierConfig {
            batch_size: setting.batch_size,
            ..params.training
        };
        let precision = ctx.precision;
        let execution = Execution {
            batching: setting.batching,
            loader: if setting.resident {
                Mode::Resident
            } else {
                Mode::ON_CALLER
            },
            precision,
        };
        let (outcome, seconds) = time_runs::<B, _>(device, ctx.timing, || {
            Ok(train_classifier::<B>(&data, &config, &execution, device)?)
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
        if outcome.seeds.iter().all(|s| s.epochs == config.max_epochs) {
            notes.push(format!(
                "no seed stopped early: every run ended at the limit of {} epochs, so the \
                 accuracies may not have converged (batch 128 takes 16x fewer steps per \
                 epoch than batch 8); judge parity at the full setting",
                config.max_epochs
            ));
        }
        notes.push(source);
        Ok(VariantOutcome {
            per_iteration: seconds.scaled(1.0 / iterations.max(1.0)),
            iteration_unit: "epoch (all seeds)".into(),
            iterations_per_run: iterations,
            items_per_iteration: seeds * train_samples as f64,
            throughput_unit: "samples/s".into(),
            quality: Some(Quality {
                metric: "mean test accuracy".into(),
                value: mean,
                higher_is_better: true,
                tolerance: Tolerance::Absolute(0.015),
            }),
            notes,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::{RunContext, VariantRun, Workload};

    fn ctx() -> RunContext {
        RunContext::quick_cpu()
    }

    /// A tiny synthetic recording and `extra` workload parameters.
    fn params(extra: &str) -> toml::Table {
        toml::from_str(&format!(
            "data = {{ source = \"synthetic\", synthetic_lines = 40 }}\n{extra}"
        ))
        .unwrap()
    }

    fn measured(run: VariantRun) -> VariantOutcome {
        match run {
            VariantRun::Measured(outcome, _) => outcome,
            VariantRun::Unsupported(reason) => panic!("unsupported: {reason}"),
        }
    }

    #[test]
    fn every_variant_runs_on_synthetic_sources() {
        let gan = params("tournament = { epochs = 2, bits = 8 }");
        for variant in QrngGan.variants() {
            let outcome = measured(QrngGan.run(&variant, &gan, &ctx()).unwrap());
            assert_eq!(outcome.iterations_per_run, 2.0);
            assert!(outcome.quality.unwrap().value.is_finite());
            assert!(outcome.notes.iter().any(|n| n.starts_with("1v2: final KL")));
        }
        let classifier = params("training = { max_epochs = 2, seeds = [1, 2] }");
        for variant in QrngClassifier.variants() {
            let run = QrngClassifier.run(&variant, &classifier, &ctx()).unwrap();
            if variant.name == "mixed-precision" {
                assert!(matches!(run, VariantRun::Unsupported(ref r) if r.contains("bf16")));
                continue;
            }
            let outcome = measured(run);
            assert_eq!(outcome.iterations_per_run, 2.0, "{}", variant.name);
            let accuracy = outcome.quality.unwrap().value;
            assert!((0.0..=1.0).contains(&accuracy));
            if variant.name == "all" {
                assert!(outcome.notes.iter().any(|n| n.contains("ran in f32")));
            }
        }
        let distinguish = params("tournament = { bits = 16 }");
        let variant = &QrngDistinguish.variants()[0];
        let outcome = measured(QrngDistinguish.run(variant, &distinguish, &ctx()).unwrap());
        assert_eq!(outcome.items_per_iteration, 3.0);
        assert!(outcome.notes.iter().any(|n| n.starts_with("1v3: KL bits")));
    }

    #[test]
    fn one_baseline_each_and_parameters_are_checked() {
        for workload in [&QrngGan as &dyn Workload, &QrngClassifier] {
            let baselines = workload.variants().iter().filter(|v| v.baseline).count();
            assert_eq!(baselines, 1, "{}", workload.name());
        }
        assert!(QrngClassifier.check_params(&params("")).is_ok());
        let err = QrngGan
            .check_params(&params("tournament = { epoch = 3 }"))
            .unwrap_err();
        assert!(format!("{err:#}").contains("epoch"), "{err:#}");
        let missing: toml::Table =
            toml::from_str("data = { path = \"/nonexistent/qrng.txt\" }").unwrap();
        let err = QrngDistinguish
            .run(&QrngDistinguish.variants()[0], &missing, &ctx())
            .unwrap_err();
        assert!(
            format!("{err:#}").contains("/nonexistent/qrng.txt"),
            "{err:#}"
        );
    }
}
