//! Dropout's CubeCL kernel for every CubeCL runtime: the key's draw and one launch, where
//! the composition takes Burn's Bernoulli draw, a division and the product.
//!
//! Design: one unit per Threefry block, two values: the unit reads the key (four 16-bit halves
//! drawn on the device by Burn's seeded generator, so nothing leaves the device), runs
//! Threefry-2x32-20 of its block in registers ([`threefry_block`]) and keeps each value whose
//! word's top 24 bits are below the threshold (the host's rule, `quench_host::streams::Keep`):
//! per block eight bytes read, sixteen written. Backward is Burn's product with the mask.

use burn::tensor::{Distribution, Int, Tensor as BurnTensor};
use burn_cubecl::kernel::into_contiguous;
use burn_cubecl::{BoolElement, CubeRuntime};
use cubecl::prelude::*;

use crate::ops::cube::{Cube, elementwise, empty_like, from_cube};
use crate::ops::dropout::Dropped;
use crate::ops::random::cube::{key_word, threefry_block};
use quench_host::streams::Keep;

/// Values `2 ABSOLUTE_POS` and the next of `output` and `mask`: `mask` is `scale` where the
/// block's word is below `below` in its top 24 bits, else 0; `output` is `input mask`.
#[cube(launch)]
#[allow(clippy::too_many_arguments)]
fn dropout_kernel<F: Float, I: Numeric>(
    input: &Tensor<F>,
    keys: &Tensor<I>,
    output: &mut Tensor<F>,
    mask: &mut Tensor<F>,
    below: u32,
    scale: f32,
    #[define(F, I)] _dtypes: [StorageType; 2],
) {
    let block = ABSOLUTE_POS;
    let first = block * 2;
    if first >= input.len() {
        terminate!();
    }
    let words = threefry_block(
        key_word(keys, 0, 0),
        key_word(keys, 0, 1),
        block as u32,
        0u32,
    );
    let mut kept = F::new(0.0);
    if (words.x0 >> 8u32) < below {
        kept = F::cast_from(scale);
    }
    mask[first] = kept;
    output[first] = input[first] * kept;
    if first + 1 < input.len() {
        let mut next = F::new(0.0);
        if (words.x1 >> 8u32) < below {
            next = F::cast_from(scale);
        }
        mask[first + 1] = next;
        output[first + 1] = input[first + 1] * next;
    }
}

/// [`crate::ops::QuenchOps::dropout_forward`] on a CubeCL backend at keep probability `keep`:
/// the key's draw and one launch (none for an empty `h`).
pub(crate) fn forward<R: CubeRuntime, BT: BoolElement, const D: usize>(
    h: BurnTensor<Cube<R, BT>, D>,
    keep: f64,
) -> Dropped<Cube<R, BT>, D> {
    let device = h.device();
    // The key as four 16-bit halves (Burn's integers on a CubeCL device are 32-bit and
    // signed), from the backend's seeded generator.
    let keys = BurnTensor::<Cube<R, BT>, 1, Int>::random(
        [4],
        Distribution::Uniform(0.0, 65_536.0),
        &device,
    );
    let input = into_contiguous(h.into_primitive().tensor());
    let keys = into_contiguous(keys.into_primitive());
    let (output, mask) = (empty_like(&input), empty_like(&input));
    let values = input.meta.num_elements();
    if values > 0 {
        let keep = Keep::dropout(keep);
        let client = input.client.clone();
        let (count, dim) = elementwise(&client, values.div_ceil(2));
        let dtypes = [input.dtype.into(), keys.dtype.into()];
        dropout_kernel::launch::<R>(
            &client,
            count,
            dim,
            input.into_tensor_arg(),
            keys.into_tensor_arg(),
            output.clone().into_tensor_arg(),
            mask.clone().into_tensor_arg(),
            keep.below,
            keep.scale,
            dtypes,
        );
    }
    Dropped {
        output: from_cube(output),
        mask: from_cube(mask),
    }
}
