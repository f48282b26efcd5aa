//! The distinguishability tournament: no training, only divergences between the sources'
//! feature sets, every pair at once.

use quench_kernels::QuenchOps;
use std::fmt;

use burn::tensor::{Int, Tensor, TensorData};
use quench_data::BitStrings;
use quench_kernels::readback::to_host_f32;
use quench_train::settings::Validate;
use serde::{Deserialize, Serialize};

use super::features::{DeviceFeatures, check_some_bits, source_bits, symmetric_kl};
use super::{QrngError, pairs};

/// Settings of the distinguishability tournament; the defaults are the original's.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DistinguishConfig {
    /// Leading bits of every line that the features read.
    pub bits: usize,
    /// Added to every feature value before normalising, so that no probability is zero.
    pub epsilon: f64,
    /// Weight of the position-frequency divergence in the composite score.
    pub weight_bits: f64,
    /// Weight of the co-occurrence divergence in the composite score.
    pub weight_pattern: f64,
    /// Weight of the frequency-difference divergence in the composite score.
    pub weight_diff: f64,
}

impl Default for DistinguishConfig {
    fn default() -> Self {
        Self {
            bits: 64,
            epsilon: 1e-10,
            weight_bits: 0.2,
            weight_pattern: 0.4,
            weight_diff: 0.4,
        }
    }
}

impl Validate for DistinguishConfig {
    type Error = QrngError;

    /// Refuses settings no tournament can use, naming the first; the bits a recording holds
    /// are checked against it ([`crate::features::check_bits`]).
    fn validate(&self) -> Result<(), QrngError> {
        check_some_bits(self.bits)?;
        Ok(quench_train::settings::positive(&[(
            "epsilon",
            self.epsilon,
        )])?)
    }
}

/// One match of the tournament; divergences are symmetric KL in nats.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct PairScore {
    /// Labels of the two sources.
    pub sources: (u32, u32),
    /// Divergence of the position frequencies (`bits` values).
    pub kl_bits: f64,
    /// Divergence of the co-occurrences (`bits^2` values).
    pub kl_pattern: f64,
    /// Divergence of the frequency differences (`bits^2` values).
    pub kl_diff: f64,
    /// The weighted sum of the three.
    pub composite: f64,
}

/// The tournament's table: one row per pair of sources.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Distinguishability {
    /// The matches, in the order of [`pairs`].
    pub pairs: Vec<PairScore>,
}

impl Distinguishability {
    /// The pair with the highest composite score.
    pub fn most_distinguishable(&self) -> Option<&PairScore> {
        self.pairs
            .iter()
            .max_by(|a, b| a.composite.total_cmp(&b.composite))
    }
}

impl fmt::Display for Distinguishability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{:<8} {:>12} {:>12} {:>12} {:>12}",
            "pair", "KL bits", "KL pattern", "KL diff", "composite"
        )?;
        for p in &self.pairs {
            writeln!(
                f,
                "{:<8} {:>12.6} {:>12.6} {:>12.6} {:>12.6}",
                format!("{}v{}", p.sources.0, p.sources.1),
                p.kl_bits,
                p.kl_pattern,
                p.kl_diff,
                p.composite
            )?;
        }
        Ok(())
    }
}

/// Runs the tournament on every pair of `strings`' sources: the three feature sets of each
/// source on `device`, then the three divergences of all pairs in one batched program, read
/// back once.
pub fn distinguish<B: QuenchOps>(
    strings: &BitStrings,
    config: &DistinguishConfig,
    device: &B::Device,
) -> Result<Distinguishability, QrngError> {
    config.validate()?;
    let sources = source_bits(strings, config.bits)?;
    if sources.len() < 2 {
        return Err(QrngError::TooFewDevices {
            found: sources.len(),
        });
    }
    let features = DeviceFeatures::<B>::compute(&sources, device);
    let matches = pairs(sources.len());
    let side = |pick: fn(&(usize, usize)) -> usize| {
        let index: Vec<i64> = matches.iter().map(|m| pick(m) as i64).collect();
        Tensor::<B, 1, Int>::from_data(TensorData::new(index, [matches.len()]), device)
    };
    let (a, b) = (side(|m| m.0), side(|m| m.1));
    let divergence = |table: Tensor<B, 2>| {
        symmetric_kl(
            table.clone().select(0, a.clone()),
            table.select(0, b.clone()),
            config.epsilon,
        )
    };
    let all = Tensor::cat(
        vec![
            divergence(features.frequencies),
            divergence(features.cooccurrence),
            divergence(features.differences),
        ],
        0,
    );
    let values: Vec<f32> = to_host_f32(all);
    let n = matches.len();
    let pairs = matches
        .iter()
        .enumerate()
        .map(|(k, &(a, b))| {
            let (kl_bits, kl_pattern, kl_diff) = (
                f64::from(values[k]),
                f64::from(values[n + k]),
                f64::from(values[2 * n + k]),
            );
            PairScore {
                sources: (sources[a].label, sources[b].label),
                kl_bits,
                kl_pattern,
                kl_diff,
                composite: config.weight_bits * kl_bits
                    + config.weight_pattern * kl_pattern
                    + config.weight_diff * kl_diff,
            }
        })
        .collect();
    Ok(Distinguishability { pairs })
}
