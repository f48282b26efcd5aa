//! Workload `loader`: one epoch of binary Fashion-MNIST (or MNIST) through the SGLD workload's
//! 784 -> 500 -> 1 MLP with guide 002's loader settings, so that batch size, loader workers,
//! staging (pinned, overlapped uploads), device-resident data and mixed precision are each
//! measured alone. Where no MNIST-like data set is installed it runs on quench-data's synthetic
//! stand-in (same shapes), and says so.

use quench_device::measure_on;
use quench_kernels::QuenchBackend;
use std::path::Path;
use std::sync::Arc;

use burn::tensor::Tensor;
use quench_data::{
    Dataset, Loader, LoaderConfig, MNIST_MEAN, MNIST_PIXELS, MNIST_STD, Mnist, MnistSource, Mode,
    Split, check_mnist_images,
};
use quench_train::amp::MixedPrecision;
use quench_train::ensemble::{Activation, EnsembleMlp};
use quench_train::init::Init;
use serde::Deserialize;

use crate::peers::Peer;
use crate::workload::{
    Claim, PrecisionRole, Quality, TableWorkload, Tolerance, Variant, VariantContext,
    VariantOutcome, claimed, majority_share,
};

use quench_train::binary::{accuracy, sgd_epoch};

/// The `loader` workload.
pub struct LoaderWorkload;

/// Parameters of the `loader` workload in a suite.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Params {
    /// Training samples used (the first ones of the two classes); 0 for all.
    train_samples: usize,
    /// SGD learning rate at batch 32; other batch sizes scale it linearly.
    learning_rate: f64,
    /// Seed of the shuffle and of the weights.
    seed: u64,
    /// Loader workers of the variants that use workers.
    workers: usize,
}

impl Default for Params {
    fn default() -> Self {
        Self {
            train_samples: 0,
            learning_rate: 0.01,
            seed: 1,
            workers: 2,
        }
    }
}

/// One variant's loader setting.
pub struct Setting {
    batch: usize,
    workers: bool,
    staging: bool,
    resident: bool,
}

const fn variant(
    name: &'static str,
    description: &'static str,
    (batch, workers, staging, resident): (usize, bool, bool, bool),
    (precision, claim): (PrecisionRole, Option<Claim>),
) -> Variant<Setting> {
    Variant {
        name,
        description,
        baseline: batch == 32 && !workers && !resident && matches!(precision, PrecisionRole::F32),
        claim,
        precision,
        setting: Setting {
            batch,
            workers,
            staging,
            resident,
        },
    }
}

const F32: PrecisionRole = PrecisionRole::F32;

/// (batch, workers, staging, device-resident) and (precision, claim) of every variant, with
/// guide 002's claims.
const VARIANTS: [Variant<Setting>; 7] = [
    variant(
        "baseline",
        "batch 32, no workers, uploads on the training thread (the original's loader)",
        (32, false, false, false),
        (F32, None),
    ),
    variant(
        "batch-128",
        "batch 128 (learning rate scaled with it)",
        (128, false, false, false),
        (F32, claimed(1.2, 1.5)),
    ),
    variant(
        "workers",
        "batch 32, loader worker threads with prefetch 2",
        (32, true, false, false),
        (F32, claimed(1.2, 2.0)),
    ),
    variant(
        "staging",
        "batch 32, workers plus a staging thread that pins batches for asynchronous uploads",
        (32, true, true, false),
        (F32, claimed(1.05, 1.2)),
    ),
    variant(
        "device-resident",
        "batch 32, data uploaded once, batches gathered on the device",
        (32, false, false, true),
        (F32, None),
    ),
    variant(
        "mixed-precision",
        "batch 32, forward pass in the run's low precision with f32 master weights",
        (32, false, false, false),
        (PrecisionRole::Mixed, claimed(1.5, 2.0)),
    ),
    variant(
        "guide-all",
        "the guide's combination: batch 128, workers, staging, mixed precision where the run \
         has it",
        (128, true, true, false),
        (
            PrecisionRole::MixedWhereAvailable,
            claimed(1.2 * 1.2 * 1.05, 1.5 * 2.0 * 1.2 * 2.0),
        ),
    ),
];

impl TableWorkload for LoaderWorkload {
    type Params = Params;
    type Prepared = PreparedLoader;
    type Setting = Setting;
    const NAME: &'static str = "loader";
    const SUMMARY: &'static str = "one epoch of binary Fashion-MNIST through a 784-500-1 MLP with guide 002's loader settings";

    fn table(&self) -> &[Variant<Setting>] {
        &VARIANTS
    }

    /// The learning rate, and the images, read once for every variant.
    fn prepare(&self, params: Params) -> anyhow::Result<PreparedLoader> {
        anyhow::ensure!(
            params.learning_rate.is_finite() && params.learning_rate > 0.0,
            "learning_rate = {}: must be a finite number above 0",
            params.learning_rate
        );
        anyhow::ensure!(
            params.workers <= quench_data::MAX_WORKERS,
            "[workloads.loader] workers = {}: must be at most {} (loader threads)",
            params.workers,
            quench_data::MAX_WORKERS
        );
        let data = BinaryData::load(
            MnistSource::or_stand_in(MnistSource::locate(None))?,
            params.train_samples,
        )?;
        Ok(PreparedLoader { params, data })
    }

    /// The baseline's loader in PyTorch (a DataLoader at batch 32, no workers) on the IDX
    /// files Quench read; where it used its synthetic stand-in, no peer.
    fn peer(&self, prepared: &PreparedLoader, _inputs: &Path) -> anyhow::Result<Option<Peer>> {
        Ok(prepared
            .data
            .source
            .dir()
            .map(|dir| peer_on(dir, &prepared.params)))
    }

    fn run_variant<B: QuenchBackend>(
        &self,
        variant: &Variant<Setting>,
        prepared: &PreparedLoader,
        ctx: &VariantContext,
        device: &B::Device,
    ) -> anyhow::Result<VariantOutcome> {
        let setting = &variant.setting;
        let (params, data) = (&prepared.params, &prepared.data);
        let mode = if setting.resident {
            Mode::Resident
        } else {
            Mode::Streaming {
                num_workers: if setting.workers { params.workers } else { 0 },
                prefetch: 2,
                staging: setting.staging,
            }
        };
        let config = LoaderConfig {
            batch_size: setting.batch,
            shuffle: true,
            drop_last: false,
            mode,
        };
        let lr = params.learning_rate * setting.batch as f64 / 32.0;
        let mut loader =
            Loader::<B>::new(vec![data.train.clone()], &[params.seed], &config, device)?;
        let model = EnsembleMlp::<B::InnerBackend>::new(
            Init::TorchDefault,
            Activation::Relu,
            1,
            &[MNIST_PIXELS, 500, 1],
            params.seed,
            device,
        );
        let test_x = Tensor::<B::InnerBackend, 3>::from_data(
            burn::tensor::TensorData::new(
                data.test.features().to_vec(),
                [1, data.test.len(), MNIST_PIXELS],
            ),
            device,
        );
        let mut amp = MixedPrecision::new(ctx.precision);
        let mut epochs = 0;
        // Every timed call trains the same first epoch (its shuffle, from the same initial
        // weights): the calls do the same work, and the quality, the last call's accuracy,
        // does not depend on how many warm-ups and repeats the suite asked for (it did: the
        // n-th call took the n-th epoch's shuffle).
        let timed = measure_on::<B, _>(device, ctx.timing, || {
            let batches = loader.epoch(0);
            epochs += 1;
            let trained = sgd_epoch::<B>(&model, model.params(), batches, lr, &mut amp);
            accuracy(&model, trained, test_x.clone(), data.test.labels())
        })?;
        let quality = timed.output.map_err(anyhow::Error::msg)?;
        let mut notes = vec![format!("data: classes 0 and 1 of {}", data.source)];
        if amp.skipped_steps() > 0 {
            notes.push(format!(
                "{} steps skipped by f16 loss scaling over {} epochs",
                amp.skipped_steps(),
                epochs
            ));
        }
        Ok(VariantOutcome {
            training_loss: None,
            sharded: None,
            per_iteration: timed.seconds,
            counts: Some(timed.counts),
            iteration_unit: "epoch".into(),
            iterations_per_run: 1.0,
            items_per_iteration: data.train.len() as f64,
            throughput_unit: "samples/s".into(),
            quality: Some(Quality {
                metric: "test accuracy".into(),
                value: quality,
                higher_is_better: true,
                tolerance: Tolerance::Absolute(0.01),
                chance: majority_share(data.test.labels()),
                caveat: None,
            }),
            notes,
        })
    }
}

/// The peer's arguments for the IDX files in `dir`.
fn peer_on(dir: &Path, params: &Params) -> Peer {
    Peer {
        script: "loader.py",
        args: vec![
            "--data-dir".into(),
            dir.display().to_string(),
            "--train-samples".into(),
            params.train_samples.to_string(),
            "--learning-rate".into(),
            params.learning_rate.to_string(),
            "--batch-size".into(),
            "32".into(),
            "--mean".into(),
            MNIST_MEAN.to_string(),
            "--std".into(),
            MNIST_STD.to_string(),
            "--seed".into(),
            params.seed.to_string(),
        ],
        repeats: None,
    }
}

/// `loader` prepared for a suite.
pub struct PreparedLoader {
    params: Params,
    data: BinaryData,
}

/// Classes 0 and 1 of the train and test splits, normalised as MNIST.
struct BinaryData {
    train: Arc<Dataset>,
    test: Dataset,
    /// Where they came from.
    source: MnistSource,
}

impl BinaryData {
    /// Both splits from `source` (the stand-in where the lookup found nothing), the training
    /// split cut to its first `train_samples` samples when that is positive and smaller;
    /// refused when it is larger.
    fn load(source: MnistSource, train_samples: usize) -> anyhow::Result<Self> {
        let binary = |split| -> anyhow::Result<Dataset> {
            let images = Mnist::read(source.clone(), split)?;
            Ok(images.to_dataset(MNIST_MEAN, MNIST_STD)?.binary(0, 1)?)
        };
        let mut train = binary(Split::Train)?;
        let test = binary(Split::Test)?;
        // The MLP reads 784 pixels per image, and the accuracy of no test image is no figure.
        check_mnist_images(
            &train,
            &format!("training images of class 0 or 1 of {source}"),
        )?;
        check_mnist_images(&test, &format!("test images of class 0 or 1 of {source}"))?;
        // More than there are is refused, not cut silently to what there is.
        anyhow::ensure!(
            train_samples <= train.len(),
            "train_samples = {train_samples}: {source} has {} training images of classes 0 and 1 \
             (0 takes them all)",
            train.len()
        );
        if train_samples > 0 && train_samples < train.len() {
            train = train.subset(&(0..train_samples).collect::<Vec<_>>())?;
        }
        Ok(Self {
            train: Arc::new(train),
            test,
            source,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::{PrepareAndRun, RunContext, VariantRun, Workload};
    use quench_kernels::CpuBackend;

    #[test]
    fn with_no_data_set_installed_the_stand_in_trains_and_is_named() {
        let empty = std::env::temp_dir().join(format!("quench-no-mnist-{}", std::process::id()));
        std::fs::create_dir_all(&empty).unwrap();
        let found = MnistSource::locate_in(None, None, &empty, &empty);
        let data = BinaryData::load(MnistSource::or_stand_in(found).unwrap(), 0).unwrap();
        std::fs::remove_dir_all(&empty).unwrap();
        let source = data.source.to_string();
        assert!(source.contains("stand-in"), "{source}");
        assert_eq!((data.train.len(), data.test.len()), (12_000, 2_000));
        let device = Default::default();
        let model = EnsembleMlp::new(
            Init::TorchDefault,
            Activation::Relu,
            1,
            &[MNIST_PIXELS, 500, 1],
            1,
            &device,
        );
        let config = LoaderConfig {
            batch_size: 32,
            shuffle: true,
            drop_last: false,
            mode: Mode::ON_CALLER,
        };
        let mut loader =
            Loader::<CpuBackend>::new(vec![data.train.clone()], &[1], &config, &device).unwrap();
        let mut amp = MixedPrecision::new(quench_device::Precision::F32);
        let trained =
            sgd_epoch::<CpuBackend>(&model, model.params(), loader.epoch(0), 0.01, &mut amp);
        let test_x = Tensor::from_data(
            burn::tensor::TensorData::new(
                data.test.features().to_vec(),
                [1, data.test.len(), MNIST_PIXELS],
            ),
            &device,
        );
        let accuracy = accuracy(&model, trained, test_x, data.test.labels()).unwrap();
        assert!(
            accuracy > 0.9,
            "one epoch learns rings from strokes: {accuracy}"
        );
    }

    #[test]
    fn the_peer_reads_the_same_files_at_the_baselines_settings() {
        let params: Params = crate::workload::parse_params(
            "loader",
            &toml::from_str("train_samples = 500\nseed = 7").unwrap(),
        )
        .unwrap();
        let peer = peer_on(Path::new("/data/fashion"), &params);
        assert_eq!(peer.script, "loader.py");
        assert_eq!(
            peer.args.join(" "),
            "--data-dir /data/fashion --train-samples 500 --learning-rate 0.01 --batch-size 32 \
             --mean 0.1307 --std 0.3081 --seed 7"
        );
    }

    /// The quality is the same whatever the timing: the last timed call's accuracy once
    /// depended on how many calls came before it (each took the next epoch's shuffle).
    #[test]
    fn the_quality_does_not_depend_on_the_repeats() {
        let variants = LoaderWorkload.variants();
        let baseline = variants.iter().find(|v| v.baseline).unwrap();
        let params = toml::from_str("train_samples = 400").unwrap();
        let quality = |warmup, repeats| {
            let ctx = RunContext {
                timing: quench_device::TimingConfig { warmup, repeats },
                ..RunContext::quick_cpu()
            };
            match LoaderWorkload.run(baseline, &params, &ctx).unwrap() {
                VariantRun::Measured(outcome, _) => outcome.quality.unwrap().value,
                VariantRun::Unsupported(why) => panic!("{why}"),
            }
        };
        assert_eq!(quality(0, 1), quality(1, 3));
    }

    #[test]
    fn mixed_precision_is_a_variant_that_follows_the_run() {
        let variants = LoaderWorkload.variants();
        let mixed = variants
            .iter()
            .find(|v| v.name == "mixed-precision")
            .unwrap();
        let run = LoaderWorkload
            .run(mixed, &toml::Table::new(), &RunContext::quick_cpu())
            .unwrap();
        assert!(
            matches!(run, VariantRun::Unsupported(ref r) if r.contains("bf16")),
            "{run:?}"
        );
        assert_eq!(variants.iter().filter(|v| v.baseline).count(), 1);
    }
}
