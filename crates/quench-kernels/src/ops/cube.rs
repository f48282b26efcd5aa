//! What the operations' CubeCL kernels share: the backend they serve (every CubeCL runtime in
//! f32, CUDA and wgpu alike), the conversions between its tensors and CubeCL's, and launch
//! shapes.

use burn::tensor::{Tensor, TensorPrimitive};
use burn_cubecl::kernel::into_contiguous;
use burn_cubecl::kernel::matmul::init_matmul_output;
use burn_cubecl::ops::numeric::empty_device_contiguous_dtype;
use burn_cubecl::tensor::CubeTensor;
use burn_cubecl::{BoolElement, CubeBackend, CubeRuntime};
use cubecl::prelude::*;
use cubecl::{CubeCount, CubeDim, calculate_cube_count_elemwise};
use cubek::matmul::definition::{MatmulElems, MatmulGlobalElems};
use cubek::matmul::launch::{Strategy, launch_ref};
use cubek::matmul::routines::simple_unit::SimpleUnitSelectionArgs;
use cubek::matmul::routines::{BlueprintStrategy, TileSizeSelection};
use cubek::std::InputBinding;

/// The CubeCL backends Quench runs on: runtime `R` in f32 (Burn's fusion off).
pub(crate) type Cube<R, BT> = CubeBackend<R, f32, i32, BT>;

/// A tensor's CubeCL primitive, contiguous (the kernels index the flat buffer).
pub(crate) fn to_cube<R: CubeRuntime, BT: BoolElement, const D: usize>(
    t: Tensor<Cube<R, BT>, D>,
) -> CubeTensor<R> {
    into_contiguous(t.into_primitive().tensor())
}

/// A kernel's output as a tensor.
pub(crate) fn from_cube<R: CubeRuntime, BT: BoolElement, const D: usize>(
    t: CubeTensor<R>,
) -> Tensor<Cube<R, BT>, D> {
    Tensor::from_primitive(TensorPrimitive::Float(t))
}

/// A contiguous tensor of `like`'s shape, type and device, its values not initialised.
pub(crate) fn empty_like<R: CubeRuntime>(like: &CubeTensor<R>) -> CubeTensor<R> {
    empty_device_contiguous_dtype(
        like.client.clone(),
        like.device.clone(),
        like.meta.shape().clone(),
        like.dtype,
    )
}

/// A contiguous tensor of `shape` with `like`'s type and device, its values not initialised.
pub(crate) fn empty_shaped<R: CubeRuntime, const D: usize>(
    like: &CubeTensor<R>,
    shape: [usize; D],
) -> CubeTensor<R> {
    empty_device_contiguous_dtype(
        like.client.clone(),
        like.device.clone(),
        shape.into(),
        like.dtype,
    )
}

/// A contiguous f32 tensor of `shape` on `device`, its values not initialised.
pub(crate) fn empty_on<R: CubeRuntime, const D: usize>(
    device: &R::Device,
    shape: [usize; D],
) -> CubeTensor<R> {
    empty_device_contiguous_dtype(
        R::client(device),
        device.clone(),
        shape.into(),
        burn::tensor::DType::F32,
    )
}

/// `lhs @ rhs` (Burn's `matmul` shapes) by cubek's unit matmul: each unit multiply-adds its
/// tile of the output in f32 registers, with no tensor-core stage (which may hold f32 operands
/// as tf32), so the product is exact f32 on every runtime in one launch, where the
/// composition's split takes three products and their corrections. `None` where cubek refuses
/// the problem (the caller then splits).
pub(crate) fn f32_matmul<R: CubeRuntime>(
    lhs: CubeTensor<R>,
    rhs: CubeTensor<R>,
) -> Option<CubeTensor<R>> {
    let dtype = lhs.dtype;
    let out = init_matmul_output(&lhs, &rhs, dtype);
    let strategy = Strategy::SimpleUnit(BlueprintStrategy::Inferred(SimpleUnitSelectionArgs {
        tile_size: TileSizeSelection::MinTileSize,
    }));
    let mut dtypes = MatmulElems::from_globals(&MatmulGlobalElems {
        lhs: dtype.into(),
        rhs: dtype.into(),
        out: dtype.into(),
    });
    let client = out.client.clone();
    launch_ref(
        &strategy,
        &client,
        InputBinding::new(lhs.binding(), dtype.into()),
        InputBinding::new(rhs.binding(), dtype.into()),
        out.clone().binding(),
        &mut dtypes,
    )
    .ok()?;
    Some(out)
}

/// One unit per value of `values`: the cube count and one-dimensional cube shape CubeCL
/// chooses for the device.
pub(crate) fn elementwise<R: CubeRuntime>(
    client: &ComputeClient<R>,
    values: usize,
) -> (CubeCount, CubeDim) {
    let dim = CubeDim::new(client, values);
    (calculate_cube_count_elemwise(client, values, dim), dim)
}

/// `tensors` as one kernel argument, a sequence (each tensor still its own binding; a kernel
/// is compiled per sequence length).
pub(crate) fn sequence<'a, R, T>(
    tensors: impl Iterator<Item = &'a CubeTensor<R>>,
) -> SequenceArg<R, T>
where
    R: CubeRuntime,
    T: LaunchArg<RuntimeArg<R> = TensorArg<R>>,
{
    tensors.map(|t| t.clone().into_tensor_arg()).collect()
}

/// The most list items (parameters, say) a launch binding `fixed` tensors of its own and
/// `per_item` of each item takes on `client`'s device: what it binds at once, and at most
/// [`MAX_LIST`] (at least one; a longer list goes in several launches).
pub(crate) fn items_per_launch<R: CubeRuntime>(
    client: &ComputeClient<R>,
    fixed: u32,
    per_item: u32,
) -> usize {
    let bound = max_bindings(client).saturating_sub(fixed) / per_item;
    bound.clamp(1, MAX_LIST) as usize
}

/// The longest list a launch takes: CUDA binds 1,024 tensors, but a kernel's parameters
/// (before CUDA 12.1) hold 4 kB, and each unit searches the list for its item in a chain of
/// comparisons unrolled once per item.
const MAX_LIST: u32 = 16;

/// The tensors one launch may bind on `client`'s device (in a test, at most what
/// `binding_limit::with_binding_limit` set).
fn max_bindings<R: CubeRuntime>(client: &ComputeClient<R>) -> u32 {
    let device = client.properties().hardware.max_bindings;
    #[cfg(test)]
    if let Some(limit) = super::binding_limit::binding_limit() {
        return limit.min(device);
    }
    device
}
