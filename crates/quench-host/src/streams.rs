//! Draws of the counter-based streams of [`crate::threefry`] on the host, written for the
//! vector unit, `LANES` blocks side by side, rows split over the host's cores when a draw is
//! large: the host kernels of `quench_kernels::ops::random` (normals and dropout masks), and
//! the noise of the SGLD step's host kernel.

use crate::lanes::{host_cores, in_lanes};
use crate::threefry::{
    PARITY, ROTATIONS, StreamKey, cos_sin_turn, ln_unit, threefry2x32, uniforms,
};

/// Blocks per vector batch of the host kernel (two output values each).
const LANES: usize = 16;
/// Values below which a host draw runs on the calling thread only.
pub const THREADED_FROM: usize = 1 << 16;

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
    /// even. AVX-512 or AVX2 where the CPU has them, with the same values ([`crate::simd`]).
    pub fn fill_member(key: StreamKey, draw: u64, first: usize, out: &mut [f32]) => fill_member_portable
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

/// What a draw's blocks become: `LANES` blocks' two values from their two words, each output
/// array the same position of every block (lane `i` is block `i`'s).
///
/// Arrays in and out rather than a function of one block: a function returning a pair per
/// block was compiled into 128- and 256-bit pieces with shuffles between them (about 7.5
/// cycles a normal); loops over whole arrays are one vector op per statement, and the only
/// shuffle left is the final interleave of the two outputs. A trait rather than a closure:
/// its method is `#[inline(always)]`, so it is compiled into each vector build (a closure of
/// the normals' size was called through `Fn::call`, at the baseline width).
trait BlockValues {
    fn values(&self, w0: &[u32; LANES], w1: &[u32; LANES]) -> ([f32; LANES], [f32; LANES]);
}

/// Fills `out` (values `first..`, `first` even) of one draw, `LANES` blocks at a time, with
/// `kind`'s values.
#[inline(always)]
fn fill_blocks(key: StreamKey, draw: u64, first: usize, out: &mut [f32], kind: impl BlockValues) {
    let (key, d) = key.for_draw(draw);
    let schedule = [key[0], key[1], PARITY ^ key[0] ^ key[1]];
    let mut block = (first / 2) as u32;
    for chunk in out.chunks_mut(2 * LANES) {
        // Through `black_box`, which costs two stores and loads of the words a batch: LLVM's
        // vectoriser builds its vectors from the stores back, and the interleaved output
        // (lane `i`'s two values side by side) made it pair each block's two words in one
        // vector, so the AVX2 build ran the rounds on 128-bit vectors (`xmm`, four blocks an
        // instruction). Cut there, the rounds are whole-register code in every build.
        let (x0, x1) = std::hint::black_box(blocks(&schedule, d, block));
        let (v0, v1) = kind.values(&x0, &x1);
        let mut pairs = [0f32; 2 * LANES];
        for i in 0..LANES {
            pairs[2 * i] = v0[i];
            pairs[2 * i + 1] = v1[i];
        }
        // A whole batch stored as it is: a copy of a run-time length was a call to `memcpy`
        // per 32 values. (One loop body, no helper closure: the body must be inlined into
        // the caller's vector build.)
        match <&mut [f32; 2 * LANES]>::try_from(&mut *chunk) {
            Ok(whole) => *whole = pairs,
            Err(_) => chunk.copy_from_slice(&pairs[..chunk.len()]),
        }
        block = block.wrapping_add(LANES as u32);
    }
}

/// The normals' host kernel, written for whichever vector width it is compiled for (the tests
/// compare it with [`fill_member`]'s dispatched build).
#[inline(always)]
pub fn fill_member_portable(key: StreamKey, draw: u64, first: usize, out: &mut [f32]) {
    fill_blocks(key, draw, first, out, Normals);
}

/// Standard normals, a pair per block (Box-Muller: the radius from the first word, the angle
/// from the second).
struct Normals;

impl BlockValues for Normals {
    #[inline(always)]
    fn values(&self, w0: &[u32; LANES], w1: &[u32; LANES]) -> ([f32; LANES], [f32; LANES]) {
        let mut cos = [0f32; LANES];
        let mut sin = [0f32; LANES];
        for i in 0..LANES {
            let (u1, u2) = uniforms(w0[i], w1[i]);
            let r = (-2.0 * ln_unit(u1)).sqrt();
            let (c, s) = cos_sin_turn(u2);
            cos[i] = r * c;
            sin[i] = r * s;
        }
        (cos, sin)
    }
}

/// A dropout mask's threshold and kept value: a value is `scale` where its word's top 24
/// bits are below `below`, else 0.
#[derive(Debug, Clone, Copy)]
pub struct Keep {
    /// The threshold on a word's top 24 bits: the keep probability times `2^24`.
    pub below: u32,
    /// The kept value, `1 / keep probability` (inverted dropout).
    pub scale: f32,
}

impl Keep {
    /// Inverted dropout's mask keeping a value with probability `keep` (to 2^-24) as `1 /
    /// keep`.
    pub fn dropout(keep: f64) -> Self {
        Self {
            below: (keep.clamp(0.0, 1.0) * f64::from(1u32 << 24)).round() as u32,
            scale: (1.0 / keep) as f32,
        }
    }

    /// The mask that keeps a value (as `scale`) where the same draw's [`fill_uniforms`] value
    /// is below `threshold`: a uniform is `(w >> 8) 2^-24`, so it is below `threshold` where
    /// `w >> 8` is below `ceil(threshold 2^24)` (exact in f64).
    pub fn below_uniform(threshold: f32, scale: f32) -> Self {
        let below = (f64::from(threshold.clamp(0.0, 1.0)) * f64::from(1u32 << 24)).ceil();
        Self {
            below: below as u32,
            scale,
        }
    }

    /// The mask's value for one word: `scale` where its top 24 bits are below `below`, else 0.
    #[inline(always)]
    fn value(&self, word: u32) -> f32 {
        if word >> 8 < self.below {
            self.scale
        } else {
            0.0
        }
    }
}

impl BlockValues for Keep {
    #[inline(always)]
    fn values(&self, w0: &[u32; LANES], w1: &[u32; LANES]) -> ([f32; LANES], [f32; LANES]) {
        // Loops rather than `array::map`, whose closure need not be inlined into the build.
        let (mut v0, mut v1) = ([0f32; LANES], [0f32; LANES]);
        for i in 0..LANES {
            v0[i] = self.value(w0[i]);
            v1[i] = self.value(w1[i]);
        }
        (v0, v1)
    }
}

crate::simd_dispatch! {
    /// Fills `out` with values `first..` of one draw's mask (`Keep`). Vector code as
    /// [`fill_member`], the same values.
    pub fn fill_mask(key: StreamKey, draw: u64, first: usize, keep: Keep, out: &mut [f32]) => fill_mask_portable
}

/// The masks' host kernel, written for whichever vector width it is compiled for (the tests
/// compare it with [`fill_mask`]'s dispatched build).
#[inline(always)]
pub fn fill_mask_portable(key: StreamKey, draw: u64, first: usize, keep: Keep, out: &mut [f32]) {
    fill_blocks(key, draw, first, out, keep);
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
    let keep = Keep::dropout(keep);
    fill_rows(&[key], len, |key, first, part| {
        fill_mask(key, 0, first, keep, part)
    })
}

/// Values of a mask made and applied at a time in [`dropout_host`]: 32 KiB of mask, so that
/// the product reads it from the first-level cache.
const APPLIED_TOGETHER: usize = 8_192;

/// Inverted dropout of `input` at keep probability `keep`: `(input times mask, mask)`, the
/// mask [`dropout_mask_host`] gives for `key` and `input.len()` (the same values), each piece
/// of it applied while it is in cache, pieces over the host's cores when large. The mask is
/// for the backward pass ([`apply_mask`]).
pub fn dropout_host(key: StreamKey, input: &[f32], keep: f64) -> (Vec<f32>, Vec<f32>) {
    let keep = Keep::dropout(keep);
    // Every value of both is written below.
    let (mut output, mut mask) = (
        crate::buffers::take(input.len()),
        crate::buffers::take(input.len()),
    );
    let (lanes, piece) = split(input.len());
    let jobs: Vec<_> = output
        .chunks_mut(piece)
        .zip(mask.chunks_mut(piece))
        .zip(input.chunks(piece))
        .enumerate()
        .map(|(i, ((out, mask), input))| (i * piece, out, mask, input))
        .collect();
    in_lanes(jobs, lanes, |group| {
        for (first, out, mask, input) in group {
            let parts = out
                .chunks_mut(APPLIED_TOGETHER)
                .zip(mask.chunks_mut(APPLIED_TOGETHER))
                .zip(input.chunks(APPLIED_TOGETHER));
            for (j, ((out, mask), input)) in parts.enumerate() {
                fill_mask(key, 0, first + j * APPLIED_TOGETHER, keep, mask);
                multiply(out, input, mask);
            }
        }
    });
    (output, mask)
}

/// `values *= mask` elementwise (dropout's backward pass on its output's gradient), pieces
/// over the host's cores when large.
pub fn apply_mask(values: &mut [f32], mask: &[f32]) {
    let (lanes, piece) = split(values.len());
    let jobs: Vec<_> = values.chunks_mut(piece).zip(mask.chunks(piece)).collect();
    in_lanes(jobs, lanes, |group| {
        for (values, mask) in group {
            scale_in_place(values, mask);
        }
    });
}

crate::simd_dispatch! {
    /// `out = input mask`, elementwise.
    fn multiply(out: &mut [f32], input: &[f32], mask: &[f32]) => multiply_portable
}

#[inline(always)]
fn multiply_portable(out: &mut [f32], input: &[f32], mask: &[f32]) {
    for ((o, x), m) in out.iter_mut().zip(input).zip(mask) {
        *o = x * m;
    }
}

crate::simd_dispatch! {
    /// `values *= mask`, elementwise.
    fn scale_in_place(values: &mut [f32], mask: &[f32]) => scale_in_place_portable
}

#[inline(always)]
fn scale_in_place_portable(values: &mut [f32], mask: &[f32]) {
    for (v, m) in values.iter_mut().zip(mask) {
        *v *= m;
    }
}

/// The lanes for a draw of `total` values and the length of each lane's piece: whole blocks
/// (an even count, so that every piece starts at a block), at least one value.
fn split(total: usize) -> (usize, usize) {
    let lanes = if total < THREADED_FROM {
        1
    } else {
        host_cores()
    };
    (lanes, ((total.div_ceil(lanes) + 1) & !1).max(2))
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
    let mut out = crate::buffers::take(keys.len() * len);
    if len == 0 {
        return out;
    }
    let (lanes, piece) = split(out.len());
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
