//! Counter-based standard normals: Threefry-2x32 with 20 rounds (Salmon et al., "Parallel
//! random numbers: as easy as 1, 2, 3", SC 2011) followed by Box-Muller.
//!
//! Value `i` of a member's draw is a pure function of the member's key, the draw's number and
//! `i`: no state is carried from value to value, so a draw is one data-parallel program. On
//! the CPU backend it runs as host code written for the vector unit ([`normals_host`]); on
//! other backends as integer tensor ops that Burn fuses ([`normals_tensor`]). Both compute the
//! same 32-bit words; the float transform agrees to f32 rounding (the device's `ln`, `sin`,
//! `cos` against the host's polynomials), so a seed gives the same noise on every backend.
//!
//! Layout: block `j` of draw `d` of the member keyed `k` is `threefry(k, [j, d mod 2^32])` with
//! the draw's high 32 bits folded into the key, and gives values `2j` (`r cos t`) and `2j + 1`
//! (`r sin t`), where `r = sqrt(-2 ln u1)`, `t = 2 pi u2`, `u1 = (w0 >> 8 + 1) 2^-24` in
//! `(0, 1]` and `u2 = (w1 >> 8) 2^-24` in `[0, 1)`. With 24-bit uniforms the largest
//! magnitude is `sqrt(48 ln 2) = 5.77`: tails beyond it (probability 8e-9) are cut.

use crate::views::ReshapeTo;
use std::f32::consts::FRAC_PI_2;

use burn::tensor::backend::Backend;
use burn::tensor::{ElementConversion, Int, Tensor, TensorData, TensorPrimitive};

use crate::lanes::in_lanes;
use crate::ops::QuenchOps;

/// Rotation distances of Threefry-2x32, one per round modulo 8.
const ROTATIONS: [u32; 8] = [13, 15, 26, 6, 17, 29, 16, 24];
/// The key-schedule parity constant of Threefish.
const PARITY: u32 = 0x1BD1_1BDA;
/// Rounds: 20 is Random123's default and passes BigCrush with margin.
const ROUNDS: usize = 20;
/// Blocks per vector batch of the host kernel (two output values each).
const LANES: usize = 16;
/// Values below which a host draw runs on the calling thread only.
const THREADED_FROM: usize = 1 << 16;

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
    fn for_draw(self, draw: u64) -> ([u32; 2], u32) {
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
fn uniforms(w0: u32, w1: u32) -> (f32, f32) {
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
fn ln_unit(u: f32) -> f32 {
    const SQRT_HALF: u32 = 0x3F35_04F3;
    // Shift the mantissa's range from [1, 2) to [0.707, 1.414) by adding the distance from
    // 1/sqrt 2 to 1 before splitting exponent and mantissa.
    let shifted = u.to_bits().wrapping_add(0x3F80_0000 - SQRT_HALF);
    let exponent = (shifted >> 23) as i32 - 127;
    let m = f32::from_bits((shifted & 0x007F_FFFF) + SQRT_HALF);
    let s = (m - 1.0) / (m + 1.0);
    let s2 = s * s;
    let series = 1.0 + s2 * (1.0 / 3.0 + s2 * (1.0 / 5.0 + s2 * (1.0 / 7.0 + s2 * (1.0 / 9.0))));
    2.0 * s * series + exponent as f32 * std::f32::consts::LN_2
}

/// `(cos 2 pi u, sin 2 pi u)` for `u` in `[0, 1)`: the nearest quarter turn `q` is taken out
/// exactly, the rest `x` (at most an eighth of a turn) goes through Taylor series to `x^9` and
/// `x^10` (truncation below 2e-9). Branch-free.
fn cos_sin_turn(u: f32) -> (f32, f32) {
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

/// `LANES` blocks through one round with rotation `R` (a constant, so that the rotation is
/// one vector shift pair).
#[inline(always)]
fn round<const R: u32>(x0: &mut [u32; LANES], x1: &mut [u32; LANES]) {
    for i in 0..LANES {
        x0[i] = x0[i].wrapping_add(x1[i]);
        x1[i] = x1[i].rotate_left(R) ^ x0[i];
    }
}

/// Four rounds then the key injection `s` of `schedule`.
#[inline(always)]
fn four_rounds<const A: u32, const B: u32, const C: u32, const D: u32>(
    x0: &mut [u32; LANES],
    x1: &mut [u32; LANES],
    schedule: &[u32; 3],
    s: usize,
) {
    round::<A>(x0, x1);
    round::<B>(x0, x1);
    round::<C>(x0, x1);
    round::<D>(x0, x1);
    let (k0, k1) = (
        schedule[s % 3],
        schedule[(s + 1) % 3].wrapping_add(s as u32),
    );
    for i in 0..LANES {
        x0[i] = x0[i].wrapping_add(k0);
        x1[i] = x1[i].wrapping_add(k1);
    }
}

crate::simd_dispatch! {
    /// Fills `out` with values `first..first + out.len()` of one member's draw. `first` is
    /// even. AVX-512 or AVX2 where the CPU has them, with the same values (`crate::simd`).
    fn fill_member(key: StreamKey, draw: u64, first: usize, out: &mut [f32]) => fill_member_portable
}

/// `LANES` consecutive blocks from block `block` of the draw whose key schedule is `schedule`
/// and second counter word `d`: the words `(x0, x1)` of each.
#[inline(always)]
fn blocks(schedule: &[u32; 3], d: u32, block: u32) -> ([u32; LANES], [u32; LANES]) {
    // LANES blocks side by side: every statement below is one vector op per lane group.
    let mut x0 = [0u32; LANES];
    let mut x1 = [d.wrapping_add(schedule[1]); LANES];
    for (i, x) in x0.iter_mut().enumerate() {
        *x = block.wrapping_add(i as u32).wrapping_add(schedule[0]);
    }
    // ROUNDS = 20: five groups of four, the rotations cycling through ROTATIONS.
    const R: [u32; 8] = ROTATIONS;
    four_rounds::<{ R[0] }, { R[1] }, { R[2] }, { R[3] }>(&mut x0, &mut x1, schedule, 1);
    four_rounds::<{ R[4] }, { R[5] }, { R[6] }, { R[7] }>(&mut x0, &mut x1, schedule, 2);
    four_rounds::<{ R[0] }, { R[1] }, { R[2] }, { R[3] }>(&mut x0, &mut x1, schedule, 3);
    four_rounds::<{ R[4] }, { R[5] }, { R[6] }, { R[7] }>(&mut x0, &mut x1, schedule, 4);
    four_rounds::<{ R[0] }, { R[1] }, { R[2] }, { R[3] }>(&mut x0, &mut x1, schedule, 5);
    (x0, x1)
}

/// Fills `out` (values `first..`, `first` even) of one draw, `LANES` blocks at a time, with
/// `value(w0, w1)`: the two values of a block from its two words.
#[inline(always)]
fn fill_blocks(
    key: StreamKey,
    draw: u64,
    first: usize,
    out: &mut [f32],
    value: impl Fn(u32, u32) -> (f32, f32),
) {
    let (key, d) = key.for_draw(draw);
    let schedule = [key[0], key[1], PARITY ^ key[0] ^ key[1]];
    let mut block = (first / 2) as u32;
    for chunk in out.chunks_mut(2 * LANES) {
        let (x0, x1) = blocks(&schedule, d, block);
        let mut pairs = [0f32; 2 * LANES];
        for i in 0..LANES {
            (pairs[2 * i], pairs[2 * i + 1]) = value(x0[i], x1[i]);
        }
        chunk.copy_from_slice(&pairs[..chunk.len()]);
        block = block.wrapping_add(LANES as u32);
    }
}

/// The normals' host kernel, written for whichever vector width it is compiled for.
#[inline(always)]
fn fill_member_portable(key: StreamKey, draw: u64, first: usize, out: &mut [f32]) {
    fill_blocks(key, draw, first, out, |w0, w1| {
        let (u1, u2) = uniforms(w0, w1);
        let r = (-2.0 * ln_unit(u1)).sqrt();
        let (c, s) = cos_sin_turn(u2);
        (r * c, r * s)
    });
}

/// A dropout mask's threshold and kept value: a value is `scale` where its word's top 24
/// bits are below `below`, else 0.
#[derive(Debug, Clone, Copy)]
struct Keep {
    below: u32,
    scale: f32,
}

crate::simd_dispatch! {
    /// Fills `out` with values `first..` of one draw's mask (`Keep`). Vector code as
    /// [`fill_member`], the same values.
    fn fill_mask(key: StreamKey, draw: u64, first: usize, keep: Keep, out: &mut [f32]) => fill_mask_portable
}

#[inline(always)]
fn fill_mask_portable(key: StreamKey, draw: u64, first: usize, keep: Keep, out: &mut [f32]) {
    let pick = |w: u32| if w >> 8 < keep.below { keep.scale } else { 0.0 };
    fill_blocks(key, draw, first, out, |w0, w1| (pick(w0), pick(w1)));
}

/// Fills `out` with the first `out.len()` values of draw `draw` of the stream keyed `key`:
/// what [`normals_host`] gives that member, for callers that fuse the noise into their own
/// per-member loop.
pub fn fill_normals(key: StreamKey, draw: u64, out: &mut [f32]) {
    fill_member(key, draw, 0, out);
}

/// Fills `out` with uniforms in `[0, 1)` on 24 bits (`(w >> 8) 2^-24`) from draw `draw` of the
/// stream keyed `key`: values `2j` and `2j + 1` are block `j`'s two words. For masks such as
/// dropout's, where a member's values must not depend on the other members.
pub fn fill_uniforms(key: StreamKey, draw: u64, out: &mut [f32]) {
    const STEP: f32 = 1.0 / (1u32 << 24) as f32;
    let (key, d) = key.for_draw(draw);
    for (j, pair) in out.chunks_mut(2).enumerate() {
        let words = threefry2x32(key, [j as u32, d]);
        for (u, w) in pair.iter_mut().zip(words) {
            *u = (w >> 8) as f32 * STEP;
        }
    }
}

/// Draw `draw` of each member's stream on the host: `len` standard normals per member, member
/// after member (`[keys.len(), len]` row-major). Large draws are split over the host's cores.
pub fn normals_host(keys: &[StreamKey], draw: u64, len: usize) -> Vec<f32> {
    fill_rows(keys, len, |key, first, part| {
        fill_member(key, draw, first, part)
    })
}

/// An inverted-dropout mask of `len` values from the stream keyed `key` (its draw 0): each
/// value independently `1 / keep` with probability `keep` (to 2^-24), else 0. Large masks
/// are split over the host's cores; the values do not depend on the split.
pub fn dropout_mask_host(key: StreamKey, len: usize, keep: f64) -> Vec<f32> {
    let keep = Keep {
        below: (keep.clamp(0.0, 1.0) * f64::from(1u32 << 24)).round() as u32,
        scale: (1.0 / keep) as f32,
    };
    fill_rows(&[key], len, |key, first, part| {
        fill_mask(key, 0, first, keep, part)
    })
}

/// `[keys.len(), len]` row-major, filled by `fill(key, first, part)` (values `first..` of the
/// row keyed `key`) in even-sized pieces of whole blocks, each inside one row, over the
/// host's cores when the draw is large.
fn fill_rows(
    keys: &[StreamKey],
    len: usize,
    fill: impl Fn(StreamKey, usize, &mut [f32]) + Sync,
) -> Vec<f32> {
    // Every value of every row is filled below.
    let mut out = crate::host_buffers::take(keys.len() * len);
    if len == 0 {
        return out;
    }
    let lanes = if out.len() < THREADED_FROM {
        1
    } else {
        crate::lanes::host_cores()
    };
    let piece = (out.len().div_ceil(lanes) + 1) & !1;
    let mut jobs: Vec<(StreamKey, usize, &mut [f32])> = Vec::new();
    for (key, row) in keys.iter().zip(out.chunks_mut(len)) {
        let mut first = 0;
        for part in row.chunks_mut(piece) {
            let n = part.len();
            jobs.push((*key, first, part));
            first += n;
        }
    }
    in_lanes(jobs, lanes, |group| {
        for (key, first, part) in group {
            fill(key, first, part);
        }
    });
    out
}

/// A 32-bit word as two 16-bit halves in integer tensors `[members, blocks]` (or `[members,
/// 1]` for keys): every intermediate stays below 2^31, so the words are the same on a backend
/// with 32-bit signed integers (CUDA) as with 64-bit ones (ndarray).
struct Word<B: Backend> {
    hi: Tensor<B, 2, Int>,
    lo: Tensor<B, 2, Int>,
}

fn int<B: Backend>(value: i64) -> B::IntElem {
    value.elem()
}

impl<B: Backend> Word<B> {
    /// One word per member, from host values, as `[members, 1]`.
    fn column(values: &[u32], device: &B::Device) -> Self {
        let half = |f: fn(u32) -> u32| {
            let data: Vec<i64> = values.iter().map(|&v| i64::from(f(v))).collect();
            Tensor::from_data(TensorData::new(data, [values.len(), 1]), device)
        };
        Self {
            hi: half(|v| v >> 16),
            lo: half(|v| v & 0xFFFF),
        }
    }

    fn add(self, other: &Self) -> Self {
        let lo = self.lo + other.lo.clone();
        let carry = lo.clone().bitwise_right_shift_scalar(int::<B>(16));
        Self {
            hi: (self.hi + other.hi.clone() + carry).bitwise_and_scalar(int::<B>(0xFFFF)),
            lo: lo.bitwise_and_scalar(int::<B>(0xFFFF)),
        }
    }

    fn xor(self, other: &Self) -> Self {
        Self {
            hi: self.hi.bitwise_xor(other.hi.clone()),
            lo: self.lo.bitwise_xor(other.lo.clone()),
        }
    }

    /// Rotation left by `r` bits: by 16 swaps the halves, the rest moves bits across them.
    fn rotate_left(self, r: u32) -> Self {
        let (a, b, r) = if r >= 16 {
            (self.lo, self.hi, r - 16)
        } else {
            (self.hi, self.lo, r)
        };
        if r == 0 {
            return Self { hi: a, lo: b };
        }
        let (up, down) = (int::<B>(i64::from(r)), int::<B>(16 - i64::from(r)));
        let mask = int::<B>(0xFFFF);
        let hi = a
            .clone()
            .bitwise_left_shift_scalar(up)
            .bitwise_or(b.clone().bitwise_right_shift_scalar(down))
            .bitwise_and_scalar(mask);
        let lo = b
            .bitwise_left_shift_scalar(up)
            .bitwise_or(a.bitwise_right_shift_scalar(down))
            .bitwise_and_scalar(mask);
        Self { hi, lo }
    }

    /// The top 24 bits, as an integer below 2^24.
    fn top24_int(self) -> Tensor<B, 2, Int> {
        self.hi.bitwise_left_shift_scalar(int::<B>(8))
            + self.lo.bitwise_right_shift_scalar(int::<B>(8))
    }
}

/// `c[0] y^n + c[1] y^(n-1) + ... + c[n]` by Horner's rule, in the host kernel's order:
/// `c[n] + y (c[n-1] + y (... + y c[0]))`, each coefficient rounded to f32 as the host's are.
fn horner<B: Backend>(y: Tensor<B, 2>, coefficients: &[f64]) -> Tensor<B, 2> {
    let f32_of = |c: f64| f64::from(c as f32);
    let mut acc = y.clone().mul_scalar(f32_of(coefficients[0]));
    for (i, &c) in coefficients.iter().enumerate().skip(1) {
        acc = acc.add_scalar(f32_of(c));
        if i + 1 < coefficients.len() {
            acc = acc * y.clone();
        }
    }
    acc
}

/// [`ln_unit`] as tensor ops for `u` in `(0, 1]`: where `u >= 1/sqrt 2` the host's series
/// with exponent 0 (so the same value to f32 rounding where `ln u` is small), below it the
/// device's `log`, whose absolute error is there a relative one under 2e-6.
fn ln_unit_tensor<B: Backend>(u: Tensor<B, 2>) -> Tensor<B, 2> {
    let near_one = u.clone().greater_equal_elem(f32::from_bits(0x3F35_04F3));
    let s = (u.clone() - 1.0) / (u.clone() + 1.0);
    let series = horner(
        s.clone() * s.clone(),
        &[1.0 / 9.0, 1.0 / 7.0, 1.0 / 5.0, 1.0 / 3.0, 1.0],
    );
    u.log().mask_where(near_one, s.mul_scalar(2.0) * series)
}

/// [`cos_sin_turn`] as tensor ops, for `u = t 2^-24` given by the integer `t` below 2^24: the
/// nearest quarter turn `q` is taken out in integers (exactly), the rest through the host's
/// series, then rotated by `q`.
fn cos_sin_turn_tensor<B: Backend>(t: Tensor<B, 2, Int>) -> (Tensor<B, 2>, Tensor<B, 2>) {
    // A quarter turn is 2^22 steps of t.
    let q = (t.clone() + int::<B>(1 << 21)).bitwise_right_shift_scalar(int::<B>(22));
    let rest = t - q.clone().bitwise_left_shift_scalar(int::<B>(22));
    let x = rest
        .float()
        .mul_scalar(1.0 / f64::from(1u32 << 22))
        .mul_scalar(f64::from(FRAC_PI_2));
    let x2 = x.clone() * x.clone();
    let sin = x * horner(
        x2.clone(),
        &[1.0 / 362_880.0, -1.0 / 5040.0, 1.0 / 120.0, -1.0 / 6.0, 1.0],
    );
    let cos = horner(
        x2,
        &[
            -1.0 / 3_628_800.0,
            1.0 / 40_320.0,
            -1.0 / 720.0,
            1.0 / 24.0,
            -0.5,
            1.0,
        ],
    );
    // An odd q swaps the pair, negating the new cos; q & 2 negates both.
    let odd = q
        .clone()
        .bitwise_and_scalar(int::<B>(1))
        .equal_elem(int::<B>(1));
    let sign = q
        .bitwise_and_scalar(int::<B>(2))
        .float()
        .mul_scalar(-1.0)
        .add_scalar(1.0);
    let c = cos.clone().mask_where(odd.clone(), sin.clone().neg());
    let s = sin.mask_where(odd, cos);
    (c * sign.clone(), s * sign)
}

/// Draw `draw` of each member's stream as tensor ops on `device`: `[keys.len(), len]`, the
/// same words as [`normals_host`] and the same values to f32 rounding.
pub fn normals_tensor<B: Backend>(
    keys: &[StreamKey],
    draw: u64,
    len: usize,
    device: &B::Device,
) -> Tensor<B, 2> {
    let members = keys.len();
    let blocks = len.div_ceil(2);
    if members == 0 || blocks == 0 {
        return Tensor::zeros([members, len], device);
    }
    let (k0, k1): (Vec<u32>, Vec<u32>) = keys
        .iter()
        .map(|k| {
            let (key, _) = k.for_draw(draw);
            (key[0], key[1])
        })
        .unzip();
    let d = draw as u32;
    let k2: Vec<u32> = k0.iter().zip(&k1).map(|(a, b)| PARITY ^ a ^ b).collect();
    let schedule = [
        Word::<B>::column(&k0, device),
        Word::column(&k1, device),
        Word::column(&k2, device),
    ];
    // Counter word 0 is the block index j, split into halves over [1, blocks].
    let j = Tensor::<B, 1, Int>::arange(0..blocks as i64, device).reshape_to([1, blocks]);
    let counter = Word {
        hi: j
            .clone()
            .bitwise_right_shift_scalar(int::<B>(16))
            .expand([members, blocks]),
        lo: j
            .bitwise_and_scalar(int::<B>(0xFFFF))
            .expand([members, blocks]),
    };
    let mut x0 = counter.add(&schedule[0]);
    // Counter word 1 is the draw's number, the same for every block of a member.
    let x1_start: Vec<u32> = k1.iter().map(|k| k.wrapping_add(d)).collect();
    let start = Word::<B>::column(&x1_start, device);
    let mut x1 = Word {
        hi: start.hi.expand([members, blocks]),
        lo: start.lo.expand([members, blocks]),
    };
    for round in 0..ROUNDS {
        x0 = x0.add(&x1);
        x1 = x1.rotate_left(ROTATIONS[round % 8]).xor(&x0);
        if round % 4 == 3 {
            let s = round / 4 + 1;
            x0 = x0.add(&schedule[s % 3]);
            let bumped: Vec<u32> = [&k0, &k1, &k2][(s + 1) % 3]
                .iter()
                .map(|k| k.wrapping_add(s as u32))
                .collect();
            x1 = x1.add(&Word::column(&bumped, device));
        }
    }
    // The host kernel's transform, op for op, rather than the device's `log`, `cos` and
    // `sin`: a GPU's are accurate only to an absolute error (WGSL allows 2^-21 for `log` near
    // 1 and 2^-11 for `cos`), which near u1 = 1 is a large relative error of the radius
    // (lavapipe: 1e-3 in an SGLD step's noise).
    let step = 1.0 / f64::from(1u32 << 24);
    let u1 = x0.top24_int().float().add_scalar(1.0).mul_scalar(step);
    let radius = ln_unit_tensor(u1).mul_scalar(-2.0).sqrt();
    let (cos, sin) = cos_sin_turn_tensor(x1.top24_int());
    let values = Tensor::stack::<3>(vec![radius.clone() * cos, radius * sin], 2)
        .reshape_to([members, 2 * blocks]);
    if 2 * blocks == len {
        values
    } else {
        values.narrow(1, 0, len)
    }
}

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

    /// The next draw, `dims = [members, ...]` (the first axis must be the member count).
    pub fn next<B: QuenchOps, const D: usize>(
        &mut self,
        dims: [usize; D],
        device: &B::Device,
    ) -> Tensor<B, D> {
        debug_assert_eq!(dims[0], self.keys.len(), "one row per member");
        let per_member = dims[1..].iter().product();
        let values = normals::<B>(&self.keys, self.draws, per_member, device);
        self.draws += 1;
        values.reshape_to(dims)
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
        /// The tensor ops on the tests' device (a GPU's `log` and `cos` have only absolute
        /// accuracy) give the host kernel's values to f32 rounding, over enough values that
        /// some fall where `ln u1` is tiny.
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
                assert_eq!(host.len(), tensor.len());
                for (i, (h, t)) in host.iter().zip(&tensor).enumerate() {
                    assert!((h - t).abs() < 3e-6, "draw {draw}, value {i}: {h} vs {t}");
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
        let d = crate::stats::max_or_nan(d);
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
