//! What tests of tensor code share: deterministic inputs without a random generator
//! ([`spread`]), the largest gap between two tensors' values that never hides a NaN
//! ([`largest_gap`]), and the bound on the CPU backend's reciprocal that tolerances through a
//! division take ([`RECIP_ESTIMATE_BOUND`]).

use burn::tensor::Tensor;
use burn::tensor::backend::Backend;

/// The largest relative error of burn-ndarray 0.21's f32 `recip` on this processor's
/// architecture. It runs the processor's reciprocal estimate without a refinement step
/// (macerator 0.3), on tensors of 32 values or more: on x86 `rcpps` with SSE or AVX2, within
/// 1.5 x 2^-12 (3.7e-4; the bound Intel's and AMD's manuals give, and the two vendors' values
/// differ within it), and `rcp14ps` with AVX-512, within 2^-14; on aarch64 `frecpe`, an 8-bit
/// estimate, within 2^-8. Every gradient through a division's numerator, a logarithm or a
/// reciprocal on the CPU backend carries it (burn-autodiff takes `recip` there), so a test
/// comparing with such a gradient takes its tolerance from this bound, not from what one
/// machine gave. Elsewhere the division is exact: 0.
pub const RECIP_ESTIMATE_BOUND: f64 = if cfg!(target_arch = "aarch64") {
    1.0 / 256.0
} else if cfg!(any(target_arch = "x86", target_arch = "x86_64")) {
    1.5 / 4096.0
} else {
    0.0
};

/// The largest `|a - b|` between two tensors' values (read back; as many values each), NaN
/// when any value of either is NaN, so that a broken result never passes a `gap < tolerance`
/// check (a plain `fold(0.0, f32::max)` drops NaN).
pub fn largest_gap<B: Backend, const D: usize>(a: Tensor<B, D>, b: Tensor<B, D>) -> f32 {
    let (a, b) = (
        crate::readback::to_host_f32(a),
        crate::readback::to_host_f32(b),
    );
    assert_eq!(a.len(), b.len(), "tensors of different sizes");
    quench_support::stats::max_abs_difference(&a, &b) as f32
}

/// `len` deterministic values spread over `[-scale, scale)` (a multiplicative hash of the index
/// and `salt`): test inputs that differ in every entry without a random generator.
pub fn spread(len: usize, salt: u32, scale: f32) -> Vec<f32> {
    (0..len as u32)
        .map(|i| {
            let bits = i
                .wrapping_mul(2_654_435_761)
                .wrapping_add(salt.wrapping_mul(40_503));
            ((bits >> 8) as f32 / 8_388_608.0 - 1.0) * scale
        })
        .collect()
}
