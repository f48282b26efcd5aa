//! Where a run's market windows come from: MetaTrader-5 exports or the seeded synthetic
//! market, cut into labelled windows, split and normalised ([`quench_data::market_windows`]),
//! with a note of what was used and of anything that makes the scores meaningless.

use std::path::PathBuf;

use quench_data::{
    Bars, DOWN, FLAT, MarketConfig, MarketData, UP, WindowConfig, market_windows, synthetic_market,
};
use serde::{Deserialize, Serialize};

use crate::TemporalError;

/// The market a run trains on: the bars and how they are cut into windows.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MarketSettings {
    /// MetaTrader-5 exports, one symbol each; none: the synthetic market.
    pub files: Vec<PathBuf>,
    /// The synthetic market (when `files` is empty).
    pub market: MarketConfig,
    /// Window length, label horizon and threshold, split fractions.
    pub windows: WindowConfig,
}

/// The windows of a run and where they came from.
#[derive(Debug, Clone)]
pub struct Market {
    /// The windows, split and normalised.
    pub data: MarketData,
    /// Where the bars came from, one line, with a warning where a symbol was too short for
    /// any window or every training window has one label.
    pub note: String,
}

impl MarketSettings {
    /// Reads (or generates) the bars and cuts them into windows. Refused: a file that cannot
    /// be read (the error names it and the line), settings that leave a part without windows.
    pub fn load(&self) -> Result<Market, TemporalError> {
        let (symbols, note) = if self.files.is_empty() {
            let m = &self.market;
            (
                synthetic_market(m)?,
                format!(
                    "data: synthetic market, {} symbols x {} bars of {} s, seed {}",
                    m.symbols, m.bars, m.interval_seconds, m.seed
                ),
            )
        } else {
            // The synthetic market's settings are not used with files: given anyway, they are a
            // mistake the run would hide.
            if self.market != MarketConfig::default() {
                return Err(TemporalError::InvalidValue {
                    name: "market",
                    value: "(settings of the synthetic market)".into(),
                    reason: "given with `files`, whose bars are used instead: remove one of the \
                             two",
                });
            }
            // The same file by two spellings (`a.csv`, `./a.csv`) is the same symbol twice.
            let same: Vec<PathBuf> = self
                .files
                .iter()
                .map(|path| std::fs::canonicalize(path).unwrap_or_else(|_| path.clone()))
                .collect();
            if let Some((i, path)) = self
                .files
                .iter()
                .enumerate()
                .find(|&(i, _)| same[..i].contains(&same[i]))
            {
                return Err(TemporalError::InvalidValue {
                    name: "files",
                    value: format!("{} (entry {i})", path.display()),
                    reason: "listed twice: each file is one symbol",
                });
            }
            let mut bars = Vec::with_capacity(self.files.len());
            let mut gaps = 0;
            for path in &self.files {
                let file = Bars::read(path)?;
                gaps += file.gaps.len();
                bars.push(file.bars);
            }
            let names: Vec<String> = self.files.iter().map(|p| p.display().to_string()).collect();
            (
                bars,
                format!("data: {} ({gaps} gaps reported)", names.join(", ")),
            )
        };
        let data = market_windows(&symbols, &self.windows)?;
        // A symbol too short for a window in some part still adds its windows to the others;
        // one with no window at all is said, not dropped silently.
        let unused: Vec<String> = symbols
            .iter()
            .enumerate()
            .filter(|&(s, _)| {
                [&data.train, &data.validation, &data.test]
                    .iter()
                    .all(|part| part.ends.iter().all(|&(symbol, _)| symbol != s))
            })
            .map(|(_, bars)| format!("{} ({} bars)", bars.symbol, bars.len()))
            .collect();
        let mut note = if unused.is_empty() {
            note
        } else {
            format!(
                "{note}; not used, too short for any window (one in every part needs {} bars): {}",
                self.windows.bars_needed(),
                unused.join(", ")
            )
        };
        // Bars that never move past the threshold (or always do) label every window alike: a
        // model that learns the constant scores perfectly and the scores say nothing.
        if let Some(class) = one_class(data.train.windows.labels()) {
            note = format!(
                "{note}; WARNING: every training window is labelled {class} (threshold {}): the \
                 scores cannot tell a model from a constant",
                self.windows.threshold
            );
        }
        Ok(Market { data, note })
    }
}

/// The name of the one class every label in `labels` has, if there is one.
fn one_class(labels: &[i64]) -> Option<&'static str> {
    let first = *labels.first()?;
    if labels.iter().any(|&l| l != first) {
        return None;
    }
    Some(match first {
        DOWN => "down",
        FLAT => "flat",
        UP => "up",
        _ => "unknown",
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_of_one_class_are_named() {
        assert_eq!(one_class(&[FLAT, FLAT, FLAT]), Some("flat"));
        assert_eq!(one_class(&[UP]), Some("up"));
        assert_eq!(one_class(&[FLAT, DOWN, FLAT]), None);
        assert_eq!(one_class(&[]), None);
    }

    #[test]
    fn a_missing_file_is_refused_naming_it() {
        let settings = MarketSettings {
            files: vec![PathBuf::from("/nonexistent/EURUSD_M1.csv")],
            ..MarketSettings::default()
        };
        let refused = settings.load().unwrap_err().to_string();
        assert!(refused.contains("/nonexistent/EURUSD_M1.csv"), "{refused}");
    }

    #[test]
    fn settings_the_files_would_leave_unused_are_refused() {
        let file = PathBuf::from("/nonexistent/EURUSD_M1.csv");
        let twice = MarketSettings {
            files: vec![file.clone(), file.clone()],
            ..MarketSettings::default()
        };
        let refused = twice.load().unwrap_err().to_string();
        assert!(
            refused.starts_with("files = /nonexistent/EURUSD_M1.csv (entry 1): listed twice"),
            "{refused}"
        );
        let with_market = MarketSettings {
            files: vec![file],
            market: MarketConfig {
                symbols: 3,
                ..MarketConfig::default()
            },
            ..MarketSettings::default()
        };
        let refused = with_market.load().unwrap_err().to_string();
        assert!(refused.starts_with("market = "), "{refused}");
    }
}
