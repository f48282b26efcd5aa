//! The PAC-Bayes bound on the generalisation gap of the Gibbs posterior, with the KL term
//! estimated by thermodynamic integration over the grid's inverse temperatures.
//!
//! For the Gibbs posterior `rho_beta ~ prior exp(-beta Lhat)`,
//! `KL(rho_beta || prior) = -beta E[Lhat] + integral_0^beta E_b[Lhat] db`; the integral is the
//! left Riemann sum `I(beta_k) = sum_j (beta_j - beta_{j-1}) Lhat(beta_{j-1})`, which
//! over-estimates it because `E_b[Lhat]` falls with `b`, so the bound stays conservative. With
//! `inner = KL + ln(2 sqrt(n) / delta)`, with probability at least `1 - delta` the test loss
//! exceeds the training loss by at most `2 inner / n + sqrt(2 Lhat inner / n)`.

/// The bound at one inverse temperature; losses are in `[0, 1]`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bound {
    /// The thermodynamic integral `I(beta)`.
    pub integral: f64,
    /// The KL estimate `I - beta Lhat`, floored at 0 (a KL divergence is never negative; a
    /// negative estimate is quadrature error).
    pub kl: f64,
    /// `KL + ln(2 sqrt(n) / delta)`.
    pub inner: f64,
    /// The bound on `test loss - training loss`.
    pub gap: f64,
}

/// The bound at every inverse temperature of `betas` (ascending, starting at 0), given the
/// mean training loss in `[0, 1]` at each (`train_loss[k]` at `betas[k]`), `n` training points
/// per chain and confidence `delta`.
pub fn pac_bayes_bounds(betas: &[f64], train_loss: &[f64], n: usize, delta: f64) -> Vec<Bound> {
    let n = n as f64;
    // As a difference of logarithms: the quotient overflows for a subnormal delta (1e-320),
    // whose logarithm is finite.
    let confidence = (2.0 * n.sqrt()).ln() - delta.ln();
    let mut integral = 0.0;
    betas
        .iter()
        .zip(train_loss)
        .enumerate()
        .map(|(k, (&beta, &lhat))| {
            if k > 0 {
                integral += (beta - betas[k - 1]) * train_loss[k - 1];
            }
            let kl = (integral - beta * lhat).max(0.0);
            let inner = kl + confidence;
            Bound {
                integral,
                kl,
                inner,
                gap: 2.0 * inner / n + (2.0 * lhat * inner / n).sqrt(),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integrates_from_zero_with_left_endpoints() {
        let bounds = pac_bayes_bounds(&[0.0, 1.0, 10.0], &[0.5, 0.4, 0.1], 50, 0.05);
        assert_eq!(bounds[0].integral, 0.0);
        assert!((bounds[1].integral - 0.5).abs() < 1e-12);
        assert!((bounds[2].integral - (0.5 + 9.0 * 0.4)).abs() < 1e-12);
        // KL at beta = 10: 4.1 - 10 * 0.1 = 3.1.
        assert!((bounds[2].kl - 3.1).abs() < 1e-12);
        let confidence = (2.0 * 50f64.sqrt() / 0.05).ln();
        let inner = 3.1 + confidence;
        let want = 2.0 * inner / 50.0 + (2.0 * 0.1 * inner / 50.0).sqrt();
        assert!((bounds[2].gap - want).abs() < 1e-12);
        // At beta = 0 the posterior is the prior: only the confidence term is left.
        assert_eq!(bounds[0].kl, 0.0);
        assert!((bounds[0].inner - confidence).abs() < 1e-12);
    }

    #[test]
    fn a_subnormal_confidence_gives_a_finite_bound() {
        // 2 sqrt(50) / 1e-320 overflows f64; its logarithm, about 739.6, does not.
        let bound = pac_bayes_bounds(&[0.0], &[0.5], 50, 1e-320)[0];
        let want = (2.0 * 50f64.sqrt()).ln() + 320.0 * std::f64::consts::LN_10;
        // The subnormal 1e-320 is held to half its spacing (2.5e-324), a relative 2.5e-4: its
        // logarithm within 2.5e-4, and the rest is rounding near 740 (1e-13).
        assert!((bound.inner - want).abs() < 1e-3, "{}", bound.inner);
        assert!(bound.gap.is_finite());
    }

    #[test]
    fn negative_kl_estimates_are_floored_and_more_data_tightens_the_bound() {
        // A training loss that rises with beta makes I - beta Lhat negative.
        let bounds = pac_bayes_bounds(&[0.0, 10.0], &[0.1, 0.5], 50, 0.05);
        assert_eq!(bounds[1].kl, 0.0);
        let small = pac_bayes_bounds(&[0.0, 10.0], &[0.5, 0.1], 50, 0.05)[1].gap;
        let large = pac_bayes_bounds(&[0.0, 10.0], &[0.5, 0.1], 5_000, 0.05)[1].gap;
        assert!(large < small / 5.0, "{large} vs {small}");
    }
}
