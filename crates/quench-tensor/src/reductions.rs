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
