//! The hybrid classifier end to end on quench-data's stand-in digits (two classes, 28 x 28):
//! where the backbone runs does not change what is learned, seeds are independent members,
//! training learns, and bad settings are refused by name.

use crate::resnet::ResNet18;
use crate::{
    CircuitMode, Execution, FeatureMode, HybridConfig, HybridData, HybridOutcome, Sizes,
    train_hybrid,
};
use burn::tensor::{Tensor, TensorData};
use quench_data::{Dataset, MNIST_MEAN, MNIST_STD, stand_in_digits};
use quench_device::Precision;
use quench_kernels::CpuBackend;
use quench_train::settings::Valid;

type Inner = burn::backend::NdArray<f32>;

fn images(len: usize, seed: u64) -> Dataset {
    let (pixels, labels) = stand_in_digits(len, seed);
    let features = pixels
        .iter()
        .map(|&p| (f32::from(p) / 255.0 - MNIST_MEAN) / MNIST_STD)
        .collect();
    Dataset::new(
        features,
        labels.iter().map(|&l| i64::from(l)).collect(),
        vec![784],
    )
    .unwrap()
}

fn setup() -> (HybridData, ResNet18<Inner>) {
    let sizes = Sizes {
        train: 256,
        validation: 64,
        test: 128,
    };
    let data = HybridData::split(&images(400, 1), &images(128, 2), sizes, 42).unwrap();
    let device = Default::default();
    let calibration = Tensor::from_data(
        TensorData::new(data.train.features()[..64 * 784].to_vec(), [64, 1, 28, 28]),
        &device,
    );
    let backbone = ResNet18::<Inner>::random(&device, 7).calibrate(calibration);
    (data, backbone)
}

fn train(
    data: &HybridData,
    backbone: &ResNet18<Inner>,
    config: &HybridConfig,
    circuit: CircuitMode,
    features: FeatureMode,
) -> HybridOutcome {
    let execution = Execution {
        circuit,
        features,
        precision: Precision::F32,
    };
    let config = Valid::new(config.clone()).unwrap();
    train_hybrid::<CpuBackend>(data, backbone, &config, &execution, &Default::default()).unwrap()
}

#[test]
fn backbone_placement_and_seed_batching_change_nothing_learned() {
    let (data, backbone) = setup();
    // Without dropout: its masks are drawn for the whole program from one generator, so a
    // member's masks depend on which members share it.
    let config = HybridConfig {
        seeds: vec![3, 4],
        epochs: 2,
        batch_size: 32,
        dropout: 0.0,
        ..HybridConfig::default()
    };
    let per_batch = train(
        &data,
        &backbone,
        &config,
        CircuitMode::Fused,
        FeatureMode::PerBatch,
    );
    let precomputed = train(
        &data,
        &backbone,
        &config,
        CircuitMode::Fused,
        FeatureMode::Precomputed,
    );
    let alone = train(
        &data,
        &backbone,
        &HybridConfig {
            seeds: vec![4],
            ..config.clone()
        },
        CircuitMode::Fused,
        FeatureMode::Precomputed,
    );
    assert_eq!(per_batch.batches_per_epoch, 8);
    for (a, b) in per_batch.seeds.iter().zip(&precomputed.seeds) {
        for (x, y) in a.train_loss.iter().zip(&b.train_loss) {
            assert!((x - y).abs() < 1e-4, "seed {}: {x} vs {y}", a.seed);
        }
        assert!((a.test_accuracy - b.test_accuracy).abs() < 1e-9);
    }
    for (x, y) in precomputed.seeds[1]
        .train_loss
        .iter()
        .zip(&alone.seeds[0].train_loss)
    {
        assert!(
            (x - y).abs() < 1e-5,
            "seed 4 with seed 3 beside it: {x} vs alone {y}"
        );
    }
    assert!(
        precomputed.seeds[0].train_loss != precomputed.seeds[1].train_loss,
        "two seeds trained identically"
    );
}

#[test]
fn training_lowers_the_loss_with_and_without_the_circuit() {
    let (data, backbone) = setup();
    let config = HybridConfig {
        seeds: vec![1],
        epochs: 6,
        batch_size: 16,
        learning_rate: 3e-3,
        ..HybridConfig::default()
    };
    for circuit in [CircuitMode::Fused, CircuitMode::Identity] {
        let outcome = train(&data, &backbone, &config, circuit, FeatureMode::Precomputed);
        let seed = &outcome.seeds[0];
        // From ln 10 (ten classes, none preferred) to below 1: the network has at least
        // learned that only two classes occur. (The random frozen backbone's features of the
        // stand-in's two shapes are barely separable, so accuracy is not asserted here.)
        let (first, last) = (
            seed.train_loss[0],
            seed.train_loss[seed.train_loss.len() - 1],
        );
        assert!(
            first > 2.0 && last < 1.0,
            "{circuit:?}: {:?}",
            seed.train_loss
        );
        assert!((0.0..=1.0).contains(&seed.test_accuracy));
    }
}

#[test]
fn bad_settings_are_refused_by_name() {
    let (data, backbone) = setup();
    let execution = Execution {
        circuit: CircuitMode::Fused,
        features: FeatureMode::Precomputed,
        precision: Precision::F32,
    };
    for (config, name) in [
        (
            HybridConfig {
                batch_size: 0,
                ..HybridConfig::default()
            },
            "batch_size = 0",
        ),
        (
            HybridConfig {
                seeds: vec![],
                ..HybridConfig::default()
            },
            "seeds = []",
        ),
        (
            HybridConfig {
                dropout: 1.0,
                ..HybridConfig::default()
            },
            "dropout = 1",
        ),
        (
            HybridConfig {
                learning_rate: f64::NAN,
                ..HybridConfig::default()
            },
            "learning_rate = NaN",
        ),
        (
            HybridConfig {
                batch_size: 1000,
                ..HybridConfig::default()
            },
            "batch_size = 1000",
        ),
    ] {
        // Settings are refused where the configuration is made; a batch larger than the
        // training set, where it meets the data.
        let error = match Valid::new(config) {
            Err(refused) => refused,
            Ok(valid) => train_hybrid::<CpuBackend>(
                &data,
                &backbone,
                &valid,
                &execution,
                &Default::default(),
            )
            .unwrap_err(),
        }
        .to_string();
        assert!(error.starts_with(name), "{error}");
    }
}
