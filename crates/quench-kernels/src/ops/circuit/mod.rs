//! The read-out of a batch of real quantum circuits as an operation
//! ([`QuenchOps::circuit_forward`] and [`QuenchOps::circuit_backward`]): `<Z_i>` `[rows,
//! qubits]` of every row's circuit ([`RealCircuit`]: fixed real gates, `RY` rotations whose
//! angles are the row's inputs `[rows, input columns]` or its member's weights `[members,
//! weight columns]`, the rows member-major, and signed permutations), and the gradients with
//! respect to both by the adjoint method ([`quench_host::circuit`]).
//!
//! The default composes the circuit gate by gate in Burn's ops (each gate a split of the state
//! along its wire and a mix of the halves; a permutation a `select`; the read-out a product
//! with the `[2^n, n]` sign matrix), its backward pass Burn's autodiff through that
//! composition; the CPU backend's host kernel runs each row's state in f64 (`circuit::host`),
//! rows over the cores; a CubeCL backend runs one kernel forward and one backward, a unit per
//! row (`circuit::cube`), where the composition takes a dozen launches per gate.

use burn::backend::Autodiff;
use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::tensor::backend::Backend;
use burn::tensor::{Int, Tensor, TensorData, TensorPrimitive};

use quench_host::circuit::z_sign;
pub use quench_host::circuit::{RealCircuit, Source, Step};

use super::QuenchOps;
use crate::precise_matmul;
use crate::readback::float_tensor;
use crate::reductions::Reduce;
use crate::views::ReshapeTo;

#[cfg(any(feature = "cuda", feature = "wgpu"))]
pub(crate) mod cube;
pub(crate) mod host;

/// Gradients of a loss with respect to a circuit read-out's angles.
#[derive(Debug, Clone)]
pub struct CircuitGradients<B: Backend> {
    /// With respect to the inputs, `[rows, input columns]`.
    pub inputs: Tensor<B, 2>,
    /// With respect to the weights, `[members, weight columns]` (summed over each member's
    /// rows).
    pub weights: Tensor<B, 2>,
}

/// `<Z_i>` `[rows, qubits]` of `program` run on every row with its `inputs` `[rows, at least
/// program.inputs()]` and its member's `weights` `[members, at least program.weights()]`
/// (`members` dividing `rows`, rows member-major); differentiable on an autodiff backend
/// (one node, through [`QuenchOps::circuit_backward`]). quench-circuit's
/// `Simulator::expectations` checks a caller's shapes first and names them.
///
/// # Panics
/// Where the shapes break that contract (a bug of the caller, as Burn's ops panic on
/// mismatched shapes): too few columns, no member, or members not dividing the rows.
pub fn expectations<B: QuenchOps>(
    program: &RealCircuit,
    inputs: Tensor<B, 2>,
    weights: Tensor<B, 2>,
) -> Tensor<B, 2> {
    let ([rows, columns], [members, weight_columns]) = (inputs.dims(), weights.dims());
    assert!(
        columns >= program.inputs().max(1) && weight_columns >= program.weights().max(1),
        "circuit read-out: inputs [{rows}, {columns}] and weights [{members}, {weight_columns}] \
         for a program reading {} inputs and {} weights (at least one column each)",
        program.inputs(),
        program.weights()
    );
    assert!(
        members > 0 && rows.is_multiple_of(members),
        "circuit read-out: {members} members for {rows} rows"
    );
    B::circuit_forward(program, inputs, weights)
}

/// `[2^n, n]`: entry `(k, i)` is `<k|Z_i|k>`, +1 where bit `n - 1 - i` of `k` is 0.
pub fn z_signs<B: Backend>(qubits: usize, device: &B::Device) -> Tensor<B, 2> {
    let dim = 1usize << qubits;
    let signs = (0..dim * qubits)
        .map(|e| z_sign(e / qubits, qubits - 1 - e % qubits))
        .collect();
    float_tensor::<B, f64, 2>(signs, [dim, qubits], device)
}

/// A one-qubit step's matrix for the batch: fixed, or `RY` with each row's `(cos, sin)` of
/// half its angle, `[rows, 1, 1, 1]` each.
enum Matrix<B: Backend> {
    Fixed([[f64; 2]; 2]),
    Ry([Tensor<B, 4>; 2]),
}

/// A call's angles as the composition reads them: `(cos, sin)` of half of every input
/// `[rows, columns]` and of every row's copy of its member's weights `[rows, weight columns]`.
struct Halves<B: Backend> {
    inputs: [Tensor<B, 2>; 2],
    weights: [Tensor<B, 2>; 2],
}

impl<B: Backend> Halves<B> {
    fn new(inputs: Tensor<B, 2>, weights: Tensor<B, 2>) -> Self {
        let [rows, _] = inputs.dims();
        let [members, columns] = weights.dims();
        let per_member = rows / members.max(1);
        let weights = weights
            .reshape_to([members, 1, columns])
            .repeat_dim(1, per_member)
            .reshape_to([rows, columns]);
        let halves = |angles: Tensor<B, 2>| {
            let half = angles.mul_scalar(0.5);
            [half.clone().cos(), half.sin()]
        };
        Self {
            inputs: halves(inputs),
            weights: halves(weights),
        }
    }

    /// The wire's stride and the matrix of a one-qubit `step`; `None` for a permutation.
    fn matrix(&self, program: &RealCircuit, step: &Step) -> Option<(usize, Matrix<B>)> {
        let column = |t: &Tensor<B, 2>, i: usize| {
            let rows = t.dims()[0];
            t.clone().narrow(1, i, 1).reshape_to([rows, 1, 1, 1])
        };
        match step {
            Step::Fixed { wire, matrix } => Some((program.stride(*wire), Matrix::Fixed(*matrix))),
            Step::Rotation { wire, angle } => {
                let ([cos, sin], i) = match *angle {
                    Source::Input(i) => (&self.inputs, i),
                    Source::Weight(i) => (&self.weights, i),
                };
                let halves = [column(cos, i), column(sin, i)];
                Some((program.stride(*wire), Matrix::Ry(halves)))
            }
            Step::Permutation { .. } => None,
        }
    }
}

/// `m` (or its transpose) applied to every amplitude pair of `state` `[rows, dim]` at
/// `stride`.
fn apply<B: Backend>(
    state: Tensor<B, 2>,
    stride: usize,
    m: &Matrix<B>,
    transposed: bool,
) -> Tensor<B, 2> {
    mix(state, stride, |x0, x1| match m {
        Matrix::Fixed([[a, b], [c, d]]) => {
            let (b, c) = if transposed { (*c, *b) } else { (*b, *c) };
            [
                x0.clone().mul_scalar(*a) + x1.clone().mul_scalar(b),
                x0.mul_scalar(c) + x1.mul_scalar(*d),
            ]
        }
        Matrix::Ry([cos, sin]) => {
            let sin = if transposed {
                sin.clone().neg()
            } else {
                sin.clone()
            };
            [
                x0.clone() * cos.clone() - x1.clone() * sin.clone(),
                x0 * sin + x1 * cos.clone(),
            ]
        }
    })
}

/// `state` `[rows, dim]` with every amplitude pair of the wire at `stride` (`x0` where the
/// wire's bit is 0, `x1` where it is 1, each `[rows, blocks, 1, stride]`) replaced by
/// `new(x0, x1)`.
fn mix<B: Backend>(
    state: Tensor<B, 2>,
    stride: usize,
    new: impl FnOnce(Tensor<B, 4>, Tensor<B, 4>) -> [Tensor<B, 4>; 2],
) -> Tensor<B, 2> {
    let [rows, dim] = state.dims();
    let split: Tensor<B, 4> = state.reshape_to([rows, dim / (2 * stride), 2, stride]);
    let [y0, y1] = new(split.clone().narrow(2, 0, 1), split.narrow(2, 1, 1));
    Tensor::cat(vec![y0, y1], 2).reshape_to([rows, dim])
}

/// A permutation step's `(indices, signs)` for `select` on `device`: `new = old[perm] *
/// signs`, or for its transpose (`inverse`) `new[perm[k]] = signs[k] old[k]`, i.e.
/// `old[inv] * signs[inv]` with `inv` the inverse permutation.
fn permutation<B: Backend>(
    perm: &[usize],
    signs: &[f64],
    inverse: bool,
    device: &B::Device,
) -> (Tensor<B, 1, Int>, Tensor<B, 2>) {
    let dim = perm.len();
    let (indices, signs): (Vec<i64>, Vec<f64>) = if inverse {
        let mut inv = vec![0; dim];
        for (k, &p) in perm.iter().enumerate() {
            inv[p] = k;
        }
        inv.iter().map(|&k| (k as i64, signs[k])).unzip()
    } else {
        perm.iter().zip(signs).map(|(&p, &s)| (p as i64, s)).unzip()
    };
    (
        Tensor::from_data(TensorData::new(indices, [dim]), device),
        float_tensor::<B, f64, 2>(signs, [1, dim], device),
    )
}

/// Each row's final state `[rows, dim]` and, with `keep`, the state entering every step.
fn run_states<B: Backend>(
    program: &RealCircuit,
    halves: &Halves<B>,
    rows: usize,
    keep: bool,
    device: &B::Device,
) -> (Tensor<B, 2>, Vec<Tensor<B, 2>>) {
    let dim = program.dimension();
    let zero = (0..dim).map(|k| if k == 0 { 1.0 } else { 0.0 }).collect();
    let mut state = float_tensor::<B, f64, 2>(zero, [1, dim], device).repeat_dim(0, rows);
    let mut entering = Vec::new();
    for step in program.steps() {
        if keep {
            entering.push(state.clone());
        }
        state = match (halves.matrix(program, step), step) {
            (Some((stride, m)), _) => apply(state, stride, &m, false),
            (None, Step::Permutation { perm, signs }) => {
                let (indices, signs) = permutation::<B>(perm, signs, false, device);
                state.select(1, indices) * signs
            }
            (None, _) => unreachable!("only permutations have no matrix"),
        };
    }
    (state, entering)
}

/// [`QuenchOps::circuit_forward`] in Burn's tensor ops, gate by gate.
pub fn composed_forward<B: QuenchOps>(
    program: &RealCircuit,
    inputs: Tensor<B, 2>,
    weights: Tensor<B, 2>,
) -> Tensor<B, 2> {
    let (rows, device) = (inputs.dims()[0], inputs.device());
    let halves = Halves::new(inputs, weights);
    let (state, _) = run_states(program, &halves, rows, false, &device);
    precise_matmul(
        state.powi_scalar(2),
        z_signs::<B>(program.qubits(), &device),
    )
}

/// [`QuenchOps::circuit_backward`] in Burn's tensor ops: the adjoint pass of
/// [`quench_host::circuit`] with the states entering each step kept from a forward pass
/// (where the host uncomputes them).
pub fn composed_backward<B: QuenchOps>(
    program: &RealCircuit,
    inputs: Tensor<B, 2>,
    weights: Tensor<B, 2>,
    d_z: Tensor<B, 2>,
) -> CircuitGradients<B> {
    let ([rows, columns], [members, weight_columns]) = (inputs.dims(), weights.dims());
    let device = inputs.device();
    let halves = Halves::new(inputs, weights);
    let (state, entering) = run_states(program, &halves, rows, true, &device);
    // dL/dpsi = 2 psi (d_z Z^T), Z the `[dim, n]` sign matrix.
    let signs = z_signs::<B>(program.qubits(), &device);
    let mut adjoint = state.mul_scalar(2.0) * precise_matmul(d_z, signs.transpose());
    let mut d_inputs: Vec<Option<Tensor<B, 2>>> = vec![None; columns];
    let mut d_weights: Vec<Option<Tensor<B, 2>>> = vec![None; weight_columns];
    for (step, psi) in program.steps().iter().zip(entering).rev() {
        let Some((stride, m)) = halves.matrix(program, step) else {
            if let Step::Permutation { perm, signs } = step {
                let (indices, signs) = permutation::<B>(perm, signs, true, &device);
                adjoint = adjoint.select(1, indices) * signs;
            }
            continue;
        };
        if let (Step::Rotation { angle, .. }, Matrix::Ry([cos, sin])) = (step, &m) {
            // dRY/dtheta psi = [[-s, -c], [c, -s]] psi / 2.
            let moved = mix(psi, stride, |x0, x1| {
                [
                    (x0.clone() * sin.clone() + x1.clone() * cos.clone()).neg(),
                    x0 * cos.clone() - x1 * sin.clone(),
                ]
            });
            let slope = (adjoint.clone() * moved).sum_along(1).mul_scalar(0.5);
            let slot = match *angle {
                Source::Input(i) => &mut d_inputs[i],
                Source::Weight(i) => &mut d_weights[i],
            };
            *slot = Some(match slot.take() {
                Some(sum) => sum + slope,
                None => slope,
            });
        }
        adjoint = apply(adjoint, stride, &m, true);
    }
    let gather = |columns: Vec<Option<Tensor<B, 2>>>| {
        if columns.is_empty() {
            return Tensor::zeros([rows, 0], &device);
        }
        let zeros = Tensor::<B, 2>::zeros([rows, 1], &device);
        Tensor::cat(
            columns
                .into_iter()
                .map(|c| c.unwrap_or_else(|| zeros.clone()))
                .collect(),
            1,
        )
    };
    let per_member = rows / members.max(1);
    let d_weight_rows: Tensor<B, 3> =
        gather(d_weights).reshape_to([members, per_member, weight_columns]);
    CircuitGradients {
        inputs: gather(d_inputs),
        weights: d_weight_rows
            .sum_along(1)
            .reshape_to([members, weight_columns]),
    }
}

/// The autodiff backend's read-out: the inner backend's forward pass, recorded as one node
/// (parents: the inputs and the weights) whose backward pass is the inner backend's
/// [`QuenchOps::circuit_backward`].
pub(super) fn autodiff_forward<B: QuenchOps, C: CheckpointStrategy>(
    program: &RealCircuit,
    inputs: Tensor<Autodiff<B, C>, 2>,
    weights: Tensor<Autodiff<B, C>, 2>,
) -> Tensor<Autodiff<B, C>, 2> {
    #[derive(Debug)]
    struct ReadOut {
        program: RealCircuit,
    }

    impl<B: QuenchOps> Backward<B, 2> for ReadOut {
        type State = (Tensor<B, 2>, Tensor<B, 2>);

        fn backward(
            self,
            ops: Ops<Self::State, 2>,
            grads: &mut Gradients,
            _checkpointer: &mut Checkpointer,
        ) {
            let d_z = grads.consume::<B>(&ops.node);
            let (inputs, weights) = ops.state;
            let d_z = Tensor::from_primitive(TensorPrimitive::Float(d_z));
            let g = B::circuit_backward(&self.program, inputs, weights, d_z);
            let [node_inputs, node_weights] = ops.parents;
            if let Some(node) = node_inputs {
                grads.register::<B>(node.id, g.inputs.into_primitive().tensor());
            }
            if let Some(node) = node_weights {
                grads.register::<B>(node.id, g.weights.into_primitive().tensor());
            }
        }
    }

    let (x, w) = (inputs.clone().inner(), weights.clone().inner());
    let z = B::circuit_forward(program, x.clone(), w.clone())
        .into_primitive()
        .tensor();
    let parents = [
        inputs.into_primitive().tensor().node,
        weights.into_primitive().tensor().node,
    ];
    let read_out = ReadOut {
        program: program.clone(),
    };
    let z = match read_out.prepare::<C>(parents).compute_bound().stateful() {
        OpsKind::Tracked(prep) => prep.finish((x, w), z),
        OpsKind::UnTracked(prep) => prep.finish(z),
    };
    Tensor::from_primitive(TensorPrimitive::Float(z))
}

/// The autodiff backend's explicit backward pass: the inner backend's, on values.
pub(super) fn autodiff_backward<B: QuenchOps, C: CheckpointStrategy>(
    program: &RealCircuit,
    inputs: Tensor<Autodiff<B, C>, 2>,
    weights: Tensor<Autodiff<B, C>, 2>,
    d_z: Tensor<Autodiff<B, C>, 2>,
) -> CircuitGradients<Autodiff<B, C>> {
    let g = B::circuit_backward(program, inputs.inner(), weights.inner(), d_z.inner());
    CircuitGradients {
        inputs: Tensor::from_inner(g.inputs),
        weights: Tensor::from_inner(g.weights),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::readback::to_host_f64;
    use burn::backend::NdArray;
    use quench_support::stats::max_abs_difference;

    /// Guide 003's circuit on `qubits` qubits with `layers` weight layers, plus a fixed
    /// Hadamard and a sign flip, so that every kind of step runs: `RY(x_i)` on every wire,
    /// `H` on wire 0, then per layer `RY(w)` on every wire and the CNOT ring with a Z on the
    /// last wire, as one signed permutation.
    fn ring(qubits: usize, layers: usize) -> RealCircuit {
        let dim = 1usize << qubits;
        let bit = |k: usize, wire: usize| (k >> (qubits - 1 - wire)) & 1;
        // The ring's CNOTs c -> c+1 (mod n) in order, as `new[k] = old[perm[k]]`: applying
        // CNOT(c, t) maps basis k to k ^ (bit c of k) << t's shift; composing, the new
        // amplitude at k is the old one at the preimage of k.
        let ring = (0..if qubits > 1 { qubits } else { 0 }).map(|c| (c, (c + 1) % qubits));
        let cnots: Vec<(usize, usize)> = ring.collect();
        let image = |mut k: usize| {
            for &(c, t) in &cnots {
                if bit(k, c) == 1 {
                    k ^= 1 << (qubits - 1 - t);
                }
            }
            k
        };
        let mut perm = vec![0; dim];
        for k in 0..dim {
            perm[image(k)] = k;
        }
        let signs = (0..dim)
            .map(|k| if bit(k, qubits - 1) == 1 { -1.0 } else { 1.0 })
            .collect::<Vec<f64>>();
        let h = std::f64::consts::FRAC_1_SQRT_2;
        let mut steps: Vec<Step> = (0..qubits)
            .map(|i| Step::Rotation {
                wire: i,
                angle: Source::Input(i),
            })
            .collect();
        steps.push(Step::Fixed {
            wire: 0,
            matrix: [[h, h], [h, -h]],
        });
        for layer in 0..layers {
            steps.extend((0..qubits).map(|i| Step::Rotation {
                wire: i,
                angle: Source::Weight(layer * qubits + i),
            }));
            steps.push(Step::Permutation {
                perm: perm.clone(),
                signs: signs.clone(),
            });
        }
        RealCircuit::new(qubits, steps).expect("a valid program")
    }

    /// The read-out and the gradients of `sum(z * spread)` with respect to the inputs and
    /// the weights, on backend `X`, through the operation or (`composed`) the composition.
    fn run<X: crate::QuenchBackend>(
        program: &RealCircuit,
        rows: usize,
        members: usize,
        composed: bool,
        device: &X::Device,
    ) -> [Vec<f64>; 3] {
        let (columns, weight_columns) = (program.inputs(), program.weights().max(1));
        let inputs = crate::testing::spread(rows * columns, 41, 3.0);
        let weights = crate::testing::spread(members * weight_columns, 42, 3.0);
        let x = float_tensor::<X, f32, 2>(inputs, [rows, columns], device).require_grad();
        let w =
            float_tensor::<X, f32, 2>(weights, [members, weight_columns], device).require_grad();
        let z = if composed {
            composed_forward(program, x.clone(), w.clone())
        } else {
            expectations(program, x.clone(), w.clone())
        };
        let pull = crate::testing::spread(rows * program.qubits(), 43, 1.0);
        let pull = float_tensor::<X, f32, 2>(pull, [rows, program.qubits()], device);
        let grads = (z.clone() * pull).sum_all().backward();
        let grad = |t: &Tensor<X, 2>| t.grad(&grads).map(to_host_f64).unwrap_or_default();
        [to_host_f64(z), grad(&x), grad(&w)]
    }

    /// A bound on the error of an f32 read-out or gradient against exact arithmetic on the
    /// same f32 angles: each of `g` gates rounds every amplitude of a unit-norm state once
    /// (relative `u = 2^-24`, two products and a sum: `3u`), the adjoint pass doubles the
    /// gates, the read-out's and the angle gradients' sums add `dim u`; each rotation's sine
    /// and cosine err by at most `trig` (absolute), which moves a unit-norm state by `2 trig`
    /// and a read-out or gradient by twice that. Gradients scale with the pulls' sum over the
    /// qubits (at most `n`).
    fn f32_bound(program: &RealCircuit, trig: f64) -> f64 {
        let u = 2f64.powi(-24);
        let gates = program.steps().len() as f64;
        let rotations = program
            .steps()
            .iter()
            .filter(|s| matches!(s, Step::Rotation { .. }))
            .count() as f64;
        let (dim, n) = (program.dimension() as f64, program.qubits() as f64);
        n * ((2.0 * 3.0 * gates + dim) * u + 4.0 * rotations * trig)
    }

    /// The host's sine and cosine: f64's, within a few f64 epsilons, nothing at f32's scale.
    const HOST_TRIG: f64 = 1e-15;

    /// The absolute error Vulkan allows a device's f32 `sin` and `cos` on `[-pi, pi]`
    /// (SPIR-V's precision table: `2^-11`), where the half angles of these tests lie (the
    /// angles are within 3 rad); CUDA's `sinf` and `cosf` are within 2 ulp, far inside it.
    const DEVICE_TRIG: f64 = 1.0 / 2048.0;

    #[test]
    fn the_host_kernel_is_the_composition_in_f64() {
        for (qubits, layers, rows, members) in [(1, 1, 1, 1), (4, 3, 12, 3), (5, 2, 7, 1)] {
            let program = ring(qubits, layers);
            let host =
                run::<Autodiff<NdArray<f32>>>(&program, rows, members, false, &Default::default());
            let reference =
                run::<Autodiff<NdArray<f64>>>(&program, rows, members, true, &Default::default());
            for (name, (a, b)) in ["z", "d inputs", "d weights"]
                .iter()
                .zip(host.iter().zip(&reference))
            {
                assert_eq!(a.len(), b.len(), "{name}");
                assert!(!a.is_empty(), "{name}");
                let gap = max_abs_difference(a, b);
                let bound = f32_bound(&program, HOST_TRIG);
                assert!(
                    gap < bound,
                    "{name} ({qubits}, {layers}): {gap:e} > {bound:e}"
                );
            }
        }
    }

    #[test]
    fn the_default_backward_pass_is_autodiff_through_the_composition() {
        // In f64, where the default methods run (the composition forward, `composed_backward`
        // back, as one node) against Burn's autodiff through the composition: the same
        // operations, so within a few f64 epsilons of the values' scale (at most the pulls'
        // sum, 3).
        type X = Autodiff<NdArray<f64>>;
        let device = Default::default();
        for (qubits, layers, rows, members) in [(3, 2, 6, 2), (2, 1, 4, 2)] {
            let program = ring(qubits, layers);
            let op = run::<X>(&program, rows, members, false, &device);
            let composed = run::<X>(&program, rows, members, true, &device);
            for (name, (a, b)) in ["z", "d inputs", "d weights"]
                .iter()
                .zip(op.iter().zip(&composed))
            {
                assert!(
                    a.iter().any(|v| v.abs() > 0.01),
                    "{name} ({qubits}): a test of nonzero values: {a:?} {b:?}"
                );
                let gap = max_abs_difference(a, b);
                assert!(gap < 1e-13, "{name} ({qubits}, {layers}): {gap:e}");
            }
        }
    }

    #[test]
    #[should_panic(expected = "circuit read-out: inputs [2, 1] and weights [1, 2]")]
    fn too_few_columns_are_a_callers_bug_named_with_the_shapes() {
        // Guide 003's ring on 2 qubits reads 2 inputs and 2 weights.
        type X = NdArray<f32>;
        let device = Default::default();
        let x = Tensor::<X, 2>::zeros([2, 1], &device);
        let w = Tensor::<X, 2>::zeros([1, 2], &device);
        expectations(&ring(2, 1), x, w);
    }

    crate::device_test! {
        fn the_device_kernels_give_the_host_kernels_values_and_gradients<B>(device) {
            // The device's f32 against the host's f64 rounded once: within `f32_bound`, and
            // the host's own rounding. Seven qubits are beyond the kernel: the composition.
            for (qubits, layers, rows, members) in [(1, 1, 1, 1), (4, 3, 33, 3), (6, 2, 5, 5), (7, 1, 3, 1)] {
                let program = ring(qubits, layers);
                let on_device = run::<B>(&program, rows, members, false, device);
                let on_host = run::<Autodiff<NdArray<f32>>>(
                    &program, rows, members, false, &Default::default(),
                );
                for (name, (a, b)) in ["z", "d inputs", "d weights"]
                    .iter()
                    .zip(on_device.iter().zip(&on_host))
                {
                    assert_eq!(a.len(), b.len(), "{name}");
                    let gap = max_abs_difference(a, b);
                    let bound = f32_bound(&program, HOST_TRIG) + f32_bound(&program, DEVICE_TRIG);
                    assert!(gap < bound, "{name} ({qubits}, {layers}, {rows}): {gap:e} > {bound:e}");
                }
            }
        }
    }
}
