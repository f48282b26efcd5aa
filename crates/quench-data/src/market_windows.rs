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
    let tables: Vec<FeatureTable> = symbols.iter().map(bar_features).collect();
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
