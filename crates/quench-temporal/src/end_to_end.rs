//! The temporal classifiers end to end on a small synthetic market: seeds batched against
//! alone, the hand-differentiated fused LSTM against Burn's, the data resident against
//! streamed, run against rerun, training that lowers the loss, and refused settings.

use crate::{
    Execution, LstmCore, ModelKind, TemporalConfig, TemporalError, TemporalOutcome, Widths,
    train_temporal,
};
use quench_data::{MarketConfig, MarketData, Mode, WindowConfig, market_windows, synthetic_market};
use quench_kernels::{QuenchBackend, QuenchOps};
use quench_train::settings::Valid;

fn market(bars: usize) -> MarketData {
    let config = MarketConfig {
        symbols: 2,
        bars,
        seed: 5,
        ..MarketConfig::default()
    };
    market_windows(
        &synthetic_market(&config).unwrap(),
        &WindowConfig::default(),
    )
    .unwrap()
}

fn small(model: ModelKind) -> TemporalConfig {
    TemporalConfig {
        seeds: vec![3, 4],
        epochs: 3,
        batch_size: 64,
        widths: Widths {
            lstm_hidden: 8,
            lstm_head: 8,
            d_model: 8,
            heads: 2,
            feed_forward: 16,
            encoder_layers: 1,
            mlp: vec![16, 8],
            ..Widths::default()
        },
        ..TemporalConfig::for_model(model)
    }
}

fn train<B: QuenchBackend>(
    data: &MarketData,
    config: &TemporalConfig,
    execution: Execution,
    device: &B::Device,
) -> TemporalOutcome {
    train_temporal::<B>(
        data,
        &Valid::new(config.clone()).unwrap(),
        &execution,
        device,
    )
    .unwrap()
}

/// Largest relative difference between two members' per-epoch training losses.
fn loss_gap(a: &TemporalOutcome, b: &TemporalOutcome) -> f64 {
    let gaps = a.seeds.iter().zip(&b.seeds).flat_map(|(x, y)| {
        assert_eq!(x.train_loss.len(), y.train_loss.len());
        x.train_loss
            .iter()
            .zip(&y.train_loss)
            .map(|(u, v)| ((u - v) / v).abs())
    });
    quench_support::stats::max_or_nan(gaps)
}

quench_kernels::device_test! {
    fn seeds_batched_train_as_they_do_alone<B>(device) {
        let data = market(700);
        for model in [ModelKind::Lstm, ModelKind::Transformer, ModelKind::Mlp] {
            // Dropout draws one mask for the whole program, so members are compared without it.
            let config = TemporalConfig {
                dropout: 0.0,
                ..small(model)
            };
            let batched = train::<B>(&data, &config, Execution::default(), device);
            let alone: Vec<TemporalOutcome> = config
                .seeds
                .iter()
                .map(|&seed| {
                    let one = TemporalConfig {
                        seeds: vec![seed],
                        ..config.clone()
                    };
                    train::<B>(&data, &one, Execution::default(), device)
                })
                .collect();
            for (m, one) in alone.iter().enumerate() {
                let b = &batched.seeds[m];
                let a = &one.seeds[0];
                assert_eq!(b.seed, a.seed);
                let worst = quench_support::stats::max_or_nan(
                    b.train_loss
                        .iter()
                        .zip(&a.train_loss)
                        .map(|(x, y)| ((x - y) / y).abs()),
                );
                assert!(
                    worst < 1e-4,
                    "{model:?} seed {}: losses differ by {worst}",
                    a.seed
                );
                // A last-place difference can flip a window whose two top logits tie to rounding.
                let flipped =
                    (b.test.accuracy - a.test.accuracy).abs() * data.test.windows.len() as f64;
                assert!(
                    flipped < 2.5,
                    "{model:?}: {flipped} test windows change class"
                );
            }
            assert_ne!(
                batched.seeds[0].train_loss, batched.seeds[1].train_loss,
                "{model:?}: two seeds trained one network"
            );
        }
    }

    fn the_fused_lstm_trains_as_burns_lstm_does<B>(device) {
        let data = market(700);
        let config = TemporalConfig {
            dropout: 0.0,
            ..small(ModelKind::Lstm)
        };
        let fused = train::<B>(&data, &config, Execution::default(), device);
        let burn = train::<B>(
            &data,
            &config,
            Execution {
                core: LstmCore::Burn,
                ..Execution::default()
            },
            device,
        );
        let gap = loss_gap(&fused, &burn);
        assert!(gap < 1e-3, "training losses differ by {gap}");
    }

    fn streamed_and_resident_windows_give_the_same_run_and_reruns_repeat_it<B>(device) {
        let data = market(700);
        for model in [ModelKind::Lstm, ModelKind::Mlp] {
            let config = small(model);
            let resident = train::<B>(&data, &config, Execution::default(), device);
            let streamed = train::<B>(
                &data,
                &config,
                Execution {
                    data: Mode::ON_CALLER,
                    ..Execution::default()
                },
                device,
            );
            let again = train::<B>(&data, &config, Execution::default(), device);
            // Not bit for bit: burn-ndarray's reductions can round differently from one run to
            // the next (a last-place difference in a loss, seen in the first epoch; issue 19).
            for other in [&streamed, &again] {
                let gap = loss_gap(&resident, other);
                assert!(gap < 1e-6, "{model:?}: training losses differ by {gap}");
                // A last-place difference can flip a window whose two top logits tie to rounding.
                for (a, b) in resident.seeds.iter().zip(&other.seeds) {
                    assert_eq!(a.best_epoch, b.best_epoch, "{model:?}");
                    let flipped =
                        (a.test.accuracy - b.test.accuracy).abs() * data.test.windows.len() as f64;
                    assert!(
                        flipped < 2.5,
                        "{model:?}: {flipped} test windows change class"
                    );
                }
            }
        }
    }

    fn every_model_lowers_its_training_loss_and_reports_the_baselines<B>(device) {
        let data = market(900);
        for model in [ModelKind::Lstm, ModelKind::Transformer, ModelKind::Mlp] {
            let config = TemporalConfig {
                epochs: 4,
                warmup_epochs: 1,
                seeds: vec![1],
                ..small(model)
            };
            let outcome = train::<B>(&data, &config, Execution::default(), device);
            let loss = &outcome.seeds[0].train_loss;
            assert!(loss.last() < loss.first(), "{model:?}: {loss:?}");
            assert_eq!(outcome.train_windows, data.train.windows.len());
            let b = outcome.baselines;
            for s in [b.majority_test, b.last_move_test, outcome.seeds[0].test] {
                assert!((0.0..=1.0).contains(&s.accuracy) && (0.0..=1.0).contains(&s.macro_f1));
            }
        }
    }

    fn unusable_settings_are_refused_by_name<B>(device) {
        let data = market(700);
        let base = small(ModelKind::Lstm);
        for (config, name) in [
            (
                TemporalConfig {
                    seeds: vec![],
                    ..base.clone()
                },
                "seeds",
            ),
            (
                TemporalConfig {
                    learning_rate: f64::NAN,
                    ..base.clone()
                },
                "learning_rate",
            ),
            (
                TemporalConfig {
                    label_smoothing: 1.0,
                    ..base.clone()
                },
                "label_smoothing",
            ),
            (
                TemporalConfig {
                    widths: Widths {
                        d_model: 10,
                        heads: 3,
                        ..base.widths.clone()
                    },
                    ..base.clone()
                },
                "d_model",
            ),
            (
                TemporalConfig {
                    widths: Widths {
                        mlp: vec![8, 0],
                        ..base.widths.clone()
                    },
                    ..base.clone()
                },
                "mlp",
            ),
        ] {
            let error = Valid::new(config)
                .and_then(|valid| train_temporal::<B>(&data, &valid, &Execution::default(), device))
                .unwrap_err();
            assert!(
                matches!(&error, TemporalError::InvalidValue { name: n, .. } if *n == name),
                "{name}: {error}"
            );
        }
    }
}

/// A seed starts every model from the same weights on every backend. Burn's initialisers draw
/// from each backend's own generator (an f64 backend draws other values than an f32 one, and
/// lavapipe others again: its Transformer disagreed with the CPU's for that alone), so the
/// Transformer's are drawn on the host, as the LSTM's and the MLP's always were.
#[test]
fn a_seed_starts_from_the_same_weights_on_every_backend() {
    use crate::TemporalNet;
    use burn::backend::NdArray;

    /// Every initial parameter of `kind` for seeds 3 and 4 on backend `B`, as f32 values.
    fn initial<B: QuenchOps>(kind: ModelKind, widths: &Widths) -> Vec<Vec<f32>> {
        let device = Default::default();
        TemporalNet::<B>::new(kind, widths.clone(), 5, LstmCore::Burn)
            .initial_params(&[3, 4], &device)
            .0
            .into_iter()
            .map(|p| p.into_data().convert::<f32>().to_vec::<f32>().unwrap())
            .collect()
    }
    let widths = small(ModelKind::Transformer).widths;
    for kind in [ModelKind::Lstm, ModelKind::Transformer, ModelKind::Mlp] {
        let single = initial::<NdArray<f32>>(kind, &widths);
        let double = initial::<NdArray<f64>>(kind, &widths);
        assert_eq!(single.len(), double.len(), "{kind:?}");
        for (k, (a, b)) in single.iter().zip(&double).enumerate() {
            assert_eq!(a, b, "{kind:?} parameter {k}");
        }
    }
}
