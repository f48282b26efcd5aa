//! Inverted dropout as one operation ([`QuenchOps::dropout_forward`] and
//! [`QuenchOps::dropout_backward`]): `h` times a fresh mask of `1 / (1 - rate)` and zeros from
//! the backend's seeded generator; backward, the output's gradient times the same mask.
//!
//! As Burn ops (the default) that is the mask ([`QuenchOps::dropout_mask`]) and a product each
//! way, on the CPU backend serial passes into new buffers (about a twentieth of a Transformer
//! step's wall time, a core idle). The host kernel (`host`) makes the same mask as
//! `dropout_mask` for the generator's state and applies it over the cores while it is in cache,
//! the gradient in place, and gives the mask's buffer back: the composition's values bit for
//! bit. A CubeCL backend draws the key on the device and masks in one launch (`cube`).

use burn::backend::Autodiff;
use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::tensor::backend::Backend;
use burn::tensor::{FloatDType, Tensor, TensorPrimitive};

use super::QuenchOps;

#[cfg(any(feature = "cuda", feature = "wgpu"))]
pub(crate) mod cube;
pub(crate) mod host;

/// Dropout's output and the mask its backward pass needs.
#[derive(Debug, Clone)]
pub struct Dropped<B: Backend, const D: usize> {
    /// `h mask`, shaped as `h`.
    pub output: Tensor<B, D>,
    /// `1 / (1 - rate)` where a value is kept, else 0, shaped as `h` in its precision.
    pub mask: Tensor<B, D>,
}

/// Inverted dropout of `h` at `rate` (in `[0, 1]`): each value kept as `h / (1 - rate)` with
/// probability `1 - rate`, else 0, a fresh mask per call from the backend's generator (hold a
/// [`crate::SeededGenerator`] for reproducible masks); differentiable on an autodiff backend
/// ([`QuenchOps::dropout_backward`]). Rate 0 returns `h` itself.
///
/// # Panics
/// Where `rate` is outside `[0, 1]`.
pub fn dropout<B: QuenchOps, const D: usize>(h: Tensor<B, D>, rate: f64) -> Tensor<B, D> {
    if rate == 0.0 {
        return h;
    }
    B::dropout_forward(h, rate).output
}

/// Dropout as Burn ops: [`QuenchOps::dropout_mask`] in `h`'s precision, and the product.
pub fn composed_dropout<B: QuenchOps, const D: usize>(h: Tensor<B, D>, rate: f64) -> Dropped<B, D> {
    let mask = B::dropout_mask::<D>(h.shape(), rate, &h.device());
    let mask = if mask.dtype() == h.dtype() {
        mask
    } else {
        mask.cast(FloatDType::from(h.dtype()))
    };
    Dropped {
        output: h * mask.clone(),
        mask,
    }
}

/// The autodiff backend's dropout: the inner backend's, recorded as one node whose backward
/// pass is the inner backend's [`QuenchOps::dropout_backward`] with the mask as its state.
pub(super) fn autodiff_dropout<B: QuenchOps, C: CheckpointStrategy, const D: usize>(
    h: Tensor<Autodiff<B, C>, D>,
    rate: f64,
) -> Dropped<Autodiff<B, C>, D> {
    #[derive(Debug)]
    struct Dropout<const D: usize>;

    impl<B: QuenchOps, const D: usize> Backward<B, 1> for Dropout<D> {
        type State = Tensor<B, D>;

        fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
            let dy = Tensor::from_primitive(TensorPrimitive::Float(grads.consume::<B>(&ops.node)));
            let [parent] = ops.parents;
            let dh = B::dropout_backward::<D>(dy, ops.state);
            if let Some(node) = parent {
                grads.register::<B>(node.id, dh.into_primitive().tensor());
            }
        }
    }

    let inner = B::dropout_forward(h.clone().inner(), rate);
    let output = inner.output.into_primitive().tensor();
    let parents = [h.into_primitive().tensor().node];
    let output = match Dropout::<D>
        .prepare::<C>(parents)
        .compute_bound()
        .stateful()
    {
        OpsKind::Tracked(prep) => prep.finish(inner.mask.clone(), output),
        OpsKind::UnTracked(prep) => prep.finish(output),
    };
    Dropped {
        output: Tensor::from_primitive(TensorPrimitive::Float(output)),
        mask: Tensor::from_inner(inner.mask),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SeededGenerator;
    use crate::readback::to_host_f32;
    use crate::reductions::Reduce;
    use burn::backend::NdArray;
    use burn::tensor::{Distribution, Shape};

    type Host = NdArray<f32>;

    /// `h` of `shape`, normal values (the generator held by the caller).
    fn input<B: Backend, const D: usize>(shape: [usize; D], device: &B::Device) -> Tensor<B, D> {
        Tensor::random(shape, Distribution::Normal(0.0, 1.0), device)
    }

    #[test]
    fn the_host_kernel_is_the_composition_bit_for_bit() {
        let device = Default::default();
        // Empty, one value, odd, and over the threaded size (split over the cores, pieces of
        // the in-cache length and a remainder).
        for (len, rate) in [
            (0, 0.3),
            (1, 0.5),
            (37, 0.2),
            (70_001, 0.4),
            (3 * 8_192 + 5, 1.0),
        ] {
            let draw = |fused: bool| {
                let _generator = SeededGenerator::acquire::<Host>(&device, 17);
                let h = input::<Host, 2>([1, len], &device);
                let d = if fused {
                    Host::dropout_forward(h.clone(), rate)
                } else {
                    composed_dropout(h.clone(), rate)
                };
                (to_host_f32(h), to_host_f32(d.output), to_host_f32(d.mask))
            };
            let (h, got, got_mask) = draw(true);
            let (_, want, want_mask) = draw(false);
            assert_eq!(got_mask, want_mask, "{len} values at rate {rate}: the mask");
            assert_eq!(got, want, "{len} values at rate {rate}: the output");
            let scale = (1.0 / (1.0 - rate)) as f32;
            for ((&m, &o), &x) in got_mask.iter().zip(&got).zip(&h) {
                assert!(m == 0.0 || m == scale, "a mask value {m}");
                assert_eq!(o.to_bits(), (x * m).to_bits());
            }
        }
    }

    #[test]
    fn the_host_backward_pass_is_the_gradient_times_the_mask_and_gives_the_mask_back() {
        let device = Default::default();
        let _generator = SeededGenerator::acquire::<Host>(&device, 3);
        let len = 1 << 17;
        let h = input::<Host, 1>([len], &device);
        let dy = input::<Host, 1>([len], &device);
        let dropped = Host::dropout_forward(h, 0.25);
        let mask = to_host_f32(dropped.mask.clone());
        let address = quench_host::buffers::address_of(&dropped.mask);
        let want: Vec<f32> = to_host_f32(dy.clone())
            .iter()
            .zip(&mask)
            .map(|(g, m)| g * m)
            .collect();
        let got = Host::dropout_backward(dy, dropped.mask);
        assert_eq!(to_host_f32(got), want);
        assert!(
            quench_host::buffers::holds(address),
            "the mask's buffer is kept for reuse"
        );
    }

    crate::device_test! {
        /// The operation on every device under autodiff (one node): values `h / keep` or 0, the
        /// kept fraction near `keep`, and the gradient the output's times the mask.
        fn dropout_keeps_a_fraction_and_its_gradient_follows_the_mask<B>(device) {
            let _generator = SeededGenerator::acquire::<B>(device, 5);
            let (rows, width, rate) = (33usize, 129usize, 0.25);
            let h = input::<B, 2>([rows, width], device).require_grad();
            let weights = input::<B, 2>([rows, width], device);
            let dropped = B::dropout_forward(h.clone(), rate);
            assert_eq!(dropped.mask.shape(), Shape::new([rows, width]));
            assert!(!dropped.mask.is_require_grad(), "the mask is a constant");
            // Rate 0 is the identity, no mask drawn.
            assert_eq!(to_host_f32(dropout(h.clone(), 0.0).inner()), to_host_f32(h.clone().inner()));
            let grads = (dropped.output.clone() * weights.clone()).sum_all().backward();
            let (x, out, mask) = (to_host_f32(h.clone().inner()), to_host_f32(dropped.output.inner()), to_host_f32(dropped.mask.inner()));
            let grad = to_host_f32(h.grad(&grads).expect("h's gradient"));
            let w = to_host_f32(weights.inner());
            let scale = (1.0 / (1.0 - rate)) as f32;
            for i in 0..x.len() {
                assert!(mask[i] == 0.0 || mask[i] == scale, "mask value {}", mask[i]);
                assert_eq!(out[i], x[i] * mask[i]);
                assert_eq!(grad[i], w[i] * mask[i]);
            }
            // 4,257 values: the kept fraction's standard deviation is 0.0066.
            let kept = mask.iter().filter(|&&m| m > 0.0).count() as f64 / mask.len() as f64;
            assert!((kept - 0.75).abs() < 0.035, "kept {kept}");
        }
    }
}
