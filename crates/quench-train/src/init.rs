//! Weight initialisations of the workloads, drawn on the host from a seed and uploaded once.

use quench_host::lanes::pieces;
use rand::SeedableRng;
use rand::rngs::StdRng;
use rand_distr::{Distribution, Normal, Uniform};
use rayon::prelude::*;

/// How a layer's weights (and biases) are drawn.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Init {
    /// Xavier/Glorot uniform weights, `U(-a, a)` with `a = gain sqrt(6 / (in + out))`; zero biases.
    XavierUniform {
        /// Scale factor.
        gain: f64,
    },
    /// (Semi-)orthogonal weights times `gain`, as PyTorch's `orthogonal_`; zero biases.
    Orthogonal {
        /// Scale factor.
        gain: f64,
    },
    /// PyTorch's default for `nn.Linear`: weights and biases `U(-1/sqrt(in), 1/sqrt(in))`.
    TorchDefault,
}

/// Weights and biases of `members` independent layers, row-major.
#[derive(Debug, Clone, PartialEq)]
pub struct LayerValues {
    /// `[members, fan_in, fan_out]`, flattened.
    pub weight: Vec<f32>,
    /// `[members, 1, fan_out]`, flattened.
    pub bias: Vec<f32>,
}

/// Draws `members` layers of shape `fan_in -> fan_out`; member `m` uses the stream `seed`, `m`
/// so that adding members never changes the earlier ones.
pub fn draw_layers(
    init: Init,
    members: usize,
    fan_in: usize,
    fan_out: usize,
    seed: u64,
) -> LayerValues {
    draw_streams(init, &[fan_in, fan_out], members, |_, m| (seed, m as u64))
        .pop()
        // Two widths make one layer; the fallback only keeps this free of a panic.
        .unwrap_or_else(|| LayerValues::zeros(members, fan_in, fan_out))
}

/// The layers of `members` MLPs with layer widths `widths` (input first), every layer drawn
/// with `init`; layer `l` uses seed `seed + l`.
pub fn draw_mlp(init: Init, members: usize, widths: &[usize], seed: u64) -> Vec<LayerValues> {
    draw_streams(init, widths, members, |l, m| {
        (seed.wrapping_add(l as u64), m as u64)
    })
}

/// The layers of an ensemble of MLPs with layer widths `widths`, one member per seed, joined
/// along the member axis: member `m` is [`draw_mlp`]`(init, 1, widths, seeds[m])`, so that a
/// member's values do not depend on which other members share the ensemble.
pub fn draw_ensemble(init: Init, widths: &[usize], seeds: &[u64]) -> Vec<LayerValues> {
    draw_streams(init, widths, seeds.len(), |l, m| {
        (seeds[m].wrapping_add(l as u64), 0)
    })
}

/// The layers of `members` MLPs with layer widths `widths`, member `m`'s layer `l` drawn from
/// the stream `stream(l, m)` ([`Draw`]), all draws at once.
fn draw_streams(
    init: Init,
    widths: &[usize],
    members: usize,
    stream: impl Fn(usize, usize) -> (u64, u64),
) -> Vec<LayerValues> {
    let mut layers: Vec<LayerValues> = widths
        .windows(2)
        .map(|w| LayerValues::zeros(members, w[0], w[1]))
        .collect();
    let mut draws = Vec::new();
    for (l, (layer, w)) in layers.iter_mut().zip(widths.windows(2)).enumerate() {
        for (m, (weight, bias)) in layer.members(members, w[0], w[1]).enumerate() {
            draws.push(Draw {
                init,
                stream: stream(l, m),
                fan_in: w[0],
                weight,
                bias,
            });
        }
    }
    draw_all(draws);
    layers
}

impl LayerValues {
    /// `members` layers `fan_in -> fan_out` of zeros, to be drawn into.
    fn zeros(members: usize, fan_in: usize, fan_out: usize) -> Self {
        Self {
            weight: vec![0.0; members * fan_in * fan_out],
            bias: vec![0.0; members * fan_out],
        }
    }

    /// Each of `members` members' `(weight, bias)`, in member order.
    fn members(
        &mut self,
        members: usize,
        fan_in: usize,
        fan_out: usize,
    ) -> impl Iterator<Item = (&mut [f32], &mut [f32])> {
        let weights = pieces(&mut self.weight, members, fan_in * fan_out);
        weights
            .into_iter()
            .zip(pieces(&mut self.bias, members, fan_out))
    }
}

/// One member's layer to draw: `weight` `[fan_in, fan_out]` and `bias` `[fan_out]` from the
/// stream `(seed, member)`.
struct Draw<'a> {
    init: Init,
    stream: (u64, u64),
    fan_in: usize,
    weight: &'a mut [f32],
    bias: &'a mut [f32],
}

impl Draw<'_> {
    fn run(self) {
        let Draw {
            init,
            stream: (seed, member),
            fan_in,
            weight,
            bias,
        } = self;
        let fan_out = bias.len();
        let mut rng = StdRng::seed_from_u64(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ member);
        match init {
            Init::XavierUniform { gain } => {
                let a = gain * (6.0 / (fan_in + fan_out) as f64).sqrt();
                uniform(&mut rng, a, weight);
            }
            Init::Orthogonal { gain } => {
                let values = orthogonal(&mut rng, fan_in, fan_out);
                for (w, x) in weight.iter_mut().zip(values) {
                    *w = (gain * x) as f32;
                }
            }
            Init::TorchDefault => {
                let a = 1.0 / (fan_in as f64).sqrt();
                uniform(&mut rng, a, weight);
                uniform(&mut rng, a, bias);
            }
        }
    }
}

/// Runs every draw, in parallel (each its own stream, so the values do not depend on the
/// order): drawing the GAN's three 1.6M-weight generators one value at a time on one thread
/// was most of a short run's set-up.
fn draw_all(mut draws: Vec<Draw<'_>>) {
    // Largest first, so that the last to start are the shortest.
    draws.sort_by_key(|d| std::cmp::Reverse(d.weight.len()));
    draws.into_par_iter().with_max_len(1).for_each(Draw::run);
}

/// `out` filled from `U(-a, a)` in order (zeros where `a` makes no distribution).
fn uniform(rng: &mut StdRng, a: f64, out: &mut [f32]) {
    if let Ok(dist) = Uniform::new_inclusive(-a, a) {
        for v in out {
            *v = dist.sample(rng) as f32;
        }
    }
}

/// A `rows x cols` matrix (row-major) whose columns are orthonormal when `rows >= cols` and
/// whose rows are orthonormal otherwise: QR of a Gaussian matrix by modified Gram-Schmidt,
/// with the sign convention that makes the distribution uniform (Haar).
///
/// The projections run right-looking (once a column is normalised, it is projected out of
/// every later column), [`PROJECTED_TOGETHER`] later columns at once: each column still
/// receives its projections in the same order, each dot product summed in the same order, so
/// the values are the left-looking form's to the bit, but the independent sums overlap instead
/// of each waiting on its own additions (a strict-order `f64` sum does not vectorise).
pub fn orthogonal(rng: &mut StdRng, rows: usize, cols: usize) -> Vec<f64> {
    let (tall_rows, tall_cols) = if rows >= cols {
        (rows, cols)
    } else {
        (cols, rows)
    };
    let normal = Normal::new(0.0, 1.0).unwrap_or_else(|_| unreachable!("unit normal is valid"));
    // Columns of the tall matrix, each of length tall_rows.
    let mut q: Vec<Vec<f64>> = (0..tall_cols)
        .map(|_| (0..tall_rows).map(|_| normal.sample(rng)).collect())
        .collect();
    for j in 0..tall_cols {
        let (done, later) = q.split_at_mut(j + 1);
        let column = &mut done[j];
        let norm = column.iter().map(|x| x * x).sum::<f64>().sqrt();
        // The diagonal of R is this norm, which is positive, so the Haar sign fix is implicit.
        for x in column.iter_mut() {
            *x /= norm.max(f64::MIN_POSITIVE);
        }
        let column = &done[j];
        let mut groups = later.chunks_exact_mut(PROJECTED_TOGETHER);
        for group in groups.by_ref() {
            project_out::<PROJECTED_TOGETHER>(column, group);
        }
        for other in groups.into_remainder().chunks_mut(1) {
            project_out::<1>(column, other);
        }
    }
    let mut out = vec![0.0; rows * cols];
    for r in 0..rows {
        for c in 0..cols {
            out[r * cols + c] = if rows >= cols { q[c][r] } else { q[r][c] };
        }
    }
    out
}

/// Later columns [`orthogonal`] projects a column out of in one pass: independent sums in
/// flight at once.
const PROJECTED_TOGETHER: usize = 8;

/// Projects the unit vector `column` out of each of the `N` vectors of `others` (as long as
/// it): `y -= <y, column> column`, the `N` dot products summed side by side, each in order.
fn project_out<const N: usize>(column: &[f64], others: &mut [Vec<f64>]) {
    let len = column.len();
    let rows: [&[f64]; N] = std::array::from_fn(|k| &others[k][..len]);
    // `Sum` for f64 starts from -0.0; so do these.
    let mut dots = [-0.0f64; N];
    for (i, &x) in column.iter().enumerate() {
        for k in 0..N {
            dots[k] += rows[k][i] * x;
        }
    }
    for (other, dot) in others.iter_mut().zip(dots) {
        for (y, x) in other.iter_mut().zip(column) {
            *y -= dot * x;
        }
    }
}

/// A sub-seed for one `purpose` of a run seeded by `seed` (SplitMix64 of both), so that nearby
/// seeds (89, 90, ...) and different purposes (split, initialisation, noise) draw unrelated
/// streams.
pub fn sub_seed(seed: u64, purpose: u64) -> u64 {
    let mut z = seed
        .wrapping_add(purpose.wrapping_mul(0x9E37_79B9_7F4A_7C15))
        .wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gram(m: &[f64], rows: usize, cols: usize, by_columns: bool) -> Vec<f64> {
        let n = if by_columns { cols } else { rows };
        let len = if by_columns { rows } else { cols };
        let at = |v: usize, i: usize| {
            if by_columns {
                m[i * cols + v]
            } else {
                m[v * cols + i]
            }
        };
        let mut g = vec![0.0; n * n];
        for a in 0..n {
            for b in 0..n {
                g[a * n + b] = (0..len).map(|i| at(a, i) * at(b, i)).sum();
            }
        }
        g
    }

    #[test]
    fn orthogonal_matrices_are_orthonormal_on_the_short_side() {
        let mut rng = StdRng::seed_from_u64(1);
        for (rows, cols) in [(8, 8), (128, 40), (3, 128)] {
            let m = orthogonal(&mut rng, rows, cols);
            let by_columns = rows >= cols;
            let n = rows.min(cols);
            let g = gram(&m, rows, cols, by_columns);
            for a in 0..n {
                for b in 0..n {
                    let expected = if a == b { 1.0 } else { 0.0 };
                    assert!(
                        (g[a * n + b] - expected).abs() < 1e-10,
                        "{rows}x{cols} ({a},{b})"
                    );
                }
            }
        }
    }

    /// Left-looking modified Gram-Schmidt (each column takes every earlier one's projection
    /// in turn, then is normalised), as `orthogonal` was first written.
    fn left_looking(rng: &mut StdRng, rows: usize, cols: usize) -> Vec<f64> {
        let (tall_rows, tall_cols) = (rows.max(cols), rows.min(cols));
        let normal = Normal::new(0.0, 1.0).unwrap();
        let mut q: Vec<Vec<f64>> = (0..tall_cols)
            .map(|_| (0..tall_rows).map(|_| normal.sample(rng)).collect())
            .collect();
        for j in 0..tall_cols {
            let (done, rest) = q.split_at_mut(j);
            let column = &mut rest[0];
            for previous in done.iter() {
                let dot: f64 = column.iter().zip(previous).map(|(a, b)| a * b).sum();
                for (x, p) in column.iter_mut().zip(previous) {
                    *x -= dot * p;
                }
            }
            let norm = q[j].iter().map(|x| x * x).sum::<f64>().sqrt();
            for x in &mut q[j] {
                *x /= norm.max(f64::MIN_POSITIVE);
            }
        }
        (0..rows * cols)
            .map(|k| {
                let (r, c) = (k / cols, k % cols);
                if rows >= cols { q[c][r] } else { q[r][c] }
            })
            .collect()
    }

    #[test]
    fn orthogonal_is_left_looking_gram_schmidt_to_the_bit() {
        // Column counts below, at and past a group of projections, and not a multiple of it.
        for (rows, cols) in [(8, 8), (128, 40), (3, 128), (512, 128), (20, 9), (1, 1)] {
            let got = orthogonal(&mut StdRng::seed_from_u64(5), rows, cols);
            let want = left_looking(&mut StdRng::seed_from_u64(5), rows, cols);
            let same = got
                .iter()
                .zip(&want)
                .all(|(a, b)| a.to_bits() == b.to_bits());
            assert!(same, "{rows}x{cols}");
        }
    }

    #[test]
    fn bounds_and_zero_biases_follow_each_rule() {
        let x = draw_layers(Init::XavierUniform { gain: 1.0 }, 2, 100, 30, 7);
        assert_eq!((x.weight.len(), x.bias.len()), (6000, 60));
        let a = (6.0f64 / 130.0).sqrt() as f32;
        assert!(x.weight.iter().all(|w| w.abs() <= a));
        assert!(x.weight.iter().any(|w| w.abs() > 0.9 * a));
        assert!(x.bias.iter().all(|&b| b == 0.0));
        let t = draw_layers(Init::TorchDefault, 1, 4, 500, 3);
        assert!(t.weight.iter().chain(&t.bias).all(|w| w.abs() <= 0.5));
        assert!(t.bias.iter().any(|&b| b != 0.0));
        let o = draw_layers(Init::Orthogonal { gain: 0.5 }, 1, 3, 128, 3);
        let row_norm: f32 = o.weight[..128].iter().map(|w| w * w).sum::<f32>().sqrt();
        assert!(row_norm <= 0.5 + 1e-5);
    }

    #[test]
    fn parallel_draws_give_each_stream_its_values_in_order() {
        // The reference: member `m` of layer `l` drawn alone, weights then biases from the
        // stream of seed `seed + l` and member `m`, one value after another.
        let widths = [7, 5, 3];
        let sequential = |seed: u64, l: usize, m: u64| {
            let mut rng =
                StdRng::seed_from_u64((seed + l as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ m);
            let dist = Uniform::new_inclusive(
                -1.0 / (widths[l] as f64).sqrt(),
                1.0 / (widths[l] as f64).sqrt(),
            )
            .unwrap();
            let mut draw = |n: usize| {
                (0..n)
                    .map(|_| dist.sample(&mut rng) as f32)
                    .collect::<Vec<_>>()
            };
            let weight = draw(widths[l] * widths[l + 1]);
            (weight, draw(widths[l + 1]))
        };
        let members = draw_mlp(Init::TorchDefault, 3, &widths, 40);
        for (l, layer) in members.iter().enumerate() {
            let per = widths[l] * widths[l + 1];
            for m in 0..3 {
                let (weight, bias) = sequential(40, l, m as u64);
                assert_eq!(
                    layer.weight[m * per..(m + 1) * per],
                    weight[..],
                    "layer {l}, member {m}"
                );
                assert_eq!(
                    layer.bias[m * widths[l + 1]..(m + 1) * widths[l + 1]],
                    bias[..]
                );
            }
        }
        // An ensemble's member `m` is the single network of its own seed, for every rule.
        let seeds = [5u64, 9, 2];
        for init in [
            Init::TorchDefault,
            Init::XavierUniform { gain: 1.5 },
            Init::Orthogonal { gain: 0.5 },
        ] {
            let ensemble = draw_ensemble(init, &widths, &seeds);
            for (m, &seed) in seeds.iter().enumerate() {
                let alone = draw_mlp(init, 1, &widths, seed);
                for (l, (joined, alone)) in ensemble.iter().zip(&alone).enumerate() {
                    let per = widths[l] * widths[l + 1];
                    assert_eq!(
                        joined.weight[m * per..(m + 1) * per],
                        alone.weight[..],
                        "{init:?}"
                    );
                    let out = widths[l + 1];
                    assert_eq!(
                        joined.bias[m * out..(m + 1) * out],
                        alone.bias[..],
                        "{init:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn members_are_independent_and_reproducible() {
        let a = draw_layers(Init::TorchDefault, 3, 5, 4, 11);
        let b = draw_layers(Init::TorchDefault, 2, 5, 4, 11);
        assert_eq!(a.weight[..40], b.weight[..]);
        assert_ne!(a.weight[..20], a.weight[20..40]);
        let c = draw_layers(Init::TorchDefault, 2, 5, 4, 12);
        assert_ne!(b.weight, c.weight);
    }
}
