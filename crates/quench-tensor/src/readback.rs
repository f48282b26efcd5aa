//! Moving values between host and device: the one place where device values become a `Vec`
//! ([`to_host_f32`]), and where host values become a float tensor ([`float_tensor`]).

use std::any::Any;
use std::sync::atomic::{AtomicU64, Ordering};

use burn::tensor::backend::Backend;
use burn::tensor::{Element, Int, Tensor, TensorData, TensorPrimitive};
use burn_ndarray::NdArrayTensor;

/// Device-to-host copies made through this module since the process started.
static READBACKS: AtomicU64 = AtomicU64::new(0);

fn count_readback() {
    READBACKS.fetch_add(1, Ordering::Relaxed);
}

/// Device-to-host copies made through this module since the process started: every copy
/// Quench makes goes through it, and Burn reads nothing back in the ops Quench uses (its
/// graph and autotune stay on the device), so the count is the process's.
pub fn readbacks() -> u64 {
    READBACKS.load(Ordering::Relaxed)
}

/// A float tensor of `values` (row-major, `shape`) in the backend's float type: data of
/// another type would make a tensor of that type on backends that hold several (burn-ndarray
/// takes a device's default float type from the first backend that used it).
pub fn float_tensor<B: Backend, E: Element, const D: usize>(
    values: Vec<E>,
    shape: [usize; D],
    device: &B::Device,
) -> Tensor<B, D> {
    // The dtype is named: with the device alone, Burn takes the device's default float type.
    Tensor::from_data(
        TensorData::new(values, shape),
        (device, <B::FloatElem as Element>::dtype()),
    )
}

/// The values of `tensor`, row-major, as f32 whatever its float dtype (bf16 and f16 are
/// widened); one device-to-host copy, which waits for the work that produces it. On the CPU
/// backend an f32 tensor is copied straight from its memory: Burn's own readback walks a
/// tensor that is still shared (its caller kept a clone) element by element through a
/// dynamic-rank iterator, about 40 ns a value.
pub fn to_host_f32<B: Backend, const D: usize>(tensor: Tensor<B, D>) -> Vec<f32> {
    count_readback();
    let primitive = tensor.into_primitive();
    if let TensorPrimitive::Float(inner) = &primitive
        && let Some(NdArrayTensor::F32(storage)) = (inner as &dyn Any).downcast_ref()
    {
        let view = storage.view();
        return match view.as_slice() {
            Some(values) => values.to_vec(),
            None => view.iter().copied().collect(),
        };
    }
    Tensor::<B, D>::from_primitive(primitive)
        .into_data()
        .convert::<f32>()
        .to_vec()
        .unwrap_or_else(|_| unreachable!("converted to f32 just above"))
}

/// The values of `tensor`, row-major, as f64 whatever its float dtype; on the CPU backend
/// copied straight from memory as [`to_host_f32`] does. For host kernels that compute in f64
/// on a backend of either precision.
pub fn to_host_f64<B: Backend, const D: usize>(tensor: Tensor<B, D>) -> Vec<f64> {
    count_readback();
    let primitive = tensor.into_primitive();
    if let TensorPrimitive::Float(inner) = &primitive {
        match (inner as &dyn Any).downcast_ref() {
            Some(NdArrayTensor::F64(storage)) => {
                let view = storage.view();
                return match view.as_slice() {
                    Some(values) => values.to_vec(),
                    None => view.iter().copied().collect(),
                };
            }
            Some(NdArrayTensor::F32(storage)) => {
                return storage.view().iter().map(|&x| f64::from(x)).collect();
            }
            _ => {}
        }
    }
    Tensor::<B, D>::from_primitive(primitive)
        .into_data()
        .convert::<f64>()
        .to_vec()
        .unwrap_or_else(|_| unreachable!("converted to f64 just above"))
}

/// The values of an integer tensor, row-major, as i64 whatever its int dtype; one
/// device-to-host copy, counted like [`to_host_f32`]'s.
pub fn to_host_i64<B: Backend, const D: usize>(tensor: Tensor<B, D, Int>) -> Vec<i64> {
    count_readback();
    tensor
        .into_data()
        .convert::<i64>()
        .to_vec()
        .unwrap_or_else(|_| unreachable!("converted to i64 just above"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::NdArray;

    #[test]
    fn reads_shared_and_strided_tensors_of_the_cpu_backend() {
        let t = Tensor::<NdArray<f32>, 2>::from_floats(
            [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]],
            &Default::default(),
        );
        let kept = t.clone();
        assert_eq!(to_host_f32(t), vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        assert_eq!(
            to_host_f32(kept.clone().swap_dims(0, 1)),
            vec![1.0, 4.0, 2.0, 5.0, 3.0, 6.0]
        );
        assert_eq!(to_host_f32(kept.narrow(1, 1, 2)), vec![2.0, 3.0, 5.0, 6.0]);
        let wide = Tensor::<NdArray<f64>, 1>::from_floats([0.5, -1.5], &Default::default());
        assert_eq!(
            to_host_f32(wide),
            vec![0.5, -1.5],
            "other dtypes take Burn's path"
        );
    }

    #[test]
    fn reads_either_precision_as_f64() {
        let narrow = Tensor::<NdArray<f32>, 2>::from_floats([[0.1, 2.0]], &Default::default());
        assert_eq!(to_host_f64(narrow.clone()), vec![f64::from(0.1f32), 2.0]);
        assert_eq!(
            to_host_f64(narrow.transpose()),
            vec![f64::from(0.1f32), 2.0]
        );
        // From f64 data: both backends share one device, whose default float type the first
        // tensor made (f32 above) would otherwise set.
        let wide =
            float_tensor::<NdArray<f64>, f64, 2>(vec![0.1, -3.0], [2, 1], &Default::default());
        let kept = wide.clone();
        assert_eq!(to_host_f64(wide), vec![0.1, -3.0]);
        assert_eq!(to_host_f64(kept.swap_dims(0, 1)), vec![0.1, -3.0]);
    }

    #[test]
    fn reads_values_in_row_major_order() {
        let t =
            Tensor::<NdArray<f32>, 2>::from_floats([[1.0, 2.0], [3.0, 4.5]], &Default::default());
        assert_eq!(to_host_f32(t), vec![1.0, 2.0, 3.0, 4.5]);
    }
}
