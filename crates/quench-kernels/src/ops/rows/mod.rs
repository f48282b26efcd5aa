//! Rows of a table gathered by index ([`QuenchOps::select_rows`]): a data loader's batch from
//! its device-resident samples. The default is Burn's `select` along the first axis, one
//! kernel on a CubeCL device and differentiable under autodiff; the CPU backend copies each
//! row with one `memcpy` (`host`), where burn-ndarray's `select` of a two-axis tensor stacks
//! one view per index and was a tenth of the SGLD grid's time on its one serial thread.

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::readback::to_host_f32;
    use burn::tensor::TensorData;

    crate::device_test! {
        fn rows_come_in_the_index_order_repeats_included<B>(device) {
            let (rows, width) = (7usize, 5usize);
            let values: Vec<f32> = (0..rows * width).map(|v| v as f32 * 0.5 - 3.0).collect();
            let table = Tensor::<B, 2>::from_data(TensorData::new(values.clone(), [rows, width]), device);
            let picks = [6i64, 0, 3, 3, 1, 6];
            let index = Tensor::<B, 1, Int>::from_data(TensorData::new(picks.to_vec(), [picks.len()]), device);
            let got = select_rows(table.clone(), index.clone());
            assert_eq!(got.dims(), [picks.len(), width]);
            let expected: Vec<f32> = picks
                .iter()
                .flat_map(|&r| values[r as usize * width..(r as usize + 1) * width].to_vec())
                .collect();
            // A copy: the values exactly.
            assert_eq!(to_host_f32(got), expected);
            assert_eq!(to_host_f32(table.select(0, index)), expected);
            // No rows: an empty batch.
            let none = Tensor::<B, 1, Int>::from_data(TensorData::new(Vec::<i64>::new(), [0]), device);
            assert_eq!(select_rows(Tensor::<B, 2>::from_data(TensorData::new(values, [rows, width]), device), none).dims(), [0, width]);
        }
    }
}
