//! Activations for host kernels that vectorise: an exponential of our own (Cody-Waite range
//! reduction and a degree-7 polynomial, below 1e-7 relative error), branch-free and without
//! float-to-int conversions, and the sigmoid, tanh and GELU built on it. libm's `tanhf` and `expf`
//! are a call per element, which keeps a loop scalar. Also the dot product in partial sums
//! that the kernels' reductions share.

/// `ln 2` in two parts for the exponential's range reduction: the first exact in 9 bits, so
/// `n ln2_hi` is exact for the `n` that occur.
const LN2_HI: f32 = 0.693_359_4;
const LN2_LO: f32 = -2.121_944_4e-4;
/// `1.5 2^23`: adding and subtracting it rounds an f32 below `2^22` to an integer.
const ROUND: f32 = 12_582_912.0;

/// ReLU as Burn's (`x <= 0` to 0): a NaN stays NaN, so that a diverged member is seen
/// downstream (`f32::max` would make it 0).
#[inline(always)]
pub fn relu(x: f32) -> f32 {
    if x <= 0.0 { 0.0 } else { x }
}

/// [`relu`] where `rectify`, else `x`: a layer's optional ReLU epilogue.
#[inline(always)]
pub fn relu_if(x: f32, rectify: bool) -> f32 {
    if rectify { relu(x) } else { x }
}

/// `e^x` for finite `x`, clamped to `[-87, 88]` (normal results); relative error below 1e-7.
/// Branch-free and without float-to-int conversions (whose saturation checks keep loops
/// scalar), so that loops over it vectorise.
#[inline(always)]
pub fn exp(x: f32) -> f32 {
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

/// The logistic function `1 / (1 + e^{-x})`, on [`exp`]'s approximation.
#[inline(always)]
pub fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + exp(-x))
}

/// `tanh x = 1 - 2 / (1 + e^{2x})`: absolute error near f32's epsilon, which is what the cell
/// update adds it to.
#[inline(always)]
pub fn tanh(x: f32) -> f32 {
    1.0 - 2.0 / (1.0 + exp(2.0 * x))
}

/// `(erf x, e^{-x^2})`, `erf` by Abramowitz and Stegun's 7.1.26 (absolute error below 1.5e-7)
/// on our exponential, branch-free so that loops over it vectorise; the Gaussian factor is the
/// one 7.1.26 computes on the way, for a caller that needs both (the GELU's derivative), so
/// that it costs one exponential rather than two.
#[inline(always)]
fn erf_and_gauss(x: f32) -> (f32, f32) {
    let a = x.abs();
    let t = 1.0 / (1.0 + 0.327_591_1 * a);
    let poly = t
        * (0.254_829_6
            + t * (-0.284_496_74 + t * (1.421_413_7 + t * (-1.453_152 + t * 1.061_405_4))));
    let gauss = exp(-a * a);
    ((1.0 - poly * gauss).copysign(x), gauss)
}

/// The exact GELU and its derivative, `(x Phi(x), Phi(x) + x phi(x))` with `Phi` the standard
/// normal distribution function, from one `erf(x / sqrt 2)`, whose `e^{-x^2 / 2}` is `phi(x)`'s:
/// a layer computes its output and the derivative its backward pass keeps in one go.
#[inline(always)]
pub fn gelu_and_derivative(x: f32) -> (f32, f32) {
    // 1 / sqrt(2 pi).
    const DENSITY: f32 = 0.398_942_3;
    let (erf_value, gauss) = erf_and_gauss(x * std::f32::consts::FRAC_1_SQRT_2);
    (
        0.5 * x * (1.0 + erf_value),
        0.5 * (1.0 + erf_value) + x * DENSITY * gauss,
    )
}

/// Partial results the host kernels' float reductions (sums, maxima, [`lane_dot`]) keep side
/// by side: a sum or maximum taken in order is one long dependency chain that cannot be
/// vectorised; eight chains can.
pub const REDUCTION_LANES: usize = 8;

/// `sum_k a[k] b[k]` over the shorter of the two, in [`REDUCTION_LANES`] partial sums (element
/// `k` into sum `k % REDUCTION_LANES`), then their sum in order: the same value wherever it
/// runs.
#[inline(always)]
pub fn lane_dot(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    if n <= REDUCTION_LANES {
        // A lane per product: the lanes' sum in order is the products' sum in order (the
        // empty lanes add zeros), without the lanes' horizontal sum, which cost far more than
        // the product itself where one layer is a single output wide (the GAN's
        // discriminator: 4,096 such dots per hidden unit and step).
        return a[..n].iter().zip(&b[..n]).fold(0.0, |s, (x, y)| s + x * y);
    }
    let (a, a_tail) = a[..n].as_chunks::<REDUCTION_LANES>();
    let (b, b_tail) = b[..n].as_chunks::<REDUCTION_LANES>();
    // Whole chunks of lanes, as in `lanes_of`, over two operands.
    let mut partial = [0.0f32; REDUCTION_LANES];
    for (x, y) in a.iter().zip(b) {
        for ((p, x), y) in partial.iter_mut().zip(x).zip(y) {
            *p += x * y;
        }
    }
    for ((p, x), y) in partial.iter_mut().zip(a_tail).zip(b_tail) {
        *p += x * y;
    }
    partial.iter().sum()
}

/// `(sum_k a[k] b[k], sum_k (a[k] b[k]) c[k])` over the shortest of the three, in one pass:
/// each in [`REDUCTION_LANES`] partial sums (element `k` into sum `k % REDUCTION_LANES`), then
/// the partial sums in order, so the first is [`lane_dot`]`(a, b)` to the bit.
#[inline(always)]
pub fn lane_dot_pair(a: &[f32], b: &[f32], c: &[f32]) -> (f32, f32) {
    let n = a.len().min(b.len()).min(c.len());
    let (a, a_tail) = a[..n].as_chunks::<REDUCTION_LANES>();
    let (b, b_tail) = b[..n].as_chunks::<REDUCTION_LANES>();
    let (c, c_tail) = c[..n].as_chunks::<REDUCTION_LANES>();
    let mut ab = [0.0f32; REDUCTION_LANES];
    let mut abc = [0.0f32; REDUCTION_LANES];
    let mut add = |x: &[f32], y: &[f32], z: &[f32]| {
        for ((((p, q), x), y), z) in ab.iter_mut().zip(abc.iter_mut()).zip(x).zip(y).zip(z) {
            let product = x * y;
            *p += product;
            *q += product * z;
        }
    };
    for ((x, y), z) in a.iter().zip(b).zip(c) {
        add(x, y, z);
    }
    add(a_tail, b_tail, c_tail);
    (ab.iter().sum(), abc.iter().sum())
}

/// `sum_k (values[k] - centre)^2` in [`REDUCTION_LANES`] partial sums, then their sum in
/// order: a variance's numerator about a mean already known.
#[inline(always)]
pub fn lane_squares_about(values: &[f32], centre: f32) -> f32 {
    lanes_of(values, 0.0, |s, v| s + (v - centre) * (v - centre))
        .iter()
        .sum()
}

/// The largest of `values`, in [`REDUCTION_LANES`] partial maxima (`f32::NEG_INFINITY` for
/// none).
#[inline(always)]
pub fn lane_max(values: &[f32]) -> f32 {
    lanes_of(values, f32::NEG_INFINITY, f32::max)
        .iter()
        .fold(f32::NEG_INFINITY, |m, v| m.max(*v))
}

/// `sum_k values[k]` in [`REDUCTION_LANES`] partial sums, then their sum in order.
#[inline(always)]
pub fn lane_sum(values: &[f32]) -> f32 {
    lanes_of(values, 0.0, |s, v| s + v).iter().sum()
}

/// `sum_k |values[k]|` in [`REDUCTION_LANES`] partial sums, then their sum in order (an L1
/// penalty).
#[inline(always)]
pub fn lane_abs_sum(values: &[f32]) -> f32 {
    lanes_of(values, 0.0, |s, v| s + v.abs()).iter().sum()
}

/// Each `width`-wide row's [`lane_sum`] into `out` (one per row), the same values: rows taken
/// [`REDUCTION_LANES`] at a time, their partial sums set side by side so that the final in-order
/// sums of eight rows run as vector adds, where one row's is a chain of scalar adds (most of
/// a row's time when it is as short as the Transformer's 20-step attention rows).
#[inline(always)]
pub fn lane_sums_of_rows(rows: &[f32], width: usize, out: &mut [f32]) {
    rows_reduced(rows, width, out, 0.0, -0.0, |s, v| s + v);
}

/// Each `width`-wide row's [`lane_max`] into `out`, eight rows at a time as
/// [`lane_sums_of_rows`]: the same values.
#[inline(always)]
pub fn lane_maxima_of_rows(rows: &[f32], width: usize, out: &mut [f32]) {
    rows_reduced(
        rows,
        width,
        out,
        f32::NEG_INFINITY,
        f32::NEG_INFINITY,
        f32::max,
    );
}

/// Row `r`'s partial results by `fold` from `start` ([`lanes_of`]), then those folded in lane
/// order from `first` into `out[r]`, [`REDUCTION_LANES`] rows side by side.
#[inline(always)]
fn rows_reduced(
    rows: &[f32],
    width: usize,
    out: &mut [f32],
    start: f32,
    first: f32,
    fold: impl Fn(f32, f32) -> f32 + Copy,
) {
    if width == 0 {
        // Every row empty: its lanes all `start`.
        out.fill((0..REDUCTION_LANES).fold(first, |value, _| fold(value, start)));
        return;
    }
    for (group, out) in rows
        .chunks(width * REDUCTION_LANES)
        .zip(out.chunks_mut(REDUCTION_LANES))
    {
        // lanes[k][r]: lane k of row r.
        let mut lanes = [[start; REDUCTION_LANES]; REDUCTION_LANES];
        for (r, row) in group.chunks_exact(width).enumerate() {
            for (k, lane) in lanes_of(row, start, fold).into_iter().enumerate() {
                lanes[k][r] = lane;
            }
        }
        let mut reduced = [first; REDUCTION_LANES];
        for lane in &lanes {
            for (value, &l) in reduced.iter_mut().zip(lane) {
                *value = fold(*value, l);
            }
        }
        let n = out.len();
        out.copy_from_slice(&reduced[..n]);
    }
}

/// The partial results of a reduction: element `k` folded into lane `k % REDUCTION_LANES`
/// (each lane from `start`) by `fold(lane, value)`, in order. Whole chunks of lanes, so that
/// the lanes stay in one register: indexed by `k % REDUCTION_LANES` they were kept in memory,
/// one scalar operation at a time.
#[inline(always)]
fn lanes_of(values: &[f32], start: f32, fold: impl Fn(f32, f32) -> f32) -> [f32; REDUCTION_LANES] {
    let (chunks, tail) = values.as_chunks::<REDUCTION_LANES>();
    let mut lanes = [start; REDUCTION_LANES];
    for chunk in chunks {
        for (lane, &v) in lanes.iter_mut().zip(chunk) {
            *lane = fold(*lane, v);
        }
    }
    for (lane, &v) in lanes.iter_mut().zip(tail) {
        *lane = fold(*lane, v);
    }
    lanes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lane_reductions_sum_element_k_into_lane_k_mod_8_then_the_lanes_in_order() {
        // Values of very different sizes, so that another order of the adds rounds to
        // another sum; every length around the lanes' multiples.
        let a: Vec<f32> = (0..45)
            .map(|k| (k as f32 * 0.77).sin() * 10f32.powi(k % 7 - 3))
            .collect();
        let b: Vec<f32> = (0..45).map(|k| (k as f32 * 1.3).cos() - 0.25).collect();
        for n in 0..a.len() {
            let (a, b) = (&a[..n], &b[..n]);
            let mut dot = [0f32; REDUCTION_LANES];
            let mut sum = [0f32; REDUCTION_LANES];
            let mut abs = [0f32; REDUCTION_LANES];
            let mut max = [f32::NEG_INFINITY; REDUCTION_LANES];
            let mut dot_c = [0f32; REDUCTION_LANES];
            let mut squares = [0f32; REDUCTION_LANES];
            let centre = 0.3f32;
            for k in 0..n {
                dot_c[k % REDUCTION_LANES] += a[k] * b[k] * b[(k + 1) % n];
                squares[k % REDUCTION_LANES] += (a[k] - centre) * (a[k] - centre);
                dot[k % REDUCTION_LANES] += a[k] * b[k];
                sum[k % REDUCTION_LANES] += a[k];
                abs[k % REDUCTION_LANES] += a[k].abs();
                max[k % REDUCTION_LANES] = max[k % REDUCTION_LANES].max(a[k]);
            }
            let in_order = |lanes: [f32; REDUCTION_LANES]| lanes.iter().sum::<f32>();
            assert_eq!(
                lane_dot(a, b).to_bits(),
                in_order(dot).to_bits(),
                "dot, {n}"
            );
            assert_eq!(
                lane_dot(a, &b[..n.saturating_sub(1)]),
                lane_dot(&a[..n.saturating_sub(1)], b)
            );
            assert_eq!(lane_sum(a).to_bits(), in_order(sum).to_bits(), "sum, {n}");
            // Rows of this width, 1 to 19 of them (two groups and a part), reduced together.
            for rows in [1, 7, 8, 19] {
                let values: Vec<f32> = (0..rows * n)
                    .map(|k| a[k % n.max(1)] * (1.0 + k as f32))
                    .collect();
                let (mut sums, mut maxima) = (vec![f32::NAN; rows], vec![f32::NAN; rows]);
                lane_sums_of_rows(&values, n, &mut sums);
                lane_maxima_of_rows(&values, n, &mut maxima);
                for r in 0..rows {
                    let row = &values[r * n..(r + 1) * n];
                    assert_eq!(
                        sums[r].to_bits(),
                        lane_sum(row).to_bits(),
                        "rows' sum, {n}, {r}"
                    );
                    assert_eq!(
                        maxima[r].to_bits(),
                        lane_max(row).to_bits(),
                        "rows' max, {n}, {r}"
                    );
                }
            }
            let shifted: Vec<f32> = (0..n).map(|k| b[(k + 1) % n]).collect();
            let (ab, abc) = lane_dot_pair(a, b, &shifted);
            assert_eq!(ab.to_bits(), lane_dot(a, b).to_bits(), "pair's dot, {n}");
            assert_eq!(abc.to_bits(), in_order(dot_c).to_bits(), "pair, {n}");
            // Over the shortest operand, whichever it is.
            let short = n.saturating_sub(1);
            assert_eq!(
                lane_dot_pair(a, b, &shifted[..short]),
                lane_dot_pair(&a[..short], b, &shifted)
            );
            assert_eq!(
                lane_squares_about(a, centre).to_bits(),
                in_order(squares).to_bits(),
                "squares, {n}"
            );
            assert_eq!(
                lane_abs_sum(a).to_bits(),
                in_order(abs).to_bits(),
                "abs, {n}"
            );
            let top = max.iter().fold(f32::NEG_INFINITY, |m, v| m.max(*v));
            assert_eq!(lane_max(a).to_bits(), top.to_bits(), "max, {n}");
        }
    }

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
        // The GELU and its derivative against f64 (erf by its series, which converges for
        // |x| < 6).
        let erf64 = |x: f64| {
            let mut term = x;
            let mut sum = x;
            for n in 1..200 {
                term *= -x * x / n as f64;
                sum += term / (2 * n + 1) as f64;
            }
            sum * 2.0 / std::f64::consts::PI.sqrt()
        };
        for k in -500..=500 {
            let x = k as f32 * 0.01;
            let xf = f64::from(x);
            let cdf = 0.5 * (1.0 + erf64(xf / std::f64::consts::SQRT_2));
            let density = (-0.5 * xf * xf).exp() / (2.0 * std::f64::consts::PI).sqrt();
            let (gelu, derivative) = gelu_and_derivative(x);
            assert!((f64::from(gelu) - xf * cdf).abs() < 5e-7, "gelu({x})");
            assert!(
                (f64::from(derivative) - (cdf + xf * density)).abs() < 5e-7,
                "gelu'({x})"
            );
        }
        // Saturation, not overflow or NaN, far out.
        assert_eq!((tanh(500.0), tanh(-500.0)), (1.0, -1.0));
        assert_eq!(sigmoid(-500.0).max(0.0), sigmoid(-500.0));
        assert!(sigmoid(-500.0) < 1e-37 && sigmoid(500.0) == 1.0);
    }
}
