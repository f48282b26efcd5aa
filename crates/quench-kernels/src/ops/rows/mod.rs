//! Rows of a table gathered by index ([`QuenchOps::select_rows`]): a data loader's batch from
//! its device-resident samples. The default is Burn's `select` along the first axis, one
//! kernel on a CubeCL device and differentiable under autodiff; the CPU backend copies each
//! row with one `memcpy` (`host`), where burn-ndarray's `select` of a two-axis tensor stacks
//! one view per index and was a tenth of the SGLD grid's time on its one serial thread.
//! [`QuenchOps::select_ints`] gathers the batch's labels alike (burn-ndarray's `select` of an
//! integer vector collects a view per value: 2 % of the SGLD grid's samples, on the same
//! serial thread).

use burn::tensor::{Int, Tensor};

use crate::ops::QuenchOps;

pub(crate) mod host;

/// Rows `index` `[k]` of `table` `[rows, width]`, in the index's order: `[k, width]`.
///
/// # Panics
/// Where an index is negative or not below `rows` (Burn's `select` refuses them too).
pub fn select_rows<B: QuenchOps>(table: Tensor<B, 2>, index: Tensor<B, 1, Int>) -> Tensor<B, 2> {
    B::select_rows(table, index)
}

/// Values `index` `[k]` of `values` `[n]`, in the index's order: `[k]`.
///
/// # Panics
/// Where an index is negative or not below `n` (Burn's `select` refuses them too).
pub fn select_ints<B: QuenchOps>(
    values: Tensor<B, 1, Int>,
    index: Tensor<B, 1, Int>,
) -> Tensor<B, 1, Int> {
    B::select_ints(values, index)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::readback::to_host_f32;
    use burn::tensor::TensorData;

    crate::device_test! {
        /// On the backend without autodiff, as the loaders gather (the CPU's host kernels).
        fn rows_come_in_the_index_order_repeats_included<B>(device) {
            type D<B> = <B as burn::tensor::backend::AutodiffBackend>::InnerBackend;
            let (rows, width) = (7usize, 5usize);
            let values: Vec<f32> = (0..rows * width).map(|v| v as f32 * 0.5 - 3.0).collect();
            let table = Tensor::<D<B>, 2>::from_data(TensorData::new(values.clone(), [rows, width]), device);
            let picks = [6i64, 0, 3, 3, 1, 6];
            let index = Tensor::<D<B>, 1, Int>::from_data(TensorData::new(picks.to_vec(), [picks.len()]), device);
            let got = select_rows(table.clone(), index.clone());
            assert_eq!(got.dims(), [picks.len(), width]);
            let expected: Vec<f32> = picks
                .iter()
                .flat_map(|&r| values[r as usize * width..(r as usize + 1) * width].to_vec())
                .collect();
            // A copy: the values exactly.
            assert_eq!(to_host_f32(got), expected);
            assert_eq!(to_host_f32(table.select(0, index.clone())), expected);
            // The integers alike.
            let labels: Vec<i64> = (0..rows as i64).map(|v| 3 * v - 7).collect();
            let ints = Tensor::<D<B>, 1, Int>::from_data(TensorData::new(labels.clone(), [rows]), device);
            let expected: Vec<i64> = picks.iter().map(|&r| labels[r as usize]).collect();
            let got = select_ints(ints, index).into_data().convert::<i64>();
            assert_eq!(got.to_vec::<i64>().ok(), Some(expected));
            // No rows: an empty batch.
            let none = Tensor::<D<B>, 1, Int>::from_data(TensorData::new(Vec::<i64>::new(), [0]), device);
            assert_eq!(select_rows(Tensor::<D<B>, 2>::from_data(TensorData::new(values, [rows, width]), device), none).dims(), [0, width]);
        }
    }
}
