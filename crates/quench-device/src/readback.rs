//! Reading a tensor back to the host: the one place where device values become a `Vec`.

use burn::tensor::Tensor;
use burn::tensor::backend::Backend;

/// The values of `tensor`, row-major, as f32 whatever its float dtype (bf16 and f16 are
/// widened); one device-to-host copy, which waits for the work that produces it.
pub fn to_host_f32<B: Backend, const D: usize>(tensor: Tensor<B, D>) -> Vec<f32> {
    tensor
        .into_data()
        .convert::<f32>()
        .to_vec()
        .unwrap_or_else(|_| unreachable!("converted to f32 just above"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::NdArray;

    #[test]
    fn reads_values_in_row_major_order() {
        let t =
            Tensor::<NdArray<f32>, 2>::from_floats([[1.0, 2.0], [3.0, 4.5]], &Default::default());
        assert_eq!(to_host_f32(t), vec![1.0, 2.0, 3.0, 4.5]);
    }
}
