//! Workload `hybrid`: guide 003's hybrid quantum-classical MNIST classifier (frozen ResNet18,
//! encoder to 4 angles, 4-qubit variational circuit, head), trained for the suite's epochs
//! with every seed a member. The variants take the original's way (each sample's circuit on
//! the host with parameter-shift gradients, the backbone on every batch, batch 64) and change
//! one thing each: the circuit batched on the device, its weight layers fused, the backbone
//! run once per image, batch 256 with bf16; then all together, and all together without the
//! circuit (the ablation, so a user sees whether the circuit helps).

use quench_kernels::QuenchBackend;
use std::path::Path;

use anyhow::Context;
use quench_data::{MNIST_MEAN, MNIST_STD, MnistSource};
use quench_hybrid::setup::{HybridImages, HybridSetup};
use quench_hybrid::{CircuitMode, Execution, FeatureMode, HybridConfig, train_hybrid};
use quench_train::settings::Valid;
use serde::Deserialize;

use crate::peers::Peer;
use crate::workload::{
    Claim, PerVariant, PrecisionRole, Quality, QualityCaveat, TableWorkload, Tolerance, Variant,
    VariantContext, VariantOutcome, check_repeats, claimed, final_training_loss, majority_share,
    suite_settings, time_runs,
};

/// The `hybrid` workload.
pub struct Hybrid;

/// Parameters of the `hybrid` workload in a suite: the images and the backbone
/// ([`HybridSetup`]'s keys, at the table's top level), `repeats` and `training`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(try_from = "toml::Table")]
pub struct Params {
    /// The images and the backbone.
    setup: HybridSetup,
    /// Timed runs of each variant (a run is a whole training); the suite's warm-up applies.
    repeats: Option<usize>,
    /// The training settings (batch size is the variant's).
    training: HybridConfig,
}

impl TryFrom<toml::Table> for Params {
    type Error = String;

    fn try_from(mut table: toml::Table) -> Result<Self, String> {
        let repeats = table
            .remove("repeats")
            .map(toml::Value::try_into)
            .transpose()
            .map_err(|err| format!("repeats: {err}"))?;
        let training = match table.remove("training") {
            None => HybridConfig::default(),
            Some(toml::Value::Table(training)) => {
                suite_settings("training", training, &["batch_size"])?
            }
            Some(other) => return Err(format!("training: a table, not {}", other.type_str())),
        };
        let setup = toml::Value::Table(table)
            .try_into()
            .map_err(|err: toml::de::Error| err.to_string())?;
        Ok(Self {
            setup,
            repeats,
            training,
        })
    }
}

/// The suite's hybrid run, prepared once for every variant and the peer.
pub struct Prepared {
    params: Params,
    /// The images, split, and the backbone's part.
    images: HybridImages,
    /// Each variant's training settings.
    configs: PerVariant<HybridConfig>,
}

/// One variant's way of computing.
pub struct Setting {
    circuit: CircuitMode,
    features: FeatureMode,
    batch_size: usize,
}

const fn variant(
    name: &'static str,
    description: &'static str,
    (circuit, features, batch_size): (CircuitMode, FeatureMode, usize),
    (precision, claim): (PrecisionRole, Option<Claim>),
) -> Variant<Setting> {
    Variant {
        name,
        description,
        baseline: matches!(circuit, CircuitMode::Host)
            && matches!(features, FeatureMode::PerBatch)
            && batch_size == 64,
        claim,
        precision,
        setting: Setting {
            circuit,
            features,
            batch_size,
        },
    }
}

const F32: PrecisionRole = PrecisionRole::F32;
const MIXED: PrecisionRole = PrecisionRole::MixedWhereAvailable;

/// The variants, with guide 003's claims: its table's time per epoch on CPU (42-56 min) against
/// Lightning (30-40 min) and pre-computed features (10-15 min), and its batch-256 time (15-20 s
/// per batch of 256 against 7-12 s per batch of 64).
const VARIANTS: [Variant<Setting>; 7] = [
    variant(
        "baseline",
        "each sample's circuit on the host in f64 with parameter-shift gradients, backbone on \
         every batch, batch 64 (the original's way)",
        (CircuitMode::Host, FeatureMode::PerBatch, 64),
        (F32, None),
    ),
    variant(
        "device-circuit",
        "the batch's circuits as one tensor program on the device, gate by gate, autodiff \
         gradients (the guide's lightning/adjoint step)",
        (CircuitMode::GateByGate, FeatureMode::PerBatch, 64),
        (F32, claimed(42.0 / 40.0, 56.0 / 30.0)),
    ),
    variant(
        "fused-circuit",
        "as device-circuit, the circuit and its read-out as one fused operation (a kernel each \
         way on a GPU, adjoint gradients)",
        (CircuitMode::Fused, FeatureMode::PerBatch, 64),
        (F32, claimed(42.0 / 40.0, 56.0 / 30.0)),
    ),
    variant(
        "precomputed-features",
        "the frozen backbone run once per image before training, features kept on the device; \
         circuit on the host as the baseline",
        (CircuitMode::Host, FeatureMode::Precomputed, 64),
        (F32, claimed(42.0 / 15.0, 56.0 / 10.0)),
    ),
    variant(
        "batch-256",
        "batch 256 with bf16 classical layers where the device has bf16, otherwise the baseline",
        (CircuitMode::Host, FeatureMode::PerBatch, 256),
        (MIXED, claimed(4.0 * 7.0 / 20.0, 4.0 * 12.0 / 15.0)),
    ),
    variant(
        "all",
        "fused device circuit, pre-computed features, batch 256, bf16 where the device has it",
        (CircuitMode::Fused, FeatureMode::Precomputed, 256),
        (MIXED, None),
    ),
    variant(
        "no-circuit",
        "as all, with the circuit replaced by the identity (the ablation: its accuracy beside \
         all's says whether the circuit helps)",
        (CircuitMode::Identity, FeatureMode::Precomputed, 256),
        (MIXED, None),
    ),
];

impl TableWorkload for Hybrid {
    type Params = Params;
    type Prepared = Prepared;
    type Setting = Setting;
    const NAME: &'static str = "hybrid";
    /// Seeds are dealt over the ranks.
    const SHARDS: bool = true;
    const SUMMARY: &'static str = "guide 003: frozen ResNet18 -> 4-qubit variational circuit -> head on MNIST, seeds as members";

    fn table(&self) -> &[Variant<Setting>] {
        &VARIANTS
    }

    /// The training settings at every variant's batch, the images (read and split once for
    /// every variant) and the backbone: the weight file readable with a one-channel `conv1`, or
    /// images to calibrate on.
    fn prepare(&self, params: Params) -> anyhow::Result<Prepared> {
        check_repeats(params.repeats)?;
        let configs = PerVariant::new(&VARIANTS, |variant| {
            let config = HybridConfig {
                batch_size: variant.setting.batch_size,
                ..params.training.clone()
            };
            Valid::new(config).context("training")
        })?;
        let images = params.setup.images()?;
        Ok(Prepared {
            params,
            images,
            configs,
        })
    }

    /// A batch larger than the training part would fail only when the variant's turn came.
    fn check_variant(&self, variant: &Variant<Setting>, prepared: &Prepared) -> anyhow::Result<()> {
        Ok(prepared.images.data.check(variant.setting.batch_size)?)
    }

    /// The original's way in PyTorch (`peers/hybrid.py`): the seeds one at a time at batch 64,
    /// a random frozen ResNet18 calibrated as Quench's on every batch, the batch's circuits as
    /// real 16-amplitude state vectors with autograd (PennyLane's per-sample host circuit is
    /// not available to it). It reads the IDX files Quench read; no peer where Quench
    /// trains on its synthetic stand-in (no data set installed), nor where `backbone_weights`
    /// names a file (the peer builds the random backbone only).
    fn peer(&self, prepared: &Prepared, _inputs: &Path) -> anyhow::Result<Option<Peer>> {
        Ok(peer_for(&prepared.params, &prepared.images.source))
    }

    fn run_variant<B: QuenchBackend>(
        &self,
        variant: &Variant<Setting>,
        prepared: &Prepared,
        ctx: &VariantContext,
        device: &B::Device,
    ) -> anyhow::Result<VariantOutcome> {
        let setting = &variant.setting;
        let (params, data) = (&prepared.params, &prepared.images.data);
        let (backbone, backbone_note) = params
            .setup
            .backbone::<B::InnerBackend>(&prepared.images, device)?;
        let config = ctx.my_share("seeds", prepared.configs.of(variant)?)?;
        let execution = Execution {
            circuit: setting.circuit,
            features: setting.features,
            precision: ctx.precision,
        };
        let timing = ctx.timing_with(params.repeats);
        let (outcome, seconds, counts) = time_runs::<B, _>(device, timing, || {
            Ok(train_hybrid::<B>(
                data, &backbone, &config, &execution, device,
            )?)
        })?;
        let seeds = config.seeds.len();
        let trained = outcome.epochs * outcome.batches_per_epoch * config.batch_size;
        let per_run_of_64 = trained as f64 / 64.0;
        let per_epoch = seconds.median / outcome.epochs.max(1) as f64;
        let accuracy = outcome.test_accuracy();
        let mut notes = vec![
            format!(
                "test accuracy {:.2} % +- {:.2} % over seeds {:?} after {} epochs of {} images",
                100.0 * accuracy.mean,
                100.0 * accuracy.std,
                config.seeds,
                outcome.epochs,
                outcome.batches_per_epoch * config.batch_size,
            ),
            format!(
                "{per_epoch:.3} s per epoch for all {seeds} seeds (validation pass included); \
                 the original reports 42-56 min per epoch of 54,000 images on CPU, one seed"
            ),
            format!("precision of the classical layers: {}", ctx.precision),
            backbone_note,
            format!("data: {}", prepared.images.source),
        ];
        if outcome.skipped_steps > 0 {
            notes.push(format!(
                "{} steps skipped by f16 loss scaling",
                outcome.skipped_steps
            ));
        }
        let accuracies: Vec<f64> = outcome.seeds.iter().map(|s| s.test_accuracy).collect();
        Ok(VariantOutcome {
            training_loss: final_training_loss(
                outcome.seeds.iter().map(|s| s.train_loss.last().copied()),
            ),
            sharded: ctx.share(seeds, &accuracies),
            per_iteration: seconds.scaled(1.0 / per_run_of_64.max(1.0)),
            counts: Some(counts.per(per_run_of_64.max(1.0))),
            iteration_unit: "batch of 64 (all seeds)".into(),
            iterations_per_run: per_run_of_64,
            items_per_iteration: (64 * seeds) as f64,
            throughput_unit: "samples/s".into(),
            quality: Some(Quality {
                metric: "mean test accuracy".into(),
                value: accuracy.mean,
                higher_is_better: true,
                tolerance: Tolerance::Absolute(0.02),
                chance: majority_share(data.test.labels()),
                caveat: VARIANTS
                    .iter()
                    .find(|v| v.baseline && outcome.epochs >= config.epochs)
                    .and_then(|baseline| {
                        QualityCaveat::fewer_steps(
                            config.batch_size,
                            baseline.setting.batch_size,
                            config.epochs,
                        )
                    }),
            }),
            notes,
        })
    }
}

/// The peer of `params` on the images of `source`: none with a weight file or the stand-in.
fn peer_for(params: &Params, source: &MnistSource) -> Option<Peer> {
    if params.setup.backbone_weights.is_some() {
        return None;
    }
    source.dir().map(|dir| peer_on(dir, params))
}

/// The peer on the IDX files in `dir` at the sizes and training settings of `params` (batch
/// 64, the baseline's).
fn peer_on(dir: &Path, params: &Params) -> Peer {
    let training = &params.training;
    let seeds: Vec<String> = training.seeds.iter().map(u64::to_string).collect();
    let args = [
        ("--data-dir", dir.display().to_string()),
        ("--train-samples", params.setup.train_samples.to_string()),
        (
            "--validation-samples",
            params.setup.validation_samples.to_string(),
        ),
        ("--test-samples", params.setup.test_samples.to_string()),
        ("--split-seed", params.setup.split_seed.to_string()),
        ("--backbone-seed", params.setup.backbone_seed.to_string()),
        (
            "--calibration-images",
            params.setup.calibration_images.to_string(),
        ),
        ("--seeds", seeds.join(",")),
        ("--epochs", training.epochs.to_string()),
        ("--batch-size", "64".into()),
        ("--learning-rate", training.learning_rate.to_string()),
        ("--weight-decay", training.weight_decay.to_string()),
        ("--step-size", training.step_size.to_string()),
        ("--gamma", training.gamma.to_string()),
        ("--patience", training.patience.to_string()),
        ("--clip-norm", training.clip_norm.to_string()),
        ("--dropout", training.dropout.to_string()),
        ("--layers", training.layers.to_string()),
        ("--weight-std", training.weight_std.to_string()),
        ("--mean", MNIST_MEAN.to_string()),
        ("--std", MNIST_STD.to_string()),
    ];
    Peer {
        script: "hybrid.py",
        args: args
            .into_iter()
            .flat_map(|(name, value)| [name.to_string(), value])
            .collect(),
        repeats: params.repeats,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::{PrepareAndRun, RunContext, VariantRun, Workload};

    #[test]
    fn a_small_run_reports_accuracy_per_batch_of_64_and_names_its_data() {
        let params: toml::Table = toml::from_str(
            "train_samples = 256\nvalidation_samples = 64\ntest_samples = 64\nrepeats = 1\n\
             calibration_images = 64\ntraining = { seeds = [1, 2], epochs = 1 }",
        )
        .unwrap();
        let variants = Hybrid.variants();
        assert_eq!(variants.iter().filter(|v| v.baseline).count(), 1);
        for name in ["baseline", "no-circuit"] {
            let variant = variants.iter().find(|v| v.name == name).unwrap();
            let run = Hybrid
                .run(variant, &params, &RunContext::quick_cpu())
                .unwrap();
            let VariantRun::Measured(outcome, _) = run else {
                panic!("{name}: {run:?}")
            };
            let quality = outcome.quality.unwrap();
            assert!((0.0..=1.0).contains(&quality.value), "{name}: {quality:?}");
            assert_eq!(outcome.iteration_unit, "batch of 64 (all seeds)");
            assert!(outcome.notes.iter().any(|n| n.starts_with("data: ")));
        }
    }

    #[test]
    fn the_peer_reads_the_same_files_at_the_suites_sizes_and_not_a_weights_file() {
        let params: Params = crate::workload::parse_params(
            "hybrid",
            &toml::from_str(
                "train_samples = 1024\nvalidation_samples = 512\ntest_samples = 1000\n\
                 repeats = 1\ntraining = { seeds = [1, 2], epochs = 2 }",
            )
            .unwrap(),
        )
        .unwrap();
        let peer = peer_on(Path::new("/data/fashion"), &params);
        assert_eq!(peer.script, "hybrid.py");
        assert_eq!(peer.repeats, Some(1));
        assert_eq!(
            peer.args.join(" "),
            "--data-dir /data/fashion --train-samples 1024 --validation-samples 512 \
             --test-samples 1000 --split-seed 42 --backbone-seed 7 --calibration-images 512 \
             --seeds 1,2 --epochs 2 --batch-size 64 --learning-rate 0.001 --weight-decay 0.0001 \
             --step-size 10 --gamma 0.1 --patience 10 --clip-norm 1 --dropout 0.2 --layers 3 \
             --weight-std 0.01 --mean 0.1307 --std 0.3081"
        );
        let weights: Params = crate::workload::parse_params(
            "hybrid",
            &toml::from_str("backbone_weights = \"resnet18_mnist.safetensors\"").unwrap(),
        )
        .unwrap();
        let installed = MnistSource::Explicit("/data/fashion".into());
        assert!(peer_for(&params, &installed).is_some());
        assert_eq!(peer_for(&weights, &installed), None);
    }

    #[test]
    fn bad_parameters_are_refused_by_name() {
        let variant = &Hybrid.variants()[0];
        for (text, name) in [
            ("train_sample = 5", "train_sample"),
            ("calibration_images = 0", "calibration_images = 0"),
            (
                "train_samples = 256\nvalidation_samples = 64\ntest_samples = 64\n\
                 calibration_images = 16\ntraining = { epochs = 0 }",
                "epochs = 0",
            ),
        ] {
            let params: toml::Table = toml::from_str(text).unwrap();
            let error = Hybrid
                .run(variant, &params, &RunContext::quick_cpu())
                .unwrap_err();
            assert!(format!("{error:#}").contains(name), "{text}: {error:#}");
        }
    }
}
