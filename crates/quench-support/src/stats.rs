//! Summary statistics: of repeated measurements ([`Stats`], the sample standard deviation)
//! and of a run's members as the originals report them ([`MeanStd`], the population one).

use std::fmt;

use serde::{Deserialize, Serialize};

/// Median, extremes, mean and standard deviation of a set of samples (any one unit).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Stats {
    /// The middle sample; the mean of the two middle ones for an even count.
    pub median: f64,
    /// The smallest sample.
    pub min: f64,
    /// The largest sample.
    pub max: f64,
    /// The arithmetic mean.
    pub mean: f64,
    /// The sample standard deviation (n - 1 in the denominator); 0 for one sample.
    pub std: f64,
    /// How many samples were summarised.
    pub count: usize,
}

impl Stats {
    /// Summarises `samples`; `None` when there are none or one is not finite.
    pub fn from_samples(samples: &[f64]) -> Option<Self> {
        if samples.is_empty() || samples.iter().any(|s| !s.is_finite()) {
            return None;
        }
        let mut sorted = samples.to_vec();
        sorted.sort_by(f64::total_cmp);
        let count = sorted.len();
        let median = if count % 2 == 1 {
            sorted[count / 2]
        } else {
            (sorted[count / 2 - 1] + sorted[count / 2]) / 2.0
        };
        let mean = sorted.iter().sum::<f64>() / count as f64;
        let std = if count > 1 {
            let ss: f64 = sorted.iter().map(|s| (s - mean).powi(2)).sum();
            (ss / (count - 1) as f64).sqrt()
        } else {
            0.0
        };
        Some(Self {
            median,
            min: sorted[0],
            max: sorted[count - 1],
            mean,
            std,
            count,
        })
    }

    /// The same statistics with every value multiplied by `factor` (e.g. per run to per epoch).
    pub fn scaled(&self, factor: f64) -> Self {
        let (a, b) = (self.min * factor, self.max * factor);
        Self {
            median: self.median * factor,
            min: a.min(b),
            max: a.max(b),
            mean: self.mean * factor,
            std: self.std * factor.abs(),
            count: self.count,
        }
    }
}

/// The largest of `errors` (0 for none), NaN when any is NaN: `f64::max` drops a NaN, and a
/// broken result must never look exact.
pub fn max_or_nan(errors: impl IntoIterator<Item = f64>) -> f64 {
    errors
        .into_iter()
        .try_fold(0.0f64, |m, e| (!e.is_nan()).then(|| m.max(e)))
        .unwrap_or(f64::NAN)
}

/// The largest `|a - b|` over the paired entries of two slices (as far as the shorter goes),
/// in f64: NaN when any difference is, as [`max_or_nan`] takes it.
pub fn max_abs_difference<T: Copy + Into<f64>>(a: &[T], b: &[T]) -> f64 {
    max_or_nan(a.iter().zip(b).map(|(&x, &y)| (x.into() - y.into()).abs()))
}

/// Mean and population standard deviation (numpy's default, as the original reports).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MeanStd {
    /// The mean.
    pub mean: f64,
    /// The population standard deviation.
    pub std: f64,
}

impl MeanStd {
    /// Of `values`; NaN for none.
    pub fn of(values: &[f64]) -> Self {
        let n = values.len() as f64;
        let mean = values.iter().sum::<f64>() / n;
        let var = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n;
        Self {
            mean,
            std: var.sqrt(),
        }
    }
}

impl fmt::Display for MeanStd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:.4}±{:.4}", self.mean, self.std)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn odd_and_even_medians() {
        let odd = Stats::from_samples(&[3.0, 1.0, 2.0]).unwrap();
        assert_eq!(
            (odd.median, odd.min, odd.max, odd.count),
            (2.0, 1.0, 3.0, 3)
        );
        let even = Stats::from_samples(&[4.0, 1.0, 3.0, 2.0]).unwrap();
        assert_eq!(even.median, 2.5);
        assert_eq!(even.mean, 2.5);
        assert!((even.std - (5.0f64 / 3.0).sqrt()).abs() < 1e-12);
    }

    #[test]
    fn empty_or_non_finite_samples_have_no_statistics() {
        assert!(Stats::from_samples(&[]).is_none());
        assert!(Stats::from_samples(&[1.0, f64::NAN]).is_none());
        assert_eq!(Stats::from_samples(&[5.0]).unwrap().std, 0.0);
    }

    #[test]
    fn scaling_scales_every_statistic() {
        let s = Stats::from_samples(&[1.0, 2.0, 6.0]).unwrap().scaled(0.5);
        assert_eq!((s.median, s.min, s.max, s.mean), (1.0, 0.5, 3.0, 1.5));
    }

    proptest! {
        #[test]
        fn median_lies_between_extremes(samples in proptest::collection::vec(-1e6f64..1e6, 1..50)) {
            let s = Stats::from_samples(&samples).unwrap();
            prop_assert!(s.min <= s.median && s.median <= s.max);
            prop_assert!(s.min <= s.mean + 1e-9 && s.mean <= s.max + 1e-9);
            prop_assert_eq!(s.count, samples.len());
        }
    }

    #[test]
    fn the_largest_error_keeps_a_nan_wherever_it_is() {
        assert_eq!(max_or_nan([]), 0.0);
        assert_eq!(max_or_nan([1e-7, 3e-6, 2e-6]), 3e-6);
        assert!(max_or_nan([f64::NAN, 1.0]).is_nan());
        assert!(max_or_nan([1.0, f64::NAN, 0.5]).is_nan());
        assert_eq!(max_or_nan([1.0, f64::INFINITY]), f64::INFINITY);
    }

    #[test]
    fn population_statistics_as_numpy_reports_them() {
        let s = MeanStd::of(&[0.5, 0.6, 0.7]);
        assert!((s.mean - 0.6).abs() < 1e-12);
        assert!((s.std - (0.02f64 / 3.0).sqrt()).abs() < 1e-12);
        assert!(MeanStd::of(&[]).mean.is_nan());
        assert_eq!(s.to_string(), "0.6000±0.0816");
    }
}
