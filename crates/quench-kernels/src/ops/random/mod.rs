//! The random operations: counter-based standard normals ([`QuenchOps::counter_normals`],
//! drawn through [`normals`] and [`NormalStreams`]) and inverted-dropout masks
//! ([`QuenchOps::dropout_mask`]), from the streams of [`crate::threefry`]. The host kernels
//! (`quench_host::streams`, pure host code) run on the CPU backend, the composition ([`composed`]) elsewhere; both compute
//! the same 32-bit words, and the float transform agrees to f32 rounding, so a seed gives the
//! same noise on every backend.

use burn::tensor::{Tensor, TensorPrimitive};

use crate::ops::QuenchOps;
use crate::threefry::StreamKey;

pub mod composed;
#[cfg(any(feature = "cuda", feature = "wgpu"))]
pub(crate) mod cube;

pub use composed::normals_tensor;
pub use quench_host::streams::{
    Keep, dropout_mask_host, fill_mask, fill_normals, fill_uniforms, normals_host,
};

/// Draw `draw` of each member's stream on `device`, `[keys.len(), len]`
/// ([`QuenchOps::counter_normals`]: host code on the CPU backend, tensor ops elsewhere).
pub fn normals<B: QuenchOps>(
    keys: &[StreamKey],
    draw: u64,
    len: usize,
    device: &B::Device,
) -> Tensor<B, 2> {
    Tensor::from_primitive(TensorPrimitive::Float(B::counter_normals(
        keys, draw, len, device,
    )))
}

/// Per-member normal streams that advance one draw per call, so that every call gets fresh
/// noise and a member's noise never depends on which other members share the program.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NormalStreams {
    keys: Vec<StreamKey>,
    draws: u64,
}

impl NormalStreams {
    /// One stream per seed, member `m` keyed by `seeds[m]`, at draw 0.
    pub fn new(seeds: &[u64]) -> Self {
        Self {
            keys: seeds.iter().map(|&s| StreamKey::from_seed(s)).collect(),
            draws: 0,
        }
    }

    /// Members.
    pub fn members(&self) -> usize {
        self.keys.len()
    }

    /// Draws taken so far.
    pub fn draws(&self) -> u64 {
        self.draws
    }

    /// The next draw, `[members, per_member]`: one row per member, so that no call can ask
    /// for another member count than the streams hold (the caller reshapes the row).
    pub fn next<B: QuenchOps>(&mut self, per_member: usize, device: &B::Device) -> Tensor<B, 2> {
        let values = normals::<B>(&self.keys, self.draws, per_member, device);
        self.draws += 1;
        values
    }

    /// The members' keys, in member order.
    pub fn keys(&self) -> &[StreamKey] {
        &self.keys
    }

    /// Moves past one draw without computing it here: for a caller that had it computed at
    /// [`draws`](Self::draws) elsewhere (with [`fill_normals`], or inside an operation such as
    /// `QuenchOps::sgld_step`).
    pub fn skip(&mut self) {
        self.draws += 1;
    }

    /// The next draw on the host, `[members, len]` row-major.
    pub fn next_host(&mut self, len: usize) -> Vec<f32> {
        let values = normals_host(&self.keys, self.draws, len);
        self.draws += 1;
        values
    }

    /// Keeps the first `members` streams (the others' members left the program).
    pub fn retain(&mut self, members: usize) {
        self.keys.truncate(members);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::threefry::{cos_sin_turn, ln_unit, threefry2x32, uniforms};
    use quench_host::streams::{
        Keep, THREADED_FROM, fill_mask, fill_mask_portable, fill_member, fill_member_portable,
    };

    #[test]
    fn threefry_gives_random123s_known_answers() {
        assert_eq!(threefry2x32([0, 0], [0, 0]), [0x6b20_0159, 0x99ba_4efe]);
        assert_eq!(
            threefry2x32([u32::MAX; 2], [u32::MAX; 2]),
            [0x1cb9_96fc, 0xbb00_2be7]
        );
        assert_eq!(
            threefry2x32([0x1319_8a2e, 0x0370_7344], [0x243f_6a88, 0x85a3_08d3]),
            [0xc492_3a9c, 0x483d_f7a0]
        );
    }

    #[test]
    fn host_kernel_is_box_muller_of_the_reference_blocks() {
        let key = StreamKey::from_seed(0xDEAD_BEEF_0000_0007);
        let draw = (5u64 << 32) + 9;
        let got = normals_host(&[key], draw, 41);
        let (k, d) = key.for_draw(draw);
        for (j, pair) in got.chunks(2).enumerate() {
            let w = threefry2x32(k, [j as u32, d]);
            let (u1, u2) = uniforms(w[0], w[1]);
            let r = (-2.0 * f64::from(u1).ln()).sqrt();
            let t = std::f64::consts::TAU * f64::from(u2);
            let want = [r * t.cos(), r * t.sin()];
            for (g, w) in pair.iter().zip(want) {
                assert!((f64::from(*g) - w).abs() < 5e-6, "block {j}: {g} vs {w}");
            }
        }
    }

    #[test]
    fn ln_and_turns_are_accurate_over_their_whole_domains() {
        let mut worst = (0f64, 0f64);
        for i in 0..=(1u32 << 16) {
            let u = ((i << 8) | 0x80).max(1) as f32 / (1u32 << 24) as f32;
            let u = u.min(1.0);
            worst.0 = worst
                .0
                .max((f64::from(ln_unit(u)) - f64::from(u).ln()).abs());
            let (c, s) = cos_sin_turn(u);
            let t = std::f64::consts::TAU * f64::from(u);
            worst.1 = worst
                .1
                .max((f64::from(c) - t.cos()).abs())
                .max((f64::from(s) - t.sin()).abs());
        }
        assert!(worst.0 < 3e-6, "ln error {}", worst.0);
        assert!(worst.1 < 1e-6, "cos/sin error {}", worst.1);
        assert_eq!(ln_unit(1.0), 0.0);
        assert!((f64::from(ln_unit(1.0 / (1u32 << 24) as f32)) + 24.0 * 2f64.ln()).abs() < 1e-5);
    }

    crate::device_test! {
        /// The tensor ops and the operation (a CubeCL backend's kernel) on the tests' device
        /// (a GPU's `log` and `cos` have only absolute accuracy) give the host kernel's
        /// values to f32 rounding, over enough values that some fall where `ln u1` is tiny:
        /// values below 5.8 carry an f32 rounding of 3.5e-7 each step of the transform, and
        /// the radius's `sqrt(-2 ln u)` amplifies `ln`'s relative error near `u = 1` by at
        /// most 1/2, so a few roundings stay under 3e-6.
        fn tensor_ops_give_the_host_values<B>(device) {
            let keys: Vec<StreamKey> = [0u64, 1, u64::MAX, 0x1234_5678_9ABC_DEF0]
                .iter()
                .map(|&s| StreamKey::from_seed(s))
                .collect();
            for (draw, len) in [(0u64, 7usize), (3, 64), ((1 << 32) + 2, 33), (9, 50_001)] {
                let host = normals_host(&keys, draw, len);
                let tensor = crate::readback::to_host_f32(normals_tensor::<B::InnerBackend>(
                    &keys, draw, len, device,
                ));
                let operation = crate::readback::to_host_f32(normals::<B::InnerBackend>(
                    &keys, draw, len, device,
                ));
                for (form, values) in [("tensor ops", &tensor), ("operation", &operation)] {
                    assert_eq!(host.len(), values.len(), "{form}");
                    for (i, (h, t)) in host.iter().zip(values).enumerate() {
                        assert!(
                            (h - t).abs() < 3e-6,
                            "{form}, draw {draw}, value {i}: {h} vs {t}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn threaded_draws_equal_a_single_thread_and_rows_are_independent_of_neighbours() {
        let seeds: Vec<u64> = (0..5).collect();
        let keys: Vec<StreamKey> = seeds.iter().map(|&s| StreamKey::from_seed(s)).collect();
        let len = THREADED_FROM / 3 + 1;
        let all = normals_host(&keys, 4, len);
        for (m, key) in keys.iter().enumerate() {
            let mut alone = vec![0f32; len];
            fill_member(*key, 4, 0, &mut alone);
            assert_eq!(&all[m * len..(m + 1) * len], &alone[..], "member {m}");
        }
        let mut streams = NormalStreams::new(&seeds);
        let first = streams.next_host(3);
        let second = streams.next_host(3);
        assert_ne!(first, second, "each call is a fresh draw");
        assert_eq!(streams.draws(), 2);
    }

    #[test]
    fn a_mask_below_a_uniform_threshold_keeps_where_the_uniform_is_below_it() {
        let key = StreamKey::from_seed(5);
        let mut u = vec![0f32; 4_001];
        fill_uniforms(key, 7, &mut u);
        // Thresholds on either side of 1/2 (where the f32 grid is finer than 2^-24), the
        // uniforms' own values, and the ends.
        for threshold in [
            0.0,
            0.1,
            0.3,
            0.35,
            0.5,
            0.8,
            0.9,
            1.0,
            u[0],
            u[1],
            u[2] + 1e-9,
        ] {
            let keep = Keep::below_uniform(threshold, 3.0);
            let mut mask = vec![0f32; u.len()];
            fill_mask(key, 7, 0, keep, &mut mask);
            for (i, (&m, &u)) in mask.iter().zip(&u).enumerate() {
                let want = if u < threshold { 3.0 } else { 0.0 };
                assert_eq!(m, want, "threshold {threshold}, value {i}, uniform {u}");
            }
        }
    }

    #[test]
    fn dropout_masks_keep_the_reference_uniforms_below_the_rate_on_every_split() {
        let key = StreamKey::from_seed(11);
        // Odd and over the threading threshold: pieces split on several lanes.
        let len = 2 * THREADED_FROM + 3;
        let keep = 0.6;
        let mask = dropout_mask_host(key, len, keep);
        let mut u = vec![0f32; len];
        fill_uniforms(key, 0, &mut u);
        let below = ((keep * 16_777_216.0) as f32).round() / 16_777_216.0;
        let scale = (1.0 / keep) as f32;
        for (i, (&m, &u)) in mask.iter().zip(&u).enumerate() {
            assert_eq!(m, if u < below { scale } else { 0.0 }, "value {i}, u {u}");
        }
        // 131,075 values: the kept fraction's standard deviation is 0.0014.
        let kept = mask.iter().filter(|&&m| m > 0.0).count() as f64 / len as f64;
        assert!((kept - keep).abs() < 0.007, "kept {kept}");
        let (mut dispatched, mut portable) = (vec![0f32; 999], vec![0f32; 999]);
        let keep = Keep {
            below: 1 << 23,
            scale: 2.0,
        };
        fill_mask(key, 3, 32, keep, &mut dispatched);
        fill_mask_portable(key, 3, 32, keep, &mut portable);
        assert_eq!(dispatched, portable);
        assert!(dropout_mask_host(key, 100, 1.0).iter().all(|&m| m == 1.0));
        assert!(dropout_mask_host(key, 100, 0.0).iter().all(|&m| m == 0.0));
        assert_ne!(
            dropout_mask_host(StreamKey::from_seed(12), 64, 0.5),
            dropout_mask_host(key, 64, 0.5)
        );
    }

    #[test]
    fn every_vector_width_gives_the_same_bits() {
        let key = StreamKey::from_seed(99);
        let (mut dispatched, mut portable) = (vec![0f32; 1001], vec![0f32; 1001]);
        fill_member(key, 7, 64, &mut dispatched);
        fill_member_portable(key, 7, 64, &mut portable);
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&dispatched), bits(&portable));
    }

    #[test]
    fn values_are_standard_normal() {
        let n = 1 << 20;
        let values = normals_host(&[StreamKey::from_seed(42)], 0, n);
        let mean = values.iter().map(|&v| f64::from(v)).sum::<f64>() / n as f64;
        let var = values
            .iter()
            .map(|&v| (f64::from(v) - mean).powi(2))
            .sum::<f64>()
            / n as f64;
        let kurtosis = values
            .iter()
            .map(|&v| (f64::from(v) - mean).powi(4))
            .sum::<f64>()
            / n as f64
            / var.powi(2);
        // Standard errors at n = 2^20: mean 1e-3, variance 1.4e-3, kurtosis 4.8e-3.
        assert!(mean.abs() < 5e-3, "mean {mean}");
        assert!((var - 1.0).abs() < 7e-3, "variance {var}");
        assert!((kurtosis - 3.0).abs() < 0.03, "kurtosis {kurtosis}");
        // Kolmogorov-Smirnov against the normal CDF on a sorted sample.
        let mut sorted: Vec<f64> = values.iter().map(|&v| f64::from(v)).collect();
        sorted.sort_by(f64::total_cmp);
        let cdf = |x: f64| 0.5 * (1.0 + erf(x / std::f64::consts::SQRT_2));
        let d = sorted.iter().enumerate().map(|(i, &x)| {
            let f = cdf(x);
            (f - i as f64 / n as f64)
                .abs()
                .max(((i + 1) as f64 / n as f64 - f).abs())
        });
        let d = quench_support::stats::max_or_nan(d);
        // The 0.1 % critical value is 1.95 / sqrt(n).
        assert!(d < 1.95 / (n as f64).sqrt(), "KS distance {d}");
        assert!(values.iter().all(|v| v.is_finite() && v.abs() <= 5.8));
    }

    /// The error function to 1.5e-7 (Abramowitz and Stegun 7.1.26).
    fn erf(x: f64) -> f64 {
        let t = 1.0 / (1.0 + 0.327_591_1 * x.abs());
        let poly = t
            * (0.254_829_592
                + t * (-0.284_496_736
                    + t * (1.421_413_741 + t * (-1.453_152_027 + t * 1.061_405_429))));
        (1.0 - poly * (-x * x).exp()).copysign(x)
    }

    #[test]
    fn uniforms_are_in_the_unit_interval_reproducible_and_per_key() {
        let (a, b) = (StreamKey::from_seed(5), StreamKey::from_seed(6));
        let mut u = vec![0f32; 10_001];
        fill_uniforms(a, 3, &mut u);
        assert!(u.iter().all(|&x| (0.0..1.0).contains(&x)));
        let mean = u.iter().map(|&x| f64::from(x)).sum::<f64>() / u.len() as f64;
        // The mean of 10,001 uniforms has a standard deviation of 0.0029.
        assert!((mean - 0.5).abs() < 0.015, "{mean}");
        let below = u.iter().filter(|&&x| x < 0.2).count() as f64 / u.len() as f64;
        assert!((below - 0.2).abs() < 0.02, "{below}");
        let mut again = vec![0f32; 10_001];
        fill_uniforms(a, 3, &mut again);
        assert_eq!(u, again);
        let mut other = vec![0f32; 10_001];
        fill_uniforms(b, 3, &mut other);
        assert_ne!(u, other);
        fill_uniforms(a, 4, &mut other);
        assert_ne!(u, other);
        // The words are the Threefry blocks the normals use.
        let w = threefry2x32(a.0, [7, 3]);
        assert_eq!(u[15], (w[1] >> 8) as f32 / (1u32 << 24) as f32);
    }
}
