//! CubeCL kernel of [`crate::ops::circuit`] for every CubeCL runtime, for circuits of up to
//! [`MAX_QUBITS`] qubits (larger ones take the composition): one launch forward, and one
//! backward plus the sum of each member's weight gradients, where the composition takes a
//! dozen launches per gate each way.
//!
//! Design: one unit per row, which holds the row's whole state (`2^n` f32, and for the
//! gradients the adjoint and a scratch state beside it) in its own memory and runs the
//! program's steps over it in order, as [`quench_host::circuit`] does in f64: a one-qubit
//! step mixes `2^(n-1)` pairs of amplitudes, a permutation moves every amplitude through the
//! scratch state. The program travels as three small tensors uploaded per call (a row of
//! `[kind, stride, index]` and a row of four matrix entries per step, the permutations'
//! indices and signs). Each row reads its angles and the program and writes its read-out
//! (or its gradients): no state touches global memory.
#![allow(clippy::too_many_arguments)]

use burn::tensor::{Int, TensorData};
use burn_cubecl::kernel::into_contiguous;
use burn_cubecl::tensor::CubeTensor;
use burn_cubecl::{BoolElement, CubeRuntime};
use cubecl::prelude::*;

use quench_host::circuit::{FIXED, INPUT, PERMUTATION, Tables};

use super::{CircuitGradients, RealCircuit};
use crate::ops::cube::{Cube, elementwise, empty_shaped, from_cube, to_cube};
use crate::reductions::Reduce;
use crate::views::ReshapeTo;

/// A tensor of the backend.
type Values<R, BT, const D: usize> = burn::tensor::Tensor<Cube<R, BT>, D>;

/// The most qubits the kernel takes: three states of 2^6 f32 per unit (768 bytes, in the
/// unit's local memory), each step's loops unrolled over `2^5` pairs or `2^6` amplitudes (a
/// kernel of 7 qubits took lavapipe several times as long to compile).
pub(crate) const MAX_QUBITS: usize = 6;

/// The one-qubit matrix of step `step` for a row whose angles start at `x0` (inputs) and
/// `w0` (weights), into `m` (row-major `[u00, u01, u10, u11]`).
#[cube]
fn load_matrix<F: Float, I: Numeric>(
    m: &mut Array<F>,
    step: usize,
    ops: &Tensor<I>,
    matrices: &Tensor<F>,
    inputs: &Tensor<F>,
    weights: &Tensor<F>,
    x0: usize,
    w0: usize,
) {
    let kind = i32::cast_from(ops[step * 3]);
    let index = u32::cast_from(ops[step * 3 + 2]) as usize;
    if kind == FIXED {
        #[unroll]
        for e in 0..4 {
            m[e] = matrices[step * 4 + e];
        }
    } else {
        let mut theta = weights[w0 + index];
        if kind == INPUT {
            theta = inputs[x0 + index];
        }
        let half = theta * F::new(0.5);
        let (c, s) = (F::cos(half), F::sin(half));
        m[0] = c;
        m[1] = -s;
        m[2] = s;
        m[3] = c;
    }
}

/// `m` (or its transpose) applied to every amplitude pair of `v` at `stride`.
#[cube]
fn mix<F: Float>(
    v: &mut Array<F>,
    m: &Array<F>,
    stride: usize,
    transposed: bool,
    #[comptime] dim: usize,
) {
    let (a, d) = (m[0], m[3]);
    let mut b = m[1];
    let mut c = m[2];
    if transposed {
        b = m[2];
        c = m[1];
    }
    #[unroll]
    for p in 0..comptime!(dim / 2) {
        let k = (p / stride) * 2 * stride + p % stride;
        let (x0, x1) = (v[k], v[k + stride]);
        v[k] = a * x0 + b * x1;
        v[k + stride] = c * x0 + d * x1;
    }
}

/// Permutation `index` of `perms` and `signs` (`[perms, dim]`) applied to `v` (or its
/// transpose, `inverse`) through `scratch`.
#[cube]
fn permute<F: Float, I: Numeric>(
    v: &mut Array<F>,
    scratch: &mut Array<F>,
    perms: &Tensor<I>,
    signs: &Tensor<F>,
    index: usize,
    inverse: bool,
    #[comptime] dim: usize,
) {
    #[unroll]
    for k in 0..dim {
        let p = u32::cast_from(perms[index * dim + k]) as usize;
        let s = signs[index * dim + k];
        if inverse {
            scratch[p] = s * v[k];
        } else {
            scratch[k] = s * v[p];
        }
    }
    #[unroll]
    for k in 0..dim {
        v[k] = scratch[k];
    }
}

/// Row `ABSOLUTE_POS`'s circuit: its read-out `<Z_i>` into `out` `[rows, qubits]`; or, with
/// `gradients`, the gradients with respect to its inputs into `out` `[rows, input columns]`
/// and to its member's weights into `d_weights` `[rows, weight columns]`, from `d_z`
/// `[rows, qubits]` (read only then), by the adjoint pass.
#[cube(launch)]
fn circuit_kernel<F: Float, I: Numeric>(
    inputs: &Tensor<F>,
    weights: &Tensor<F>,
    ops: &Tensor<I>,
    matrices: &Tensor<F>,
    perms: &Tensor<I>,
    signs: &Tensor<F>,
    d_z: &Tensor<F>,
    out: &mut Tensor<F>,
    d_weights: &mut Tensor<F>,
    input_columns: u32,
    weight_columns: u32,
    per_member: u32,
    #[comptime] qubits: usize,
    #[comptime] gradients: bool,
    #[define(F, I)] _dtypes: [StorageType; 2],
) {
    let dim = comptime!(1usize << qubits);
    let columns = input_columns as usize;
    let w_columns = weight_columns as usize;
    let row = ABSOLUTE_POS;
    if row * columns >= inputs.len() {
        terminate!();
    }
    let x0 = row * columns;
    let w0 = (row / per_member as usize) * w_columns;
    let steps = ops.len() / 3;
    let mut state = Array::<F>::new(dim);
    let mut scratch = Array::<F>::new(dim);
    let mut m = Array::<F>::new(4usize);
    #[unroll]
    for k in 0..dim {
        state[k] = F::new(0.0);
    }
    state[0] = F::new(1.0);
    for step in 0..steps {
        let kind = i32::cast_from(ops[step * 3]);
        let stride = u32::cast_from(ops[step * 3 + 1]) as usize;
        if kind == PERMUTATION {
            let index = u32::cast_from(ops[step * 3 + 2]) as usize;
            permute::<F, I>(&mut state, &mut scratch, perms, signs, index, false, dim);
        } else {
            load_matrix::<F, I>(&mut m, step, ops, matrices, inputs, weights, x0, w0);
            mix::<F>(&mut state, &m, stride, false, dim);
        }
    }
    if !gradients {
        #[unroll]
        for i in 0..qubits {
            let mut z = F::new(0.0);
            #[unroll]
            for k in 0..dim {
                let a = state[k];
                if (k >> (qubits - 1 - i)) & 1usize == 0usize {
                    z += a * a;
                } else {
                    z -= a * a;
                }
            }
            out[row * qubits + i] = z;
        }
    } else {
        // dL/dpsi_k = 2 psi_k sum_i dz_i <k|Z_i|k>.
        let mut adjoint = Array::<F>::new(dim);
        #[unroll]
        for k in 0..dim {
            let mut signed = F::new(0.0);
            #[unroll]
            for i in 0..qubits {
                let d = d_z[row * qubits + i];
                if (k >> (qubits - 1 - i)) & 1usize == 0usize {
                    signed += d;
                } else {
                    signed -= d;
                }
            }
            adjoint[k] = F::new(2.0) * state[k] * signed;
        }
        for c in 0..columns {
            out[x0 + c] = F::new(0.0);
        }
        for c in 0..w_columns {
            d_weights[row * w_columns + c] = F::new(0.0);
        }
        for back in 0..steps {
            let step = steps - 1 - back;
            let kind = i32::cast_from(ops[step * 3]);
            let stride = u32::cast_from(ops[step * 3 + 1]) as usize;
            let index = u32::cast_from(ops[step * 3 + 2]) as usize;
            if kind == PERMUTATION {
                permute::<F, I>(&mut state, &mut scratch, perms, signs, index, true, dim);
                permute::<F, I>(&mut adjoint, &mut scratch, perms, signs, index, true, dim);
            } else {
                load_matrix::<F, I>(&mut m, step, ops, matrices, inputs, weights, x0, w0);
                mix::<F>(&mut state, &m, stride, true, dim);
                if kind != FIXED {
                    // g^T (dRY/dtheta) psi, dRY/dtheta = [[-s, -c], [c, -s]] / 2.
                    let (c, s) = (m[0], m[2]);
                    let mut slope = F::new(0.0);
                    #[unroll]
                    for p in 0..comptime!(dim / 2) {
                        let k = (p / stride) * 2 * stride + p % stride;
                        let (a0, a1) = (state[k], state[k + stride]);
                        slope += adjoint[k] * (-s * a0 - c * a1)
                            + adjoint[k + stride] * (c * a0 - s * a1);
                    }
                    slope *= F::new(0.5);
                    if kind == INPUT {
                        out[x0 + index] += slope;
                    } else {
                        d_weights[row * w_columns + index] += slope;
                    }
                }
                mix::<F>(&mut adjoint, &m, stride, true, dim);
            }
        }
    }
}

/// The program's [`Tables`] as tensors on `device`.
fn tables<R: CubeRuntime, BT: BoolElement>(
    program: &RealCircuit,
    device: &R::Device,
) -> [CubeTensor<R>; 4] {
    let Tables {
        steps,
        matrices,
        perms,
        signs,
    } = program.tables();
    let (count, dim) = (program.steps().len(), program.dimension());
    let ints = |values: Vec<i32>, shape: [usize; 2]| {
        let t = burn::tensor::Tensor::<Cube<R, BT>, 2, Int>::from_data(
            TensorData::new(values, shape),
            device,
        );
        into_contiguous(t.into_primitive())
    };
    let floats = |values: Vec<f32>, shape: [usize; 2]| {
        to_cube(Values::<R, BT, 2>::from_data(
            TensorData::new(values, shape),
            device,
        ))
    };
    let permutations = perms.len() / dim;
    [
        ints(steps, [count, 3]),
        floats(matrices, [count, 4]),
        ints(perms, [permutations, dim]),
        floats(signs, [permutations, dim]),
    ]
}

/// Whether the kernel takes the call (else the composition does): a program within
/// [`MAX_QUBITS`] with steps, rows, and input and weight columns to bind.
fn fits(program: &RealCircuit, rows: usize, columns: usize, weight_columns: usize) -> bool {
    program.qubits() <= MAX_QUBITS
        && !program.steps().is_empty()
        && rows > 0
        && columns > 0
        && weight_columns > 0
}

/// One launch of the kernel over `rows` rows: the read-out `[rows, qubits]`, or with `d_z`
/// the input gradients `[rows, columns]` and the per-row weight gradients `[rows, weight
/// columns]`.
fn launch<R: CubeRuntime, BT: BoolElement>(
    program: &RealCircuit,
    inputs: CubeTensor<R>,
    weights: CubeTensor<R>,
    d_z: Option<CubeTensor<R>>,
) -> (CubeTensor<R>, CubeTensor<R>) {
    let (rows, columns) = (inputs.meta.shape()[0], inputs.meta.shape()[1]);
    let (members, weight_columns) = (weights.meta.shape()[0], weights.meta.shape()[1]);
    let per_member = (rows / members.max(1)).max(1);
    let qubits = program.qubits();
    let gradients = d_z.is_some();
    let [ops, matrices, perms, signs] = tables::<R, BT>(program, &inputs.device);
    let (out, d_weights) = if gradients {
        (
            empty_shaped(&inputs, [rows, columns]),
            empty_shaped(&inputs, [rows, weight_columns]),
        )
    } else {
        // The weight gradients are not written: a one-value stand-in binding.
        (
            empty_shaped(&inputs, [rows, qubits]),
            empty_shaped(&inputs, [1]),
        )
    };
    let client = inputs.client.clone();
    let (count, dim) = elementwise(&client, rows);
    let dtypes = [inputs.dtype.into(), ops.dtype.into()];
    circuit_kernel::launch::<R>(
        &client,
        count,
        dim,
        inputs.clone().into_tensor_arg(),
        weights.into_tensor_arg(),
        ops.into_tensor_arg(),
        matrices.into_tensor_arg(),
        perms.into_tensor_arg(),
        signs.into_tensor_arg(),
        d_z.unwrap_or(inputs).into_tensor_arg(),
        out.clone().into_tensor_arg(),
        d_weights.clone().into_tensor_arg(),
        columns as u32,
        weight_columns as u32,
        per_member as u32,
        qubits,
        gradients,
        dtypes,
    );
    (out, d_weights)
}

/// [`crate::ops::QuenchOps::circuit_forward`] on a CubeCL backend.
pub(crate) fn circuit_forward<R: CubeRuntime, BT: BoolElement>(
    program: &RealCircuit,
    inputs: Values<R, BT, 2>,
    weights: Values<R, BT, 2>,
) -> Values<R, BT, 2> {
    let ([rows, columns], [_, weight_columns]) = (inputs.dims(), weights.dims());
    if !fits(program, rows, columns, weight_columns) {
        return super::composed_forward(program, inputs, weights);
    }
    from_cube(launch::<R, BT>(program, to_cube(inputs), to_cube(weights), None).0)
}

/// [`crate::ops::QuenchOps::circuit_backward`] on a CubeCL backend.
pub(crate) fn circuit_backward<R: CubeRuntime, BT: BoolElement>(
    program: &RealCircuit,
    inputs: Values<R, BT, 2>,
    weights: Values<R, BT, 2>,
    d_z: Values<R, BT, 2>,
) -> CircuitGradients<Cube<R, BT>> {
    let ([rows, columns], [members, weight_columns]) = (inputs.dims(), weights.dims());
    if !fits(program, rows, columns, weight_columns) {
        return super::composed_backward(program, inputs, weights, d_z);
    }
    let (d_inputs, d_weights) = launch::<R, BT>(
        program,
        to_cube(inputs),
        to_cube(weights),
        Some(to_cube(d_z)),
    );
    let per_member = rows / members.max(1);
    let d_weights: Values<R, BT, 3> =
        from_cube::<R, BT, 2>(d_weights).reshape_to([members, per_member, weight_columns]);
    CircuitGradients {
        inputs: from_cube(d_inputs),
        weights: d_weights.sum_along(1).reshape_to([members, weight_columns]),
    }
}
