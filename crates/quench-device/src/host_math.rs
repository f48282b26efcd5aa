//! Activations for host kernels that vectorise: an exponential of our own (Cody-Waite range
//! reduction and a degree-7 polynomial, below 1e-7 relative error), branch-free and without
//! float-to-int conversions, and the sigmoid and tanh built on it. libm's `tanhf` and `expf`
//! are a call per element, which keeps a loop scalar.

/// `ln 2` in two parts for the exponential's range reduction: the first exact in 9 bits, so
/// `n ln2_hi` is exact for the `n` that occur.
const LN2_HI: f32 = 0.693_359_4;
const LN2_LO: f32 = -2.121_944_4e-4;
/// `1.5 2^23`: adding and subtracting it rounds an f32 below `2^22` to an integer.
const ROUND: f32 = 12_582_912.0;

/// `e^x` for finite `x`, clamped to `[-87, 88]` (normal results); relative error below 1e-7.
/// Branch-free and without float-to-int conversions (whose saturation checks keep loops
/// scalar), so that loops over it vectorise.
#[inline(always)]
pub(crate) fn exp(x: f32) -> f32 {
    let x = x.clamp(-87.0, 88.0);
    // `shifted` holds round(x / ln 2) in its low mantissa bits, offset by ROUND's.
    let shifted = x * std::f32::consts::LOG2_E + ROUND;
    let n = shifted - ROUND;
    let r = (x - n * LN2_HI) - n * LN2_LO;
    // e^r on |r| <= ln2 / 2 by its Taylor polynomial of degree 7 (remainder below 6e-9).
    let p = 1.0
        + r * (1.0
            + r * (0.5
                + r * (1.0 / 6.0
                    + r * (1.0 / 24.0
                        + r * (1.0 / 120.0 + r * (1.0 / 720.0 + r * (1.0 / 5040.0)))))));
    let n_bits = shifted.to_bits().wrapping_sub(ROUND.to_bits());
    p * f32::from_bits(n_bits.wrapping_add(127) << 23)
}

#[inline(always)]
pub(crate) fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + exp(-x))
}

/// `tanh x = 1 - 2 / (1 + e^{2x})`: absolute error near f32's epsilon, which is what the cell
/// update adds it to.
#[inline(always)]
pub(crate) fn tanh(x: f32) -> f32 {
    1.0 - 2.0 / (1.0 + exp(2.0 * x))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_vectorised_activations_match_the_standard_library() {
        let mut worst = [0f64; 3];
        for k in -40_000..=40_000 {
            let x = k as f32 * 5e-4;
            let pairs = [
                (exp(x), x.exp()),
                (sigmoid(x), 1.0 / (1.0 + (-x).exp())),
                (tanh(x), x.tanh()),
            ];
            for (w, (got, want)) in worst.iter_mut().zip(pairs) {
                *w = w.max(f64::from((got - want).abs()) / f64::from(want.abs().max(1.0)));
            }
        }
        assert!(worst.iter().all(|&w| w < 3e-7), "worst errors {worst:?}");
        // Saturation, not overflow or NaN, far out.
        assert_eq!((tanh(500.0), tanh(-500.0)), (1.0, -1.0));
        assert_eq!(sigmoid(-500.0).max(0.0), sigmoid(-500.0));
        assert!(sigmoid(-500.0) < 1e-37 && sigmoid(500.0) == 1.0);
    }
}
