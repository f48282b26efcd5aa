//! CubeCL kernels of [`crate::ops::propagate`] for every CubeCL runtime, for matrices up to
//! 16 x 16 (a two-qubit Lindbladian in a real basis); larger ones take the composition. Four
//! launches of two kernels, where the composition takes a product per Horner step, squaring and
//! segment, forward and back, with the elementwise ops between them:
//! - the propagators (forward) and the generators' gradients (backward), one kernel with the
//!   derivative switched on when it is compiled: one cube per task-segment matrix, one unit per
//!   entry `(i, j)` (`n^2` units, padded to whole warps). The matrices live in shared memory
//!   (`x` and `p`, and for the gradient also the direction `e` and the derivative `l`: 4 x 256
//!   f32 at most); each Horner step or squaring is a product in which every unit sums its row
//!   of one by its column of the other (`n` multiply-adds from shared memory), then the cube
//!   synchronises and overwrites. A matrix is read from global memory once and written once:
//!   `2 n^2` values of traffic for `(degree + squarings) n^3` multiply-adds (four times as many
//!   for the gradient's pair).
//! - the carry (forward) and the carry back: one cube per task, one unit per component of the
//!   state, which lives in shared memory; per segment each unit stores the current vector
//!   (the state entering the segment, or the gradient leaving it), reads its row (or, back,
//!   its column) of the segment's propagator and takes the product, `n^2` reads per segment.

use burn::tensor::TensorData;
use burn_cubecl::{BoolElement, CubeRuntime};
use cubecl::prelude::*;
use cubecl::{CubeCount, CubeDim};

use super::{PropagateGradients, PropagateTape, SquaredPolynomial};
use crate::ops::cube::{Cube, empty_shaped, from_cube, to_cube};

/// A tensor of the backend.
type Values<R, BT, const D: usize> = burn::tensor::Tensor<Cube<R, BT>, D>;

/// The largest side `n` the kernels take: `n^2` units a cube, within the 256 invocations
/// every Vulkan device allows.
const MAX_SIDE: usize = 16;

/// Cubes along x a launch may have on every runtime; more go along y.
const MAX_CUBES_X: usize = 65_535;

/// Units a cube's width is a multiple of: a warp on CUDA. On lavapipe a cube of 81 units (a
/// 9 x 9 matrix) came back with its last unit's entries unwritten, where cubes padded to
/// whole warps (the extra units only synchronise) came back whole.
const WARP: usize = 32;

/// A cube of `units` units, padded to whole warps.
fn warps(units: usize) -> CubeDim {
    CubeDim::new_1d(units.next_multiple_of(WARP) as u32)
}

/// `count` cubes, on a grid every runtime accepts.
fn cubes(count: usize) -> CubeCount {
    let x = count.clamp(1, MAX_CUBES_X);
    CubeCount::Static(x as u32, count.div_ceil(x).max(1) as u32, 1)
}

/// Entry `(i, j)` of `a b`, row-major `n x n` matrices in shared memory.
#[cube]
fn entry<F: Float>(
    a: &SharedMemory<F>,
    b: &SharedMemory<F>,
    i: usize,
    j: usize,
    #[comptime] n: usize,
) -> F {
    let mut sum = F::new(0.0);
    #[unroll]
    for k in 0..n {
        sum += a[i * n + k] * b[k * n + j];
    }
    sum
}

/// The steps of a squared polynomial's evaluation: `degree` Horner steps, then `squarings`.
/// One loop over both, because CubeCL 0.10 compiled a second loop over the squarings alone
/// (`for _ in 0..squarings`, whose body only reads and rewrites `p`) to run at most once on
/// lavapipe: a kernel with three squarings returned `p^2`.
#[cube]
fn steps(degree: usize, squarings: u32) -> usize {
    degree + squarings as usize
}

/// Matrix `CUBE_POS` (`s * tasks + t`) of `generators` `[n, n, matrices]`: its propagator
/// `r(X)` into `out` `[matrices, n, n]`; or, with `derivative`, the gradient with respect to
/// the generator, `L_r(X^T)[g w^T]` with `g` the gradient leaving the segment and `w` the
/// state entering it (`leaving` and `entering`, both `[matrices, n]`, read only then), into
/// `out` `[n, n, matrices]`: the pair `(P, L)` carried along the same steps.
#[cube(launch)]
fn squared_polynomial_kernel<F: Float>(
    generators: &Tensor<F>,
    coefficients: &Tensor<F>,
    leaving: &Tensor<F>,
    entering: &Tensor<F>,
    out: &mut Tensor<F>,
    squarings: u32,
    #[comptime] n: usize,
    #[comptime] derivative: bool,
    #[define(F)] _dtype: StorageType,
) {
    let matrices = generators.len() / (n * n);
    let matrix = CUBE_POS;
    if matrix >= matrices {
        terminate!();
    }
    // Units past the matrix's entries (the cube is padded to whole warps) only synchronise.
    let unit = UNIT_POS_X as usize;
    let active = unit < n * n;
    let (i, j) = (unit / n, unit % n);
    let mut diagonal = F::new(0.0);
    if i == j {
        diagonal = F::new(1.0);
    }
    // `x` is the generator (its transpose for the derivative), `e` the direction and `l` the
    // derivative (both left at zero for the propagator alone).
    let mut x = SharedMemory::<F>::new(n * n);
    let mut p = SharedMemory::<F>::new(n * n);
    let mut e = SharedMemory::<F>::new(n * n);
    let mut l = SharedMemory::<F>::new(n * n);
    let degree = coefficients.len() - 1;
    if active {
        if derivative {
            x[unit] = generators[(j * n + i) * matrices + matrix];
            e[unit] = leaving[matrix * n + i] * entering[matrix * n + j];
        } else {
            x[unit] = generators[unit * matrices + matrix];
        }
        p[unit] = coefficients[degree] * diagonal;
        l[unit] = F::new(0.0);
    }
    sync_cube();
    // Horner's steps, then the squarings, as one loop (see `steps`).
    for step in 0..steps(degree, squarings) {
        let mut next_p = F::new(0.0);
        let mut next_l = F::new(0.0);
        if active {
            if step < degree {
                next_p = entry::<F>(&x, &p, i, j, n) + coefficients[degree - 1 - step] * diagonal;
                if derivative {
                    next_l = entry::<F>(&e, &p, i, j, n) + entry::<F>(&x, &l, i, j, n);
                }
            } else {
                next_p = entry::<F>(&p, &p, i, j, n);
                if derivative {
                    next_l = entry::<F>(&p, &l, i, j, n) + entry::<F>(&l, &p, i, j, n);
                }
            }
        }
        sync_cube();
        if active {
            p[unit] = next_p;
            l[unit] = next_l;
        }
        sync_cube();
    }
    if active {
        if derivative {
            out[unit * matrices + matrix] = l[unit];
        } else {
            out[matrix * n * n + unit] = p[unit];
        }
    }
}

/// Task `CUBE_POS`'s vector `start` `[tasks, n]` carried through the propagators `[segments,
/// tasks, n, n]`: forward `v <- P_s v` over the segments in order, or back (`transposed`)
/// `v <- P_s^T v` from the last. Before each segment's product the current vector goes into
/// `visited` `[segments, tasks, n]` at that segment; the last into `end` `[tasks, n]`.
#[cube(launch)]
fn carry_kernel<F: Float>(
    propagators: &Tensor<F>,
    start: &Tensor<F>,
    visited: &mut Tensor<F>,
    end: &mut Tensor<F>,
    segments: u32,
    #[comptime] n: usize,
    #[comptime] transposed: bool,
    #[define(F)] _dtype: StorageType,
) {
    let tasks = start.len() / n;
    let task = CUBE_POS;
    if task >= tasks {
        terminate!();
    }
    let i = UNIT_POS_X as usize;
    let active = i < n;
    let segments = segments as usize;
    let mut v = SharedMemory::<F>::new(n);
    if active {
        v[i] = start[task * n + i];
    }
    sync_cube();
    for step in 0..segments {
        let mut s = step;
        if transposed {
            s = segments - 1 - step;
        }
        let at = s * tasks + task;
        let matrix = at * n * n;
        let mut value = F::new(0.0);
        if active {
            visited[at * n + i] = v[i];
            #[unroll]
            for k in 0..n {
                let mut m = propagators[matrix + i * n + k];
                if transposed {
                    m = propagators[matrix + k * n + i];
                }
                value += m * v[k];
            }
        }
        sync_cube();
        if active {
            v[i] = value;
        }
        sync_cube();
    }
    if active {
        end[task * n + i] = v[i];
    }
}

/// The polynomial's coefficients as an f32 tensor on `device`.
fn coefficients<R: CubeRuntime, BT: BoolElement>(
    polynomial: &SquaredPolynomial,
    device: &R::Device,
) -> Values<R, BT, 1> {
    let values: Vec<f32> = polynomial.coefficients.iter().map(|&c| c as f32).collect();
    let len = values.len();
    Values::<R, BT, 1>::from_data(TensorData::new(values, [len]), device)
}

/// Whether the kernels take these sizes (else the composition does): a side within
/// [`MAX_SIDE`], something to compute, and a polynomial.
fn fits(n: usize, segments: usize, tasks: usize, polynomial: &SquaredPolynomial) -> bool {
    (1..=MAX_SIDE).contains(&n) && segments > 0 && tasks > 0 && !polynomial.coefficients.is_empty()
}

/// [`crate::ops::QuenchOps::propagate_forward`] on a CubeCL backend.
pub(crate) fn propagate_forward<R: CubeRuntime, BT: BoolElement>(
    generators: Values<R, BT, 4>,
    initial: Values<R, BT, 2>,
    polynomial: &SquaredPolynomial,
) -> PropagateTape<Cube<R, BT>> {
    let [n, _, segments, tasks] = generators.dims();
    if !fits(n, segments, tasks, polynomial) {
        return super::composed_forward(generators, initial, polynomial);
    }
    let device = generators.device();
    let coefficients = to_cube(coefficients::<R, BT>(polynomial, &device));
    let generators = to_cube(generators);
    let initial = to_cube(initial);
    let client = generators.client.clone();
    let dtype = generators.dtype;
    let propagators = empty_shaped(&generators, [segments, tasks, n, n]);
    // The direction's inputs are not read for the propagators alone: the generators stand in.
    squared_polynomial_kernel::launch::<R>(
        &client,
        cubes(segments * tasks),
        warps(n * n),
        generators.clone().into_tensor_arg(),
        coefficients.into_tensor_arg(),
        generators.clone().into_tensor_arg(),
        generators.into_tensor_arg(),
        propagators.clone().into_tensor_arg(),
        polynomial.squarings,
        n,
        false,
        dtype.into(),
    );
    let states = empty_shaped(&initial, [segments, tasks, n]);
    let output = empty_shaped(&initial, [tasks, n]);
    carry_kernel::launch::<R>(
        &client,
        cubes(tasks),
        warps(n),
        propagators.clone().into_tensor_arg(),
        initial.into_tensor_arg(),
        states.clone().into_tensor_arg(),
        output.clone().into_tensor_arg(),
        segments as u32,
        n,
        false,
        dtype.into(),
    );
    PropagateTape {
        propagators: from_cube(propagators),
        states: from_cube(states),
        output: from_cube(output),
    }
}

/// [`crate::ops::QuenchOps::propagate_backward`] on a CubeCL backend.
pub(crate) fn propagate_backward<R: CubeRuntime, BT: BoolElement>(
    generators: Values<R, BT, 4>,
    tape: PropagateTape<Cube<R, BT>>,
    d_output: Values<R, BT, 2>,
    polynomial: &SquaredPolynomial,
) -> PropagateGradients<Cube<R, BT>> {
    let [n, _, segments, tasks] = generators.dims();
    if !fits(n, segments, tasks, polynomial) {
        return super::composed_backward(generators, tape, d_output, polynomial);
    }
    let device = generators.device();
    let coefficients = to_cube(coefficients::<R, BT>(polynomial, &device));
    let generators = to_cube(generators);
    let propagators = to_cube(tape.propagators);
    let entering = to_cube(tape.states);
    let d_output = to_cube(d_output);
    let client = generators.client.clone();
    let dtype = generators.dtype;
    let leaving = empty_shaped(&entering, [segments, tasks, n]);
    let d_initial = empty_shaped(&d_output, [tasks, n]);
    carry_kernel::launch::<R>(
        &client,
        cubes(tasks),
        warps(n),
        propagators.into_tensor_arg(),
        d_output.into_tensor_arg(),
        leaving.clone().into_tensor_arg(),
        d_initial.clone().into_tensor_arg(),
        segments as u32,
        n,
        true,
        dtype.into(),
    );
    let d_generators = empty_shaped(&generators, [n, n, segments, tasks]);
    squared_polynomial_kernel::launch::<R>(
        &client,
        cubes(segments * tasks),
        warps(n * n),
        generators.into_tensor_arg(),
        coefficients.into_tensor_arg(),
        leaving.into_tensor_arg(),
        entering.into_tensor_arg(),
        d_generators.clone().into_tensor_arg(),
        polynomial.squarings,
        n,
        true,
        dtype.into(),
    );
    PropagateGradients {
        generators: from_cube(d_generators),
        initial: from_cube(d_initial),
    }
}
