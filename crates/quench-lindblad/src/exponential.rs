//! The matrix exponential of the exact solver: a Taylor polynomial after scaling by `2^-s`,
//! then `s` squarings, with the degree and `s` fixed on the host from a bound known in
//! advance, so that no value is read back from the device.

use quench_kernels::ops::expmv::remainder_bound;
use quench_kernels::ops::propagate::SquaredPolynomial;

/// Largest chunk size and chunk count considered: degree up to 64, far beyond what any
/// bound needs after a few squarings.
const MAX_CHUNK: usize = 8;

/// How to evaluate `exp(X)` for `||X||_1 <= bound`: the Taylor polynomial of degree
/// `chunk * chunks` of `X / 2^squarings` by Paterson-Stockmeyer, then `squarings` squarings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TaylorPlan {
    /// Paterson-Stockmeyer chunk size `q` (powers `X^2 .. X^q` are formed).
    pub(crate) chunk: usize,
    /// Number of chunks `r`; the degree is `q r`.
    pub(crate) chunks: usize,
    /// Number of squarings `s`.
    pub(crate) squarings: u32,
}

impl TaylorPlan {
    /// The cheapest plan whose truncation error is below `unit_roundoff` for every matrix with
    /// `||X||_1 <= bound`: fewest batched products (each costs several elementwise
    /// operations), then fewest squarings (each doubles the rounding error of the polynomial
    /// in low precision), then fewest elementwise operations.
    pub(crate) fn new(bound: f64, unit_roundoff: f64) -> Self {
        let plan = |chunk: usize, chunks: usize| {
            let degree = chunk * chunks;
            let squarings = (0..64u32)
                .find(|&s| remainder_bound(bound / 2f64.powi(s as i32), degree) <= unit_roundoff)
                .unwrap_or(64);
            TaylorPlan {
                chunk,
                chunks,
                squarings,
            }
        };
        let rank = |p: &TaylorPlan| (p.products(), p.squarings, p.scaled_sums());
        (1..=MAX_CHUNK)
            .flat_map(|chunk| (1..=MAX_CHUNK).map(move |chunks| (chunk, chunks)))
            .map(|(chunk, chunks)| plan(chunk, chunks))
            .fold(
                plan(1, 1),
                |best, p| if rank(&p) < rank(&best) { p } else { best },
            )
    }

    /// Batched matrix products the plan costs.
    pub(crate) fn products(&self) -> usize {
        self.chunk + self.chunks - 2 + self.squarings as usize
    }

    /// Elementwise operations forming the chunks: a scaled sum of up to `q + 1` powers each.
    fn scaled_sums(&self) -> usize {
        2 * (self.chunk + 1) * self.chunks
    }

    /// The plan as a squared polynomial: the Taylor polynomial of degree `chunk * chunks`
    /// (coefficients `1 / k!`), then the squarings.
    pub(crate) fn polynomial(&self) -> SquaredPolynomial {
        SquaredPolynomial::taylor(self.chunk * self.chunks, self.squarings)
    }

    /// The Taylor coefficients `1 / k!`, `k = 0 .. degree`.
    pub(crate) fn coefficients(&self) -> Vec<f64> {
        self.polynomial().coefficients
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guide_bound_in_f32_costs_six_products() {
        // One qubit, controls within +-10, rates within 1, t_seg = 0.05: ||M t|| <= 2.5.
        let plan = TaylorPlan::new(2.5, 2f64.powi(-24));
        assert_eq!(plan.products(), 6, "{plan:?}");
        let phi = 2.5 / 2f64.powi(plan.squarings as i32);
        assert!(remainder_bound(phi, plan.chunk * plan.chunks) <= 2f64.powi(-24));
    }

    #[test]
    fn tighter_roundoff_and_larger_bounds_never_get_cheaper() {
        let mut last = 0;
        for bound in [0.1, 1.0, 4.0, 16.0, 256.0] {
            let single = TaylorPlan::new(bound, 2f64.powi(-24));
            let double = TaylorPlan::new(bound, 2f64.powi(-53));
            assert!(double.products() >= single.products());
            assert!(single.products() >= last);
            last = single.products();
        }
    }

    #[test]
    fn zero_bound_needs_no_product() {
        let plan = TaylorPlan::new(0.0, 2f64.powi(-24));
        assert_eq!((plan.products(), plan.coefficients()), (0, vec![1.0, 1.0]));
    }
}
