//! Host kernel of [`crate::ops::rows`]: each picked row copied whole into the batch.

use burn::tensor::{Int, Tensor, TensorData};
use quench_host::tensor::{Host, from_values, in_f32, int_values, values};

/// Rows `index` `[k]` of `table` `[rows, width]`: `[k, width]`.
///
/// # Panics
/// Where an index is negative or not below `rows`, naming it.
pub(crate) fn select_rows(table: Tensor<Host, 2>, index: Tensor<Host, 1, Int>) -> Tensor<Host, 2> {
    let [rows, width] = table.dims();
    let table = in_f32(table.into_primitive().tensor());
    let source = values(&table);
    let index = index.into_primitive();
    let picks = int_values(&index);
    let mut out = Vec::with_capacity(picks.len() * width);
    for &r in picks.iter() {
        let row = usize::try_from(r)
            .ok()
            .filter(|&r| r < rows)
            .unwrap_or_else(|| panic!("select_rows: index {r} outside 0..{rows}"));
        out.extend_from_slice(&source[row * width..(row + 1) * width]);
    }
    from_values(out, [picks.len(), width])
}

/// Values `index` `[k]` of `values` `[n]`: `[k]`.
///
/// # Panics
/// Where an index is negative or not below `n`, naming it.
pub(crate) fn select_ints(
    values: Tensor<Host, 1, Int>,
    index: Tensor<Host, 1, Int>,
) -> Tensor<Host, 1, Int> {
    let [n] = values.dims();
    let (values, index) = (values.into_primitive(), index.into_primitive());
    let source = int_values(&values);
    let out: Vec<i64> = int_values(&index)
        .iter()
        .map(|&r| {
            usize::try_from(r)
                .ok()
                .filter(|&r| r < n)
                .map(|r| source[r])
                .unwrap_or_else(|| panic!("select_ints: index {r} outside 0..{n}"))
        })
        .collect();
    let k = out.len();
    Tensor::from_data(TensorData::new(out, [k]), &Default::default())
}
