//! Noise models: from a task's parameters to the rates of the jump operators.
//!
//! A spectral task `(alpha, A, omega_c)` has a noise power spectral density `S(w)`; its rate is
//! `G = (integral of S(w) chi(w) over [0, 2 w_max]) / (2 w_max)` with the box filter
//! `chi = 1` on `[0, w_max]`, `w_max = segments / T`, by the trapezoid rule on 500 equally
//! spaced points, as in the guide. The direct variant gives rates outright.

use rand::Rng;
use serde::{Deserialize, Serialize};

use crate::LindbladError;

/// Guards the spectra against a zero denominator at `w = 0`, as the guide does.
const EPSILON: f64 = 1e-12;

/// The shape of a noise power spectral density, in angular frequency `w`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Spectrum {
    /// `S(w) = A / (|w|^alpha + omega_c^alpha + 1e-12)`, `alpha > 0`.
    OneOverF,
    /// `S(w) = A / (w^2 + omega_c^2 + 1e-12)` (Ornstein-Uhlenbeck); `alpha` is unused.
    Lorentzian,
    /// Two Lorentzians: `A1 / (w^2 + omega_c^2) + A2 / (w^2 + (omega_c (1 + alpha))^2)` with
    /// `A1 = A (1 - alpha / 5)`, `A2 = A alpha / 5`, `0 <= alpha <= 5`.
    DoubleExponential,
}

/// One task of the spectral noise models: the parameters of its spectrum.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SpectralTask {
    /// Spectral exponent (1/f) or scale mix (double exponential), dimensionless.
    pub alpha: f64,
    /// Amplitude `A` of the spectrum, in units of rate times angular frequency.
    pub amplitude: f64,
    /// Cut-off angular frequency `omega_c`, in units of `1 / T`.
    pub omega_c: f64,
}

impl SpectralTask {
    /// The task as the policy's input vector `[alpha, A, omega_c]`.
    pub fn to_array(&self) -> [f64; 3] {
        [self.alpha, self.amplitude, self.omega_c]
    }
}

impl Spectrum {
    /// The spectral density `S(w)` of `task` at angular frequency `omega`.
    pub fn density(self, task: &SpectralTask, omega: f64) -> f64 {
        let SpectralTask {
            alpha,
            amplitude,
            omega_c,
        } = *task;
        match self {
            Self::OneOverF => amplitude / (omega.abs().powf(alpha) + omega_c.powf(alpha) + EPSILON),
            Self::Lorentzian => amplitude / (omega * omega + omega_c * omega_c + EPSILON),
            Self::DoubleExponential => {
                let wide = omega_c * (1.0 + alpha);
                amplitude * (1.0 - alpha / 5.0) / (omega * omega + omega_c * omega_c + EPSILON)
                    + amplitude * alpha / 5.0 / (omega * omega + wide * wide + EPSILON)
            }
        }
    }

    /// Refuses parameters outside the spectrum's domain (negative amplitude or cut-off,
    /// `alpha <= 0` for 1/f, `alpha` outside `[0, 5]` for the double exponential).
    pub fn validate(self, task: &SpectralTask) -> Result<(), LindbladError> {
        let finite_non_negative = |name: &str, value: f64| {
            if value.is_finite() && value >= 0.0 {
                Ok(())
            } else {
                Err(LindbladError::invalid(
                    name,
                    value,
                    "must be finite and non-negative",
                ))
            }
        };
        finite_non_negative("amplitude", task.amplitude)?;
        finite_non_negative("omega_c", task.omega_c)?;
        match self {
            Self::OneOverF if !(task.alpha.is_finite() && task.alpha > 0.0) => Err(
                LindbladError::invalid("alpha", task.alpha, "must be positive for a 1/f spectrum"),
            ),
            Self::DoubleExponential if !(0.0..=5.0).contains(&task.alpha) => {
                Err(LindbladError::invalid(
                    "alpha",
                    task.alpha,
                    "must lie in [0, 5] for a double exponential",
                ))
            }
            _ => Ok(()),
        }
    }
}

/// A spectrum turned into one rate per task by the guide's filtered integral.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SpectralNoise {
    /// The spectrum's shape.
    pub spectrum: Spectrum,
    /// Control bandwidth `w_max` (angular frequency, `1 / T` units): the filter passes
    /// `[0, w_max]`, the integral runs over `[0, 2 w_max]`.
    pub omega_max: f64,
    /// Points of the trapezoid rule (500 in the guide).
    pub points: usize,
}

impl SpectralNoise {
    /// The guide's setting for `segments` pulse segments over total time `t_total`:
    /// `w_max = segments / t_total`, 500 points.
    pub fn guide(spectrum: Spectrum, segments: usize, t_total: f64) -> Self {
        Self {
            spectrum,
            omega_max: segments as f64 / t_total,
            points: 500,
        }
    }

    /// The rate `G` of `task`, in units of `1 / T`: the filtered spectrum integrated by the
    /// trapezoid rule over `[0, 2 w_max]` and divided by the range `2 w_max`.
    pub fn rate(&self, task: &SpectralTask) -> Result<f64, LindbladError> {
        self.spectrum.validate(task)?;
        if !(self.omega_max.is_finite() && self.omega_max > 0.0) {
            return Err(LindbladError::invalid(
                "omega_max",
                self.omega_max,
                "must be positive",
            ));
        }
        if self.points < 2 {
            return Err(LindbladError::invalid(
                "points",
                self.points as f64,
                "the trapezoid rule needs at least 2 points",
            ));
        }
        let range = 2.0 * self.omega_max;
        let step = range / (self.points - 1) as f64;
        let integrand = |i: usize| {
            let omega = step * i as f64;
            if omega <= self.omega_max {
                self.spectrum.density(task, omega)
            } else {
                0.0
            }
        };
        let integral: f64 = (1..self.points)
            .map(|i| 0.5 * step * (integrand(i - 1) + integrand(i)))
            .sum();
        Ok(integral.max(0.0) / range)
    }
}

/// Uniform ranges from which spectral tasks are drawn; [`Default`] is the guide's
/// `[0.5, 2] x [0.001, 0.01] x [100, 1000]`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SpectralTaskRanges {
    /// Range of `alpha` (inclusive low, exclusive high).
    pub alpha: (f64, f64),
    /// Range of the amplitude `A`.
    pub amplitude: (f64, f64),
    /// Range of the cut-off `omega_c`.
    pub omega_c: (f64, f64),
}

impl Default for SpectralTaskRanges {
    fn default() -> Self {
        Self {
            alpha: (0.5, 2.0),
            amplitude: (0.001, 0.01),
            omega_c: (100.0, 1000.0),
        }
    }
}

impl SpectralTaskRanges {
    /// One task drawn uniformly from the ranges.
    pub fn sample<R: Rng + ?Sized>(&self, rng: &mut R) -> SpectralTask {
        let mut uniform = |(low, high): (f64, f64)| low + (high - low) * rng.random::<f64>();
        SpectralTask {
            alpha: uniform(self.alpha),
            amplitude: uniform(self.amplitude),
            omega_c: uniform(self.omega_c),
        }
    }
}

/// A task of the direct-rate variant: relaxation and dephasing rates, in units of `1 / T`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RelaxDephaseTask {
    /// Relaxation rate (the guide draws it from `[0.01, 0.08]`).
    pub g_relax: f64,
    /// Dephasing rate (the guide draws it from `[0.02, 0.15]`).
    pub g_deph: f64,
}

impl RelaxDephaseTask {
    /// The rates of the jumps `[s-, sz]` of [`presets::relax_dephase`](crate::presets::relax_dephase):
    /// `[g_relax, g_deph / 2]`, so that `L = sqrt(g_deph / 2) sz` dephases coherences at
    /// `g_deph`.
    pub fn rates(&self) -> Result<[f64; 2], LindbladError> {
        for (name, value) in [("g_relax", self.g_relax), ("g_deph", self.g_deph)] {
            if !(value.is_finite() && value >= 0.0) {
                return Err(LindbladError::invalid(
                    name,
                    value,
                    "must be finite and non-negative",
                ));
            }
        }
        Ok([self.g_relax, self.g_deph / 2.0])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn task(alpha: f64, amplitude: f64, omega_c: f64) -> SpectralTask {
        SpectralTask {
            alpha,
            amplitude,
            omega_c,
        }
    }

    #[test]
    fn rate_of_a_flat_spectrum_is_half_its_level() {
        // A Lorentzian with a huge cut-off is flat, S = A / omega_c^2, over the band; the box
        // passes half of the integration range, and the trapezoid rule adds half a step.
        let noise = SpectralNoise::guide(Spectrum::Lorentzian, 20, 1.0);
        let level = 1.0 / 1e12;
        let g = noise.rate(&task(1.0, 1.0, 1e6)).unwrap();
        let step = 40.0 / 499.0;
        let covered = 249.0 * step + 0.5 * step;
        assert!((g - level * covered / 40.0).abs() < 1e-8 * level, "{g}");
    }

    #[test]
    fn one_over_f_rate_matches_a_fine_quadrature_of_the_band() {
        let t = task(1.3, 0.005, 300.0);
        let noise = SpectralNoise::guide(Spectrum::OneOverF, 20, 1.0);
        let g = noise.rate(&t).unwrap();
        let fine: f64 = (0..200_000)
            .map(|i| (i as f64 + 0.5) * 20.0 / 200_000.0)
            .map(|w| Spectrum::OneOverF.density(&t, w) * 20.0 / 200_000.0)
            .sum::<f64>()
            / 40.0;
        // The coarse rule misses at most the half step past the band edge.
        assert!((g - fine).abs() < 0.01 * fine, "{g} {fine}");
    }

    #[test]
    fn double_exponential_with_alpha_zero_is_the_lorentzian() {
        let t = task(0.0, 0.3, 5.0);
        for w in [0.0, 1.0, 17.0] {
            let a = Spectrum::DoubleExponential.density(&t, w);
            let b = Spectrum::Lorentzian.density(&t, w);
            assert!((a - b).abs() < 1e-15);
        }
    }

    #[test]
    fn invalid_parameters_are_refused_by_name() {
        let noise = SpectralNoise::guide(Spectrum::OneOverF, 20, 1.0);
        let error = noise.rate(&task(-1.0, 0.01, 100.0)).unwrap_err();
        assert!(error.to_string().starts_with("alpha = -1"), "{error}");
        let error = RelaxDephaseTask {
            g_relax: -0.1,
            g_deph: 0.1,
        }
        .rates()
        .unwrap_err();
        assert!(error.to_string().starts_with("g_relax"), "{error}");
    }

    #[test]
    fn sampled_tasks_lie_in_the_guide_ranges() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let ranges = SpectralTaskRanges::default();
        for _ in 0..100 {
            let t = ranges.sample(&mut rng);
            assert!((0.5..2.0).contains(&t.alpha));
            assert!((0.001..0.01).contains(&t.amplitude));
            assert!((100.0..1000.0).contains(&t.omega_c));
        }
    }
}
