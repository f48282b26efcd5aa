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

#[cfg(test)]
mod tests {
    use super::*;
    use burn::tensor::{Int, Tensor};

    use crate::ops::QuenchOps;
    use crate::views::ReshapeTo;

    use crate::readback::to_host_f32;
    use crate::reductions::Reduce;

    /// A float reshape under test: Burn's through [`ReshapeTo`], or [`ViewTo`]'s.
    trait FloatReshape {
        fn to<B: QuenchOps, const D: usize, const D2: usize>(
            t: Tensor<B, D>,
            shape: [usize; D2],
        ) -> Tensor<B, D2>;
    }

    struct ByReshape;
    struct ByView;

    impl FloatReshape for ByReshape {
        fn to<B: QuenchOps, const D: usize, const D2: usize>(
            t: Tensor<B, D>,
            shape: [usize; D2],
        ) -> Tensor<B, D2> {
            t.reshape_to(shape)
        }
    }

    impl FloatReshape for ByView {
        fn to<B: QuenchOps, const D: usize, const D2: usize>(
            t: Tensor<B, D>,
            shape: [usize; D2],
        ) -> Tensor<B, D2> {
            t.view_to(shape)
        }
    }

    /// The cases Burn 0.21's CubeCL reshape gets wrong, through `R`.
    fn size_one_values<B: QuenchOps, R: FloatReshape>(device: &B::Device) {
        let all = R::to(
            Tensor::<B, 1, Int>::arange(0..725, device).float(),
            [5, 145],
        );
        let last = R::to(all.clone().narrow(1, 144, 1), [5, 1, 1]);
        assert_eq!(to_host_f32(last), vec![144.0, 289.0, 434.0, 579.0, 724.0]);
        let block = R::to(all.clone().narrow(1, 0, 96), [5, 4, 24]);
        assert_eq!(&to_host_f32(block)[95..97], &[95.0, 145.0]);
        // One task's state `[1, 4]`, transposed and given a task axis.
        let state = all.narrow(1, 0, 4).narrow(0, 1, 1);
        let column = R::to(state.transpose(), [4, 1, 1]);
        assert_eq!(to_host_f32(column), vec![145.0, 146.0, 147.0, 148.0]);
    }

    /// The backward pass of a reshape that removes a size-one dimension, fed a strided
    /// gradient by a transpose (the solver's `[n, 1, tasks]` to `[tasks, n]` with one task),
    /// through `R` on the autodiff backend `B`.
    fn size_one_gradient<B: crate::QuenchBackend, R: FloatReshape>(device: &B::Device) {
        let values = R::to(
            Tensor::<B, 1>::from_floats([0.5, -1.0, 2.0], device),
            [3, 1, 1],
        )
        .require_grad();
        let weights = Tensor::<B, 2>::from_floats([[1.0, -1.0, 0.5]], device);
        let state = R::to(values.clone(), [3, 1]).transpose();
        let grads = (state * weights).sum_all().backward();
        let grad = values
            .grad(&grads)
            .expect("the values take part in the sum");
        assert_eq!(to_host_f32(grad), vec![1.0, -1.0, 0.5]);
    }

    crate::device_test! {
        /// The cases Burn 0.21's CubeCL reshape gets wrong, on the tests' device, through
        /// `reshape_to`, `unsqueeze_to` and `view_to`.
        fn views_with_size_one_dimensions_keep_their_elements<B>(device) {
            size_one_values::<B::InnerBackend, ByReshape>(device);
            size_one_values::<B::InnerBackend, ByView>(device);
            let all = Tensor::<B::InnerBackend, 1, Int>::arange(0..725, device)
                .float()
                .reshape_to([5, 145]);
            let unsqueezed = all.narrow(1, 144, 1).unsqueeze_to::<3>(2);
            assert_eq!(to_host_f32(unsqueezed), vec![144.0, 289.0, 434.0, 579.0, 724.0]);
        }

        /// [`size_one_gradient`] through `reshape_to` and `view_to`.
        fn gradients_through_size_one_views_reach_every_element<B>(device) {
            size_one_gradient::<B, ByReshape>(device);
            size_one_gradient::<B, ByView>(device);
        }
    }

    crate::device_test! {
        /// `view_to` against `reshape_to`: the same values and gradients, from a contiguous
        /// tensor and from a transposed (strided) one, ranks down.
        fn views_give_reshapes_values_and_gradients<B>(device) {
            let x = Tensor::<B, 1, Int>::arange(0..24, device)
                .float()
                .reshape_to([2, 3, 4])
                .require_grad();
            let weights = Tensor::<B, 1, Int>::arange(0..24, device).float().sin();
            let loss = |t: Tensor<B, 1>| (t * weights.clone()).sum_all();
            let strided = || x.clone().swap_dims(1, 2);
            let by_view = [
                x.clone().view_to([6, 4]).view_to([24]),
                strided().view_to([2, 2, 6]).view_to([24]),
            ];
            let by_reshape = [
                x.clone().reshape_to([6, 4]).reshape_to([24]),
                strided().reshape_to([2, 2, 6]).reshape_to([24]),
            ];
            for (view, reshape) in by_view.into_iter().zip(by_reshape) {
                assert_eq!(to_host_f32(view.clone()), to_host_f32(reshape.clone()));
                let (a, b) = (loss(view).backward(), loss(reshape).backward());
                let (a, b) = (x.grad(&a).expect("view"), x.grad(&b).expect("reshape"));
                assert_eq!(to_host_f32(a), to_host_f32(b));
            }
        }
    }

    #[test]
    fn a_view_on_the_cpu_shares_its_tensors_buffer() {
        use burn::tensor::TensorPrimitive;
        use burn_ndarray::NdArrayTensor;
        fn address<const D: usize>(t: &Tensor<burn::backend::NdArray, D>) -> *const f32 {
            match t.clone().into_primitive() {
                TensorPrimitive::Float(NdArrayTensor::F32(storage)) => storage.view().as_ptr(),
                _ => unreachable!("an f32 tensor"),
            }
        }
        let x = Tensor::<burn::backend::NdArray, 3>::ones([4, 5, 6], &Default::default());
        assert_eq!(address(&x.clone().view_to([20, 6])), address(&x));
        assert_eq!(address(&x.clone().view_to([120])), address(&x));
        assert_ne!(
            address(&x.clone().reshape_to([20, 6])),
            address(&x),
            "Burn's reshape copies (if it stops, view_to can go)"
        );
    }
}
