//! Matrix algebra on batches of small matrices stored batch-last, `[rows, cols, batch]`.
//!
//! The batch axis is last so that each element of a product is an elementwise operation over
//! long contiguous rows: for the 4 x 4 generators of a qubit this is several times faster on
//! the CPU backend than a batched matrix product, which calls a tiny GEMM per matrix.

use burn::tensor::{Tensor, TensorData};
use quench_kernels::reductions::Reduce;
use quench_kernels::views::ReshapeTo;
use quench_kernels::{QuenchOps, precise_matmul};

/// Largest `rows x inner x cols` multiplied by broadcasting; above it the product goes through
/// the backend's batched matmul. 4 x 4 times 4 x 4 (64) broadcasts; 16 x 16 products (4,096)
/// do not, as the `[rows, inner, cols, batch]` intermediate would outweigh the GEMM calls.
const BROADCAST_LIMIT: usize = 512;

/// The batched product `a b` of `a: [n, k, batch]` and `b: [k, m, batch]`, giving `[n, m, batch]`.
pub(crate) fn matmul<B: QuenchOps>(a: Tensor<B, 3>, b: Tensor<B, 3>) -> Tensor<B, 3> {
    let [n, k, batch] = a.dims();
    let m = b.dims()[1];
    if n * k * m <= BROADCAST_LIMIT {
        let products = a.reshape_to([n, k, 1, batch]) * b.reshape_to([1, k, m, batch]);
        products.sum_along(1).reshape_to([n, m, batch])
    } else {
        precise_matmul(a.permute([2, 0, 1]), b.permute([2, 0, 1])).permute([1, 2, 0])
    }
}

/// The matrix-vector products `f v` of `factors: [n, n, batch]` (possibly a strided view, such
/// as one segment's columns of a larger stack) and `vectors: [n, 1, batch]`, giving
/// `[n, 1, batch]`. The vector is broadcast along the rows instead of reshaping the factor,
/// which would copy a strided view.
pub(crate) fn apply<B: QuenchOps>(factors: Tensor<B, 3>, vectors: Tensor<B, 3>) -> Tensor<B, 3> {
    let [_, k, batch] = factors.dims();
    (factors * vectors.reshape_to([1, k, batch])).sum_along(1)
}

/// The identity `[n, n, batch]` in the dtype and on the device of `like`, contiguous: one
/// outer product of `vec(I)` with a row of ones (expanding a `[n, n, 1]` identity instead
/// would leave a broadcast view that later reshapes copy slowly).
pub(crate) fn identity<B: QuenchOps, const D: usize>(
    n: usize,
    batch: usize,
    like: &Tensor<B, D>,
) -> Tensor<B, 3> {
    let eye: Vec<f64> = (0..n * n)
        .map(|index| if index / n == index % n { 1.0 } else { 0.0 })
        .collect();
    let options = (&like.device(), like.dtype());
    let eye = Tensor::<B, 2>::from_data(TensorData::new(eye, [n * n, 1]), options);
    eye.matmul(Tensor::ones([1, batch], options))
        .reshape_to([n, n, batch])
}

/// A polynomial `sum_j coefficients[j] x^j` of every matrix of `x: [n, n, batch]`, by the
/// Paterson-Stockmeyer scheme with `chunk` = `q`: the powers `x^2 .. x^q` (q - 1 products),
/// each chunk `B_j = sum_i c_{jq+i} x^i` as a linear combination of them, then Horner's rule
/// in `x^q`, `B_0 + x^q (B_1 + x^q (..))` (one product per further chunk). A degree `q r`
/// polynomial costs `q + r - 2` batched products, e.g. 4 for degree 9.
pub(crate) fn polynomial<B: QuenchOps>(
    x: Tensor<B, 3>,
    coefficients: &[f64],
    chunk: usize,
) -> Tensor<B, 3> {
    let [n, _, batch] = x.dims();
    let q = chunk.max(1);
    let degree = coefficients.len().saturating_sub(1);
    let chunks = degree.div_ceil(q).max(1);
    let mut powers = vec![identity(n, batch, &x), x.clone()];
    for _ in 1..q {
        let next = matmul(powers[powers.len() - 1].clone(), x.clone());
        powers.push(next);
    }
    // Chunk j takes coefficients j q .. j q + q - 1; the last chunk also takes the top
    // coefficient on x^q, so Horner needs no extra step for it. Scaled sums of whole tensors
    // beat stacking the powers for one matrix product: the copies of a stack cost more than
    // the few elementwise operations on the CPU backend.
    let block = |j: usize| {
        let last = if j + 1 == chunks { q } else { q - 1 };
        (0..=last)
            .filter_map(|i| {
                let c = coefficients.get(j * q + i).copied().unwrap_or(0.0);
                let power = powers[i].clone();
                match c {
                    0.0 => None,
                    1.0 => Some(power),
                    c => Some(power.mul_scalar(c)),
                }
            })
            .reduce(|sum, term| sum + term)
            .unwrap_or_else(|| powers[0].zeros_like())
    };
    (0..chunks - 1).rev().fold(block(chunks - 1), |acc, j| {
        block(j) + matmul(powers[q].clone(), acc)
    })
}

/// A balanced product tree over `segments` factors per task, `P_{S-1} .. P_1 P_0`.
///
/// The factors are stored batch-last in the tree's own order (see [`ProductTree::order`]) so
/// that every level multiplies the second half of its blocks by the first half: two
/// contiguous slices and one batched product, without gathering pairs or padding. A level
/// with an odd number of groups sets its last (latest) group aside, and the groups set aside
/// multiply the root from the left at the end.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ProductTree {
    order: Vec<usize>,
}

impl ProductTree {
    /// The tree over `segments` factors.
    pub(crate) fn new(segments: usize) -> Self {
        fn layout(count: usize) -> Vec<usize> {
            if count <= 1 {
                return vec![0; count];
            }
            let parents = layout(count / 2);
            let mut order: Vec<usize> = parents.iter().map(|&p| 2 * p).collect();
            order.extend(parents.iter().map(|&p| 2 * p + 1));
            if count % 2 == 1 {
                order.push(count - 1);
            }
            order
        }
        Self {
            order: layout(segments),
        }
    }

    /// The segment stored at each position: block `p` of the factors (batch columns
    /// `p * tasks .. (p + 1) * tasks`) must hold segment `order()[p]`.
    pub(crate) fn order(&self) -> &[usize] {
        &self.order
    }

    /// The ordered product per task `[n, n, tasks]` of factors `[n, n, segments * tasks]`
    /// stored in [`Self::order`].
    pub(crate) fn multiply<B: QuenchOps>(
        &self,
        factors: Tensor<B, 3>,
        tasks: usize,
    ) -> Tensor<B, 3> {
        let mut level = factors;
        let mut count = self.order.len();
        let mut set_aside = Vec::new();
        while count > 1 {
            if count % 2 == 1 {
                count -= 1;
                set_aside.push(level.clone().narrow(2, count * tasks, tasks));
                level = level.narrow(2, 0, count * tasks);
            }
            let half = count / 2 * tasks;
            let earlier = level.clone().narrow(2, 0, half);
            let later = level.narrow(2, half, half);
            level = matmul(later, earlier);
            count /= 2;
        }
        set_aside
            .into_iter()
            .rev()
            .fold(level, |product, latest| matmul(latest, product))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::NdArray;
    use quench_support::stats::max_abs_difference;

    type B = NdArray<f64>;

    fn batch(values: &[[f64; 4]]) -> Tensor<B, 3> {
        // Each entry is one 2 x 2 matrix, row-major; the batch goes last.
        let count = values.len();
        let mut data = vec![0.0; 4 * count];
        for (b, m) in values.iter().enumerate() {
            for (index, &v) in m.iter().enumerate() {
                data[index * count + b] = v;
            }
        }
        Tensor::from_data(TensorData::new(data, [2, 2, count]), &Default::default())
    }

    fn entries(t: Tensor<B, 3>) -> Vec<f64> {
        t.into_data().to_vec().unwrap()
    }

    fn product(a: [f64; 4], b: [f64; 4]) -> [f64; 4] {
        [
            a[0] * b[0] + a[1] * b[2],
            a[0] * b[1] + a[1] * b[3],
            a[2] * b[0] + a[3] * b[2],
            a[2] * b[1] + a[3] * b[3],
        ]
    }

    #[test]
    fn broadcast_and_gemm_products_agree() {
        let device = Default::default();
        let generator = quench_kernels::SeededGenerator::acquire::<B>(&device, 3);
        let a = Tensor::<B, 3>::random([16, 16, 3], burn::tensor::Distribution::Default, &device);
        let b = Tensor::<B, 3>::random([16, 16, 3], burn::tensor::Distribution::Default, &device);
        drop(generator);
        let gemm = entries(matmul(a.clone(), b.clone()));
        let broadcast = entries(
            (a.reshape_to([16, 16, 1, 3]) * b.reshape_to([1, 16, 16, 3]))
                .sum_along(1)
                .reshape_to([16, 16, 3]),
        );
        let worst = max_abs_difference(&gemm, &broadcast);
        assert!(worst < 1e-12, "{worst}");
    }

    #[test]
    fn polynomial_matches_direct_evaluation_for_every_chunk_size() {
        let m = [0.3, -0.7, 0.5, 0.2];
        let coefficients = [1.0, 0.5, -0.25, 0.125, 2.0, -1.0, 0.3];
        let mut expected = [0.0; 4];
        let mut power = [1.0, 0.0, 0.0, 1.0];
        for &c in &coefficients {
            expected
                .iter_mut()
                .zip(power)
                .for_each(|(e, p)| *e += c * p);
            power = product(power, m);
        }
        for chunk in 1..=7 {
            let got = entries(polynomial(batch(&[m]), &coefficients, chunk));
            for (g, e) in got.iter().zip(expected) {
                assert!(
                    (g - e).abs() < 1e-12,
                    "chunk {chunk}: {got:?} vs {expected:?}"
                );
            }
        }
    }

    #[test]
    fn product_tree_multiplies_later_segments_on_the_left() {
        for segments in 1..=11 {
            let tree = ProductTree::new(segments);
            let mut sorted = tree.order().to_vec();
            sorted.sort_unstable();
            assert_eq!(sorted, (0..segments).collect::<Vec<_>>(), "a permutation");
            // Two tasks; segment s of task t is [[1, s + t + 1], [s - t, 1]]: products of
            // these do not commute, so any misordering shows.
            let factor = |s: usize, t: usize| [1.0, (s + t + 1) as f64, s as f64 - t as f64, 1.0];
            let stored: Vec<[f64; 4]> = tree
                .order()
                .iter()
                .flat_map(|&s| (0..2).map(move |t| factor(s, t)))
                .collect();
            let got = entries(tree.multiply(batch(&stored), 2));
            for task in 0..2 {
                let expected = (0..segments)
                    .fold([1.0, 0.0, 0.0, 1.0], |acc, s| product(factor(s, task), acc));
                for (index, e) in expected.iter().enumerate() {
                    assert_eq!(
                        got[index * 2 + task],
                        *e,
                        "{segments} segments, task {task}"
                    );
                }
            }
        }
    }
}
