//! The CPU backend's f32 tensors as host slices, for host kernels: read in place when
//! contiguous, written by moving a `Vec` into a tensor.

use std::borrow::Cow;

use burn::tensor::ops::{FloatTensor, FloatTensorOps, IntTensor, IntTensorOps};
use burn::tensor::{FloatDType, IntDType, Shape, Tensor, TensorData, TensorPrimitive};
use burn_ndarray::{NdArray, NdArrayTensor};

/// The backend the host kernels serve.
pub type Host = NdArray<f32>;

/// `t` as an f32 tensor of the CPU backend (a cast only if it holds another float type).
pub fn in_f32(t: FloatTensor<Host>) -> FloatTensor<Host> {
    match t {
        NdArrayTensor::F32(_) => t,
        other => Host::float_cast(other, FloatDType::F32),
    }
}

/// The values of an f32 tensor, row-major: borrowed when contiguous.
pub fn values(t: &FloatTensor<Host>) -> Cow<'_, [f32]> {
    match t {
        NdArrayTensor::F32(storage) => {
            let view = storage.view();
            match view.to_slice() {
                Some(values) => Cow::Borrowed(values),
                None => Cow::Owned(view.iter().copied().collect()),
            }
        }
        _ => unreachable!("cast to f32 by in_f32 first"),
    }
}

/// The values of an integer tensor as `i64`, row-major: borrowed when it holds contiguous
/// `i64` (the CPU backend's integer type), else cast and copied.
pub fn int_values(t: &IntTensor<Host>) -> Cow<'_, [i64]> {
    match t {
        NdArrayTensor::I64(storage) => {
            let view = storage.view();
            match view.to_slice() {
                Some(values) => Cow::Borrowed(values),
                None => Cow::Owned(view.iter().copied().collect()),
            }
        }
        other => match Host::int_cast(other.clone(), IntDType::I64) {
            NdArrayTensor::I64(storage) => Cow::Owned(storage.view().iter().copied().collect()),
            _ => unreachable!("cast to i64"),
        },
    }
}

/// A tensor of `values` (row-major, `shape`), the `Vec` moved in.
pub fn tensor<const D: usize>(values: Vec<f32>, shape: [usize; D]) -> FloatTensor<Host> {
    NdArrayTensor::from_data(TensorData::new(values, shape))
}

/// A `Vec` moved into a tensor of `shape` (row-major).
pub fn from_values<const D: usize>(values: Vec<f32>, shape: [usize; D]) -> Tensor<Host, D> {
    Tensor::from_primitive(TensorPrimitive::Float(tensor(values, shape)))
}

/// The values of a tensor as f32, row-major, in its own buffer where nothing else holds it
/// ([`owned`]).
pub fn host_values<const D: usize>(t: Tensor<Host, D>) -> Vec<f32> {
    owned(t.into_primitive().tensor())
}

/// The values of an f32 tensor, row-major, as an owned `Vec`: the tensor's own buffer where it
/// is neither shared nor strided (no copy), else a copy. For kernels that update in place.
pub fn owned(t: FloatTensor<Host>) -> Vec<f32> {
    match in_f32(t) {
        NdArrayTensor::F32(storage) => {
            let array = storage.into_owned().into_owned();
            let len = array.len();
            if !array.is_standard_layout() {
                return array.iter().copied().collect();
            }
            let (values, offset) = array.into_raw_vec_and_offset();
            let start = offset.unwrap_or(0);
            if start == 0 && values.len() == len {
                values
            } else {
                values[start..start + len].to_vec()
            }
        }
        _ => unreachable!("cast to f32 by in_f32"),
    }
}

/// `t` as `shape` without a copy where it is f32 in row-major order (burn-ndarray's reshape
/// copies every time); otherwise burn-ndarray's reshape.
pub fn view(t: FloatTensor<Host>, shape: Shape) -> FloatTensor<Host> {
    match t {
        NdArrayTensor::F32(storage) => {
            let array = storage.into_shared();
            if array.is_standard_layout()
                && let Ok(view) = array.clone().into_shape_with_order(shape.to_vec())
            {
                return NdArrayTensor::from(view);
            }
            Host::float_reshape(NdArrayTensor::from(array), shape)
        }
        other => Host::float_reshape(other, shape),
    }
}
