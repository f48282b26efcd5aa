//! Counter-based standard normals: Threefry-2x32 with 20 rounds (Salmon et al., "Parallel
//! random numbers: as easy as 1, 2, 3", SC 2011) followed by Box-Muller.
//!
//! Value `i` of a member's draw is a pure function of the member's key, the draw's number and
//! `i`: no state is carried from value to value, so a draw is one data-parallel program. On
//! the CPU backend it runs as host code written for the vector unit, on a CubeCL backend as a
//! kernel, elsewhere as integer tensor ops (`quench_kernels::ops::random`). All compute the
//! same 32-bit words; the float transform agrees to f32 rounding (the device's `ln`, `sin`,
//! `cos` against the host's polynomials), so a seed gives the same noise on every backend.
//!
//! Layout: block `j` of draw `d` of the member keyed `k` is `threefry(k, [j, d mod 2^32])` with
//! the draw's high 32 bits folded into the key, and gives values `2j` (`r cos t`) and `2j + 1`
//! (`r sin t`), where `r = sqrt(-2 ln u1)`, `t = 2 pi u2`, `u1 = (w0 >> 8 + 1) 2^-24` in
//! `(0, 1]` and `u2 = (w1 >> 8) 2^-24` in `[0, 1)`. With 24-bit uniforms the largest
//! magnitude is `sqrt(48 ln 2) = 5.77`: tails beyond it (probability 8e-9) are cut.

use std::f32::consts::FRAC_PI_2;

/// Rotation distances of Threefry-2x32, one per round modulo 8.
pub const ROTATIONS: [u32; 8] = [13, 15, 26, 6, 17, 29, 16, 24];
/// The key-schedule parity constant of Threefish.
pub const PARITY: u32 = 0x1BD1_1BDA;
/// The bits of `1 / sqrt 2` in f32: where [`ln_unit`] moves the mantissa's range to (the
/// tensor form and the CubeCL kernel split `ln u` at it too).
pub const SQRT_HALF_BITS: u32 = 0x3F35_04F3;
/// Rounds: 20 is Random123's default and passes BigCrush with margin.
pub const ROUNDS: usize = 20;

/// The 64-bit key of one member's stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct StreamKey(pub [u32; 2]);

impl StreamKey {
    /// The key of seed `seed` (its low and high 32-bit halves).
    pub fn from_seed(seed: u64) -> Self {
        Self([seed as u32, (seed >> 32) as u32])
    }

    /// The key and second counter word of draw `draw`: the draw's high half is folded into the
    /// key, so that 2^64 draws never repeat a block.
    pub fn for_draw(self, draw: u64) -> ([u32; 2], u32) {
        ([self.0[0], self.0[1] ^ (draw >> 32) as u32], draw as u32)
    }
}

/// Threefry-2x32-20 of `counter` under `key`: the reference the vector and tensor forms are
/// tested against (Random123's known answers).
pub fn threefry2x32(key: [u32; 2], counter: [u32; 2]) -> [u32; 2] {
    let schedule = [key[0], key[1], PARITY ^ key[0] ^ key[1]];
    let mut x = [
        counter[0].wrapping_add(key[0]),
        counter[1].wrapping_add(key[1]),
    ];
    for round in 0..ROUNDS {
        x[0] = x[0].wrapping_add(x[1]);
        x[1] = x[1].rotate_left(ROTATIONS[round % 8]) ^ x[0];
        if round % 4 == 3 {
            let s = round / 4 + 1;
            x[0] = x[0].wrapping_add(schedule[s % 3]);
            x[1] = x[1]
                .wrapping_add(schedule[(s + 1) % 3])
                .wrapping_add(s as u32);
        }
    }
    x
}

/// `(u1, u2)` of a block's two words: `u1` in `(0, 1]` (its log is finite), `u2` in `[0, 1)`.
#[inline(always)]
pub fn uniforms(w0: u32, w1: u32) -> (f32, f32) {
    const STEP: f32 = 1.0 / (1u32 << 24) as f32;
    // Through i32: the values fit, and signed conversion is one vector instruction.
    (
        ((w0 >> 8) + 1) as i32 as f32 * STEP,
        (w1 >> 8) as i32 as f32 * STEP,
    )
}

/// `ln u` for `u` in `(0, 1]`: `u = m 2^e` with `m` in `[1/sqrt 2, sqrt 2)`, then
/// `ln m = 2 atanh(s)`, `s = (m - 1) / (m + 1)`, `|s| <= 0.172`, by its series to `s^9`
/// (truncation 2e-9 relative). Branch-free, so that a loop of it vectorises.
#[inline(always)]
pub fn ln_unit(u: f32) -> f32 {
    // Shift the mantissa's range from [1, 2) to [0.707, 1.414) by adding the distance from
    // 1/sqrt 2 to 1 before splitting exponent and mantissa.
    let shifted = u.to_bits().wrapping_add(0x3F80_0000 - SQRT_HALF_BITS);
    let exponent = (shifted >> 23) as i32 - 127;
    let m = f32::from_bits((shifted & 0x007F_FFFF) + SQRT_HALF_BITS);
    let s = (m - 1.0) / (m + 1.0);
    let s2 = s * s;
    let series = 1.0 + s2 * (1.0 / 3.0 + s2 * (1.0 / 5.0 + s2 * (1.0 / 7.0 + s2 * (1.0 / 9.0))));
    2.0 * s * series + exponent as f32 * std::f32::consts::LN_2
}

/// `(cos 2 pi u, sin 2 pi u)` for `u` in `[0, 1)`: the nearest quarter turn `q` is taken out
/// exactly, the rest `x` (at most an eighth of a turn) goes through Taylor series to `x^9` and
/// `x^10` (truncation below 2e-9). Branch-free.
#[inline(always)]
pub fn cos_sin_turn(u: f32) -> (f32, f32) {
    // Adding 1.5 2^23 rounds to an integer (the spacing there is 1), whose low bits are q.
    const ROUNDER: f32 = 12_582_912.0;
    let quarters = u * 4.0;
    let rounded = quarters + ROUNDER;
    let q = rounded.to_bits();
    let x = (quarters - (rounded - ROUNDER)) * FRAC_PI_2;
    let x2 = x * x;
    let sin = x
        * (1.0
            + x2 * (-1.0 / 6.0
                + x2 * (1.0 / 120.0 + x2 * (-1.0 / 5040.0 + x2 * (1.0 / 362_880.0)))));
    let cos = 1.0
        + x2 * (-0.5
            + x2 * (1.0 / 24.0
                + x2 * (-1.0 / 720.0 + x2 * (1.0 / 40_320.0 + x2 * (-1.0 / 3_628_800.0)))));
    // Rotate (cos x, sin x) by q quarter turns: an odd q swaps them (negating one), and
    // q & 2 negates both (its bit moved to the sign).
    let odd = q & 1 == 1;
    let (c, s) = (if odd { -sin } else { cos }, if odd { cos } else { sin });
    let flip = (q & 2) << 30;
    (
        f32::from_bits(c.to_bits() ^ flip),
        f32::from_bits(s.to_bits() ^ flip),
    )
}
