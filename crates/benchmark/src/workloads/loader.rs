//! Workload `loader`: one epoch of binary Fashion-MNIST (or MNIST) through the SGLD workload's
//! 784 -> 500 -> 1 MLP with guide 002's loader settings, so that batch size, loader workers,
//! staging (pinned, overlapped uploads) and device-resident data are each measured alone.

use std::sync::Arc;

use burn::tensor::Tensor;
use burn::tensor::activation::sigmoid;
use burn::tensor::backend::AutodiffBackend;
use quench_data::{Dataset, Loader, LoaderConfig, Mnist, Mode, Split};
use quench_device::{OnDevice, TimingConfig, measure_on, run_on};
use quench_train::ensemble::{Activation, EnsembleMlp};
use quench_train::init::Init;
use quench_train::params::{gradients, require_grad, values};
use serde::Deserialize;

use crate::workload::{
    Claim, Quality, RunContext, TableWorkload, Tolerance, Variant, VariantOutcome, VariantRun,
    claimed,
};

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
    claim: Option<Claim>,
) -> Variant<Setting> {
    Variant {
        name,
        description,
        baseline: batch == 32 && !workers && !resident,
        claim,
        setting: Setting {
            batch,
            workers,
            staging,
            resident,
        },
    }
}

/// (batch, workers, staging, device-resident) of every variant, with guide 002's claims.
const VARIANTS: [Variant<Setting>; 6] = [
    variant(
        "baseline",
        "batch 32, no workers, uploads on the training thread (the original's loader)",
        (32, false, false, false),
        None,
    ),
    variant(
        "batch-128",
        "batch 128 (learning rate scaled with it)",
        (128, false, false, false),
        claimed(1.2, 1.5),
    ),
    variant(
        "workers",
        "batch 32, loader worker threads with prefetch 2",
        (32, true, false, false),
        claimed(1.2, 2.0),
    ),
    variant(
        "staging",
        "batch 32, workers plus a staging thread that uploads while the model computes",
        (32, true, true, false),
        claimed(1.05, 1.2),
    ),
    variant(
        "device-resident",
        "batch 32, data uploaded once, batches gathered on the device",
        (32, false, false, true),
        None,
    ),
    variant(
        "guide-all",
        "the guide's combination: batch 128, workers, staging",
        (128, true, true, false),
        claimed(1.2 * 1.2 * 1.05, 1.5 * 2.0 * 1.2),
    ),
];

impl TableWorkload for LoaderWorkload {
    type Params = Params;
    type Setting = Setting;
    const NAME: &'static str = "loader";
    const SUMMARY: &'static str = "one epoch of binary Fashion-MNIST through a 784-500-1 MLP with guide 002's loader settings";

    fn table(&self) -> &[Variant<Setting>] {
        &VARIANTS
    }

    fn run_variant(
        &self,
        variant: &Variant<Setting>,
        params: Params,
        ctx: &RunContext,
    ) -> anyhow::Result<VariantRun> {
        let setting = &variant.setting;
        let data = BinaryData::load(params.train_samples)?;
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
        let samples = data.train.len() as f64;
        let accuracy = run_on(
            ctx.device,
            OneEpoch {
                data: &data,
                config,
                lr,
                seed: params.seed,
                timing: ctx.timing,
            },
        )??;
        Ok(VariantRun::Measured(VariantOutcome {
            per_iteration: accuracy.seconds,
            iteration_unit: "epoch".into(),
            iterations_per_run: 1.0,
            items_per_iteration: samples,
            throughput_unit: "samples/s".into(),
            quality: Some(Quality {
                metric: "test accuracy".into(),
                value: accuracy.output,
                higher_is_better: true,
                tolerance: Tolerance::Absolute(0.01),
            }),
            notes: vec![data.source_note.clone()],
        }))
    }
}

/// Classes 0 and 1 of the train and test splits, normalised as MNIST.
struct BinaryData {
    train: Arc<Dataset>,
    test: Dataset,
    source_note: String,
}

impl BinaryData {
    fn load(train_samples: usize) -> anyhow::Result<Self> {
        let read = |split| -> anyhow::Result<(Dataset, String)> {
            let mnist = Mnist::load(None, split)?;
            let source = mnist.source.to_string();
            Ok((mnist.to_dataset(0.1307, 0.3081)?.binary(0, 1)?, source))
        };
        let (mut train, source) = read(Split::Train)?;
        let (test, _) = read(Split::Test)?;
        if train_samples > 0 && train_samples < train.len() {
            train = train.subset(&(0..train_samples).collect::<Vec<_>>())?;
        }
        Ok(Self {
            train: Arc::new(train),
            test,
            source_note: format!("data: classes 0 and 1 of {source}"),
        })
    }
}

/// Times one training epoch and returns the test accuracy of the trained network.
struct OneEpoch<'a> {
    data: &'a BinaryData,
    config: LoaderConfig,
    lr: f64,
    seed: u64,
    timing: TimingConfig,
}

impl OnDevice for OneEpoch<'_> {
    type Output = anyhow::Result<quench_device::Measurement<f64>>;

    fn run<B: AutodiffBackend>(self, device: &B::Device) -> Self::Output {
        let mut loader = Loader::<B>::new(
            vec![self.data.train.clone()],
            &[self.seed],
            &self.config,
            device,
        )?;
        let init = EnsembleMlp::<B::InnerBackend>::new(
            Init::TorchDefault,
            Activation::Relu,
            1,
            &[784, 500, 1],
            self.seed,
            device,
        );
        let test_x = Tensor::<B::InnerBackend, 3>::from_data(
            burn::tensor::TensorData::new(
                self.data.test.features().to_vec(),
                [1, self.data.test.len(), 784],
            ),
            device,
        );
        let test_y: Vec<i64> = self.data.test.labels().to_vec();
        let mut epoch = 0;
        Ok(measure_on::<B, _>(device, self.timing, || {
            let mut params = init.params();
            for batch in loader.epoch(epoch) {
                let p = require_grad::<B>(params);
                let model = EnsembleMlp::from_params(p.clone(), init.activation);
                let logits = model.forward(batch.features);
                let y = batch.labels.float().unsqueeze_dim::<3>(2);
                // Binary cross-entropy on logits, in the numerically stable form.
                let loss = (logits.clone().clamp_min(0.0) - logits.clone() * y
                    + (logits.abs().neg().exp() + 1.0).log())
                .mean();
                let grads = loss.backward();
                params = values(&p)
                    .into_iter()
                    .zip(gradients(&p, &grads))
                    .map(|(w, g)| w - g * self.lr)
                    .collect();
            }
            epoch += 1;
            let trained = init.with_params(params);
            let predicted = sigmoid(trained.forward(test_x.clone()))
                .greater_elem(0.5)
                .int()
                .into_data();
            let correct = predicted
                .iter::<i64>()
                .zip(&test_y)
                .filter(|(p, y)| p == *y)
                .count();
            correct as f64 / test_y.len().max(1) as f64
        })?)
    }
}
