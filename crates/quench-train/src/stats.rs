//! Summaries over members (seeds, repetitions) as the originals report them.

use std::fmt;

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

    #[test]
    fn population_statistics_as_numpy_reports_them() {
        let s = MeanStd::of(&[0.5, 0.6, 0.7]);
        assert!((s.mean - 0.6).abs() < 1e-12);
        assert!((s.std - (0.02f64 / 3.0).sqrt()).abs() < 1e-12);
        assert!(MeanStd::of(&[]).mean.is_nan());
        assert_eq!(s.to_string(), "0.6000±0.0816");
    }
}
