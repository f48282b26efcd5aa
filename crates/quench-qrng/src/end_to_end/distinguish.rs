//! The distinguishability tournament against a longhand f64 reference, on synthetic and on
//! the recorded sources.

use std::path::Path;

use crate::distinguish::{DistinguishConfig, distinguish};
use crate::features::source_bits;
use crate::{QrngError, synthetic_recording};
use burn::backend::NdArray;
use quench_data::{BitStrings, QRNG_LABELS};

type Cpu = NdArray<f32>;

fn recording() -> BitStrings {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../data/qrng/AI_2qubits_training_data.txt");
    BitStrings::read(&path, &QRNG_LABELS).unwrap()
}

/// The original's NumPy computation written out in f64: per source, frequencies,
/// co-occurrences and |f_i - f_j| of the first `bits` bits; per pair, the symmetric KL of each
/// after abs, +1e-10 and normalising; composite 0.2 / 0.4 / 0.4.
fn reference(strings: &BitStrings, bits: usize) -> Vec<[f64; 4]> {
    let features: Vec<[Vec<f64>; 3]> = strings
        .classes()
        .iter()
        .map(|&label| {
            let lines: Vec<&[u8]> = (0..strings.len())
                .filter(|&i| strings.labels()[i] == label)
                .map(|i| &strings.line(i)[..bits])
                .collect();
            let n = lines.len() as f64;
            let f: Vec<f64> = (0..bits)
                .map(|i| lines.iter().map(|l| f64::from(l[i])).sum::<f64>() / n)
                .collect();
            let mut pattern = vec![0.0; bits * bits];
            let mut diff = vec![0.0; bits * bits];
            for i in 0..bits {
                for j in 0..bits {
                    pattern[i * bits + j] =
                        lines.iter().filter(|l| l[i] == 1 && l[j] == 1).count() as f64 / n;
                    diff[i * bits + j] = (f[i] - f[j]).abs();
                }
            }
            [f, pattern, diff]
        })
        .collect();
    let dist = |x: &[f64]| {
        let y: Vec<f64> = x.iter().map(|v| v.abs() + 1e-10).collect();
        let s: f64 = y.iter().sum();
        y.into_iter().map(|v| v / s).collect::<Vec<_>>()
    };
    let kl = |p: &[f64], q: &[f64]| p.iter().zip(q).map(|(a, b)| a * (a / b).ln()).sum::<f64>();
    let sym = |p: &[f64], q: &[f64]| {
        let (p, q) = (dist(p), dist(q));
        (kl(&p, &q) + kl(&q, &p)) / 2.0
    };
    let mut rows = Vec::new();
    for a in 0..features.len() {
        for b in a + 1..features.len() {
            let k: Vec<f64> = (0..3)
                .map(|s| sym(&features[a][s], &features[b][s]))
                .collect();
            rows.push([k[0], k[1], k[2], 0.2 * k[0] + 0.4 * k[1] + 0.4 * k[2]]);
        }
    }
    rows
}

fn assert_matches_reference(strings: &BitStrings, bits: usize) {
    let config = DistinguishConfig {
        bits,
        ..DistinguishConfig::default()
    };
    let table = distinguish::<Cpu>(strings, &config, &Default::default()).unwrap();
    let want = reference(strings, bits);
    assert_eq!(table.pairs.len(), want.len());
    for (got, want) in table.pairs.iter().zip(&want) {
        let got = [got.kl_bits, got.kl_pattern, got.kl_diff, got.composite];
        for (g, w) in got.iter().zip(want) {
            assert!(
                (g - w).abs() <= 2e-3 * w.abs() + 1e-7,
                "{got:?} vs {want:?}"
            );
        }
    }
}

#[test]
fn synthetic_tournament_matches_the_f64_reference() {
    assert_matches_reference(&synthetic_recording(300, 3).unwrap(), 16);
}

#[test]
fn recorded_tournament_matches_the_f64_reference_with_full_device_slices() {
    let strings = recording();
    let sources = source_bits(&strings, 64).unwrap();
    assert_eq!(
        sources
            .iter()
            .map(|s| (s.label, s.lines))
            .collect::<Vec<_>>(),
        vec![(1, 2000), (2, 2000), (3, 2000)]
    );
    assert_matches_reference(&strings, 64);
    let table =
        distinguish::<Cpu>(&strings, &DistinguishConfig::default(), &Default::default()).unwrap();
    let labels: Vec<(u32, u32)> = table.pairs.iter().map(|p| p.sources).collect();
    assert_eq!(labels, vec![(1, 2), (1, 3), (2, 3)]);
    let printed = table.to_string();
    assert!(
        printed.contains("1v3") && printed.lines().count() == 4,
        "{printed}"
    );
}

#[test]
fn more_different_sources_score_higher() {
    let sources = [
        quench_data::SourceModel {
            bias: 0.0,
            correlation: 0.0,
            drift: 0.0,
        },
        quench_data::SourceModel {
            bias: 0.01,
            correlation: 0.0,
            drift: 0.0,
        },
        quench_data::SourceModel {
            bias: 0.2,
            correlation: 0.3,
            drift: 0.0,
        },
    ];
    let strings = quench_data::synthetic_qrng(&sources, 500, 64, 8).unwrap();
    let table =
        distinguish::<Cpu>(&strings, &DistinguishConfig::default(), &Default::default()).unwrap();
    let best = table.most_distinguishable().unwrap();
    assert_ne!(best.sources, (1, 2), "{table}");
    assert!(
        table.pairs[0].composite < table.pairs[1].composite,
        "{table}"
    );
}

#[test]
fn refuses_a_single_source_and_too_many_bits() {
    let one = quench_data::synthetic_qrng(
        &[quench_data::SourceModel {
            bias: 0.0,
            correlation: 0.0,
            drift: 0.0,
        }],
        10,
        64,
        1,
    )
    .unwrap();
    let device = Default::default();
    assert!(matches!(
        distinguish::<Cpu>(&one, &DistinguishConfig::default(), &device),
        Err(QrngError::TooFewDevices { found: 1 })
    ));
    let wide = DistinguishConfig {
        bits: 101,
        ..DistinguishConfig::default()
    };
    let err = distinguish::<Cpu>(&synthetic_recording(5, 1).unwrap(), &wide, &device).unwrap_err();
    assert!(err.to_string().contains("bits = 101"), "{err}");
}
