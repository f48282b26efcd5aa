//! CubeCL kernels of the inference convolution ([`crate::ops::conv`]) for every CubeCL
//! runtime: the patch matrix gathered in one launch (the composition pads with a zero row by
//! a concatenation and selects: five launches), the product a cubek matmul, and the folded
//! BatchNorm, the residual and ReLU in one epilogue launch (the composition: two to four).
//!
//! Design: one unit per value written. The gather's unit reads the input value its patch row
//! names (or writes the padding's zero) from the uploaded row list, `[cells * taps]` indices;
//! the epilogue's unit reads its product value, its channel's scale and shift and its
//! residual value. Each value is read once and written once.
#![allow(clippy::too_many_arguments)]

use burn::tensor::{Int, TensorData};
use burn_cubecl::kernel::into_contiguous;
use burn_cubecl::tensor::CubeTensor;
use burn_cubecl::{BoolElement, CubeRuntime};
use cubecl::prelude::*;

use super::{ConvAffine, PatchRows};
use crate::ops::cube::{Cube, elementwise, empty_like, empty_shaped, from_cube, to_cube};
use crate::views::ReshapeTo;

/// A tensor of the backend.
type Values<R, BT, const D: usize> = burn::tensor::Tensor<Cube<R, BT>, D>;

/// Value `ABSOLUTE_POS` of the patches `[batch, rows, channels]`: input row `rows[r]` of
/// `x` `[batch, positions, channels]`, or zero where it is `positions` (padding).
#[cube(launch)]
fn gather_kernel<F: Float, I: Numeric>(
    x: &Tensor<F>,
    rows: &Tensor<I>,
    patches: &mut Tensor<F>,
    positions: u32,
    channels: u32,
    #[define(F, I)] _dtypes: [StorageType; 2],
) {
    let position = ABSOLUTE_POS;
    if position >= patches.len() {
        terminate!();
    }
    let channels = channels as usize;
    let positions = positions as usize;
    let c = position % channels;
    let row = position / channels;
    let per_sample = rows.len();
    let b = row / per_sample;
    let read = u32::cast_from(rows[row % per_sample]) as usize;
    let mut value = F::new(0.0);
    if read < positions {
        value = x[(b * positions + read) * channels + c];
    }
    patches[position] = value;
}

/// Value `ABSOLUTE_POS` of `y` `[batch, cells, out]`: `y * scale + shift`, plus the residual
/// where `with_residual`, through ReLU where `rectify`.
#[cube(launch)]
fn epilogue_kernel<F: Float>(
    y: &Tensor<F>,
    scale: &Tensor<F>,
    shift: &Tensor<F>,
    residual: &Tensor<F>,
    output: &mut Tensor<F>,
    #[comptime] with_residual: bool,
    #[comptime] rectify: bool,
    #[define(F)] _dtype: StorageType,
) {
    let position = ABSOLUTE_POS;
    if position >= y.len() {
        terminate!();
    }
    let channel = position % scale.len();
    let mut value = y[position] * scale[channel] + shift[channel];
    if with_residual {
        value += residual[position];
    }
    if rectify {
        value = F::max(value, F::new(0.0));
    }
    output[position] = value;
}

/// [`crate::ops::QuenchOps::conv_patches`] on a CubeCL backend.
pub(crate) fn conv_patches<R: CubeRuntime, BT: BoolElement>(
    x: Values<R, BT, 3>,
    patches: &PatchRows,
    conv: &ConvAffine<Cube<R, BT>>,
    residual: Option<Values<R, BT, 3>>,
    rectify: bool,
) -> Values<R, BT, 3> {
    let [batch, positions, channels] = x.dims();
    let out = conv.weight.dims()[1];
    let cells = patches.cells();
    let inner = patches.taps.len() * channels;
    let device = x.device();
    let x = if patches.is_identity() {
        x
    } else {
        let x = to_cube(x);
        let len = patches.rows.len();
        let indices: Vec<i32> = patches.rows.iter().map(|&r| r as i32).collect();
        let rows = burn::tensor::Tensor::<Cube<R, BT>, 1, Int>::from_data(
            TensorData::new(indices, [len]),
            &device,
        );
        let rows: CubeTensor<R> = into_contiguous(rows.into_primitive());
        let gathered = empty_shaped(&x, [batch, len, channels]);
        let client = x.client.clone();
        let (count, dim) = elementwise(&client, batch * len * channels);
        gather_kernel::launch::<R>(
            &client,
            count,
            dim,
            x.clone().into_tensor_arg(),
            rows.clone().into_tensor_arg(),
            gathered.clone().into_tensor_arg(),
            positions as u32,
            channels as u32,
            [x.dtype.into(), rows.dtype.into()],
        );
        from_cube(gathered)
    };
    let y = to_cube(
        x.reshape_to([batch * cells, inner])
            .matmul(conv.weight.clone())
            .reshape_to([batch, cells, out]),
    );
    let output = empty_like(&y);
    let client = y.client.clone();
    let dtype = y.dtype;
    let (count, dim) = elementwise(&client, batch * cells * out);
    let residual = residual.map(to_cube);
    let with_residual = residual.is_some();
    epilogue_kernel::launch::<R>(
        &client,
        count,
        dim,
        y.clone().into_tensor_arg(),
        to_cube(conv.scale.clone()).into_tensor_arg(),
        to_cube(conv.shift.clone()).into_tensor_arg(),
        residual.unwrap_or_else(|| y.clone()).into_tensor_arg(),
        output.clone().into_tensor_arg(),
        with_residual,
        rectify,
        dtype.into(),
    );
    from_cube(output)
}
