//! Per-source features of the leading bits, and the symmetric KL divergence between them.

use burn::tensor::{Tensor, TensorData};
use quench_data::BitStrings;
use quench_kernels::QuenchOps;
use quench_kernels::reductions::Reduce;
use quench_kernels::views::ReshapeTo;

use super::QrngError;

/// The first `bits` bits of every line of one source, as 0/1 values.
#[derive(Debug, Clone, PartialEq)]
pub struct DeviceBits {
    /// The source's label in the recording.
    pub label: u32,
    /// Lines of the source.
    pub lines: usize,
    /// Leading bits kept per line.
    pub bits: usize,
    /// `[lines, bits]` row-major, each 0.0 or 1.0.
    pub values: Vec<f32>,
}

/// Refuses a count of leading bits of none: what the configurations' validation checks
/// before any recording is read.
pub fn check_some_bits(bits: usize) -> Result<(), QrngError> {
    if bits == 0 {
        return Err(QrngError::config("bits", 0, "must be at least 1"));
    }
    Ok(())
}

/// Refuses `bits` leading bits that `strings` cannot give: none, or more than a line holds.
/// Checked where the recording is read, before any work, and by the analyses themselves.
pub fn check_bits(bits: usize, strings: &BitStrings) -> Result<(), QrngError> {
    check_some_bits(bits)?;
    if bits > strings.bits_per_line() {
        return Err(QrngError::TooFewBits {
            bits,
            available: strings.bits_per_line(),
        });
    }
    Ok(())
}

/// The first `bits` bits of each declared source's lines, sources in the order of
/// [`BitStrings::classes`], lines taken by label.
///
/// Refused: `bits` of 0 or more than a line holds, a declared source without lines.
pub fn source_bits(strings: &BitStrings, bits: usize) -> Result<Vec<DeviceBits>, QrngError> {
    check_bits(bits, strings)?;
    strings
        .classes()
        .iter()
        .map(|&label| {
            let values: Vec<f32> = (0..strings.len())
                .filter(|&i| strings.labels()[i] == label)
                .flat_map(|i| strings.line(i)[..bits].iter().map(|&b| f32::from(b)))
                .collect();
            let lines = values.len() / bits;
            if lines == 0 {
                return Err(QrngError::NoLines { label });
            }
            Ok(DeviceBits {
                label,
                lines,
                bits,
                values,
            })
        })
        .collect()
}

/// The three feature sets of every source, on the device, one row per source.
#[derive(Debug, Clone)]
pub struct DeviceFeatures<B: QuenchOps> {
    /// Position frequencies `f_i = P(bit_i = 1)`: `[sources, bits]`.
    pub frequencies: Tensor<B, 2>,
    /// Co-occurrences `P(bit_i = 1 and bit_j = 1)`, row-major over `(i, j)`: `[sources, bits^2]`.
    pub cooccurrence: Tensor<B, 2>,
    /// Frequency differences `|f_i - f_j|`, row-major over `(i, j)`: `[sources, bits^2]`.
    pub differences: Tensor<B, 2>,
}

impl<B: QuenchOps> DeviceFeatures<B> {
    /// Computes the features of `sources` (all with the same `bits`) on `device`: the
    /// co-occurrences of a source are `X^T X / lines` for its bit matrix `X` `[lines, bits]`.
    pub fn compute(sources: &[DeviceBits], device: &B::Device) -> Self {
        let bits = sources.first().map_or(0, |s| s.bits);
        let cooccurrence = sources
            .iter()
            .map(|source| {
                let x = bit_matrix::<B>(source, device);
                let lines = source.lines as f64;
                x.clone()
                    .transpose()
                    .matmul(x)
                    .div_scalar(lines)
                    .reshape_to([1, bits * bits])
            })
            .collect();
        let frequencies = frequencies::<B>(sources, device);
        let sources = sources.len();
        let differences = (frequencies.clone().reshape_to([sources, bits, 1])
            - frequencies.clone().reshape_to([sources, 1, bits]))
        .abs()
        .reshape_to([sources, bits * bits]);
        Self {
            frequencies,
            cooccurrence: Tensor::cat(cooccurrence, 0),
            differences,
        }
    }
}

/// The bits of `source` on `device`: `[lines, bits]`.
fn bit_matrix<B: QuenchOps>(source: &DeviceBits, device: &B::Device) -> Tensor<B, 2> {
    Tensor::from_data(
        TensorData::new(source.values.clone(), [source.lines, source.bits]),
        device,
    )
}

/// Position frequencies `f_i = P(bit_i = 1)` of `sources` (all with the same `bits`):
/// `[sources, bits]`.
pub fn frequencies<B: QuenchOps>(sources: &[DeviceBits], device: &B::Device) -> Tensor<B, 2> {
    Tensor::cat(
        sources
            .iter()
            .map(|source| bit_matrix::<B>(source, device).mean_along(0))
            .collect(),
        0,
    )
}

/// Row-wise symmetric KL divergence `(KL(p||q) + KL(q||p)) / 2` in nats, after turning each
/// row into a distribution: absolute values, plus `epsilon`, divided by the row's sum.
/// `p` and `q` are `[rows, k]`; the result is `[rows]`.
pub fn symmetric_kl<B: QuenchOps>(p: Tensor<B, 2>, q: Tensor<B, 2>, epsilon: f64) -> Tensor<B, 1> {
    let normalise = |x: Tensor<B, 2>| {
        let x = x.abs().add_scalar(epsilon);
        x.clone() / x.sum_along(1)
    };
    let (p, q) = (normalise(p), normalise(q));
    let log_ratio = p.clone().log() - q.clone().log();
    let forward = (p * log_ratio.clone()).sum_along(1);
    let backward = (q * log_ratio.neg()).sum_along(1);
    let rows = forward.dims()[0];
    ((forward + backward) / 2.0).reshape_to([rows])
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::NdArray;
    use quench_data::QRNG_LABELS;
    use quench_kernels::readback::to_host_f32;
    use std::sync::atomic::{AtomicUsize, Ordering};

    type Cpu = NdArray<f32>;

    /// Reads `text` through the real reader, from a file of its own.
    fn strings(text: &str) -> BitStrings {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!("quench-features-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(format!("{}.txt", NEXT.fetch_add(1, Ordering::Relaxed)));
        std::fs::write(&path, text).unwrap();
        BitStrings::read(&path, &QRNG_LABELS).unwrap()
    }

    #[test]
    fn sources_are_taken_by_label_wherever_their_lines_are() {
        let s = strings("1100 2\n0000 1\n1010 2\n0110 3\n1111 1\n");
        let sources = source_bits(&s, 3).unwrap();
        assert_eq!(sources.len(), 3);
        assert_eq!((sources[0].label, sources[0].lines), (1, 2));
        assert_eq!(sources[0].values, vec![0.0, 0.0, 0.0, 1.0, 1.0, 1.0]);
        assert_eq!(sources[1].values, vec![1.0, 1.0, 0.0, 1.0, 0.0, 1.0]);
        assert!(matches!(
            source_bits(&s, 5),
            Err(QrngError::TooFewBits {
                bits: 5,
                available: 4
            })
        ));
        assert!(matches!(
            source_bits(&s, 0),
            Err(QrngError::Config { field: "bits", .. })
        ));
        let missing = strings("1100 2\n0000 1\n");
        assert!(matches!(
            source_bits(&missing, 2),
            Err(QrngError::NoLines { label: 3 })
        ));
    }

    #[test]
    fn features_follow_their_definitions() {
        let s = strings("110 1\n100 1\n111 1\n000 1\n011 2\n011 3\n");
        let features =
            DeviceFeatures::<Cpu>::compute(&source_bits(&s, 3).unwrap(), &Default::default());
        let f = to_host_f32(features.frequencies);
        assert_eq!(&f[..3], &[0.75, 0.5, 0.25]);
        assert_eq!(&f[3..6], &[0.0, 1.0, 1.0]);
        let c = to_host_f32(features.cooccurrence);
        // Source 1: bits 0 and 1 are both set on lines 1 and 3 of 4; bit 2 with bit 0 on line 3.
        assert_eq!(
            &c[..9],
            &[0.75, 0.5, 0.25, 0.5, 0.5, 0.25, 0.25, 0.25, 0.25]
        );
        let d = to_host_f32(features.differences);
        assert_eq!(&d[..9], &[0.0, 0.25, 0.5, 0.25, 0.0, 0.25, 0.5, 0.25, 0.0]);
    }

    #[test]
    fn symmetric_kl_matches_a_longhand_reference() {
        let p = [0.2f64, -0.5, 0.0, 0.3];
        let q = [0.1f64, 0.1, 0.6, 0.2];
        let dist = |x: &[f64]| {
            let y: Vec<f64> = x.iter().map(|v| v.abs() + 1e-10).collect();
            let s: f64 = y.iter().sum();
            y.into_iter().map(|v| v / s).collect::<Vec<_>>()
        };
        let kl = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(x, y)| x * (x / y).ln()).sum::<f64>();
        let (pn, qn) = (dist(&p), dist(&q));
        let want = (kl(&pn, &qn) + kl(&qn, &pn)) / 2.0;
        let device = Default::default();
        let row = |x: &[f64]| {
            Tensor::<Cpu, 2>::from_data(
                TensorData::new(x.iter().map(|&v| v as f32).collect::<Vec<_>>(), [1, 4]),
                &device,
            )
        };
        let both = |a: &[f64], b: &[f64]| Tensor::cat(vec![row(a), row(b)], 0);
        let got: Vec<f32> = symmetric_kl(both(&p, &q), both(&q, &q), 1e-10)
            .into_data()
            .to_vec()
            .unwrap();
        assert!(
            (got[0] as f64 - want).abs() < 1e-5 * want,
            "{got:?} vs {want}"
        );
        assert!(
            got[1].abs() < 1e-6,
            "identical rows have no divergence: {got:?}"
        );
    }
}
