//! Sums and means that every backend computes right, however long the reduced axis.
//!
//! Burn 0.21's reductions on its CubeCL backends (measured on wgpu over lavapipe) are wrong
//! when the reduced axis holds 65,535 elements or more and the kernel cannot read it in
//! vectorised lines (a length that is not a multiple of four, or an axis that is not the
//! innermost): `sum_dim` over `[n, 1]` gave 65,532 for every `n` from 65,535 to 524,291 (the
//! elements past about index 65,531 were never read), `sum` of 524,291 ones 65,533, and the
//! same for `mean_dim`, `mean`, `max_dim` and `argmax`. Axes of up to 32,768 elements were
//! right in every form tried. The circuit simulator's `<Z_i>` sums axes of up to `2^19`
//! elements, and a GHZ state on 20 qubits lost the amplitude at its last index.
//!
//! [`Reduce`] is the reduction Quench uses (clippy's `disallowed-methods` refuses Burn's
//! `sum`, `sum_dim`, `mean` and `mean_dim`): an axis longer than [`MAX_REDUCED_AXIS`] is cut
//! into equal blocks of at most that many elements (zero-padded at its end), each block is
//! summed, then the block sums, again in blocks where there are more than
//! [`MAX_REDUCED_AXIS`] of them. A short axis costs one shape check over Burn's own call.

use burn::tensor::backend::Backend;
use burn::tensor::{Numeric, Tensor, TensorKind};

use crate::views::ReshapeTo;

/// The longest axis handed to one of Burn's reductions, in elements (`2^15`).
pub const MAX_REDUCED_AXIS: usize = 1 << 15;

/// Sums and means over axes of any length (see the module's documentation).
pub trait Reduce<B: Backend, const D: usize, K: TensorKind<B>> {
    /// The sum over axis `dim`, kept as a dimension of size one (Burn's `sum_dim`).
    fn sum_along(self, dim: usize) -> Tensor<B, D, K>;

    /// The mean over axis `dim`, kept as a dimension of size one (Burn's `mean_dim`).
    fn mean_along(self, dim: usize) -> Tensor<B, D, K>;

    /// The sum of every element, `[1]` (Burn's `sum`).
    fn sum_all(self) -> Tensor<B, 1, K>;

    /// The mean of every element, `[1]` (Burn's `mean`).
    fn mean_all(self) -> Tensor<B, 1, K>;
}

#[allow(clippy::disallowed_methods)]
impl<B: Backend, const D: usize, K: TensorKind<B> + Numeric<B>> Reduce<B, D, K>
    for Tensor<B, D, K>
{
    fn sum_along(self, dim: usize) -> Tensor<B, D, K> {
        let dims = self.dims();
        let length = dims[dim];
        let outer: usize = dims[..dim].iter().product();
        let inner: usize = dims[dim + 1..].iter().product();
        let mut kept = dims;
        kept[dim] = 1;
        if length <= MAX_REDUCED_AXIS {
            if inner == 1 && dim + 1 < D {
                // Only axes of one follow: sum the flattened rows along their last axis.
                // burn-ndarray (ndarray's `sum_axis`) takes a trailing axis of one for the
                // innermost and would add the reduced axis one slice at a time.
                return self
                    .reshape_to::<2>([outer, length])
                    .sum_dim(1)
                    .reshape_to(kept);
            }
            return self.sum_dim(dim);
        }
        let blocks = length.div_ceil(MAX_REDUCED_AXIS);
        let block = length.div_ceil(blocks);
        let device = self.device();
        let mut axis: Tensor<B, 3, K> = self.reshape_to([outer, length, inner]);
        let padding = blocks * block - length;
        if padding > 0 {
            let zeros = Tensor::zeros([outer, padding, inner], &device);
            axis = Tensor::cat(vec![axis, zeros], 1);
        }
        let partial: Tensor<B, 3, K> = if inner == 1 {
            axis.reshape_to::<3>([outer, blocks, block]).sum_dim(2)
        } else {
            axis.reshape_to::<4>([outer, blocks, block, inner])
                .sum_dim(2)
                .reshape_to([outer, blocks, inner])
        };
        partial.sum_along(1).reshape_to(kept)
    }

    fn mean_along(self, dim: usize) -> Tensor<B, D, K> {
        let length = self.dims()[dim];
        if length <= MAX_REDUCED_AXIS {
            return self.mean_dim(dim);
        }
        self.sum_along(dim).div_scalar(length as f64)
    }

    fn sum_all(self) -> Tensor<B, 1, K> {
        let elements = self.shape().num_elements();
        if elements <= MAX_REDUCED_AXIS {
            return self.sum();
        }
        self.reshape_to([elements]).sum_along(0)
    }

    fn mean_all(self) -> Tensor<B, 1, K> {
        let elements = self.shape().num_elements();
        if elements <= MAX_REDUCED_AXIS {
            return self.mean();
        }
        self.sum_all().div_scalar(elements as f64)
    }
}

#[cfg(test)]
mod tests {
    use burn::tensor::{Int, Tensor};

    use super::*;
    use crate::readback::to_host_f32;

    crate::device_test! {
        /// Every element of long axes is counted, in every layout Burn's reductions got wrong:
        /// ones with a two at the last place sum to `n + 1`.
        fn long_axes_count_every_element<B>(device) {
            for n in [65_535usize, 98_307] {
                let index = Tensor::<B::InnerBackend, 1, Int>::arange(0..n as i64, device).float();
                let values = index.equal_elem((n - 1) as f32).float() + 1.0;
                let want = (n + 1) as f32;
                let row: Tensor<B::InnerBackend, 2> = values.clone().reshape_to([1, n]);
                let column: Tensor<B::InnerBackend, 2> = values.clone().reshape_to([n, 1]);
                let middle: Tensor<B::InnerBackend, 3> = values.clone().reshape_to([1, n, 1]);
                assert_eq!(to_host_f32(row.sum_along(1)), vec![want], "row of {n}");
                assert_eq!(to_host_f32(column.clone().sum_along(0)), vec![want], "column of {n}");
                assert_eq!(to_host_f32(middle.sum_along(1)), vec![want], "middle axis of {n}");
                assert_eq!(to_host_f32(values.clone().sum_all()), vec![want], "all {n}");
                let mean = to_host_f32(column.mean_along(0))[0];
                assert!((mean - want / n as f32).abs() < 1e-6, "mean of {n}: {mean}");
                let mean = to_host_f32(values.mean_all())[0];
                assert!((mean - want / n as f32).abs() < 1e-6, "mean of all {n}: {mean}");
            }
        }

        /// A short axis followed by axes of one (summed as flattened rows) gives Burn's
        /// values and shape, and its gradient.
        fn short_axes_before_axes_of_one_sum_as_rows<B>(device) {
            let x = Tensor::<B, 1, Int>::arange(0..30, device)
                .float()
                .reshape_to::<4>([3, 10, 1, 1])
                .require_grad();
            let sum = x.clone().sum_along(1);
            assert_eq!(sum.dims(), [3, 1, 1, 1]);
            assert_eq!(to_host_f32(sum.clone()), vec![45.0, 145.0, 245.0]);
            let weights = Tensor::<B, 4>::from_floats([[[[1.0]]], [[[2.0]]], [[[3.0]]]], device);
            let grads = (sum * weights).sum_all().backward();
            let grad = x.grad(&grads).expect("x takes part in the sum");
            let want: Vec<f32> = (0..30).map(|i| (i / 10 + 1) as f32).collect();
            assert_eq!(to_host_f32(grad), want);
        }

        /// A long axis between others keeps their layout, and the gradient reaches every
        /// element (the staged sum pads, reshapes and concatenates under autodiff).
        fn staged_sums_keep_the_other_axes_and_their_gradients<B>(device) {
            let n = 40_000;
            // Small integers, so that every sum is exact in f32.
            let values = Tensor::<B, 1, Int>::arange(0..2 * n as i64 * 3, device)
                .remainder_scalar(7)
                .float()
                .reshape_to([2, n, 3])
                .require_grad();
            let sums = values.clone().sum_along(1);
            assert_eq!(sums.dims(), [2, 1, 3]);
            let mut want = vec![0.0f32; 6];
            for i in 0..2 * n * 3 {
                want[(i / (3 * n)) * 3 + i % 3] += (i % 7) as f32;
            }
            assert_eq!(to_host_f32(sums.clone().inner()), want);
            let weights = Tensor::<B, 3>::from_floats([[[1.0, 2.0, 3.0]], [[4.0, 5.0, 6.0]]], device);
            let grads = (sums * weights).sum_all().backward();
            let grad = to_host_f32(values.grad(&grads).expect("the values take part in the sum"));
            assert_eq!(grad.len(), 2 * n * 3);
            assert!(grad[..3 * n].chunks(3).all(|c| c == [1.0, 2.0, 3.0]));
            assert!(grad[3 * n..].chunks(3).all(|c| c == [4.0, 5.0, 6.0]));
        }
    }
}
