//! Moving values between host and device: the one place where device values become a `Vec`
//! ([`to_host_f32`]), and where host values become a float tensor ([`float_tensor`]).

use burn::tensor::backend::Backend;
use burn::tensor::{Element, Tensor, TensorData};

/// A float tensor of `values` (row-major, `shape`) in the backend's float type: data of
/// another type would make a tensor of that type on backends that hold several (burn-ndarray
/// takes a device's default float type from the first backend that used it).
pub fn float_tensor<B: Backend, E: Element, const D: usize>(
    values: Vec<E>,
    shape: [usize; D],
    device: &B::Device,
) -> Tensor<B, D> {
    Tensor::from_data(
        TensorData::new(values, shape).convert::<B::FloatElem>(),
        device,
    )
}

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
