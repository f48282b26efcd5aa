//! Tensor views that every backend computes right.
//!
//! Burn 0.21's reshape on its CubeCL backends (wgpu, CUDA) gives wrong strides when a view's
//! last dimension has size one and the reshape adds dimensions (`split_strides` in burn-std
//! never steps past that dimension): `t.narrow(1, i, 1).reshape([rows, 1, 1])` of a
//! `[rows, n]` tensor reads `t[0, i..i + rows]` instead of column `i` (found on lavapipe,
//! where SGLD's output-bias noise came from the wrong place). The CPU backend is not
//! affected. Taking the column as a vector first avoids the faulty case.

use burn::tensor::Tensor;
use burn::tensor::backend::Backend;

/// Column `index` of `matrix` (`[rows, columns]`) as a vector `[rows]`, a view that may be
/// reshaped into any shape of `rows` elements on every backend.
pub fn column<B: Backend>(matrix: Tensor<B, 2>, index: usize) -> Tensor<B, 1> {
    matrix.narrow(1, index, 1).squeeze_dim(1)
}

/// Columns `start..start + length` of `matrix` (`[rows, columns]`) reshaped to `shape`
/// (`rows x length` elements), on every backend: a single column goes through [`column`].
pub fn columns_as<B: Backend, const D: usize>(
    matrix: Tensor<B, 2>,
    start: usize,
    length: usize,
    shape: [usize; D],
) -> Tensor<B, D> {
    if length == 1 {
        column(matrix, start).reshape(shape)
    } else {
        matrix.narrow(1, start, length).reshape(shape)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::tensor::Int;

    crate::device_test! {
        /// The case Burn 0.21's CubeCL reshape gets wrong, on the tests' device.
        fn a_column_reshaped_keeps_its_rows<B>(device) {
            let all = Tensor::<B::InnerBackend, 1, Int>::arange(0..725, device)
                .float()
                .reshape([5, 145]);
            let last = columns_as(all.clone(), 144, 1, [5, 1, 1]);
            assert_eq!(
                crate::readback::to_host_f32(last),
                vec![144.0, 289.0, 434.0, 579.0, 724.0]
            );
            let block = columns_as(all, 0, 96, [5, 4, 24]);
            assert_eq!(&crate::readback::to_host_f32(block)[95..97], &[95.0, 145.0]);
        }
    }
}
