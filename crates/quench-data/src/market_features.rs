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

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::{MarketConfig, synthetic_market};

    fn column(name: &str) -> usize {
        FEATURES.iter().position(|&f| f == name).unwrap()
    }

    fn market(bars: usize, seed: u64) -> Vec<Bars> {
        synthetic_market(&MarketConfig {
            symbols: 2,
            bars,
            seed,
            ..MarketConfig::default()
        })
        .unwrap()
    }

    /// Bars `after + 1..` of `bars` moved: prices scaled bar by bar (each bar by one factor,
    /// so it stays valid), volumes and spreads changed.
    fn perturbed(bars: &Bars, after: usize, seed: u64) -> Bars {
        let mut moved = bars.clone();
        let mut state = seed;
        let mut next = || {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1);
            (state >> 11) as f64 / (1u64 << 53) as f64
        };
        for i in after + 1..bars.len() {
            let factor = 0.9 + 0.2 * next();
            for column in [
                &mut moved.open,
                &mut moved.high,
                &mut moved.low,
                &mut moved.close,
            ] {
                column[i] *= factor;
            }
            moved.tick_volume[i] = (1000.0 * next()).round();
            moved.spread[i] = (30.0 * next()).round();
        }
        moved.validate().unwrap();
        moved
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        #[test]
        fn rows_up_to_t_ignore_every_later_bar(t in 0usize..299, seed in any::<u64>()) {
            let bars = &market(300, 3)[0];
            let before = bar_features(bars);
            let after = bar_features(&perturbed(bars, t, seed));
            let bits = |table: &FeatureTable, rows: std::ops::Range<usize>| -> Vec<u32> {
                rows.flat_map(|r| table.row(r).to_vec()).map(f32::to_bits).collect()
            };
            prop_assert_eq!(bits(&before, 0..t + 1), bits(&after, 0..t + 1));
            // The perturbation reaches the later rows, so the equality above is not vacuous.
            prop_assert_ne!(bits(&before, t + 1..300), bits(&after, t + 1..300));
        }
    }

    #[test]
    fn every_value_is_finite_on_the_market_and_on_flat_prices() {
        for bars in market(3_000, 7) {
            let table = bar_features(&bars);
            assert_eq!(table.rows(), 3_000);
            assert_eq!(table.first_valid, HISTORY);
            assert!(table.values.iter().all(|v| v.is_finite()));
        }
        let mut flat = Bars::empty("FLAT".into());
        for t in 0..200 {
            flat.push(t * 900, [1.25, 1.25, 1.25, 1.25, 0.0, 0.0, 0.0]);
        }
        let table = bar_features(&flat);
        assert!(table.values.iter().all(|v| v.is_finite()));
        let row = table.row(150);
        for name in [
            "ret_1",
            "rsi_14",
            "atr_14",
            "vol_20",
            "body",
            "volume_z_20",
            "trend_4h",
        ] {
            assert_eq!(row[column(name)], 0.0, "{name}");
        }
        assert_eq!(row[column("range_pos_20")], 0.5);
        assert!(row[column("close_sma_50")].abs() < 1e-6);
        // Fewer bars than the history: every row lacks it.
        assert_eq!(bar_features(&market(50, 1)[0]).first_valid, 50);
    }

    #[test]
    fn a_steady_rise_has_the_features_it_should() {
        // Closes grow by 1 % a bar; each bar opens at the previous close, high = close,
        // low = open; volumes alternate 100 and 300; 15-minute bars from midnight.
        let growth = 1.01f64;
        let mut bars = Bars::empty("UP".into());
        for t in 0..200 {
            let close = growth.powi(t);
            let open = if t == 0 { close } else { close / growth };
            let volume = if t % 2 == 0 { 100.0 } else { 300.0 };
            bars.push(
                i64::from(t) * 900,
                [open, close, open, close, volume, 2.0, 0.0],
            );
        }
        let table = bar_features(&bars);
        let t = 150;
        let row = table.row(t);
        let step = growth.ln();
        let close = bars.close[t];
        let near = |name: &str, expected: f64| {
            let value = f64::from(row[column(name)]);
            assert!(
                (value - expected).abs() <= 1e-5 * expected.abs().max(1.0),
                "{name}: {value} against {expected}"
            );
        };
        for (name, k) in [
            ("ret_1", 1.0),
            ("ret_2", 2.0),
            ("ret_4", 4.0),
            ("ret_8", 8.0),
            ("ret_16", 16.0),
        ] {
            near(name, k * step);
        }
        for (name, n) in [
            ("close_sma_5", 5),
            ("close_sma_20", 20),
            ("close_sma_50", 50),
        ] {
            let sma = (0..n).map(|k| bars.close[t - k]).sum::<f64>() / n as f64;
            near(name, close / sma - 1.0);
        }
        near("rsi_14", 1.0);
        // True ranges grow like the closes, so Wilder's average lags them: in the steady
        // state `A_t = x_t / (14 - 13 / growth)` for true range `x_t = close (1 - 1 / growth)`.
        near("atr_14", (1.0 - 1.0 / growth) / (14.0 - 13.0 / growth));
        near("vol_20", 0.0);
        near("range", (growth - 1.0) / growth);
        near("body", 1.0);
        near("upper_wick", 0.0);
        near("lower_wick", 0.0);
        near("range_pos_20", 1.0);
        // The last 20 volumes alternate: mean 200, deviation 100; bar 150 has 100.
        near("volume_ratio_20", (101.0f64 / 201.0).ln());
        near("volume_z_20", -1.0);
        near("spread_close", 2.0 / close);
        near("trend_1h", 4.0 * step);
        near("trend_4h", 16.0 * step);
        near("rvol_1h", 4.0 * step);
        near("rvol_4h", 16.0 * step);
        // Bar 150 opens at 37:30 past midnight of day 1, i.e. 13:30 UTC.
        let phase = TAU * (150.0 * 900.0 - 86_400.0) / 86_400.0;
        near("time_sin", phase.sin());
        near("time_cos", phase.cos());
    }

    #[test]
    fn running_sums_match_direct_windows() {
        let bars = &market(600, 11)[1];
        let table = bar_features(bars);
        let ret = |i: usize| (bars.close[i] / bars.close[i - 1]).ln();
        for t in [96, 97, 250, 599] {
            let row = table.row(t);
            let returns: Vec<f64> = (t - 49..=t).map(ret).collect();
            let mean = returns.iter().sum::<f64>() / 50.0;
            let std = (returns.iter().map(|r| (r - mean).powi(2)).sum::<f64>() / 50.0).sqrt();
            let value = f64::from(row[column("vol_50")]);
            assert!(
                (value - std).abs() < 1e-6 * std,
                "{t}: {value} against {std}"
            );
            let volumes = &bars.tick_volume[t - 19..=t];
            let mean = volumes.iter().sum::<f64>() / 20.0;
            let std = (volumes.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / 20.0).sqrt();
            let z = (bars.tick_volume[t] - mean) / std;
            let value = f64::from(row[column("volume_z_20")]);
            assert!((value - z).abs() < 1e-5, "{t}: {value} against {z}");
            let high = bars.high[t - 19..=t]
                .iter()
                .copied()
                .fold(f64::MIN, f64::max);
            let low = bars.low[t - 19..=t]
                .iter()
                .copied()
                .fold(f64::MAX, f64::min);
            let position = (bars.close[t] - low) / (high - low);
            assert!((f64::from(row[column("range_pos_20")]) - position).abs() < 1e-6);
        }
    }
}
