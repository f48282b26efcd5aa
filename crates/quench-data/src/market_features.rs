//! Causal per-bar features of OHLCV bars: the inputs of the direction classifiers.
//!
//! The features of bar `t` use bars `0..=t` only, never a later one, so a model that sees the
//! row of bar `t` cannot peek at the future it predicts. With `c`, `o`, `h`, `l`, `v`, `s` the
//! close, open, high, low, tick volume and spread, `r_i = ln(c_i / c_{i-1})` the 1-bar log
//! return and `SMA_n` the mean close of the last `n` bars, the [`FEATURES`] of bar `t` are:
//!
//! | # | name | definition |
//! |---|------|------------|
//! | 0-4 | `ret_1`, `ret_2`, `ret_4`, `ret_8`, `ret_16` | `ln(c_t / c_{t-k})`, log return over `k` bars |
//! | 5-8 | `close_sma_5`, `_10`, `_20`, `_50` | `c_t / SMA_n - 1` |
//! | 9 | `sma_5_20` | `SMA_5 / SMA_20 - 1`, the moving-average crossover |
//! | 10 | `rsi_14` | Wilder's RSI(14) scaled to `[-1, 1]`: `(G - L) / (G + L)` with `G`, `L` the Wilder averages of close-to-close gains and losses (0 when both are 0) |
//! | 11 | `atr_14` | Wilder's average true range over 14 bars, divided by `c_t` |
//! | 12-14 | `vol_10`, `vol_20`, `vol_50` | standard deviation of the last `n` 1-bar log returns |
//! | 15 | `range` | `(h - l) / c` |
//! | 16 | `body` | `(c - o) / (h - l)`, 0 when `h = l` |
//! | 17 | `upper_wick` | `(h - max(o, c)) / (h - l)`, 0 when `h = l` |
//! | 18 | `lower_wick` | `(min(o, c) - l) / (h - l)`, 0 when `h = l` |
//! | 19 | `range_pos_20` | `(c - L_20) / (H_20 - L_20)`, where the close lies in the 20-bar range (highest high `H_20`, lowest low `L_20`); 0.5 when the range is 0 |
//! | 20 | `volume_ratio_20` | `ln((v + 1) / (mean_20(v) + 1))`; the `+ 1` keeps zero volume finite |
//! | 21 | `volume_z_20` | `(v - mean_20(v)) / std_20(v)`, 0 when the volumes do not vary |
//! | 22 | `spread_close` | `s / c` (spread in the file's unit per unit of price) |
//! | 23 | `trend_1h` | `ln(mean(c_{t-3..=t}) / mean(c_{t-7..=t-4}))`: change of the mean close of the last 4 bars (an hour of 15-minute bars) against the 4 before |
//! | 24 | `trend_4h` | the same with 16-bar blocks (four hours) |
//! | 25 | `rvol_1h` | root mean square of the last 6 non-overlapping 4-bar log returns `ln(c_{t-4k} / c_{t-4k-4})`, `k = 0..6`: hourly realised volatility over 6 hours |
//! | 26 | `rvol_4h` | the same with 16-bar returns: 4-hour realised volatility over a day |
//! | 27-28 | `time_sin`, `time_cos` | `sin` and `cos` of `2 pi (seconds since UTC midnight) / 86400` |
//!
//! Rows before [`FeatureTable::first_valid`] (bar 96: `rvol_4h` reaches back 96 bars) are
//! computed from the bars that exist (shorter windows, missing bars replaced by the first) and
//! are finite, but lack full history and are not used for training. Rolling means and
//! deviations come from running (prefix) sums, so a table costs `O(bars x features)`. Every
//! value is finite for bars that pass [`Bars::validate`]: every division is guarded.
//!
//! Steps in time (weekends, gaps) are not bridged: an `n`-bar feature spans the last `n` bars,
//! whatever time they cover.

use std::f64::consts::TAU;

use crate::Bars;
use crate::civil::DAY;

/// Names of the per-bar features, in column order (definitions in the module documentation).
pub const FEATURES: [&str; 29] = [
    "ret_1",
    "ret_2",
    "ret_4",
    "ret_8",
    "ret_16",
    "close_sma_5",
    "close_sma_10",
    "close_sma_20",
    "close_sma_50",
    "sma_5_20",
    "rsi_14",
    "atr_14",
    "vol_10",
    "vol_20",
    "vol_50",
    "range",
    "body",
    "upper_wick",
    "lower_wick",
    "range_pos_20",
    "volume_ratio_20",
    "volume_z_20",
    "spread_close",
    "trend_1h",
    "trend_4h",
    "rvol_1h",
    "rvol_4h",
    "time_sin",
    "time_cos",
];

/// Bars of history the longest feature (`rvol_4h`, 6 returns of 16 bars) needs before bar `t`.
pub(crate) const HISTORY: usize = 96;

/// Period of Wilder's RSI and ATR.
const WILDER: usize = 14;

/// The features of every bar of one symbol.
#[derive(Debug, Clone, PartialEq)]
pub struct FeatureTable {
    /// `[bars, FEATURES.len()]`, row-major: row `t` holds the features of bar `t`.
    pub values: Vec<f32>,
    /// The first row with full history: `min(96, bars)`.
    pub first_valid: usize,
}

impl FeatureTable {
    /// Number of rows (bars).
    pub fn rows(&self) -> usize {
        self.values.len() / FEATURES.len()
    }

    /// The features of bar `t`, `[FEATURES.len()]`; panics if `t >= rows`.
    pub fn row(&self, t: usize) -> &[f32] {
        &self.values[t * FEATURES.len()..(t + 1) * FEATURES.len()]
    }
}

/// Running sums of a series: `sum(i, n)` is the sum of the `n` values ending at `i`
/// (fewer where the series starts later).
struct Prefix(Vec<f64>);

impl Prefix {
    fn new(values: impl Iterator<Item = f64>) -> Self {
        let mut sums = vec![0.0];
        let mut total = 0.0;
        for value in values {
            total += value;
            sums.push(total);
        }
        Self(sums)
    }

    /// Sum and count of the values `i + 1 - n ..= i` that exist.
    fn sum(&self, i: usize, n: usize) -> (f64, usize) {
        let start = (i + 1).saturating_sub(n);
        (self.0[i + 1] - self.0[start], i + 1 - start)
    }

    fn mean(&self, i: usize, n: usize) -> f64 {
        let (sum, count) = self.sum(i, n);
        sum / count as f64
    }
}

/// Population standard deviation from the running sums of values and squares over the `n`
/// values ending at `i`; 0 where rounding leaves a negative variance.
fn deviation(values: &Prefix, squares: &Prefix, i: usize, n: usize) -> (f64, f64) {
    let (sum, count) = values.sum(i, n);
    let (square_sum, _) = squares.sum(i, n);
    let mean = sum / count as f64;
    let variance = (square_sum / count as f64 - mean * mean).max(0.0);
    (mean, variance.sqrt())
}

/// `numerator / denominator`, or `otherwise` when the denominator is 0.
fn ratio(numerator: f64, denominator: f64, otherwise: f64) -> f64 {
    if denominator > 0.0 {
        numerator / denominator
    } else {
        otherwise
    }
}

/// Wilder's smoothing, started as a plain mean: `a_i = a_{i-1} + (x_i - a_{i-1}) / min(i, 14)`
/// for the `i`-th value (from 1), so the 14th average is the mean of the first 14.
fn wilder(values: impl Iterator<Item = f64>) -> Vec<f64> {
    let mut average = 0.0;
    values
        .enumerate()
        .map(|(i, x)| {
            average += (x - average) / (i + 1).min(WILDER) as f64;
            average
        })
        .collect()
}

/// The [`FEATURES`] of every bar of `bars` (definitions in the module documentation).
///
/// `bars` must have columns of equal length ([`Bars::validate`] checks); for bars that pass
/// it every value is finite.
pub fn bar_features(bars: &Bars) -> FeatureTable {
    let n = bars.len();
    let (open, high, low, close) = (&bars.open, &bars.high, &bars.low, &bars.close);
    let log_close: Vec<f64> = close.iter().map(|c| c.ln()).collect();
    // Log close `k` bars before `t`, or the first one where the series is shorter.
    let back = |t: usize, k: usize| log_close[t.saturating_sub(k)];
    // Returns start at bar 1: bar 0 has no predecessor.
    let ret: Vec<f64> = (0..n).map(|t| log_close[t] - back(t, 1)).collect();
    let closes = Prefix::new(close.iter().copied());
    let returns = Prefix::new(ret.iter().copied().skip(1));
    let squared_returns = Prefix::new(ret.iter().skip(1).map(|r| r * r));
    let volumes = Prefix::new(bars.tick_volume.iter().copied());
    let squared_volumes = Prefix::new(bars.tick_volume.iter().map(|v| v * v));
    let gains = wilder((1..n).map(|t| (close[t] - close[t - 1]).max(0.0)));
    let losses = wilder((1..n).map(|t| (close[t - 1] - close[t]).max(0.0)));
    let true_range = wilder((0..n).map(|t| {
        let previous = close[t.saturating_sub(1)];
        (high[t] - low[t])
            .max((high[t] - previous).abs())
            .max((low[t] - previous).abs())
    }));
    let return_deviation = |t: usize, k: usize| {
        // The returns of bars 1..=t are entries 0..t of their running sums.
        if t == 0 {
            0.0
        } else {
            deviation(&returns, &squared_returns, t - 1, k).1
        }
    };
    // Change of the mean close of the `k` bars ending at `t` against the `k` before.
    let trend = |t: usize, k: usize| (closes.mean(t, k) / closes.mean(t.saturating_sub(k), k)).ln();
    let realised = |t: usize, k: usize| {
        let squares: f64 = (0..6)
            .map(|j| {
                let end = t.saturating_sub(j * k);
                let step = log_close[end] - back(end, k);
                step * step
            })
            .sum();
        (squares / 6.0).sqrt()
    };

    let mut values = Vec::with_capacity(n * FEATURES.len());
    for t in 0..n {
        let c = close[t];
        let sma = |k: usize| closes.mean(t, k);
        let range = high[t] - low[t];
        let (gain, loss) = if t == 0 {
            (0.0, 0.0)
        } else {
            (gains[t - 1], losses[t - 1])
        };
        let window = t.saturating_sub(19)..=t;
        let highest = high[window.clone()]
            .iter()
            .copied()
            .fold(f64::MIN, f64::max);
        let lowest = low[window].iter().copied().fold(f64::MAX, f64::min);
        let volume = bars.tick_volume[t];
        let (volume_mean, volume_std) = deviation(&volumes, &squared_volumes, t, 20);
        let phase = TAU * bars.time[t].rem_euclid(DAY) as f64 / DAY as f64;
        let row: [f64; 29] = [
            ret[t],
            log_close[t] - back(t, 2),
            log_close[t] - back(t, 4),
            log_close[t] - back(t, 8),
            log_close[t] - back(t, 16),
            c / sma(5) - 1.0,
            c / sma(10) - 1.0,
            c / sma(20) - 1.0,
            c / sma(50) - 1.0,
            sma(5) / sma(20) - 1.0,
            ratio(gain - loss, gain + loss, 0.0),
            true_range[t] / c,
            return_deviation(t, 10),
            return_deviation(t, 20),
            return_deviation(t, 50),
            range / c,
            ratio(c - open[t], range, 0.0),
            ratio(high[t] - open[t].max(c), range, 0.0),
            ratio(open[t].min(c) - low[t], range, 0.0),
            ratio(c - lowest, highest - lowest, 0.5),
            ((volume + 1.0) / (volume_mean + 1.0)).ln(),
            // Rounding in the running sums leaves a tiny spread for constant volumes.
            if volume_std > 1e-6 * (volume_mean + 1.0) {
                (volume - volume_mean) / volume_std
            } else {
                0.0
            },
            bars.spread[t] / c,
            trend(t, 4),
            trend(t, 16),
            realised(t, 4),
            realised(t, 16),
            phase.sin(),
            phase.cos(),
        ];
        values.extend(row.map(|v| v as f32));
    }
    FeatureTable {
        values,
        first_valid: HISTORY.min(n),
    }
}
