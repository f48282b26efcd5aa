//! qRNG source fingerprinting (guide 000): which quantum random-number source wrote a bit string?
//!
//! Three analyses of the same recording (`data/qrng/AI_2qubits_training_data.txt`: 6,000 lines
//! of 100 bits, 2,000 per source, labels 1-3), each over every pair of sources:
//!
//! - [`distinguish`]: the distinguishability tournament, no training: symmetric KL divergences
//!   between per-device feature sets ([`features`]) and their composite score.
//! - [`gan`]: the GAN tournament: for each pair, a generator learns the pair's frequency-difference
//!   grid against a discriminator; every pair and seed is a member of one batched program.
//! - [`classifier`]: the 100 -> 30 -> 20 -> 3 MLP that names the source of a line, its seeds
//!   trained as members of one batched program with per-member plateau schedule and early
//!   stopping ([`schedule`]) on a validation split, reported on an untouched test split
//!   ([`split`]).
//!
//! A device's lines are taken by their label, never by their position in the file (the
//! original scripts slice `data[2001:4000]` and lose a line per source).

pub mod classifier;
pub mod distinguish;
mod error;
pub mod features;
pub mod gan;
pub mod recording;
pub mod schedule;
pub mod split;

// The three analyses and the shipped configurations end to end, in the unit-test binary so the generic code is compiled once for both.
#[cfg(test)]
mod end_to_end;

pub use error::QrngError;

use quench_data::{BitStrings, SourceModel, synthetic_qrng};

pub use quench_train::ensemble::seeded_ensemble;
pub use quench_train::init::sub_seed;

/// How the independent members of an analysis (pairs and seeds, classifier seeds) are run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Batching {
    /// All members as one batched program with a leading member axis.
    #[default]
    Members,
    /// One member after another, each a program of one member: the original's way, kept as
    /// the measured reference.
    OneAtATime,
}

/// Synthetic stand-ins for the three recorded sources, for tests and for runs without the
/// file: ones with probability near the recording's 54.7 %, 56.5 % and 49.2 %, each with its own
/// small correlation between neighbouring bits or drift over the recording.
pub const SYNTHETIC_DEVICES: [SourceModel; 3] = [
    SourceModel {
        bias: 0.047,
        correlation: 0.02,
        drift: 0.0,
    },
    SourceModel {
        bias: 0.065,
        correlation: 0.0,
        drift: 0.01,
    },
    SourceModel {
        bias: -0.008,
        correlation: 0.05,
        drift: 0.0,
    },
];

/// A recording of [`SYNTHETIC_DEVICES`] shaped like the real one: `lines_per_source` lines of
/// 100 bits per source, labels 1-3.
pub fn synthetic_recording(lines_per_source: usize, seed: u64) -> Result<BitStrings, QrngError> {
    Ok(synthetic_qrng(
        &SYNTHETIC_DEVICES,
        lines_per_source,
        100,
        seed,
    )?)
}

/// Every unordered pair of `sources` sources as indices `(a, b)` with `a < b`, in the order
/// `(0, 1), (0, 2), ..., (1, 2), ...`: for three sources the original's matches 1v2, 1v3, 2v3.
pub fn pairs(sources: usize) -> Vec<(usize, usize)> {
    (0..sources)
        .flat_map(|a| (a + 1..sources).map(move |b| (a, b)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_are_the_original_matches() {
        assert_eq!(pairs(3), vec![(0, 1), (0, 2), (1, 2)]);
        assert_eq!(pairs(4).len(), 6);
        assert!(pairs(1).is_empty());
    }

    #[test]
    fn sub_seeds_differ_by_seed_and_purpose() {
        let seeds: Vec<u64> = (89..93)
            .flat_map(|s| (0..3).map(move |p| sub_seed(s, p)))
            .collect();
        let mut unique = seeds.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), seeds.len());
        assert_eq!(sub_seed(89, 1), sub_seed(89, 1));
    }

    #[test]
    fn synthetic_recording_has_three_labelled_sources() {
        let strings = synthetic_recording(50, 1).unwrap();
        assert_eq!((strings.len(), strings.bits_per_line()), (150, 100));
        assert_eq!(strings.classes(), &[1, 2, 3]);
    }
}

#[cfg(test)]
quench_support::aligned_allocator!();
