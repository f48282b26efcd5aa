//! Workloads `temporal-lstm`, `temporal-transformer` and `temporal-mlp` (guide 004): 3-class
//! direction classifiers on windows of market bars, every seed a member, one workload per
//! model so that each has its own baseline.
//!
//! The baseline is the original's CPU way: batch 128 (256 for the MLP), f32, each batch
//! assembled sample by sample on the host by a loader without workers, and for the LSTM
//! `burn::nn::Lstm` (eight matmuls per step and direction, member after member). Every other
//! variant changes one thing (the guide's loader workers, its larger batch, device-resident
//! windows for its non-blocking copies, AMP as bf16, and our fused LSTM); `all` takes them
//! together at the guide's recommended batch. The data is the seeded synthetic market unless
//! the suite names MetaTrader-5 exports; the PyTorch peer (`peers/temporal.py`) trains on the
//! same windows, exported for it as numpy files.

use quench_kernels::QuenchBackend;
use std::path::{Path, PathBuf};

use anyhow::Context;
use quench_data::{MarketConfig, MarketData, Mode, WindowConfig};
use quench_support::stats::MeanStd;
use quench_temporal::data::{Market, MarketSettings};
use quench_temporal::{Execution, LstmCore, ModelKind, TemporalConfig, train_temporal};
use quench_train::settings::Valid;
use serde::Deserialize;

use crate::npy;
use crate::peers::Peer;
use crate::workload::{
    Claim, PerVariant, PrecisionRole, Quality, QualityCaveat, TableWorkload, Tolerance, Variant,
    VariantContext, VariantOutcome, check_repeats, claimed, final_training_loss,
    refuse_set_by_variant, time_runs,
};

/// The temporal workload of model `MODEL` (an index into [`MODELS`]).
pub struct Temporal<const MODEL: usize>;

/// The models, in the order of the workloads' const parameter.
const MODELS: [ModelKind; 3] = [ModelKind::Lstm, ModelKind::Transformer, ModelKind::Mlp];
const NAMES: [&str; 3] = ["temporal-lstm", "temporal-transformer", "temporal-mlp"];
const SUMMARIES: [&str; 3] = [
    "guide 004: bidirectional LSTM + attention pooling on 20-bar market windows, 3 classes, seeds as members",
    "guide 004: pre-norm Transformer encoder on 20-bar market windows, 3 classes, seeds as members",
    "guide 004: gated MLP on the last bar's 29 features, 3 classes, seeds as members",
];

/// Parameters of a temporal workload in a suite.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Params {
    /// MetaTrader-5 exports, one symbol each; none: the synthetic market.
    files: Vec<PathBuf>,
    /// The synthetic market (when `files` is empty).
    market: MarketConfig,
    /// Window length, label horizon and threshold, split fractions.
    windows: WindowConfig,
    /// Timed runs of each variant (a run is a whole training); the suite's warm-up applies.
    repeats: Option<usize>,
    /// Overrides of the model's training settings (`TemporalConfig`; the original's by
    /// default; `model` and `batch_size` are the workload's and the variant's).
    training: toml::Table,
}

impl Default for Params {
    fn default() -> Self {
        Self {
            files: Vec::new(),
            market: MarketConfig::default(),
            windows: WindowConfig::default(),
            repeats: None,
            training: toml::Table::new(),
        }
    }
}

/// A temporal workload prepared for a suite.
pub struct PreparedTemporal {
    params: Params,
    /// The model's training settings with the suite's overrides (the peer's).
    config: TemporalConfig,
    /// Each variant's, at its batch.
    configs: PerVariant<TemporalConfig>,
    /// The windows, split and normalised.
    data: MarketData,
    /// Where the bars came from.
    note: String,
}

/// One variant's way of computing.
pub struct Setting {
    core: LstmCore,
    data: Mode,
    /// Batch size for (LSTM and Transformer, MLP).
    batch: (usize, usize),
}

/// The original's loader: the caller assembles each batch sample by sample and uploads it.
const HOST: Mode = Mode::ON_CALLER;
/// The guide's `DataLoader(num_workers=2, pin_memory, persistent_workers)`.
const WORKERS: Mode = Mode::Streaming {
    num_workers: 2,
    prefetch: 2,
    staging: true,
};
const RESIDENT: Mode = Mode::Resident;
const F32: PrecisionRole = PrecisionRole::F32;
const BASE_BATCH: (usize, usize) = (128, 256);

const fn variant(
    name: &'static str,
    description: &'static str,
    (core, data, batch): (LstmCore, Mode, (usize, usize)),
    (precision, claim): (PrecisionRole, Option<Claim>),
) -> Variant<Setting> {
    Variant {
        name,
        description,
        baseline: matches!(core, LstmCore::Burn)
            && matches!(data, Mode::Streaming { num_workers: 0, .. })
            && batch.0 == BASE_BATCH.0
            && matches!(precision, PrecisionRole::F32),
        claim,
        precision,
        setting: Setting { core, data, batch },
    }
}

/// What a model's `baseline` and `all` rows say, in that model's own words.
struct Described {
    baseline: &'static str,
    all: &'static str,
}

const LSTM_WORDS: Described = Described {
    baseline: "batch 128, f32, batches assembled per sample on the host without workers, \
               burn::nn::Lstm member after member (the original's CPU way)",
    all: "fused LSTM, resident windows, batch 256 (the guide's recommended), bf16 where the \
          device has it",
};

const TRANSFORMER_WORDS: Described = Described {
    baseline: "batch 128, f32, batches assembled per sample on the host without workers, \
               Burn's attention, LayerNorm and feed-forward layers op by op (the original's CPU \
               way)",
    all: "resident windows, batch 256 (the guide's recommended), bf16 where the device has it",
};

const MLP_WORDS: Described = Described {
    baseline: "batch 256, f32, batches assembled per sample on the host without workers, \
               Burn's linear layers op by op (the original's CPU way)",
    all: "resident windows (only the last bar, the one the MLP reads), batch 512 (the guide's \
          recommended), bf16 where the device has it",
};

/// The rows every model has, in its words, with guide 004's claims: loader workers 30-50 %,
/// non-blocking copies 10-20 %, AMP 2-3x, about 6x per model with everything (its CPU-to-T4
/// figures: LSTM 5.6x, Transformer and MLP 6x).
const fn rows(words: Described, all_claim: Option<Claim>) -> [Variant<Setting>; 6] {
    [
        variant(
            "baseline",
            words.baseline,
            (LstmCore::Burn, HOST, BASE_BATCH),
            (F32, None),
        ),
        variant(
            "workers",
            "as baseline, batches assembled by 2 persistent workers and uploaded by a staging \
             thread (the guide's DataLoader settings)",
            (LstmCore::Burn, WORKERS, BASE_BATCH),
            (F32, claimed(1.3, 1.5)),
        ),
        variant(
            "batch-512",
            "as baseline at batch 512 (the guide's larger batch)",
            (LstmCore::Burn, HOST, (512, 512)),
            (F32, None),
        ),
        variant(
            "device-resident",
            "as baseline, every window uploaded once and batches gathered on the device (the \
             guide's pinned, non-blocking copies, taken further; the MLP's windows as the last \
             bar it reads)",
            (LstmCore::Burn, RESIDENT, BASE_BATCH),
            (F32, claimed(1.1, 1.2)),
        ),
        variant(
            "mixed-precision",
            "as baseline in bf16 with f32 master weights where the device has bf16 (the guide's \
             AMP)",
            (LstmCore::Burn, HOST, BASE_BATCH),
            (PrecisionRole::Mixed, claimed(2.0, 3.0)),
        ),
        variant(
            "all",
            words.all,
            (LstmCore::Fused, RESIDENT, (256, 512)),
            (PrecisionRole::MixedWhereAvailable, all_claim),
        ),
    ]
}

const fn with_fused(rows: [Variant<Setting>; 6]) -> [Variant<Setting>; 7] {
    let [baseline, workers, batch, resident, bf16, all] = rows;
    [
        baseline,
        workers,
        batch,
        resident,
        variant(
            "fused-lstm",
            "as baseline with Quench's fused LSTM: one input projection for all steps, one \
             recurrent matmul per step for both directions and every seed",
            (LstmCore::Fused, HOST, BASE_BATCH),
            (F32, None),
        ),
        bf16,
        all,
    ]
}

const LSTM_VARIANTS: [Variant<Setting>; 7] = with_fused(rows(LSTM_WORDS, claimed(5.6, 5.6)));
const TRANSFORMER_VARIANTS: [Variant<Setting>; 6] = rows(TRANSFORMER_WORDS, claimed(6.0, 6.0));
const MLP_VARIANTS: [Variant<Setting>; 6] = rows(MLP_WORDS, claimed(6.0, 6.0));

/// The windows of `params` and where they came from ([`MarketSettings::load`]).
fn market(params: &Params) -> anyhow::Result<(MarketData, String)> {
    let Market { data, note } = MarketSettings {
        files: params.files.clone(),
        market: params.market.clone(),
        windows: params.windows.clone(),
    }
    .load()?;
    Ok((data, note))
}

/// The batch a variant's `(LSTM and Transformer, MLP)` batch sizes give `model`.
fn batch_of(model: ModelKind, (recurrent_or_attention, mlp): (usize, usize)) -> usize {
    match model {
        ModelKind::Mlp => mlp,
        _ => recurrent_or_attention,
    }
}

/// The model's training settings with the suite's overrides (the defaults depend on the
/// model, so the overrides are merged into them as a table); `model` cannot be overridden.
/// Checked per variant, at its batch, by [`TableWorkload::prepare`].
fn training(model: ModelKind, overrides: &toml::Table) -> anyhow::Result<TemporalConfig> {
    anyhow::ensure!(
        !overrides.contains_key("model"),
        "training.model: set by the workload ({}), not by the suite",
        model.name()
    );
    refuse_set_by_variant("training", overrides, &["batch_size"]).map_err(anyhow::Error::msg)?;
    quench_support::config::overridden(
        &TemporalConfig::for_model(model),
        overrides.clone(),
        "training",
    )
    .map_err(anyhow::Error::msg)
}

/// Writes the windows of `data` for the peer into `dir` as numpy files: `rows.npy` (`f32
/// [rows, features]`: every symbol's normalised feature rows up to its last window end, one
/// symbol after another; rows no window covers are 0) and per part (`train`, `validation`,
/// `test`) `<part>_ends.npy` (`i64 [n]`: the row of each window's last bar) and
/// `<part>_labels.npy` (`i64 [n]`). Window `i` of a part is rows `ends[i] + 1 - window ..=
/// ends[i]`, the same values as Quench's window, in a file far smaller than the windows
/// themselves (which repeat every row `window` times).
fn export_windows(data: &MarketData, dir: &Path) -> anyhow::Result<()> {
    let parts = [
        ("train", &data.train),
        ("validation", &data.validation),
        ("test", &data.test),
    ];
    let (window, width) = match data.train.windows.sample_shape() {
        &[window, width] => (window, width),
        shape => anyhow::bail!("windows of shape {shape:?}, not [window, features]"),
    };
    let mut lengths = vec![0; data.symbols.len()];
    for (_, part) in parts {
        for &(s, t) in &part.ends {
            lengths[s] = lengths[s].max(t + 1);
        }
    }
    let offsets: Vec<usize> = lengths
        .iter()
        .scan(0, |next, &length| {
            let start = *next;
            *next += length;
            Some(start)
        })
        .collect();
    let mut rows = vec![0.0f32; lengths.iter().sum::<usize>() * width];
    for (name, part) in parts {
        let features = part.windows.features();
        let mut ends = Vec::with_capacity(part.ends.len());
        for (i, &(s, t)) in part.ends.iter().enumerate() {
            let end = offsets[s] + t;
            // Overlapping windows write the same row with the same value.
            rows[(end + 1 - window) * width..(end + 1) * width]
                .copy_from_slice(&features[i * window * width..(i + 1) * window * width]);
            ends.push(i64::try_from(end)?);
        }
        npy::write(&dir.join(format!("{name}_ends.npy")), &[ends.len()], &ends)?;
        npy::write(
            &dir.join(format!("{name}_labels.npy")),
            &[ends.len()],
            part.windows.labels(),
        )?;
    }
    npy::write(&dir.join("rows.npy"), &[rows.len() / width, width], &rows)
}

/// The peer's arguments: the windows exported into `dir`, the model's training settings
/// `config` and widths, at the baseline's batch.
fn peer_on(model: ModelKind, config: &TemporalConfig, dir: &Path, params: &Params) -> Peer {
    let list = |values: &[usize]| -> String {
        let values: Vec<String> = values.iter().map(usize::to_string).collect();
        values.join(",")
    };
    let seeds: Vec<String> = config.seeds.iter().map(u64::to_string).collect();
    let batch = match model {
        ModelKind::Mlp => BASE_BATCH.1,
        _ => BASE_BATCH.0,
    };
    let w = &config.widths;
    let mut args: Vec<String> = [
        ("--model", model.name().to_string()),
        ("--data", dir.display().to_string()),
        ("--window", params.windows.window.to_string()),
        ("--seeds", seeds.join(",")),
        ("--epochs", config.epochs.to_string()),
        ("--batch-size", batch.to_string()),
        ("--learning-rate", config.learning_rate.to_string()),
        ("--weight-decay", config.weight_decay.to_string()),
        ("--warmup-epochs", config.warmup_epochs.to_string()),
        ("--label-smoothing", config.label_smoothing.to_string()),
        ("--clip-norm", config.clip_norm.to_string()),
        ("--patience", config.patience.to_string()),
        ("--dropout", config.dropout.to_string()),
        ("--lstm-hidden", w.lstm_hidden.to_string()),
        ("--lstm-layers", w.lstm_layers.to_string()),
        ("--lstm-head", w.lstm_head.to_string()),
        ("--d-model", w.d_model.to_string()),
        ("--heads", w.heads.to_string()),
        ("--feed-forward", w.feed_forward.to_string()),
        ("--encoder-layers", w.encoder_layers.to_string()),
        ("--mlp", list(&w.mlp)),
    ]
    .into_iter()
    .flat_map(|(name, value)| [name.to_string(), value])
    .collect();
    for (flag, on) in [
        ("--cosine", config.cosine),
        ("--class-weighted", config.class_weighted),
    ] {
        if on {
            args.push(flag.into());
        }
    }
    Peer {
        script: "temporal.py",
        args,
        repeats: params.repeats,
    }
}

impl<const MODEL: usize> TableWorkload for Temporal<MODEL> {
    type Params = Params;
    type Prepared = PreparedTemporal;
    type Setting = Setting;
    const NAME: &'static str = NAMES[MODEL];
    /// Seeds are dealt over the ranks.
    const SHARDS: bool = true;
    const SUMMARY: &'static str = SUMMARIES[MODEL];

    fn table(&self) -> &[Variant<Setting>] {
        match MODELS[MODEL] {
            ModelKind::Lstm => &LSTM_VARIANTS,
            ModelKind::Transformer => &TRANSFORMER_VARIANTS,
            ModelKind::Mlp => &MLP_VARIANTS,
        }
    }

    /// Each variant's training settings (the model's with the suite's overrides, at the
    /// variant's batch), and the bars: the files read and windowed (or the synthetic market
    /// drawn) once for every variant and the peer.
    fn prepare(&self, params: Params) -> anyhow::Result<PreparedTemporal> {
        check_repeats(params.repeats)?;
        let model = MODELS[MODEL];
        let config = training(model, &params.training)?;
        let configs = PerVariant::new(self.table(), |variant| {
            let config = TemporalConfig {
                batch_size: batch_of(model, variant.setting.batch),
                ..config.clone()
            };
            // The states at this batch, before any data is made.
            config
                .check_memory(params.windows.window, quench_data::FEATURES.len())
                .context("training")?;
            Valid::new(config).context("training")
        })?;
        let (data, note) = market(&params)?;
        Ok(PreparedTemporal {
            params,
            config,
            configs,
            data,
            note,
        })
    }

    /// The original's way in PyTorch (`peers/temporal.py`): the seeds one at a time at the
    /// baseline's batch (128, MLP 256), each batch assembled per sample by a `DataLoader`
    /// without workers, `nn.LSTM`, `nn.TransformerEncoderLayer(norm_first=True)` or the
    /// BatchNorm MLP, with the same training settings. It trains on Quench's own windows: the
    /// synthetic market (or the files) is cut, split and normalised here and exported as numpy
    /// files ([`export_windows`]) into `inputs`.
    fn peer(&self, prepared: &PreparedTemporal, inputs: &Path) -> anyhow::Result<Option<Peer>> {
        export_windows(&prepared.data, inputs)?;
        Ok(Some(peer_on(
            MODELS[MODEL],
            &prepared.config,
            inputs,
            &prepared.params,
        )))
    }

    fn run_variant<B: QuenchBackend>(
        &self,
        variant: &Variant<Setting>,
        prepared: &PreparedTemporal,
        ctx: &VariantContext,
        device: &B::Device,
    ) -> anyhow::Result<VariantOutcome> {
        let model = MODELS[MODEL];
        let setting = &variant.setting;
        let (params, data) = (&prepared.params, &prepared.data);
        let config = ctx.my_share("seeds", prepared.configs.of(variant)?)?;
        let execution = Execution {
            core: setting.core,
            data: setting.data,
            precision: ctx.precision,
        };
        let timing = ctx.timing_with(params.repeats);
        let (outcome, seconds, counts) = time_runs::<B, _>(device, timing, || {
            Ok(train_temporal::<B>(data, &config, &execution, device)?)
        })?;
        let seeds = config.seeds.len();
        let epochs = outcome.epochs.max(1) as f64;
        let mean = |f: &dyn Fn(&quench_temporal::SeedOutcome) -> f64| {
            MeanStd::of(&outcome.seeds.iter().map(f).collect::<Vec<_>>())
        };
        let test_f1 = mean(&|s| s.test.macro_f1);
        let test_accuracy = mean(&|s| s.test.accuracy);
        let validation_f1 = mean(&|s| s.validation.macro_f1);
        let validation_accuracy = mean(&|s| s.validation.accuracy);
        let b = &outcome.baselines;
        let mut notes = vec![
            format!(
                "test macro-F1 {:.3} +- {:.3}, accuracy {:.2} % +- {:.2} %; validation macro-F1 \
                 {:.3}, accuracy {:.2} %; over seeds {:?} after {} epochs",
                test_f1.mean,
                test_f1.std,
                100.0 * test_accuracy.mean,
                100.0 * test_accuracy.std,
                validation_f1.mean,
                100.0 * validation_accuracy.mean,
                config.seeds,
                outcome.epochs,
            ),
            format!(
                "without a model, on test: majority class ({}) macro-F1 {:.3}, accuracy {:.2} %; \
                 same as last move macro-F1 {:.3}, accuracy {:.2} %",
                b.majority_class,
                b.majority_test.macro_f1,
                100.0 * b.majority_test.accuracy,
                b.last_move_test.macro_f1,
                100.0 * b.last_move_test.accuracy,
            ),
            format!(
                "{:.3} s per epoch of {} windows for all {seeds} seeds (validation pass \
                 included); batch {}",
                seconds.median / epochs,
                outcome.train_windows,
                config.batch_size,
            ),
            format!("precision: {}", ctx.precision),
            prepared.note.clone(),
        ];
        if outcome.skipped_steps > 0 {
            notes.push(format!(
                "{} steps skipped by f16 loss scaling",
                outcome.skipped_steps
            ));
        }
        let f1s: Vec<f64> = outcome.seeds.iter().map(|s| s.test.macro_f1).collect();
        Ok(VariantOutcome {
            training_loss: final_training_loss(
                outcome.seeds.iter().map(|s| s.train_loss.last().copied()),
            ),
            sharded: ctx.share(seeds, &f1s),
            per_iteration: seconds.scaled(1.0 / epochs),
            counts: Some(counts.per(epochs)),
            iteration_unit: "epoch (all seeds)".into(),
            iterations_per_run: epochs,
            items_per_iteration: (outcome.train_windows * seeds) as f64,
            throughput_unit: "windows/s".into(),
            quality: Some(Quality {
                metric: "mean test macro-F1".into(),
                value: test_f1.mean,
                higher_is_better: true,
                tolerance: Tolerance::Absolute(0.03),
                // Always the training part's most frequent class, scored on the test part.
                chance: Some(outcome.baselines.majority_test.macro_f1),
                caveat: (outcome.epochs >= config.epochs)
                    .then(|| {
                        QualityCaveat::fewer_steps(
                            config.batch_size,
                            batch_of(model, BASE_BATCH),
                            config.epochs,
                        )
                    })
                    .flatten(),
            }),
            notes,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::{PrepareAndRun, RunContext, VariantRun, Workload};
    use quench_data::{FEATURES, synthetic_market};

    #[test]
    fn every_model_describes_its_variants_in_its_own_words() {
        let words = |table: &[Variant<Setting>]| {
            table
                .iter()
                .map(|v| v.description.to_lowercase())
                .collect::<Vec<_>>()
                .join(" | ")
        };
        let (lstm, transformer, mlp) = (
            words(&LSTM_VARIANTS),
            words(&TRANSFORMER_VARIANTS),
            words(&MLP_VARIANTS),
        );
        assert!(
            lstm.contains("lstm") && !lstm.contains("attention"),
            "{lstm}"
        );
        assert!(
            transformer.contains("attention") && !transformer.contains("lstm"),
            "{transformer}"
        );
        assert!(
            mlp.contains("linear") && !mlp.contains("lstm") && !mlp.contains("attention"),
            "{mlp}"
        );
    }

    const SMALL: &str = "market = { symbols = 2, bars = 900, seed = 3 }\nrepeats = 1\n\
                         training = { seeds = [1, 2], epochs = 1, widths = { lstm_hidden = 8, \
                         lstm_head = 8, d_model = 8, heads = 2, feed_forward = 16, \
                         encoder_layers = 1, mlp = [16, 8] } }";

    #[test]
    fn every_model_reports_macro_f1_per_epoch_beside_the_baselines() {
        let params: toml::Table = toml::from_str(SMALL).unwrap();
        let workloads: [&dyn Workload; 3] = [&Temporal::<0>, &Temporal::<1>, &Temporal::<2>];
        for workload in workloads {
            let variants = workload.variants();
            assert_eq!(variants.iter().filter(|v| v.baseline).count(), 1);
            for name in ["baseline", "all"] {
                let variant = variants.iter().find(|v| v.name == name).unwrap();
                let run = workload
                    .run(variant, &params, &RunContext::quick_cpu())
                    .unwrap();
                let VariantRun::Measured(outcome, _) = run else {
                    panic!("{}/{name}: {run:?}", workload.name())
                };
                let quality = outcome.quality.unwrap();
                assert!((0.0..=1.0).contains(&quality.value), "{name}: {quality:?}");
                assert_eq!(outcome.iteration_unit, "epoch (all seeds)");
                assert!(
                    outcome
                        .notes
                        .iter()
                        .any(|n| n.contains("same as last move"))
                );
                assert!(
                    outcome
                        .notes
                        .iter()
                        .any(|n| n.starts_with("data: synthetic market"))
                );
            }
        }
        assert!(
            Temporal::<0>
                .variants()
                .iter()
                .any(|v| v.name == "fused-lstm")
        );
    }

    #[test]
    fn a_symbol_too_short_for_any_window_is_named_in_the_note() {
        let dir = tempfile::tempdir().unwrap();
        let bars = synthetic_market(&quench_data::MarketConfig {
            symbols: 1,
            bars: 600,
            ..Default::default()
        })
        .unwrap()
        .remove(0);
        let csv = |name: &str, count: usize| {
            let mut text =
                String::from("time,open,high,low,close,tick_volume,spread,real_volume\n");
            for t in 0..count {
                text += &format!(
                    "{},{},{},{},{},{},{},{}\n",
                    bars.time[t],
                    bars.open[t],
                    bars.high[t],
                    bars.low[t],
                    bars.close[t],
                    bars.tick_volume[t],
                    bars.spread[t],
                    bars.real_volume[t]
                );
            }
            let path = dir.path().join(name);
            std::fs::write(&path, text).unwrap();
            path
        };
        // The files in place of SMALL's synthetic market (given with files, it is refused).
        let params = Params {
            files: vec![csv("LONG.csv", 600), csv("SHORT.csv", 5)],
            market: Default::default(),
            ..toml::from_str(SMALL).unwrap()
        };
        let (data, note) = market(&params).unwrap();
        assert_eq!(data.symbols, ["LONG", "SHORT"]);
        let needed = params.windows.bars_needed();
        assert!(
            note.ends_with(&format!(
                "not used, too short for any window (one in every part needs {needed} bars): \
                 SHORT (5 bars)"
            )),
            "{note}"
        );
        let params = Params {
            files: vec![csv("LONG.csv", 600)],
            ..params
        };
        assert!(!market(&params).unwrap().1.contains("not used"));
    }

    #[test]
    fn the_peer_trains_on_quench_windows_at_the_baseline_batch() {
        let params: Params = toml::from_str(SMALL).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let peer = |workload: &dyn Workload| {
            let table: toml::Table = toml::from_str(SMALL).unwrap();
            let inputs = dir.path().join(workload.name());
            workload.peer(&table, &inputs).unwrap().unwrap()
        };
        let lstm = peer(&Temporal::<0>);
        let transformer = peer(&Temporal::<1>);
        let mlp = peer(&Temporal::<2>);
        assert_eq!(lstm.script, "temporal.py");
        assert_eq!(lstm.repeats, Some(1));
        let args = |peer: &Peer| peer.args.join(" ");
        for wanted in [
            "--model lstm",
            "--window 20 --seeds 1,2 --epochs 1 --batch-size 128 --learning-rate 0.0005",
            "--label-smoothing 0.1 --clip-norm 0.5",
            "--lstm-hidden 8 --lstm-layers 2 --lstm-head 8",
            "--cosine",
        ] {
            assert!(args(&lstm).contains(wanted), "{wanted}: {}", args(&lstm));
        }
        assert!(!args(&lstm).contains("--class-weighted"));
        assert!(args(&transformer).contains("--model transformer"));
        assert!(args(&transformer).contains("--learning-rate 0.0003"));
        assert!(args(&transformer).contains("--d-model 8 --heads 2 --feed-forward 16"));
        for wanted in [
            "--model mlp",
            "--batch-size 256",
            "--mlp 16,8",
            "--class-weighted",
        ] {
            assert!(args(&mlp).contains(wanted), "{wanted}: {}", args(&mlp));
        }
        assert!(!args(&mlp).contains("--cosine"));

        // The exported rows give back Quench's windows, bit for bit, and its labels.
        let exported = PathBuf::from(&lstm.args[3]);
        assert_eq!(lstm.args[2], "--data");
        let (data, _) = market(&params).unwrap();
        let rows: Vec<f32> = npy::tests::body(&exported.join("rows.npy"), "'<f4'")
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
            .collect();
        let ints = |bytes: Vec<u8>| -> Vec<i64> {
            bytes
                .chunks_exact(8)
                .map(|b| i64::from_le_bytes(b.try_into().unwrap()))
                .collect()
        };
        let width = FEATURES.len();
        for (name, part) in [
            ("train", &data.train),
            ("validation", &data.validation),
            ("test", &data.test),
        ] {
            let n = part.windows.len();
            let shape = format!("'shape': ({n},)");
            let ends = ints(npy::tests::body(
                &exported.join(format!("{name}_ends.npy")),
                &shape,
            ));
            let labels = ints(npy::tests::body(
                &exported.join(format!("{name}_labels.npy")),
                &shape,
            ));
            assert_eq!(labels, part.windows.labels(), "{name}");
            let windows: Vec<u32> = ends
                .iter()
                .flat_map(|&end| {
                    let end = usize::try_from(end).unwrap();
                    rows[(end + 1 - 20) * width..(end + 1) * width].to_vec()
                })
                .map(f32::to_bits)
                .collect();
            let quench: Vec<u32> = part
                .windows
                .features()
                .iter()
                .map(|v| v.to_bits())
                .collect();
            assert!(windows == quench, "{name}: the exported windows differ");
        }

        let refused: toml::Table = toml::from_str("training = { model = \"mlp\" }").unwrap();
        let err = PrepareAndRun::peer(&Temporal::<0>, &refused, dir.path())
            .unwrap_err()
            .to_string();
        assert!(err.contains("temporal-lstm"), "{err}");

        // A folder that cannot be made is a clear error, not a missing peer.
        let file = dir.path().join("a-file");
        std::fs::write(&file, "").unwrap();
        let table: toml::Table = toml::from_str(SMALL).unwrap();
        let err = format!(
            "{:#}",
            PrepareAndRun::peer(&Temporal::<0>, &table, &file.join("inputs")).unwrap_err()
        );
        assert!(
            err.contains("cannot create") && err.contains("a-file"),
            "{err}"
        );
    }

    #[test]
    fn bad_parameters_are_refused_by_name() {
        let variant = &Temporal::<0>.variants()[0];
        for (text, name) in [
            ("window = 5", "window"),
            ("training = { model = \"mlp\" }", "training.model"),
            ("training = { epoch = 2 }", "epoch"),
            ("training = { learning_rate = -1.0 }", "learning_rate"),
            (
                "files = [\"/nonexistent/EURUSD.csv\"]",
                "/nonexistent/EURUSD.csv",
            ),
        ] {
            let params: toml::Table = toml::from_str(text).unwrap();
            let error = Temporal::<0>
                .run(variant, &params, &RunContext::quick_cpu())
                .unwrap_err();
            assert!(format!("{error:#}").contains(name), "{text}: {error:#}");
        }
    }
}
