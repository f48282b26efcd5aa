//! Windows of bar features labelled with the direction of the next move: the data sets of
//! the 3-class direction classifiers (guide 004).
//!
//! **Labels.** With `r = close[t + horizon] / close[t] - 1`, bar `t` is labelled 2 (up) if
//! `r > threshold`, 0 (down) if `r < -threshold`, else 1 (flat). A window ending at bar `t`
//! holds the normalised feature rows `t - window + 1 ..= t` ([`crate::FEATURES`]) and takes
//! the label of `t`; its `last_move` is the label of the move that ended at `t`
//! (`close[t] / close[t - horizon] - 1`, known at time `t`), the "same as the last move"
//! baseline.
//!
//! **Splits.** A symbol's usable window ends are `t` in
//! `[max(first_valid + window - 1, horizon), len - horizon - 1]` (full feature history, a
//! known last move, a known future close). They are split chronologically per symbol: the
//! first `floor(train * m)` of the `m` ends, then `floor(validation * m)`, then the rest. The
//! last `horizon` ends before each boundary are **purged** (dropped): their labels would look
//! at closes of the next period, so a training label never uses a close at or after the first
//! validation window end, nor a validation label one at or after the first test window end.
//! The symbols' windows are pooled per part, symbol after symbol (shuffling is the loader's
//! job).
//!
//! **Normalisation.** Each feature is standardised with the mean and standard deviation of
//! the feature rows the training windows cover (each row once), a deviation below `1e-8`
//! counting as 1; the same statistics apply to all parts, so nothing of the validation and
//! test periods leaks into the inputs.

use std::ops::Range;

use serde::{Deserialize, Serialize};

use crate::market_features::{FeatureTable, HISTORY, bar_features};
use crate::{Bars, DataError, Dataset, FEATURES};

/// The label of a fall beyond the threshold.
pub const DOWN: i64 = 0;
/// The label of a move within the threshold.
pub const FLAT: i64 = 1;
/// The label of a rise beyond the threshold.
pub const UP: i64 = 2;

/// Deviations below this count as 1 in the normalisation, so a constant feature stays finite.
const MIN_STD: f64 = 1e-8;

/// How windows are cut, labelled and split.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WindowConfig {
    /// Bars per window (feature rows per sample), at least 1.
    pub window: usize,
    /// Bars ahead whose close defines the label, at least 1.
    pub horizon: usize,
    /// Relative move beyond which a bar is up or down (0.006: 0.6 %), finite and `>= 0`.
    pub threshold: f64,
    /// Fraction of each symbol's window ends for training, in `(0, 1)`.
    pub train: f64,
    /// Fraction for validation, in `(0, 1)`; `train + validation < 1`, the rest is the test.
    pub validation: f64,
}

impl Default for WindowConfig {
    fn default() -> Self {
        Self {
            window: 20,
            horizon: 8,
            threshold: 0.006,
            train: 0.70,
            validation: 0.15,
        }
    }
}

impl WindowConfig {
    /// Host bytes that cutting `bars` bars into windows takes at its peak: every bar's
    /// feature row twice (as computed and normalised, f32) and, as every bar ends about one
    /// window, `window` rows per bar in the windows themselves.
    pub fn bytes_for(&self, bars: u128) -> u128 {
        let row = (FEATURES.len() * 4) as u128;
        bars.saturating_mul(row.saturating_mul(2 + self.window as u128))
    }

    /// Refuses a configuration outside the ranges documented on its fields, naming the field.
    pub fn validate(&self) -> Result<(), DataError> {
        if self.window == 0 {
            return Err(DataError::invalid("window", 0, "must be at least 1"));
        }
        if self.horizon == 0 {
            return Err(DataError::invalid("horizon", 0, "must be at least 1"));
        }
        if !(self.threshold.is_finite() && self.threshold >= 0.0) {
            return Err(DataError::invalid(
                "threshold",
                self.threshold,
                "must be finite and at least 0",
            ));
        }
        for (field, value) in [("train", self.train), ("validation", self.validation)] {
            if !(value > 0.0 && value < 1.0) {
                return Err(DataError::invalid(field, value, "must lie in (0, 1)"));
            }
        }
        if self.train + self.validation >= 1.0 {
            return Err(DataError::invalid(
                "validation",
                self.validation,
                "train + validation must be below 1, leaving a test part",
            ));
        }
        Ok(())
    }

    /// The label of a move from price `from` to price `to`: [`UP`], [`DOWN`] or [`FLAT`].
    pub fn label(&self, from: f64, to: f64) -> i64 {
        let change = to / from - 1.0;
        if change > self.threshold {
            UP
        } else if change < -self.threshold {
            DOWN
        } else {
            FLAT
        }
    }

    /// The fewest bars with which one symbol yields a window in every part.
    pub fn bars_needed(&self) -> usize {
        let start = self.first_end(HISTORY);
        // From the lower bounds that the fractions set, a few steps reach the exact count.
        let at_least = |bars: f64, fraction: f64| (bars / fraction).ceil() as usize;
        let purged = self.horizon as f64 + 1.0;
        let mut ends = at_least(purged, self.train)
            .max(at_least(purged, self.validation))
            .max(at_least(1.0, 1.0 - self.train - self.validation));
        while ends < usize::MAX && self.split(ends).iter().any(Range::is_empty) {
            ends += 1;
        }
        start.saturating_add(ends).saturating_add(self.horizon)
    }

    /// The first usable window end of a symbol whose features are valid from `first_valid`.
    fn first_end(&self, first_valid: usize) -> usize {
        (first_valid.saturating_add(self.window) - 1).max(self.horizon)
    }

    /// The train, validation and test ends among `ends` usable ones, from 0, after purging.
    fn split(&self, ends: usize) -> [Range<usize>; 3] {
        let train = (ends as f64 * self.train).floor() as usize;
        let validation = (ends as f64 * self.validation).floor() as usize;
        [
            0..train.saturating_sub(self.horizon),
            train..train + validation.saturating_sub(self.horizon),
            train + validation..ends,
        ]
    }

    /// The train, validation and test window ends (bar indices) of a symbol of `bars` bars.
    fn symbol_split(&self, bars: usize, first_valid: usize) -> [Range<usize>; 3] {
        let start = self.first_end(first_valid);
        let ends = bars.saturating_sub(self.horizon).saturating_sub(start);
        self.split(ends)
            .map(|range| start + range.start..start + range.end)
    }
}

/// One part (train, validation or test) of the direction-classifier data.
#[derive(Debug, Clone, PartialEq)]
pub struct MarketPart {
    /// Samples `[window, FEATURES.len()]` of normalised features, labels [`DOWN`], [`FLAT`],
    /// [`UP`].
    pub windows: Dataset,
    /// For each window, the label of the move that ended at its last bar (the baseline
    /// "same as the last move"), `[len]`.
    pub last_move: Vec<i64>,
    /// For each window, the index of its symbol in [`MarketData::symbols`] and the bar index
    /// `t` of its last row, `[len]`.
    pub ends: Vec<(usize, usize)>,
}

/// Direction-classifier data of several symbols, split and normalised.
#[derive(Debug, Clone, PartialEq)]
pub struct MarketData {
    /// The training windows.
    pub train: MarketPart,
    /// The validation windows.
    pub validation: MarketPart,
    /// The test windows.
    pub test: MarketPart,
    /// Mean of each feature over the training rows, `[FEATURES.len()]`.
    pub mean: Vec<f32>,
    /// Standard deviation of each feature over the training rows (1 where below 1e-8),
    /// `[FEATURES.len()]`; a window holds `(feature - mean) / std`.
    pub std: Vec<f32>,
    /// The symbols, in the order given.
    pub symbols: Vec<String>,
}

/// Part names, in the order of the split.
const PARTS: [&str; 3] = ["train", "validation", "test"];

/// Cuts, labels, splits and normalises the windows of `symbols` (module documentation).
///
/// Refused: an invalid `config`, bars that fail [`Bars::validate`], or a part left without a
/// window ([`DataError::MarketPartEmpty`], saying how many bars a symbol needs).
pub fn market_windows(symbols: &[Bars], config: &WindowConfig) -> Result<MarketData, DataError> {
    config.validate()?;
    for bars in symbols {
        bars.validate()?;
    }
    let bars: u128 = symbols.iter().map(|bars| bars.len() as u128).sum();
    quench_support::budget::check_fits(
        || {
            format!(
                "the windows of {} symbol(s), {bars} bars, {} bars per window",
                symbols.len(),
                config.window
            )
        },
        config.bytes_for(bars),
    )?;
    let tables: Vec<FeatureTable> = symbols.iter().map(bar_features).collect();
    for (bars, table) in symbols.iter().zip(&tables) {
        finite_features(bars, &table.values, "")?;
    }
    let splits: Vec<[Range<usize>; 3]> = symbols
        .iter()
        .zip(&tables)
        .map(|(bars, table)| config.symbol_split(bars.len(), table.first_valid))
        .collect();
    for (part, name) in PARTS.iter().enumerate() {
        if splits.iter().all(|split| split[part].is_empty()) {
            return Err(DataError::MarketPartEmpty {
                part: name,
                symbols: symbols.len(),
                longest: symbols.iter().map(Bars::len).max().unwrap_or(0),
                needed: config.bars_needed(),
            });
        }
    }
    let (mean, std) = training_statistics(&tables, &splits, config.window);
    let normalised: Vec<Vec<f32>> = tables
        .iter()
        .map(|table| {
            (table.values.chunks_exact(FEATURES.len()))
                .flat_map(|row| {
                    row.iter()
                        .zip(mean.iter().zip(&std))
                        .map(|(value, (mean, std))| (value - mean) / std)
                })
                .collect()
        })
        .collect();
    for (bars, values) in symbols.iter().zip(&normalised) {
        finite_features(bars, values, " after normalisation")?;
    }
    let [train, validation, test] = [0, 1, 2].map(|part| {
        let ends = splits.iter().map(|split| split[part].clone());
        cut_part(symbols, &normalised, ends, config)
    });
    Ok(MarketData {
        train: train?,
        validation: validation?,
        test: test?,
        mean,
        std,
        symbols: symbols.iter().map(|bars| bars.symbol.clone()).collect(),
    })
}

/// Refuses the first non-finite value of a `[bars, FEATURES.len()]` table of `bars`, naming
/// the bar, its time and the feature: one would make the normalisation, and every window
/// after it, NaN.
fn finite_features(bars: &Bars, values: &[f32], stage: &'static str) -> Result<(), DataError> {
    match values.iter().position(|v| !v.is_finite()) {
        None => Ok(()),
        Some(at) => {
            let bar = at / FEATURES.len();
            Err(DataError::NonFiniteFeature {
                symbol: bars.symbol.clone(),
                bar,
                time: bars.time.get(bar).copied().unwrap_or_default(),
                feature: FEATURES[at % FEATURES.len()],
                value: values[at],
                stage,
            })
        }
    }
}

/// Mean and floored deviation of each feature over the rows the training windows cover.
fn training_statistics(
    tables: &[FeatureTable],
    splits: &[[Range<usize>; 3]],
    window: usize,
) -> (Vec<f32>, Vec<f32>) {
    let width = FEATURES.len();
    let rows = || {
        tables.iter().zip(splits).flat_map(move |(table, split)| {
            let train = &split[0];
            let rows = if train.is_empty() {
                0..0
            } else {
                train.start + 1 - window..train.end
            };
            rows.map(move |t| table.row(t))
        })
    };
    // Two passes: the deviation from the mean, not from running squares, stays accurate.
    let mut count = 0usize;
    let mut sum = vec![0.0f64; width];
    for row in rows() {
        count += 1;
        for (s, &v) in sum.iter_mut().zip(row) {
            *s += f64::from(v);
        }
    }
    let mean: Vec<f64> = sum.iter().map(|s| s / count as f64).collect();
    let mut square = vec![0.0f64; width];
    for row in rows() {
        for ((s, &v), m) in square.iter_mut().zip(row).zip(&mean) {
            *s += (f64::from(v) - m).powi(2);
        }
    }
    let std = square
        .iter()
        .map(|s| {
            let std = (s / count as f64).sqrt();
            if std < MIN_STD { 1.0 } else { std as f32 }
        })
        .collect();
    (mean.iter().map(|&m| m as f32).collect(), std)
}

/// The windows ending at `ends[s]` of every symbol `s`, from the normalised feature tables.
fn cut_part(
    symbols: &[Bars],
    normalised: &[Vec<f32>],
    ends: impl Iterator<Item = Range<usize>> + Clone,
    config: &WindowConfig,
) -> Result<MarketPart, DataError> {
    let width = FEATURES.len();
    let count: usize = ends.clone().map(|range| range.len()).sum();
    let mut features = Vec::with_capacity(count * config.window * width);
    let mut labels = Vec::with_capacity(count);
    let mut last_move = Vec::with_capacity(count);
    let mut window_ends = Vec::with_capacity(count);
    for (s, range) in ends.enumerate() {
        let close = &symbols[s].close;
        for t in range {
            // The rows of a window are contiguous in the row-major table.
            features.extend_from_slice(
                &normalised[s][(t + 1 - config.window) * width..(t + 1) * width],
            );
            labels.push(config.label(close[t], close[t + config.horizon]));
            last_move.push(config.label(close[t - config.horizon], close[t]));
            window_ends.push((s, t));
        }
    }
    Ok(MarketPart {
        windows: Dataset::new(features, labels, vec![config.window, width])?,
        last_move,
        ends: window_ends,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{MarketConfig, synthetic_market};

    fn market(symbols: usize, bars: usize) -> Vec<Bars> {
        synthetic_market(&MarketConfig {
            symbols,
            bars,
            seed: 21,
            ..MarketConfig::default()
        })
        .unwrap()
    }

    fn parts(data: &MarketData) -> [&MarketPart; 3] {
        [&data.train, &data.validation, &data.test]
    }

    #[test]
    fn windows_labels_and_last_moves_match_a_brute_force_recomputation() {
        let market = market(2, 900);
        let config = WindowConfig::default();
        let data = market_windows(&market, &config).unwrap();
        let tables: Vec<_> = market.iter().map(bar_features).collect();
        let h = config.horizon;
        let class = |r: f64| {
            if r > config.threshold {
                2
            } else if r < -config.threshold {
                0
            } else {
                1
            }
        };
        for part in parts(&data) {
            assert_eq!(part.windows.sample_shape(), &[20, FEATURES.len()]);
            assert_eq!(part.windows.len(), part.ends.len());
            assert_eq!(part.windows.len(), part.last_move.len());
            for (i, &(s, t)) in part.ends.iter().enumerate() {
                let close = &market[s].close;
                assert!(t >= tables[s].first_valid + config.window - 1 && t + h < close.len());
                assert_eq!(
                    part.windows.labels()[i],
                    class(close[t + h] / close[t] - 1.0)
                );
                assert_eq!(part.last_move[i], class(close[t] / close[t - h] - 1.0));
                let window = part.windows.sample(i);
                for (r, row) in window.chunks_exact(FEATURES.len()).enumerate() {
                    for (f, &value) in row.iter().enumerate() {
                        let raw = tables[s].row(t + 1 - config.window + r)[f];
                        assert_eq!(value, (raw - data.mean[f]) / data.std[f]);
                    }
                }
            }
        }
        // The last move at t is the label that the window ending at t - horizon was given:
        // known at t, nothing later.
        let train = &data.train;
        let mut checked = 0;
        for (i, &(s, t)) in train.ends.iter().enumerate() {
            if let Some(j) = train.ends.iter().position(|&end| end == (s, t - h)) {
                assert_eq!(train.last_move[i], train.windows.labels()[j]);
                checked += 1;
            }
        }
        assert!(checked > 100, "{checked}");
        let labels = data.train.windows.labels();
        assert!([DOWN, FLAT, UP].iter().all(|l| labels.contains(l)));
    }

    #[test]
    fn splits_are_chronological_and_purged_per_symbol() {
        let market = market(3, 1_500);
        let config = WindowConfig::default();
        let data = market_windows(&market, &config).unwrap();
        assert_eq!(data.symbols, ["SYN00", "SYN01", "SYN02"]);
        for s in 0..3 {
            let ends = |part: &MarketPart| -> Vec<usize> {
                part.ends.iter().filter(|e| e.0 == s).map(|e| e.1).collect()
            };
            let [train, validation, test] = parts(&data).map(ends);
            assert!(train.windows(2).all(|w| w[1] == w[0] + 1));
            let first_validation = validation[0];
            let first_test = test[0];
            // No training label looks at a close of the validation period, no validation
            // label at one of the test period.
            assert!(train.iter().all(|&t| t + config.horizon < first_validation));
            assert!(validation.iter().all(|&t| t + config.horizon < first_test));
            // Exactly the horizon's ends are purged before each boundary.
            assert_eq!(first_validation - train.last().unwrap() - 1, config.horizon);
            assert_eq!(first_test - validation.last().unwrap() - 1, config.horizon);
            assert_eq!(*test.last().unwrap(), 1_500 - config.horizon - 1);
            let usable = 1_500 - config.horizon - (HISTORY + config.window - 1);
            let all = train.len() + validation.len() + test.len() + 2 * config.horizon;
            assert_eq!(all, usable);
            assert_eq!(train.len() + config.horizon, usable * 70 / 100);
        }
    }

    #[test]
    fn normalisation_uses_the_training_rows_only() {
        let market = market(2, 1_000);
        let config = WindowConfig::default();
        let data = market_windows(&market, &config).unwrap();
        let last_train_end = |s: usize| {
            data.train
                .ends
                .iter()
                .filter(|e| e.0 == s)
                .map(|e| e.1)
                .max()
                .unwrap()
        };
        // Scale every later bar: the validation and test inputs change, the statistics not.
        let shifted = |market: &[Bars], from: &dyn Fn(usize) -> usize| -> Vec<Bars> {
            let mut moved = market.to_vec();
            for (s, bars) in moved.iter_mut().enumerate() {
                for i in from(s)..bars.len() {
                    for column in [
                        &mut bars.open,
                        &mut bars.high,
                        &mut bars.low,
                        &mut bars.close,
                    ] {
                        column[i] *= 1.0 + 0.001 * (i % 7) as f64;
                    }
                    bars.tick_volume[i] *= 3.0;
                }
            }
            moved
        };
        let later = market_windows(&shifted(&market, &|s| last_train_end(s) + 1), &config).unwrap();
        assert_eq!((&later.mean, &later.std), (&data.mean, &data.std));
        assert_ne!(later.test.windows, data.test.windows);
        let earlier =
            market_windows(&shifted(&market, &|s| last_train_end(s) - 50), &config).unwrap();
        assert_ne!(earlier.mean, data.mean);
        assert_ne!(earlier.std, data.std);
        // Standardised training rows have mean 0 and deviation 1 per feature (time_sin and
        // time_cos included: they vary).
        let mut rows = std::collections::BTreeSet::new();
        for &(s, t) in &data.train.ends {
            rows.extend((t + 1 - config.window..=t).map(|r| (s, r)));
        }
        let tables: Vec<_> = market.iter().map(bar_features).collect();
        for (f, name) in FEATURES.iter().enumerate() {
            let values: Vec<f64> = rows
                .iter()
                .map(|&(s, r)| f64::from((tables[s].row(r)[f] - data.mean[f]) / data.std[f]))
                .collect();
            let mean = values.iter().sum::<f64>() / values.len() as f64;
            let var = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / values.len() as f64;
            assert!(
                mean.abs() < 1e-3 && (var - 1.0).abs() < 1e-3,
                "{name}: {mean} {var}"
            );
        }
    }

    #[test]
    fn too_few_bars_name_the_part_and_the_bars_needed() {
        let config = WindowConfig::default();
        let needed = config.bars_needed();
        let data = market_windows(&market(1, needed), &config).unwrap();
        assert!(parts(&data).iter().all(|p| !p.windows.is_empty()));
        let err = market_windows(&market(2, needed - 1), &config).unwrap_err();
        assert!(
            matches!(
                err,
                DataError::MarketPartEmpty { symbols: 2, longest, needed: n, .. }
                    if longest == needed - 1 && n == needed
            ),
            "{err}"
        );
        assert!(
            err.to_string().contains(&format!("at least {needed} bars")),
            "{err}"
        );
        assert!(matches!(
            market_windows(&[], &config),
            Err(DataError::MarketPartEmpty {
                part: "train",
                symbols: 0,
                ..
            })
        ));
    }

    #[test]
    fn refuses_bad_configurations_and_bars_by_name() {
        let market = market(1, 1_000);
        for (config, field) in [
            (
                WindowConfig {
                    window: 0,
                    ..WindowConfig::default()
                },
                "window",
            ),
            (
                WindowConfig {
                    horizon: 0,
                    ..WindowConfig::default()
                },
                "horizon",
            ),
            (
                WindowConfig {
                    threshold: -0.1,
                    ..WindowConfig::default()
                },
                "threshold",
            ),
            (
                WindowConfig {
                    threshold: f64::NAN,
                    ..WindowConfig::default()
                },
                "threshold",
            ),
            (
                WindowConfig {
                    train: 1.0,
                    ..WindowConfig::default()
                },
                "train",
            ),
            (
                WindowConfig {
                    validation: 0.0,
                    ..WindowConfig::default()
                },
                "validation",
            ),
            (
                WindowConfig {
                    train: 0.9,
                    validation: 0.1,
                    ..WindowConfig::default()
                },
                "validation",
            ),
        ] {
            assert!(
                matches!(market_windows(&market, &config), Err(DataError::Invalid { field: f, .. }) if f == field),
                "{config:?}"
            );
        }
        let mut broken = market.clone();
        broken[0].high[500] = broken[0].low[500] * 0.5;
        assert!(matches!(
            market_windows(&broken, &WindowConfig::default()),
            Err(DataError::BarInvalid {
                bar: 500,
                field: "high",
                ..
            })
        ));
    }

    #[test]
    fn features_beyond_f32_are_refused_by_bar_time_and_name() {
        let mut market = market(2, 600);
        // A spread of 1e39 points: finite in f64, infinite as the f32 feature spread / close.
        market[1].spread[321] = 1e39;
        let err = market_windows(&market, &WindowConfig::default()).unwrap_err();
        assert!(
            matches!(
                &err,
                DataError::NonFiniteFeature { bar: 321, feature: "spread_close", value, stage: "", .. }
                    if value.is_infinite()
            ),
            "{err}"
        );
        let text = err.to_string();
        assert!(
            text.contains(&market[1].symbol) && text.contains(&market[1].time[321].to_string()),
            "{text}"
        );
        // The same bars with an ordinary spread there are accepted: the refusal is that value's.
        market[1].spread[321] = market[1].spread[320];
        assert!(market_windows(&market, &WindowConfig::default()).is_ok());
    }
}
