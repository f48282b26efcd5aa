//! The random operations' composition ([`crate::ops::random`]): the counter-based normals of
//! [`crate::threefry`] as integer and float tensor ops, for the backends without a kernel of
//! their own. A 32-bit word is carried as two 16-bit halves, so that the words are the same
//! with 32-bit signed integers (CUDA) as with 64-bit ones (ndarray).

use std::f32::consts::FRAC_PI_2;

use burn::tensor::backend::Backend;
use burn::tensor::{ElementConversion, Int, Tensor, TensorData};

use crate::threefry::{PARITY, ROTATIONS, ROUNDS, SQRT_HALF_BITS, StreamKey};
use crate::views::ReshapeTo;

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
    let near_one = u.clone().greater_equal_elem(f32::from_bits(SQRT_HALF_BITS));
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
