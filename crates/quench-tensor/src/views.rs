//! Tensor views that every backend computes right.
//!
//! Burn 0.21's reshape on its CubeCL backends (wgpu, CUDA) gives wrong strides when it adds
//! dimensions to a tensor that is not contiguous and has a dimension of size one
//! (burn-std's `split_strides` stops at that dimension and never steps past it). Examples
//! found on lavapipe: `t.narrow(1, i, 1).reshape([rows, 1, 1])` of a `[rows, n]` tensor read
//! `t[0, i..i + rows]` instead of column `i` (SGLD's output-bias noise came from the wrong
//! place), and `x.transpose().reshape([n, 1, tasks])` of one task's `[1, n]` state read the
//! wrong elements (the meta step's one-task-at-a-time loss). The CPU backend is not
//! affected. Under autodiff the same fault hides in the backward pass: the gradient of a
//! reshape that *removes* dimensions is reshaped back, adding them, and a transpose or permute
//! after it hands that reshape a strided gradient. `x.reshape([n, 1]).transpose()` of one
//! task's `[n, 1, 1]` state gave the right loss and a gradient that was zero past its first
//! row on lavapipe (the one-task-at-a-time meta step took no inner step).
//! [`ReshapeTo::reshape_to`] is the reshape Quench uses everywhere (clippy's
//! `disallowed-methods` refuses Burn's own): a reshape that changes the rank goes through the
//! flat tensor, so that neither it nor its backward pass adds dimensions to anything but a
//! flat tensor, which Burn computes right (a view when the tensor is contiguous, a copy when
//! it is not). `quench_kernels::ops::view::ViewTo::view_to` is the same reshape for float tensors
//! through `QuenchOps::float_view`, without burn-ndarray's copy on the CPU, for the hot paths.

use burn::tensor::backend::Backend;
use burn::tensor::{BasicOps, Tensor, TensorKind};

/// Whether a reshape from rank `from` to rank `to` goes through the flat tensor: when it
/// changes the rank of a tensor that is not flat. Adding dimensions is the faulty case,
/// forward or, for a reshape that removes them, backward; a flat tensor has no size-one
/// dimension for burn-std to stop at.
pub fn through_flat(from: usize, to: usize) -> bool {
    from != to && from > 1 && to > 1
}

/// A reshape that every backend computes right (see the module's documentation).
pub trait ReshapeTo<B: Backend, K: TensorKind<B>> {
    /// This tensor's elements, in row-major order, as a tensor of `shape`.
    ///
    /// # Panics
    /// As Burn's `reshape`, where `shape` holds another number of elements.
    fn reshape_to<const D2: usize>(self, shape: [usize; D2]) -> Tensor<B, D2, K>;

    /// This tensor with a dimension of size one inserted at `dim` (Burn's `unsqueeze_dim`).
    fn unsqueeze_to<const D2: usize>(self, dim: usize) -> Tensor<B, D2, K>;
}

impl<B: Backend, const D: usize, K: TensorKind<B> + BasicOps<B>> ReshapeTo<B, K>
    for Tensor<B, D, K>
{
    #[allow(clippy::disallowed_methods)]
    fn reshape_to<const D2: usize>(self, shape: [usize; D2]) -> Tensor<B, D2, K> {
        if through_flat(D, D2) {
            let elements = self.shape().num_elements();
            self.reshape([elements]).reshape(shape)
        } else {
            self.reshape(shape)
        }
    }

    fn unsqueeze_to<const D2: usize>(self, dim: usize) -> Tensor<B, D2, K> {
        let dims = self.dims();
        assert!(
            D2 == D + 1 && dim <= D,
            "unsqueeze_to: rank {D} to {D2} at {dim}"
        );
        let mut shape = [1usize; D2];
        for (i, size) in dims.into_iter().enumerate() {
            shape[if i < dim { i } else { i + 1 }] = size;
        }
        self.reshape_to(shape)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unsqueeze_to_inserts_where_asked() {
        let device = Default::default();
        let x = Tensor::<burn::backend::NdArray, 2>::ones([2, 3], &device);
        assert_eq!(x.clone().unsqueeze_to::<3>(0).dims(), [1, 2, 3]);
        assert_eq!(x.clone().unsqueeze_to::<3>(1).dims(), [2, 1, 3]);
        assert_eq!(x.unsqueeze_to::<3>(2).dims(), [2, 3, 1]);
    }
}
