//! A seeded synthetic FX market: the default data of the direction classifiers (guide 004),
//! so the workload runs without a file.
//!
//! Each symbol `SYNkk` has its own random stream (`StdRng` seeded with the configured seed
//! mixed with `k`) and its own scale: a base volatility `s` per bar drawn in
//! `[0.0030, 0.0040]`, a starting price in `[0.7, 1.5]` and a typical spread of 8 to 20 points.
//! Bar `t` (one every `interval_seconds` from 2024-01-01 00:00 UTC, Saturdays and Sundays
//! skipped as FX markets close) is drawn as follows.
//!
//! - **Regime.** A Markov chain over four regimes, each with a drift `mu` (in units of `s`
//!   per bar), a volatility multiplier `m` and a probability `p` of staying one more bar
//!   (mean length `1 / (1 - p)` bars): calm (`mu = 0`, `m = 0.6`, `p = 0.99`), trending up
//!   (`+0.3`, `1.0`, `0.99`), trending down (`-0.3`, `1.0`, `0.99`) and volatile (`0`, `1.8`,
//!   `0.97`); on leaving, the next regime is one of the other three at random. Trends thus
//!   last about a hundred bars: the persistence a classifier can learn.
//! - **Volatility clustering.** GARCH(1,1) on the shocks: `h_t = w + a e_{t-1}^2 + b h_{t-1}`
//!   with `a = 0.06`, `b = 0.92`, `w = s^2 (1 - a - b)` (so the long-run variance is `s^2`)
//!   and `e_t = sqrt(h_t) z_t`, `z_t ~ N(0, 1)`.
//! - **Prices.** The log return close to close is `r_t = mu s - k ln(c_{t-1} / c_0) + m e_t`,
//!   where the weak pull `k = 0.0005` back to the starting price `c_0` keeps a symbol within
//!   a plausible range over many bars. The bar opens at
//!   the previous close times `exp(g)`, `g ~ N(0, (0.05 s)^2)` (a small gap), and closes at
//!   `close_{t-1} exp(r_t)`; the high lies above `max(open, close)` and the low below
//!   `min(open, close)` by `exp(|N(0, (0.5 m sqrt(h_t))^2)|)` factors, so every bar is
//!   possible.
//! - **Volume and spread.** Tick volume is `round(300 (0.4 + |r_t| / s) d(t) exp(0.3 N))`, at
//!   least 1: it grows with the absolute return and with the session activity
//!   `d(t) = 0.6 + 0.8 exp(-((hour - 13) / 4)^2)` (UTC). The spread, in points, is the
//!   symbol's typical spread times `sqrt(h_t) / s` (wider in turbulent markets), rounded, at
//!   least 1. Real volume is 0, as for FX.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rand_distr::StandardNormal;
use serde::{Deserialize, Serialize};

use crate::civil::{DAY, weekday};
use crate::{Bars, DataError};

/// 2024-01-01 00:00:00 UTC, a Monday: the time of every symbol's first synthetic bar.
pub const MARKET_START: i64 = 1_704_067_200;

/// The synthetic market's size and seed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MarketConfig {
    /// Number of symbols (the guide's 11 FX pairs), at least 1.
    pub symbols: usize,
    /// Bars per symbol, at least 1.
    pub bars: usize,
    /// Seconds from one bar to the next, in `1..=86_400` (900: 15-minute bars).
    pub interval_seconds: i64,
    /// Seed of every random draw.
    pub seed: u64,
}

impl Default for MarketConfig {
    fn default() -> Self {
        Self {
            symbols: 11,
            bars: 10_000,
            interval_seconds: 900,
            seed: 0,
        }
    }
}

impl MarketConfig {
    /// Refuses a configuration outside the ranges documented on its fields, naming the field.
    pub fn validate(&self) -> Result<(), DataError> {
        if self.symbols == 0 {
            return Err(DataError::invalid("symbols", 0, "must be at least 1"));
        }
        if self.bars == 0 {
            return Err(DataError::invalid("bars", 0, "must be at least 1"));
        }
        if !(1..=DAY).contains(&self.interval_seconds) {
            return Err(DataError::invalid(
                "interval_seconds",
                self.interval_seconds,
                "must lie in 1..=86400 (a second to a day)",
            ));
        }
        Ok(())
    }
}

/// One regime of the Markov chain.
struct Regime {
    /// Drift of the log return per bar, in units of the symbol's base volatility.
    drift: f64,
    /// Multiplier of the shock.
    volatility: f64,
    /// Probability of staying one more bar.
    stay: f64,
}

/// Calm, trending up, trending down, volatile.
const REGIMES: [Regime; 4] = [
    Regime {
        drift: 0.0,
        volatility: 0.6,
        stay: 0.99,
    },
    Regime {
        drift: 0.3,
        volatility: 1.0,
        stay: 0.99,
    },
    Regime {
        drift: -0.3,
        volatility: 1.0,
        stay: 0.99,
    },
    Regime {
        drift: 0.0,
        volatility: 1.8,
        stay: 0.97,
    },
];

/// Pull of the log price back towards its start, per bar.
const REVERSION: f64 = 0.0005;

/// GARCH(1,1) weight of the last squared shock.
const GARCH_ALPHA: f64 = 0.06;
/// GARCH(1,1) weight of the last variance.
const GARCH_BETA: f64 = 0.92;

/// Host bytes of one bar of [`Bars`]: the time and eight f64 columns.
pub(crate) const BYTES_PER_BAR: u128 = 9 * 8;

/// The synthetic market of the module documentation: `config.symbols` symbols named
/// `SYN00`, `SYN01`, ... of `config.bars` bars each, every bar passing [`Bars::validate`].
pub fn synthetic_market(config: &MarketConfig) -> Result<Vec<Bars>, DataError> {
    crate::loads::loaded(format_args!(
        "synthetic market of {} symbols x {} bars, seed {}",
        config.symbols, config.bars, config.seed
    ));
    config.validate()?;
    let bars = (config.symbols as u128).saturating_mul(config.bars as u128);
    quench_support::budget::check_fits(
        || {
            format!(
                "a synthetic market of {} symbols x {} bars",
                config.symbols, config.bars
            )
        },
        bars.saturating_mul(BYTES_PER_BAR),
    )?;
    Ok((0..config.symbols)
        .map(|k| synthetic_symbol(config, k))
        .collect())
}

fn synthetic_symbol(config: &MarketConfig, k: usize) -> Bars {
    // The golden-ratio multiple keeps the streams of neighbouring seeds and symbols apart.
    let stream = config.seed ^ (k as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let mut rng = StdRng::seed_from_u64(stream);
    let base = rng.random_range(0.0030..0.0040);
    let typical_spread = f64::from(rng.random_range(8u32..=20));
    let anchor: f64 = rng.random_range(0.7..1.5);
    let mut close = anchor;
    let omega = base * base * (1.0 - GARCH_ALPHA - GARCH_BETA);
    let mut variance = base * base;
    let mut shock = 0.0;
    let mut regime = 0;
    let mut time = MARKET_START;
    let mut bars = Bars::empty(format!("SYN{k:02}"));
    for _ in 0..config.bars {
        if rng.random::<f64>() >= REGIMES[regime].stay {
            // One of the other three, uniformly.
            regime = (regime + rng.random_range(1..REGIMES.len())) % REGIMES.len();
        }
        let Regime {
            drift, volatility, ..
        } = REGIMES[regime];
        variance = omega + GARCH_ALPHA * shock * shock + GARCH_BETA * variance;
        shock = variance.sqrt() * normal(&mut rng);
        let ret = drift * base - REVERSION * (close / anchor).ln() + volatility * shock;
        let open = close * (0.05 * base * normal(&mut rng)).exp();
        close *= ret.exp();
        let wick = 0.5 * volatility * variance.sqrt();
        let high = open.max(close) * (wick * normal(&mut rng)).abs().exp();
        let low = open.min(close) * (-(wick * normal(&mut rng)).abs()).exp();
        let hour = time.rem_euclid(DAY) as f64 / 3600.0;
        let activity = 0.6 + 0.8 * (-((hour - 13.0) / 4.0).powi(2)).exp();
        let ticks = 300.0 * (0.4 + ret.abs() / base) * activity * (0.3 * normal(&mut rng)).exp();
        let spread = typical_spread * variance.sqrt() / base;
        bars.push(
            time,
            [
                open,
                high,
                low,
                close,
                ticks.round().max(1.0),
                spread.round().max(1.0),
                0.0,
            ],
        );
        time = next_weekday_bar(time, config.interval_seconds);
    }
    bars
}

/// A standard normal draw.
fn normal(rng: &mut StdRng) -> f64 {
    rng.sample(StandardNormal)
}

/// The time of the bar after `time`: `interval` seconds later, skipping Saturdays and
/// Sundays (`interval` is at most a day, so the loop ends within two days' steps).
fn next_weekday_bar(time: i64, interval: i64) -> i64 {
    let mut next = time + interval;
    while matches!(weekday(next), 0 | 6) {
        next += interval;
    }
    next
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DOWN, FLAT, UP, WindowConfig};

    fn small(seed: u64) -> MarketConfig {
        MarketConfig {
            symbols: 3,
            bars: 2_000,
            seed,
            ..MarketConfig::default()
        }
    }

    #[test]
    fn same_seed_same_bars_and_symbols_differ() {
        let a = synthetic_market(&small(5)).unwrap();
        assert_eq!(a, synthetic_market(&small(5)).unwrap());
        assert_ne!(a[0].close, synthetic_market(&small(6)).unwrap()[0].close);
        let names: Vec<_> = a.iter().map(|b| b.symbol.as_str()).collect();
        assert_eq!(names, ["SYN00", "SYN01", "SYN02"]);
        assert_ne!(a[0].close, a[1].close);
        assert_ne!(a[1].close, a[2].close);
        // A symbol's stream does not depend on how many symbols are drawn.
        let more = synthetic_market(&MarketConfig {
            symbols: 5,
            ..small(5)
        })
        .unwrap();
        assert_eq!(more[..3], a[..]);
    }

    #[test]
    fn every_bar_is_valid_and_weekends_are_skipped() {
        for bars in synthetic_market(&small(1)).unwrap() {
            assert_eq!(bars.len(), 2_000);
            bars.validate().unwrap();
            assert_eq!(bars.time[0], MARKET_START);
            for pair in bars.time.windows(2) {
                // 15 minutes, or from Friday 23:45 to Monday 00:00.
                assert!(
                    [900, 2 * DAY + 900].contains(&(pair[1] - pair[0])),
                    "{pair:?}"
                );
            }
            assert!(bars.time.iter().all(|&t| !matches!(weekday(t), 0 | 6)));
            assert!(bars.real_volume.iter().all(|&v| v == 0.0));
            assert!(
                bars.tick_volume
                    .iter()
                    .all(|&v| v >= 1.0 && v.fract() == 0.0)
            );
            assert!(bars.spread.iter().all(|&s| s >= 1.0 && s.fract() == 0.0));
        }
    }

    #[test]
    fn default_labels_are_balanced_and_persistent() {
        let market = synthetic_market(&MarketConfig::default()).unwrap();
        let config = WindowConfig::default();
        let h = config.horizon;
        let (mut counts, mut same, mut total) = ([0usize; 3], 0, 0);
        for bars in &market {
            for t in h..bars.len() - h {
                let next = config.label(bars.close[t], bars.close[t + h]);
                let last = config.label(bars.close[t - h], bars.close[t]);
                counts[next as usize] += 1;
                same += usize::from(next == last);
                total += 1;
            }
        }
        let fraction = |label: i64| counts[label as usize] as f64 / total as f64;
        for label in [DOWN, UP] {
            assert!((0.25..0.40).contains(&fraction(label)), "{counts:?}");
        }
        assert!(fraction(FLAT) < 0.5, "{counts:?}");
        // Trends persist: the next move repeats the last one more often than independent
        // moves with these frequencies would (sum of squared frequencies), by 10 points
        // where the sampling error is well below one.
        let chance: f64 = [DOWN, FLAT, UP].map(|l| fraction(l).powi(2)).iter().sum();
        let repeat = same as f64 / total as f64;
        assert!(repeat > chance + 0.08, "repeat {repeat}, chance {chance}");
    }

    #[test]
    fn refuses_impossible_configurations() {
        for (config, field) in [
            (
                MarketConfig {
                    symbols: 0,
                    ..small(0)
                },
                "symbols",
            ),
            (
                MarketConfig {
                    bars: 0,
                    ..small(0)
                },
                "bars",
            ),
            (
                MarketConfig {
                    interval_seconds: 0,
                    ..small(0)
                },
                "interval_seconds",
            ),
            (
                MarketConfig {
                    interval_seconds: DAY + 1,
                    ..small(0)
                },
                "interval_seconds",
            ),
        ] {
            assert!(
                matches!(synthetic_market(&config), Err(DataError::Invalid { field: f, .. }) if f == field),
                "{config:?}"
            );
        }
    }
}
