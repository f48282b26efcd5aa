//! CubeCL kernel of the counter-based normals ([`crate::threefry`]) for every CubeCL runtime:
//! one launch per draw where the composition ([`super::composed`]) takes about four hundred
//! integer and float tensor ops (each of Threefry's twenty rounds is a dozen ops on 16-bit
//! halves).
//!
//! Design: one unit per block (two values) of one member's draw; the unit reads its member's
//! key (four 16-bit halves, so that the words reach the device unchanged through the
//! backend's signed integer tensors), runs Threefry-2x32-20 in registers and writes `r cos t`
//! and `r sin t`: sixteen bytes of key read (served from cache) and eight written per block,
//! all the rest arithmetic. The float transform is the host kernel's, not the device's `log`,
//! `cos` and `sin` (a GPU's are accurate only to an absolute error, WGSL allows 2^-11 for
//! `cos`): `ln u1` by the host's series on the mantissa (bits taken apart exactly), the turn's
//! nearest quarter taken out in integers. So the values agree with the host's to f32
//! rounding.
//!
//! [`counter_normal`] is also what the SGLD step's kernel ([`crate::ops::sgld`]) draws its
//! noise with, value by value.

use burn::tensor::TensorData;
use burn_cubecl::kernel::into_contiguous;
use burn_cubecl::tensor::CubeTensor;
use burn_cubecl::{BoolElement, CubeRuntime};
use cubecl::prelude::*;

use crate::ops::cube::{Cube, elementwise, empty_on};
use crate::threefry::{PARITY, SQRT_HALF_BITS, StreamKey};

/// `ln 2`, for the exponent's part of `ln u`.
const LN_2: f32 = core::f32::consts::LN_2;
/// A quarter turn is `2^22` steps of the 24-bit angle: radians per step.
const RADIANS_PER_STEP: f32 = core::f32::consts::FRAC_PI_2 / 4_194_304.0;

/// Threefry-2x32's state between rounds, and a block's two words after them.
#[derive(CubeType, Clone, Copy)]
pub(crate) struct Block {
    pub(crate) x0: u32,
    pub(crate) x1: u32,
}

/// `x` rotated left by `r` bits (`0 < r < 32`); CubeCL's `u32` has no `rotate_left`.
#[cube]
#[allow(clippy::manual_rotate)]
fn rotate_left(x: u32, #[comptime] r: u32) -> u32 {
    (x << r) | (x >> (32u32 - r))
}

/// Four rounds with rotation distances `r0..r3`, then key injection `s` (1 to 5): `ka` and
/// `kb` are the schedule's words `s mod 3` and `s + 1 mod 3` (`[k0, k1, PARITY ^ k0 ^ k1]`).
#[cube]
#[allow(clippy::too_many_arguments)]
fn four_rounds(
    block: Block,
    ka: u32,
    kb: u32,
    #[comptime] r0: u32,
    #[comptime] r1: u32,
    #[comptime] r2: u32,
    #[comptime] r3: u32,
    #[comptime] s: u32,
) -> Block {
    let mut x0 = block.x0;
    let mut x1 = block.x1;
    x0 += x1;
    x1 = rotate_left(x1, r0) ^ x0;
    x0 += x1;
    x1 = rotate_left(x1, r1) ^ x0;
    x0 += x1;
    x1 = rotate_left(x1, r2) ^ x0;
    x0 += x1;
    x1 = rotate_left(x1, r3) ^ x0;
    x0 += ka;
    x1 += kb + s;
    Block { x0, x1 }
}

/// `ln u` for `u = ((w0 >> 8) + 1) 2^-24` in `(0, 1]`: the host's [`crate::threefry`]
/// series on the mantissa, moved to `[1/sqrt 2, sqrt 2)`.
#[cube]
fn ln_unit(w0: u32) -> f32 {
    let u = f32::cast_from((w0 >> 8u32) + 1u32) * (1.0 / 16_777_216.0);
    let shifted = u32::reinterpret(u) + (0x3F80_0000u32 - SQRT_HALF_BITS);
    let exponent = i32::cast_from(shifted >> 23u32) - 127i32;
    let m = f32::reinterpret((shifted & 0x007F_FFFFu32) + SQRT_HALF_BITS);
    let s = (m - 1.0) / (m + 1.0);
    let s2 = s * s;
    let series = 1.0 + s2 * (1.0 / 3.0 + s2 * (1.0 / 5.0 + s2 * (1.0 / 7.0 + s2 * (1.0 / 9.0))));
    2.0 * s * series + f32::cast_from(exponent) * LN_2
}

/// Threefry-2x32-20 of block `(block, draw)` under key `(k0, k1)`: the stream's two words
/// of that block.
#[cube]
pub(crate) fn threefry_block(k0: u32, k1: u32, block: u32, draw: u32) -> Block {
    let k2 = k0 ^ k1 ^ PARITY;
    let start = Block {
        x0: block + k0,
        x1: draw + k1,
    };
    // Threefry's rotations (crate::threefry::ROTATIONS) and schedule, round by round.
    let after4 = four_rounds(start, k1, k2, 13u32, 15u32, 26u32, 6u32, 1u32);
    let after8 = four_rounds(after4, k2, k0, 17u32, 29u32, 16u32, 24u32, 2u32);
    let after12 = four_rounds(after8, k0, k1, 13u32, 15u32, 26u32, 6u32, 3u32);
    let after16 = four_rounds(after12, k1, k2, 17u32, 29u32, 16u32, 24u32, 4u32);
    four_rounds(after16, k2, k0, 13u32, 15u32, 26u32, 6u32, 5u32)
}

/// Value `index` of draw `draw` (its low word; the high one folded into `k1`) of the stream
/// keyed `(k0, k1)`: Threefry of block `index / 2`, then `r cos t` for an even index and
/// `r sin t` for an odd one.
#[cube]
pub(crate) fn counter_normal(k0: u32, k1: u32, draw: u32, index: u32) -> f32 {
    let block = threefry_block(k0, k1, index >> 1u32, draw);
    let radius = f32::sqrt(-2.0 * ln_unit(block.x0));
    // t = (x1 >> 8) quarter turns of 2^22 steps: q the nearest quarter, x the rest (at most
    // an eighth of a turn) in radians.
    let t = block.x1 >> 8u32;
    let q = (t + (1u32 << 21u32)) >> 22u32;
    let rest = i32::cast_from(t) - i32::cast_from(q << 22u32);
    let x = f32::cast_from(rest) * RADIANS_PER_STEP;
    let x2 = x * x;
    let sin = x
        * (1.0
            + x2 * (-1.0 / 6.0
                + x2 * (1.0 / 120.0 + x2 * (-1.0 / 5040.0 + x2 * (1.0 / 362_880.0)))));
    let cos = 1.0
        + x2 * (-0.5
            + x2 * (1.0 / 24.0
                + x2 * (-1.0 / 720.0 + x2 * (1.0 / 40_320.0 + x2 * (-1.0 / 3_628_800.0)))));
    // An odd q swaps the pair (negating the new cos), q & 2 negates both; an even index takes
    // the cos, an odd one the sin.
    let mut value = cos;
    if (q & 1u32) == 1u32 {
        value = -sin;
        if (index & 1u32) == 1u32 {
            value = cos;
        }
    } else if (index & 1u32) == 1u32 {
        value = sin;
    }
    if (q & 2u32) == 2u32 {
        value = -value;
    }
    radius * value
}

/// A member's key half `h` (0, 1: `k0`'s high and low; 2, 3: `k1`'s) from `[members, 4]`.
#[cube]
pub(crate) fn key_word<I: Numeric>(keys: &Tensor<I>, member: usize, word: usize) -> u32 {
    let hi = u32::cast_from(keys[member * 4 + 2 * word]);
    let lo = u32::cast_from(keys[member * 4 + 2 * word + 1]);
    (hi << 16u32) | lo
}

/// Value `ABSOLUTE_POS` of `normals` `[members, len]`.
#[cube(launch)]
fn normals_kernel<F: Float, I: Numeric>(
    keys: &Tensor<I>,
    normals: &mut Tensor<F>,
    len: u32,
    draw: u32,
    #[define(F, I)] _dtypes: [StorageType; 2],
) {
    let position = ABSOLUTE_POS;
    if position >= normals.len() {
        terminate!();
    }
    let len = len as usize;
    let member = position / len;
    let index = (position - member * len) as u32;
    let k0 = key_word(keys, member, 0);
    let k1 = key_word(keys, member, 1);
    normals[position] = F::cast_from(counter_normal(k0, k1, draw, index));
}

/// The keys of draw `draw` (its high word folded in) as `[members, 4]` 16-bit halves on
/// `device`, for [`key_word`].
pub(crate) fn key_halves<R: CubeRuntime, BT: BoolElement>(
    keys: &[StreamKey],
    draw: u64,
    device: &R::Device,
) -> CubeTensor<R> {
    let halves: Vec<i64> = keys
        .iter()
        .flat_map(|k| {
            let (key, _) = k.for_draw(draw);
            [key[0] >> 16, key[0] & 0xFFFF, key[1] >> 16, key[1] & 0xFFFF].map(i64::from)
        })
        .collect();
    let data = TensorData::new(halves, [keys.len(), 4]);
    into_contiguous(
        burn::tensor::Tensor::<Cube<R, BT>, 2, burn::tensor::Int>::from_data(data, device)
            .into_primitive(),
    )
}

/// [`crate::ops::QuenchOps::counter_normals`] on a CubeCL backend: one launch (none for an
/// empty draw).
pub(crate) fn counter_normals<R: CubeRuntime, BT: BoolElement>(
    keys: &[StreamKey],
    draw: u64,
    len: usize,
    device: &R::Device,
) -> CubeTensor<R> {
    let members = keys.len();
    if members == 0 || len == 0 {
        return burn::tensor::Tensor::<Cube<R, BT>, 2>::zeros([members, len], device)
            .into_primitive()
            .tensor();
    }
    let keys = key_halves::<R, BT>(keys, draw, device);
    let normals = empty_on::<R, 2>(device, [members, len]);
    let client = normals.client.clone();
    let (count, dim) = elementwise(&client, members * len);
    let dtypes = [normals.dtype.into(), keys.dtype.into()];
    normals_kernel::launch::<R>(
        &client,
        count,
        dim,
        keys.into_tensor_arg(),
        normals.clone().into_tensor_arg(),
        len as u32,
        draw as u32,
        dtypes,
    );
    normals
}
