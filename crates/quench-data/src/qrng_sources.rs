//! Synthetic qRNG sources: biased, correlated, drifting bit generators that stand in for the
//! recorded quantum random-number generators.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::{BitStrings, DataError};

/// One synthetic random-number source.
///
/// Line `t` of `L` (from 0) emits ones with probability
/// `p_t = clamp(1/2 + bias + drift * t / (L - 1), 0, 1)`. Its first bit is drawn with that
/// probability; each later bit repeats its predecessor with probability `correlation` and is
/// drawn afresh otherwise, so every bit of the line is still a one with probability `p_t` and
/// neighbouring bits have correlation coefficient `correlation`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SourceModel {
    /// Shift of the probability of a one away from 1/2, in `[-0.5, 0.5]`.
    pub bias: f64,
    /// Probability that a bit copies the previous bit of its line, in `[0, 1]`.
    pub correlation: f64,
    /// Change of the probability of a one from the first line to the last (finite).
    pub drift: f64,
}

impl SourceModel {
    fn validate(&self) -> Result<(), DataError> {
        if !(-0.5..=0.5).contains(&self.bias) {
            return Err(DataError::invalid(
                "bias",
                self.bias,
                "must lie in [-0.5, 0.5]",
            ));
        }
        if !(0.0..=1.0).contains(&self.correlation) {
            return Err(DataError::invalid(
                "correlation",
                self.correlation,
                "must lie in [0, 1]",
            ));
        }
        if !self.drift.is_finite() {
            return Err(DataError::invalid("drift", self.drift, "must be finite"));
        }
        Ok(())
    }

    /// Probability of a one on line `line` of `lines`.
    fn p_one(&self, line: usize, lines: usize) -> f64 {
        let progress = if lines > 1 {
            line as f64 / (lines - 1) as f64
        } else {
            0.0
        };
        (0.5 + self.bias + self.drift * progress).clamp(0.0, 1.0)
    }
}

/// Records `lines_per_source` lines of `bits_per_line` bits from each of `sources`, seeded
/// by `seed`, in the in-memory form of [`BitStrings::read`]: source `d` (from 0) gets label
/// `d + 1` and its lines follow the previous source's, as in the recorded file.
pub fn synthetic_qrng(
    sources: &[SourceModel],
    lines_per_source: usize,
    bits_per_line: usize,
    seed: u64,
) -> Result<BitStrings, DataError> {
    crate::loads::loaded(format_args!(
        "{lines_per_source} synthetic bit strings per source, seed {seed}"
    ));
    if sources.is_empty() {
        return Err(DataError::invalid(
            "sources",
            0,
            "at least one source is needed",
        ));
    }
    if bits_per_line == 0 {
        return Err(DataError::invalid("bits_per_line", 0, "must be at least 1"));
    }
    for source in sources {
        source.validate()?;
    }
    // Each line's bits as bytes, the vector and label that hold them, and the copy that
    // `BitStrings::from_lines` makes: refused here rather than as an aborting allocation.
    let lines = (sources.len() as u128).saturating_mul(lines_per_source as u128);
    quench_support::budget::check_fits(
        || {
            format!(
                "{lines_per_source} synthetic bit strings per source ({} sources of \
                 {bits_per_line} bits)",
                sources.len()
            )
        },
        lines.saturating_mul(2 * bits_per_line as u128 + 32),
    )?;
    let mut rng = StdRng::seed_from_u64(seed);
    let mut lines = Vec::with_capacity(sources.len() * lines_per_source);
    for (label, source) in (1..).zip(sources) {
        for t in 0..lines_per_source {
            let p = source.p_one(t, lines_per_source);
            let mut bits = Vec::with_capacity(bits_per_line);
            let mut previous = rng.random_bool(p);
            bits.push(u8::from(previous));
            for _ in 1..bits_per_line {
                if !rng.random_bool(source.correlation) {
                    previous = rng.random_bool(p);
                }
                bits.push(u8::from(previous));
            }
            lines.push((bits, label));
        }
    }
    let classes = (1..=sources.len() as u32).collect();
    Ok(BitStrings::from_lines(lines, bits_per_line, classes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recording_beyond_memory_is_refused_before_it_is_made() {
        if quench_support::budget::host_limit().is_none() {
            return;
        }
        let err = synthetic_qrng(&[FAIR], 1 << 60, 100, 1).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("1152921504606846976 synthetic bit strings per source"),
            "{err}"
        );
    }

    const FAIR: SourceModel = SourceModel {
        bias: 0.0,
        correlation: 0.0,
        drift: 0.0,
    };

    /// Fraction of ones in the lines `range` of `strings`.
    fn ones(strings: &BitStrings, range: std::ops::Range<usize>) -> f64 {
        let bits: Vec<u8> = range.flat_map(|i| strings.line(i).to_vec()).collect();
        bits.iter().map(|&b| f64::from(b)).sum::<f64>() / bits.len() as f64
    }

    #[test]
    fn bias_correlation_and_drift_show_in_the_bits() {
        let sources = [
            FAIR,
            SourceModel { bias: 0.1, ..FAIR },
            SourceModel {
                correlation: 0.6,
                ..FAIR
            },
            SourceModel { drift: 0.4, ..FAIR },
        ];
        let strings = synthetic_qrng(&sources, 1000, 100, 5).unwrap();
        assert_eq!(strings.len(), 4000);
        assert_eq!(strings.classes(), &[1, 2, 3, 4]);
        // 100,000 bits per source: the sd of a frequency is below 0.0016 (0.004 when correlated).
        assert!((strings.mean_bit(1).unwrap() - 0.5).abs() < 0.01);
        assert!((strings.mean_bit(2).unwrap() - 0.6).abs() < 0.01);
        assert!((strings.mean_bit(3).unwrap() - 0.5).abs() < 0.02);
        let repeats = |label: usize| {
            let same: usize = ((label - 1) * 1000..label * 1000)
                .map(|i| strings.line(i).windows(2).filter(|w| w[0] == w[1]).count())
                .sum();
            same as f64 / (1000 * 99) as f64
        };
        // Repeats happen with probability 1/2 for fair bits, 0.6 + 0.4 / 2 = 0.8 when correlated.
        assert!((repeats(1) - 0.5).abs() < 0.01);
        assert!((repeats(3) - 0.8).abs() < 0.01);
        // Drift 0.4: the first tenth of the lines averages 0.52, the last tenth 0.88.
        assert!((ones(&strings, 3000..3100) - 0.52).abs() < 0.02);
        assert!((ones(&strings, 3900..4000) - 0.88).abs() < 0.02);
    }

    #[test]
    fn same_seed_same_bits() {
        let sources = [SourceModel {
            bias: -0.2,
            correlation: 0.3,
            drift: 0.1,
        }];
        let a = synthetic_qrng(&sources, 50, 64, 9).unwrap();
        assert_eq!(a, synthetic_qrng(&sources, 50, 64, 9).unwrap());
        assert_ne!(a, synthetic_qrng(&sources, 50, 64, 10).unwrap());
    }

    #[test]
    fn refuses_impossible_devices() {
        for source in [
            SourceModel { bias: 0.7, ..FAIR },
            SourceModel {
                correlation: -0.1,
                ..FAIR
            },
            SourceModel {
                drift: f64::NAN,
                ..FAIR
            },
        ] {
            assert!(matches!(
                synthetic_qrng(&[source], 10, 10, 0),
                Err(DataError::Invalid { .. })
            ));
        }
        assert!(synthetic_qrng(&[], 10, 10, 0).is_err());
        assert!(synthetic_qrng(&[FAIR], 10, 0, 0).is_err());
    }
}
