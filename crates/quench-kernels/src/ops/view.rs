//! The float reshape that shares its buffer ([`QuenchOps::float_view`]), as a tensor method.

use burn::tensor::{Shape, Tensor, TensorPrimitive};

use crate::ops::QuenchOps;

/// A float reshape through [`QuenchOps::float_view`]: no copy on the CPU backend, whose own
/// reshape copies the tensor every time (two copies for [`crate::views::ReshapeTo::reshape_to`]'s way
/// through the flat tensor); [`crate::views::ReshapeTo::reshape_to`]'s values on every backend. For the hot
/// paths, where the copies showed in profiles.
pub trait ViewTo<B: QuenchOps> {
    /// This tensor's elements, in row-major order, as a tensor of `shape`.
    ///
    /// # Panics
    /// Where `shape` holds another number of elements.
    fn view_to<const D2: usize>(self, shape: [usize; D2]) -> Tensor<B, D2>;
}

impl<B: QuenchOps, const D: usize> ViewTo<B> for Tensor<B, D> {
    fn view_to<const D2: usize>(self, shape: [usize; D2]) -> Tensor<B, D2> {
        let elements = self.shape().num_elements();
        assert_eq!(
            elements,
            shape.iter().product::<usize>(),
            "view_to: {:?} to {shape:?}",
            self.dims()
        );
        let primitive = B::float_view(self.into_primitive().tensor(), Shape::new(shape));
        Tensor::from_primitive(TensorPrimitive::Float(primitive))
    }
}
