//! Zeros written once ([`QuenchOps::zeros`]): state that starts at zero, such as Adam's
//! moments. The default is Burn's `zeros`, one fill kernel on a CubeCL device. burn-ndarray's
//! `zeros` writes every value into a buffer and then copies the buffer into the tensor: two
//! passes over memory (for the GAN's generators, 38 MB of moments at the first step). The CPU
//! backend writes its buffer once, in place. Not `calloc`'s lazily zeroed pages: Adam reads
//! its moments before it writes them, so each fresh page would first map the shared zero
//! page and then fault again on the write, flushing every core's TLB (about a quarter of a
//! one-epoch GAN run's samples, in a profile).

use burn::tensor::Tensor;

use crate::ops::QuenchOps;

/// A tensor of `shape` holding zeros, on `device`.
pub fn zeros<B: QuenchOps, const D: usize>(shape: [usize; D], device: &B::Device) -> Tensor<B, D> {
    B::zeros(shape, device)
}

/// A tensor of zeros shaped as `tensor`, on its device.
pub fn zeros_like<B: QuenchOps, const D: usize>(tensor: &Tensor<B, D>) -> Tensor<B, D> {
    B::zeros(tensor.dims(), &tensor.device())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::readback::to_host_f32;

    crate::device_test! {
        fn zeros_have_the_shape_asked_for_and_every_value_zero<B>(device) {
            // Small and large: the allocator hands out large buffers as fresh pages, small
            // ones from memory used before, which must be zeroed all the same.
            for shape in [[1usize, 1, 1], [3, 5, 7], [2, 512, 1025]] {
                // Memory freed just before, so that a small buffer may reuse it.
                drop(Tensor::<B, 3>::ones(shape, device));
                let z = zeros::<B, 3>(shape, device);
                assert_eq!(z.dims(), shape);
                let values = to_host_f32(z);
                assert_eq!(values.len(), shape.iter().product::<usize>());
                assert!(values.iter().all(|&v| v.to_bits() == 0), "{shape:?}: not all +0.0");
                let like = zeros_like(&Tensor::<B, 3>::ones(shape, device));
                assert_eq!(like.dims(), shape);
                assert!(to_host_f32(like).iter().all(|&v| v.to_bits() == 0));
                // Under autodiff: the inner backend's zeros, a constant.
                let tracked = zeros::<burn::backend::Autodiff<B>, 3>(shape, device);
                assert_eq!(tracked.dims(), shape);
                assert!(to_host_f32(tracked.inner()).iter().all(|&v| v.to_bits() == 0));
            }
        }
    }
}
