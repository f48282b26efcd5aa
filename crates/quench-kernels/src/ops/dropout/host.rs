//! Dropout's host kernel ([`crate::ops::dropout`]) on the CPU backend in f32: the mask made and
//! applied piece by piece over the cores (`quench_host::streams::dropout_host`), the gradient
//! multiplied in place, the mask's buffer given back after.

use burn::tensor::{TensorMetadata, ops::FloatTensor};

use quench_host::buffers::recycle_tensor;
use quench_host::streams::{apply_mask, dropout_host};
use quench_host::tensor::{Host, in_f32, owned, tensor, values};

use crate::threefry::StreamKey;

/// `(h mask, mask)` for the mask of `key` at keep probability `keep`, shaped as `h`.
pub(crate) fn forward<const D: usize>(
    h: FloatTensor<Host>,
    key: StreamKey,
    keep: f64,
) -> [FloatTensor<Host>; 2] {
    let h = in_f32(h);
    let dims = h.shape().dims::<D>();
    let (output, mask) = dropout_host(key, &values(&h), keep);
    [output, mask].map(|v| tensor(v, dims))
}

/// `dy mask`, in `dy`'s buffer where nothing else holds it; the mask's buffer is given back.
pub(crate) fn backward<const D: usize>(
    dy: FloatTensor<Host>,
    mask: FloatTensor<Host>,
) -> FloatTensor<Host> {
    let dims = dy.shape().dims::<D>();
    let mut grad = owned(dy);
    let mask = in_f32(mask);
    apply_mask(&mut grad, &values(&mask));
    recycle_tensor(mask);
    tensor(grad, dims)
}
