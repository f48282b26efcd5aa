//! The two-mode Gaussian mixture of Welling & Teh (2011, "Bayesian learning via stochastic
//! gradient Langevin dynamics", section 5.1): the standard check that a sampler finds both
//! modes of a posterior.
//!
//! Model: `theta1 ~ N(0, 10)`, `theta2 ~ N(0, 1)`, and every point
//! `x ~ 1/2 N(theta1, sigma_x^2) + 1/2 N(theta1 + theta2, sigma_x^2)` with `sigma_x^2 = 2`.
//! Data drawn at `(theta1, theta2) = (0, 1)` has a posterior with two modes, near `(0, 1)` and
//! near `(1, -1)` (the same two component means, swapped); the paper uses 100 points.

use std::f64::consts::PI;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rand_distr::StandardNormal;

use crate::Dataset;

/// Points of the paper's data set.
pub const WELLING_TEH_POINTS: usize = 100;

/// Parameters of the mixture and of its prior.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TwoModeMixture {
    /// `(theta1, theta2)` the data is drawn at; the paper's `(0, 1)`.
    pub theta: [f64; 2],
    /// Variance of each component, `sigma_x^2`; the paper's 2.
    pub sigma_x2: f64,
    /// Prior variances of `theta1` and `theta2`; the paper's `(10, 1)`.
    pub prior_var: [f64; 2],
}

impl Default for TwoModeMixture {
    /// The paper's setting.
    fn default() -> Self {
        Self {
            theta: [0.0, 1.0],
            sigma_x2: 2.0,
            prior_var: [10.0, 1.0],
        }
    }
}

impl TwoModeMixture {
    /// Draws `n` points with `StdRng::seed_from_u64(seed)` (per point: the component, then its
    /// normal deviate): samples `[1]`, and as label the component that produced the point
    /// (0: mean `theta1`, 1: mean `theta1 + theta2`), which a sampler never sees.
    pub fn sample(&self, n: usize, seed: u64) -> Dataset {
        let mut rng = StdRng::seed_from_u64(seed);
        let sd = self.sigma_x2.sqrt();
        let (x, components): (Vec<f32>, Vec<i64>) = (0..n)
            .map(|_| {
                let second = rng.random_bool(0.5);
                let mean = self.theta[0] + if second { self.theta[1] } else { 0.0 };
                let deviate: f64 = rng.sample(StandardNormal);
                ((mean + sd * deviate) as f32, i64::from(second))
            })
            .unzip();
        Dataset::new(x, components, vec![1]).expect("one point per component label")
    }

    /// Unnormalised log posterior of `theta` given points `x` (`[n]`, e.g. the features of
    /// [`Self::sample`]): log prior plus log likelihood, up to a constant; in f64 on the host
    /// as a reference for samplers.
    pub fn log_posterior(&self, x: &[f32], theta: [f64; 2]) -> f64 {
        let log_prior = -theta[0] * theta[0] / (2.0 * self.prior_var[0])
            - theta[1] * theta[1] / (2.0 * self.prior_var[1]);
        let normal = |x: f64, mean: f64| {
            (-(x - mean) * (x - mean) / (2.0 * self.sigma_x2)).exp()
                / (2.0 * PI * self.sigma_x2).sqrt()
        };
        let log_likelihood: f64 = x
            .iter()
            .map(|&x| {
                let x = f64::from(x);
                (0.5 * normal(x, theta[0]) + 0.5 * normal(x, theta[0] + theta[1])).ln()
            })
            .sum();
        log_prior + log_likelihood
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_the_paper_data_reproducibly() {
        let mixture = TwoModeMixture::default();
        let data = mixture.sample(WELLING_TEH_POINTS, 1);
        assert_eq!(data, mixture.sample(WELLING_TEH_POINTS, 1));
        assert_eq!((data.len(), data.sample_shape()), (100, &[1][..]));
        let big = mixture.sample(20_000, 2);
        let mean = big.features().iter().map(|&x| f64::from(x)).sum::<f64>() / 20_000.0;
        // Mixture mean theta1 + theta2 / 2 = 0.5, variance 2 + 1/4: sd of the mean 0.011.
        assert!((mean - 0.5).abs() < 0.05, "mean {mean}");
        let seconds = big.labels().iter().sum::<i64>();
        assert!(
            (9_700..10_300).contains(&seconds),
            "{seconds} from component 2"
        );
    }

    #[test]
    fn posterior_has_the_two_modes_of_the_paper() {
        let mixture = TwoModeMixture::default();
        let data = mixture.sample(WELLING_TEH_POINTS, 0);
        let x = data.features();
        let grid: Vec<[f64; 2]> = (-30..=30)
            .flat_map(|i| (-30..=30).map(move |j| [f64::from(i) / 10.0, f64::from(j) / 10.0]))
            .collect();
        // The highest grid point inside each half-plane theta2 > 0 and theta2 < 0.
        let best = |upper: bool| {
            grid.iter()
                .filter(|t| (t[1] > 0.0) == upper && t[1] != 0.0)
                .max_by(|a, b| {
                    mixture
                        .log_posterior(x, **a)
                        .total_cmp(&mixture.log_posterior(x, **b))
                })
                .copied()
                .unwrap()
        };
        let (upper, lower) = (best(true), best(false));
        assert!(
            (upper[0] - 0.0).abs() <= 0.6 && (upper[1] - 1.0).abs() <= 0.6,
            "{upper:?}"
        );
        assert!(
            (lower[0] - 1.0).abs() <= 0.6 && (lower[1] + 1.0).abs() <= 0.6,
            "{lower:?}"
        );
        // The likelihood is symmetric under (t1, t2) -> (t1 + t2, -t2); only the wide prior
        // tells the modes apart, by less than the 0.1 grid step.
        let mirror = [upper[0] + upper[1], -upper[1]];
        assert!(
            (0..2).all(|i| (lower[i] - mirror[i]).abs() < 0.15),
            "{lower:?} {mirror:?}"
        );
        // Both are modes: far above the posterior at the origin and between them.
        let saddle = mixture.log_posterior(x, [0.5, 0.0]);
        assert!(mixture.log_posterior(x, upper) > saddle);
        assert!(mixture.log_posterior(x, lower) > saddle);
    }
}
