//! The batched, differentiable simulation on a Burn backend.
//!
//! A [`Simulator`] compiles a [`Circuit`] once into a plan of device operations:
//! - one-qubit gates act on the state viewed as `[batch, 2^w, 2, 2^(n-w-1)]` (wire `w` on the
//!   third axis), with matrix entries that are constants, per-sample tensors `[batch, 1, 1, 1]`
//!   (angles from the inputs) or per-member tensors `[members, 1, 1, 1]` (angles from the
//!   weights; the state is then viewed as `[members, rows per member * 2^w, 2, ...]`);
//! - runs of X, Z, CNOT, CZ and SWAP compose on the host into one signed permutation, applied
//!   as one `select` and one sign multiply;
//! - in [`Mode::Fused`], in calls with at least `2^n` rows per member (where it pays, see
//!   [`MAX_FUSED_QUBITS`]), every run of two or more shared operations (no per-sample angle)
//!   becomes one `2^n x 2^n` matrix per member, built once per call by simulating the run on
//!   the identity (the batch of all basis states) and applied to the batch as one (batched)
//!   matmul; a run without weights is constant and built once, when the simulator is;
//! - in [`Mode::Fused`], the `<Z_i>` read-out of a real circuit ([`Simulator::expectations`])
//!   is the seam's fused operation instead ([`quench_kernels::ops::circuit`]), which holds no
//!   batch of states at all.
//!
//! Members are independent copies of the circuit with their own weights (training seeds):
//! weights are `[members, weights]` and the batch's rows are member-major, `batch / members`
//! rows per member.
//!
//! States stay real (one `[batch, 2^n]` tensor) until a complex gate makes them complex
//! (a second tensor for the imaginary part). Gradients flow to the inputs and weights by
//! Burn's autodiff.

use burn::tensor::{Int, Tensor, TensorData};
use quench_kernels::ops::circuit::{RealCircuit, expectations, z_signs};
use quench_kernels::readback::float_tensor;
use quench_kernels::reductions::{MAX_REDUCED_AXIS, Reduce};
use quench_kernels::views::ReshapeTo;
use quench_kernels::{QuenchOps, precise_matmul};

use crate::circuit::Circuit;
use crate::error::CircuitError;
use crate::gate::{Angle, Gate, GateKind};
use crate::limits::MAX_FUSED_QUBITS;
use crate::permutation::{HostPermutation, absorb};
use crate::program::real_program;

/// How the simulator applies shared gates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// Every gate (or run of signed permutations) is one operation on the batch.
    GateByGate,
    /// Runs of shared gates become one matrix, applied as one matmul, in the calls where that
    /// pays: circuits of at most [`MAX_FUSED_QUBITS`] qubits, run on at least `2^n` rows per
    /// member. Other calls, and larger circuits, run gate by gate.
    #[default]
    Fused,
}

/// Whether fusing the shared runs of an `n`-qubit circuit pays in a call with
/// `rows_per_member` rows per member: building a run's matrix costs as much as simulating the
/// run on all `2^n` basis states, so it pays from `2^n` rows on (measured: see
/// [`MAX_FUSED_QUBITS`]).
pub fn fusion_pays(qubits: usize, rows_per_member: usize) -> bool {
    qubits <= MAX_FUSED_QUBITS && rows_per_member >= 1 << qubits
}

/// A batch of states, amplitudes `[batch, 2^qubits]`: real parts, and imaginary parts once a
/// complex gate has acted.
#[derive(Debug, Clone)]
pub struct State<B: QuenchOps> {
    /// Real parts, `[batch, 2^qubits]`.
    pub re: Tensor<B, 2>,
    /// Imaginary parts, `[batch, 2^qubits]`; `None` while every amplitude is real.
    pub im: Option<Tensor<B, 2>>,
}

impl<B: QuenchOps> State<B> {
    /// Probabilities of the basis states, `[batch, 2^qubits]`.
    pub fn probabilities(&self) -> Tensor<B, 2> {
        let p = self.re.clone().powi_scalar(2);
        match &self.im {
            Some(im) => p + im.clone().powi_scalar(2),
            None => p,
        }
    }
}

/// A matrix entry of a one-qubit gate for the whole batch: zero, a constant, or a tensor
/// `[batch or 1, 1, 1, 1]`.
#[derive(Debug, Clone)]
enum Coef<B: QuenchOps> {
    Zero,
    Const(f64),
    Var(Tensor<B, 4>),
}

impl<B: QuenchOps> Coef<B> {
    fn from_value(value: f64) -> Self {
        if value == 0.0 {
            Coef::Zero
        } else {
            Coef::Const(value)
        }
    }

    fn neg(self) -> Self {
        match self {
            Coef::Zero => Coef::Zero,
            Coef::Const(c) => Coef::Const(-c),
            Coef::Var(t) => Coef::Var(t.neg()),
        }
    }
}

/// A complex matrix entry, (re, im).
type Entry<B> = (Coef<B>, Coef<B>);

/// One step of the compiled plan.
#[derive(Debug, Clone)]
enum Op<B: QuenchOps> {
    /// A one-qubit gate.
    Single(Gate),
    /// `new[k] = sign[k] * old[perm[k]]`: perm `[2^n]`, signs `[1, 2^n]` when any is -1.
    Signed {
        perm: Tensor<B, 1, Int>,
        signs: Option<Tensor<B, 2>>,
    },
    /// A run of shared operations applied as one matrix.
    Fused(Fused<B>),
    /// The circuit's opening one-qubit gates with fixed or per-sample angles, each on its own
    /// wire, acting on `|0...0>`: the state is the product of their first columns, built by
    /// `n - 1` broadcast multiplies instead of `n` gate applications. Only ever first.
    Product(Vec<Gate>),
}

/// A fused run: `state @ M` with `M = U^T`, built from the run's operations.
#[derive(Debug, Clone)]
enum Fused<B: QuenchOps> {
    /// The run reads weights: rebuilt on every call.
    Weighted(Vec<Op<B>>),
    /// The run reads no weights: built once.
    Constant(State<B>),
}

impl HostPermutation {
    /// `perm` as an index tensor `[2^n]` for `select`.
    fn index_tensor<B: QuenchOps>(&self, device: &B::Device) -> Tensor<B, 1, Int> {
        let perm: Vec<i64> = self.perm.iter().map(|&k| k as i64).collect();
        let dim = perm.len();
        Tensor::from_data(TensorData::new(perm, [dim]), device)
    }

    fn upload<B: QuenchOps>(self, device: &B::Device) -> Op<B> {
        let dim = self.perm.len();
        let perm = self.index_tensor(device);
        let signs = self
            .sign
            .iter()
            .any(|&s| s < 0.0)
            .then(|| float_tensor(self.sign, [1, dim], device));
        Op::Signed { perm, signs }
    }
}

/// A compiled circuit on a device; see the module documentation for how it runs.
#[derive(Debug, Clone)]
pub struct Simulator<B: QuenchOps> {
    circuit: Circuit,
    mode: Mode,
    plan: Vec<Op<B>>,
    /// The plan without fused runs, for calls with fewer than `2^n` rows per member (where
    /// building the matrices costs more than the gates they replace); `None` when the
    /// simulator does not fuse.
    unfused: Option<Vec<Op<B>>>,
    /// In [`Mode::Fused`], a real circuit as one program for the seam's fused read-out
    /// ([`Simulator::expectations`]); `None` otherwise.
    program: Option<RealCircuit>,
    /// `[2^n, n]`: entry `(k, i)` is `<k|Z_i|k>`, for circuits of at most
    /// [`MAX_FUSED_QUBITS`] qubits (larger ones reduce over axes instead).
    z_signs: Option<Tensor<B, 2>>,
    /// The X permutation of every wire, `[2^n]` each (see [`apply_single`]).
    flips: Vec<Tensor<B, 1, Int>>,
    /// The host memory available when the simulator was made, bytes (`None` where it cannot
    /// be read): [`Simulator::run`] refuses batches beyond it. Read once here, not per run,
    /// since reading it reads `/proc` and a training step runs the simulator.
    host_bytes: Option<u128>,
    device: B::Device,
}

impl<B: QuenchOps> Simulator<B> {
    /// Compiles `circuit` for `device` in `mode`.
    ///
    /// # Errors
    /// [`CircuitError::TooLarge`] when the simulator's tables and one circuit's state would not
    /// fit in the host's memory ([`Circuit::check_fits`] for a batch of one): a 30-qubit
    /// circuit's tables alone take tens of GiB, and are refused here with the estimate rather
    /// than aborted by a failed allocation.
    pub fn new(circuit: Circuit, mode: Mode, device: &B::Device) -> Result<Self, CircuitError> {
        let host_bytes = quench_support::budget::host_limit().map(|limit| u128::from(limit.bytes));
        circuit.check_fits(1, size_of::<B::FloatElem>(), host_bytes)?;
        let qubits = circuit.qubits();
        let flips: Vec<Tensor<B, 1, Int>> = (0..qubits)
            .map(|wire| {
                HostPermutation::of(&Gate::new(GateKind::X, &[wire]), qubits).index_tensor(device)
            })
            .collect();
        let steps = compile::<B>(&circuit, device);
        let fuse = mode == Mode::Fused && qubits <= MAX_FUSED_QUBITS;
        let unfused = fuse.then(|| steps.iter().map(|(op, _, _)| op.clone()).collect());
        let mut plan = Vec::new();
        let mut run: Vec<(Op<B>, bool)> = Vec::new();
        for (op, shared, weighted) in steps {
            if fuse && shared {
                run.push((op, weighted));
            } else {
                flush_run(&mut plan, &mut run, qubits, &flips, device);
                plan.push(op);
            }
        }
        flush_run(&mut plan, &mut run, qubits, &flips, device);
        let z_signs = (qubits <= MAX_FUSED_QUBITS).then(|| z_signs(qubits, device));
        let program = if mode == Mode::Fused {
            real_program(&circuit)
        } else {
            None
        };
        Ok(Simulator {
            circuit,
            mode,
            plan,
            unfused,
            program,
            z_signs,
            flips,
            host_bytes,
            device: device.clone(),
        })
    }

    /// The circuit simulated.
    pub fn circuit(&self) -> &Circuit {
        &self.circuit
    }

    /// The mode it was compiled in.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// Final states of `batch` circuits with per-sample `inputs` `[batch, circuit.inputs()]`
    /// (needed when the circuit reads inputs) and `weights` `[members, circuit.weights()]`
    /// (needed when it reads weights; one row for the whole batch, or one per member, the
    /// batch's rows member-major). Refuses missing or misshapen tensors.
    pub fn run(
        &self,
        batch: usize,
        inputs: Option<Tensor<B, 2>>,
        weights: Option<Tensor<B, 2>>,
    ) -> Result<State<B>, CircuitError> {
        let members = self.check_call(batch, inputs.as_ref(), weights.as_ref())?;
        let state = basis_state_zero::<B>(batch, self.circuit.dimension(), &self.device);
        let angles = Angles {
            inputs: inputs.as_ref(),
            weights: weights.as_ref(),
            members,
            flips: &self.flips,
            halves: [inputs.as_ref(), weights.as_ref()].map(|t| {
                t.map(|t| {
                    let half = t.clone().mul_scalar(0.5);
                    (half.clone().cos(), half.sin())
                })
            }),
        };
        let plan = match &self.unfused {
            Some(unfused) if !fusion_pays(self.circuit.qubits(), batch / members) => unfused,
            _ => &self.plan,
        };
        Ok(apply_plan(state, plan, self.circuit.qubits(), &angles))
    }

    /// The members of a call of `batch` circuits with `inputs` and `weights`, or what is
    /// wrong with them (see [`Simulator::run`]).
    fn check_call(
        &self,
        batch: usize,
        inputs: Option<&Tensor<B, 2>>,
        weights: Option<&Tensor<B, 2>>,
    ) -> Result<usize, CircuitError> {
        if batch == 0 {
            return Err(CircuitError::EmptyBatch);
        }
        // Refused with an estimate rather than aborted by a failed allocation.
        self.circuit
            .check_fits(batch, size_of::<B::FloatElem>(), self.host_bytes)?;
        let expected_inputs = self.circuit.inputs();
        match inputs {
            Some(x) if x.dims() != [batch, expected_inputs] => {
                return Err(CircuitError::Shape {
                    name: "inputs",
                    expected: format!("[{batch}, {expected_inputs}]"),
                    found: x.dims().to_vec(),
                });
            }
            None if expected_inputs > 0 => {
                return Err(CircuitError::Shape {
                    name: "inputs",
                    expected: format!("[{batch}, {expected_inputs}]"),
                    found: Vec::new(),
                });
            }
            _ => {}
        }
        let expected_weights = self.circuit.weights();
        let members = weights.map_or(1, |w| w.dims()[0]);
        let misshapen = |found: Vec<usize>| CircuitError::Shape {
            name: "weights",
            expected: format!("[members dividing {batch}, {expected_weights}]"),
            found,
        };
        match weights {
            Some(w)
                if w.dims()[1] != expected_weights
                    || members == 0
                    || !batch.is_multiple_of(members) =>
            {
                return Err(misshapen(w.dims().to_vec()));
            }
            None if expected_weights > 0 => return Err(misshapen(Vec::new())),
            _ => {}
        }
        Ok(members)
    }

    /// `<Z_i>` `[batch, qubits]` of the final states of `batch` circuits with `inputs` and
    /// `weights` as [`Simulator::run`] takes them: [`Simulator::run`] then
    /// [`Simulator::z_expectations`], or, for a real circuit in [`Mode::Fused`], the seam's
    /// fused read-out ([`quench_kernels::ops::circuit`]: one kernel forward and one backward on
    /// a GPU, each row's state in f64 on the CPU, gradients by the adjoint method), which
    /// never holds the batch's states in a tensor.
    ///
    /// # Errors
    /// As [`Simulator::run`].
    pub fn expectations(
        &self,
        batch: usize,
        inputs: Option<Tensor<B, 2>>,
        weights: Option<Tensor<B, 2>>,
    ) -> Result<Tensor<B, 2>, CircuitError> {
        let Some(program) = &self.program else {
            let state = self.run(batch, inputs, weights)?;
            return self.z_expectations(&state);
        };
        self.check_call(batch, inputs.as_ref(), weights.as_ref())?;
        // The operation binds at least one column of each; a circuit that reads none gets
        // zeros it never reads.
        let inputs = inputs.unwrap_or_else(|| Tensor::zeros([batch, 1], &self.device));
        let weights = weights.unwrap_or_else(|| Tensor::zeros([1, 1], &self.device));
        let widen = |t: Tensor<B, 2>| {
            if t.dims()[1] == 0 {
                Tensor::zeros([t.dims()[0], 1], &self.device)
            } else {
                t
            }
        };
        Ok(expectations(program, widen(inputs), widen(weights)))
    }

    /// Refuses a state that is not this simulator's: amplitudes `[batch, 2^qubits]` of
    /// another width (another simulator's, or a tensor made by hand), or imaginary parts of
    /// another shape than the real ones.
    fn check_state(&self, state: &State<B>) -> Result<(), CircuitError> {
        let dims = state.re.dims();
        let expected = || {
            format!(
                "[batch, {}] (2^{} qubits)",
                self.circuit.dimension(),
                self.circuit.qubits()
            )
        };
        if dims[1] != self.circuit.dimension() {
            return Err(CircuitError::Shape {
                name: "state.re",
                expected: expected(),
                found: dims.to_vec(),
            });
        }
        match &state.im {
            Some(im) if im.dims() != dims => Err(CircuitError::Shape {
                name: "state.im",
                expected: format!("{dims:?}, the real parts' shape"),
                found: im.dims().to_vec(),
            }),
            _ => Ok(()),
        }
    }

    /// `<Z_i>` of `state` for every qubit, `[batch, qubits]`.
    ///
    /// # Errors
    /// [`CircuitError::Shape`] for a state that is not this simulator's.
    pub fn z_expectations(&self, state: &State<B>) -> Result<Tensor<B, 2>, CircuitError> {
        self.check_state(state)?;
        let probabilities = state.probabilities();
        Ok(match &self.z_signs {
            Some(signs) => precise_matmul(probabilities, signs.clone()),
            None => {
                let qubits = self.circuit.qubits();
                let [batch, dim] = probabilities.dims();
                let per_wire = (0..qubits)
                    .map(|wire| {
                        let split: Tensor<B, 4> = probabilities.clone().reshape_to([
                            batch,
                            1 << wire,
                            2,
                            dim >> (wire + 1),
                        ]);
                        let halves = split.sum_along(3).sum_along(1).reshape_to([batch, 2]);
                        halves.clone().narrow(1, 0, 1) - halves.narrow(1, 1, 1)
                    })
                    .collect();
                Tensor::cat(per_wire, 1)
            }
        })
    }

    /// `<Z_i Z_j>` of `state` for every pair `(i, j)` of `pairs`, `[batch, pairs]`; refuses a
    /// wire out of range and a state that is not this simulator's.
    pub fn zz_expectations(
        &self,
        state: &State<B>,
        pairs: &[(usize, usize)],
    ) -> Result<Tensor<B, 2>, CircuitError> {
        self.check_state(state)?;
        let qubits = self.circuit.qubits();
        let dim = self.circuit.dimension();
        let mut signs = Vec::with_capacity(dim * pairs.len());
        for &(i, j) in pairs {
            for wire in [i, j] {
                if wire >= qubits {
                    return Err(CircuitError::WireOutOfRange {
                        gate: 0,
                        name: "zz",
                        wire,
                        qubits,
                    });
                }
            }
        }
        if dim > MAX_REDUCED_AXIS {
            return Ok(Tensor::cat(
                pairs
                    .iter()
                    .map(|&(i, j)| Self::zz_by_axes(state, i.min(j), i.max(j)))
                    .collect(),
                1,
            ));
        }
        // Row-major [dim, pairs].
        for k in 0..dim {
            for &(i, j) in pairs {
                let bit = |w: usize| (k >> (qubits - 1 - w)) & 1;
                signs.push(if bit(i) == bit(j) { 1.0 } else { -1.0 });
            }
        }
        let signs = float_tensor(signs, [dim, pairs.len()], &self.device);
        Ok(precise_matmul(state.probabilities(), signs))
    }

    /// `<Z_i Z_j>` for one pair of wires `i <= j`, `[batch, 1]`, from sums over the axes around
    /// them: for states too large for a sign matrix, whose product would run over an inner
    /// dimension of `2^qubits` (on lavapipe, a `[1, 2^20] x [2^20, 1]` product skipped elements
    /// as Burn's long reductions do; see `quench_kernels::reductions`).
    fn zz_by_axes(state: &State<B>, i: usize, j: usize) -> Tensor<B, 2> {
        let probabilities = state.probabilities();
        let [batch, dim] = probabilities.dims();
        if i == j {
            return probabilities.sum_along(1);
        }
        let split: Tensor<B, 6> =
            probabilities.reshape_to([batch, 1 << i, 2, 1 << (j - i - 1), 2, dim >> (j + 1)]);
        let corners = split
            .sum_along(5)
            .sum_along(3)
            .sum_along(1)
            .reshape_to([batch, 4]);
        // Bits (b_i, b_j) = 00 and 11 agree, 01 and 10 differ.
        let same = corners.clone().narrow(1, 0, 1) + corners.clone().narrow(1, 3, 1);
        same - corners.clone().narrow(1, 1, 1) - corners.narrow(1, 2, 1)
    }
}

/// The per-sample and shared angle tensors of one call.
struct Angles<'a, B: QuenchOps> {
    inputs: Option<&'a Tensor<B, 2>>,
    weights: Option<&'a Tensor<B, 2>>,
    members: usize,
    /// The simulator's per-wire X permutations.
    flips: &'a [Tensor<B, 1, Int>],
    /// `(cos(x / 2), sin(x / 2))` of all inputs and of all weights, computed once per call:
    /// every rotation reads its half angle, and one `cos` and `sin` of the whole tensor cost
    /// less than one per gate.
    halves: [Option<(Tensor<B, 2>, Tensor<B, 2>)>; 2],
}

impl<B: QuenchOps> Angles<'_, B> {
    /// `(cos(a * angle), sin(a * angle))` as coefficients: constants for fixed angles,
    /// `[batch, 1, 1, 1]` for inputs, `[members, 1, 1, 1]` for weights.
    fn cos_sin(&self, angle: Angle, a: f64) -> (Coef<B>, Coef<B>) {
        let cached = match angle {
            Angle::Input(i) if a == 0.5 => self.halves[0].as_ref().map(|h| (h, i)),
            Angle::Weight(i) if a == 0.5 => self.halves[1].as_ref().map(|h| (h, i)),
            _ => None,
        };
        if let Some(((cos, sin), i)) = cached {
            let column = |t: &Tensor<B, 2>| {
                let rows = t.dims()[0];
                Coef::Var(t.clone().narrow(1, i, 1).reshape_to([rows, 1, 1, 1]))
            };
            return (column(cos), column(sin));
        }
        let tensor = match angle {
            Angle::Fixed(value) => {
                let t = a * value;
                return (Coef::from_value(t.cos()), Coef::from_value(t.sin()));
            }
            Angle::Input(i) => {
                let inputs = self.inputs.expect("checked by run");
                let batch = inputs.dims()[0];
                inputs.clone().narrow(1, i, 1).reshape_to([batch, 1, 1, 1])
            }
            Angle::Weight(i) => self
                .weights
                .expect("checked by run")
                .clone()
                .narrow(1, i, 1)
                .reshape_to([self.members, 1, 1, 1]),
        };
        let t = tensor.mul_scalar(a);
        (Coef::Var(t.clone().cos()), Coef::Var(t.sin()))
    }

    /// The matrix of a one-qubit gate as coefficients.
    fn matrix(&self, gate: &Gate) -> [[Entry<B>; 2]; 2] {
        let zero = || (Coef::Zero, Coef::Zero);
        let real = |c: Coef<B>| (c, Coef::Zero);
        let imag = |c: Coef<B>| (Coef::Zero, c);
        match (gate.kind, gate.angle) {
            (GateKind::Ry, Some(angle)) => {
                let (c, s) = self.cos_sin(angle, 0.5);
                [[real(c.clone()), real(s.clone().neg())], [real(s), real(c)]]
            }
            (GateKind::Rx, Some(angle)) => {
                let (c, s) = self.cos_sin(angle, 0.5);
                [
                    [real(c.clone()), imag(s.clone().neg())],
                    [imag(s.neg()), real(c)],
                ]
            }
            (GateKind::Rz, Some(angle)) => {
                let (c, s) = self.cos_sin(angle, 0.5);
                [[(c.clone(), s.clone().neg()), zero()], [zero(), (c, s)]]
            }
            (GateKind::Phase, Some(angle)) => {
                let (c, s) = self.cos_sin(angle, 1.0);
                [[real(Coef::Const(1.0)), zero()], [zero(), (c, s)]]
            }
            (kind, _) => {
                let u = kind.matrix(0.0).expect("one-qubit gates have a matrix");
                u.map(|row| row.map(|z| (Coef::from_value(z.re), Coef::from_value(z.im))))
            }
        }
    }
}

/// `(operation, shared, reads weights)` for each step of `circuit`, signed permutations
/// composed, the opening product gates (see [`Op::Product`]) as one step.
fn compile<B: QuenchOps>(circuit: &Circuit, device: &B::Device) -> Vec<(Op<B>, bool, bool)> {
    let qubits = circuit.qubits();
    let mut steps = Vec::new();
    let mut opening: Vec<Gate> = Vec::new();
    for gate in circuit.gates() {
        let fresh_wire = !opening.iter().any(|g| g.wires[0] == gate.wires[0]);
        if gate.kind.arity() != 1 || matches!(gate.angle, Some(Angle::Weight(_))) || !fresh_wire {
            break;
        }
        opening.push(gate.clone());
    }
    let gates = &circuit.gates()[opening.len()..];
    if !opening.is_empty() {
        // Never fused: the product replaces the state rather than acting on it.
        steps.push((Op::Product(opening), false, false));
    }
    let mut pending: Option<HostPermutation> = None;
    for gate in gates {
        if absorb(&mut pending, gate, qubits) {
            continue;
        }
        if let Some(permutation) = pending.take() {
            steps.push((permutation.upload(device), true, false));
        }
        let weighted = matches!(gate.angle, Some(Angle::Weight(_)));
        steps.push((Op::Single(gate.clone()), gate.is_shared(), weighted));
    }
    if let Some(permutation) = pending {
        steps.push((permutation.upload(device), true, false));
    }
    steps
}

/// Moves the shared `run` into `plan`: fused when it holds two or more operations.
fn flush_run<B: QuenchOps>(
    plan: &mut Vec<Op<B>>,
    run: &mut Vec<(Op<B>, bool)>,
    qubits: usize,
    flips: &[Tensor<B, 1, Int>],
    device: &B::Device,
) {
    if run.len() < 2 {
        plan.extend(run.drain(..).map(|(op, _)| op));
        return;
    }
    let weighted = run.iter().any(|(_, w)| *w);
    let ops: Vec<Op<B>> = run.drain(..).map(|(op, _)| op).collect();
    plan.push(Op::Fused(if weighted {
        Fused::Weighted(ops)
    } else {
        let no_angles = Angles {
            inputs: None,
            weights: None,
            members: 1,
            flips,
            halves: [None, None],
        };
        Fused::Constant(fused_matrix(&ops, qubits, &no_angles, device))
    }));
}

/// `M = U^T` of the run `ops` for every member (`[members * 2^n, 2^n]`, real and imaginary
/// parts): row `k` of a member's block is the run applied to the basis state `k`.
fn fused_matrix<B: QuenchOps>(
    ops: &[Op<B>],
    qubits: usize,
    angles: &Angles<B>,
    device: &B::Device,
) -> State<B> {
    let dim = 1usize << qubits;
    let eye: Tensor<B, 2> = Tensor::eye(dim, device);
    let identity = State {
        re: eye
            .unsqueeze_to::<3>(0)
            .repeat_dim(0, angles.members)
            .reshape_to([angles.members * dim, dim]),
        im: None,
    };
    apply_plan(identity, ops, qubits, angles)
}

/// The batch of `|0...0>`, `[batch, dim]`.
fn basis_state_zero<B: QuenchOps>(batch: usize, dim: usize, device: &B::Device) -> State<B> {
    let one = Tensor::ones([batch, 1], device);
    let re = if dim > 1 {
        Tensor::cat(vec![one, Tensor::zeros([batch, dim - 1], device)], 1)
    } else {
        one
    };
    State { re, im: None }
}

/// Applies `plan` to `state`.
fn apply_plan<B: QuenchOps>(
    mut state: State<B>,
    plan: &[Op<B>],
    qubits: usize,
    angles: &Angles<B>,
) -> State<B> {
    for op in plan {
        state = match op {
            Op::Product(gates) => product_state(state, gates, qubits, angles),
            Op::Single(gate) => {
                // Per-member angles need the member-major view; the others the per-row one.
                let group = match gate.angle {
                    Some(Angle::Weight(_)) => angles.members,
                    _ => state.re.dims()[0],
                };
                let wire = gate.wires[0];
                apply_single(
                    state,
                    wire,
                    group,
                    &angles.matrix(gate),
                    &angles.flips[wire],
                )
            }
            Op::Signed { perm, signs } => {
                let permute = |t: Tensor<B, 2>| {
                    let t = t.select(1, perm.clone());
                    match signs {
                        Some(s) => t * s.clone(),
                        None => t,
                    }
                };
                State {
                    re: permute(state.re),
                    im: state.im.map(permute),
                }
            }
            Op::Fused(fused) => {
                let matrix = match fused {
                    Fused::Constant(m) => m.clone(),
                    Fused::Weighted(ops) => fused_matrix(ops, qubits, angles, &state.re.device()),
                };
                apply_matrix(state, matrix)
            }
        };
    }
    state
}

/// The product state of `gates` (each on its own wire, none reading weights) applied to
/// `|0...0>`; `state` only gives the batch size and device.
fn product_state<B: QuenchOps>(
    state: State<B>,
    gates: &[Gate],
    qubits: usize,
    angles: &Angles<B>,
) -> State<B> {
    let [batch, _] = state.re.dims();
    let device = state.re.device();
    // A coefficient as a column `[batch, 1]`.
    let column = |c: &Coef<B>| -> Option<Tensor<B, 2>> {
        match c {
            Coef::Zero => None,
            Coef::Const(v) => Some(Tensor::full([batch, 1], *v, &device)),
            Coef::Var(t) => {
                let rows = t.dims()[0];
                Some(t.clone().reshape_to([rows, 1]).expand([batch, 1]))
            }
        }
    };
    // `[batch, 2]` from the amplitudes of |0> and |1>, or `None` when both are zero.
    let pair = |a: &Coef<B>, b: &Coef<B>| -> Option<Tensor<B, 2>> {
        match (column(a), column(b)) {
            (None, None) => None,
            (a, b) => {
                let zeros = || Tensor::zeros([batch, 1], &device);
                Some(Tensor::cat(
                    vec![a.unwrap_or_else(zeros), b.unwrap_or_else(zeros)],
                    1,
                ))
            }
        }
    };
    let kron = |s: Tensor<B, 2>, v: Tensor<B, 2>| -> Tensor<B, 2> {
        let d = s.dims()[1];
        (s.unsqueeze_to::<3>(2) * v.unsqueeze_to::<3>(1)).reshape_to([batch, 2 * d])
    };
    let mut re: Tensor<B, 2> = Tensor::ones([batch, 1], &device);
    let mut im: Option<Tensor<B, 2>> = None;
    for wire in 0..qubits {
        let Some(gate) = gates.iter().find(|g| g.wires[0] == wire) else {
            let zero = Tensor::zeros([batch, 1], &device);
            let ket0 = Tensor::cat(vec![Tensor::ones([batch, 1], &device), zero], 1);
            re = kron(re, ket0.clone());
            im = im.map(|i| kron(i, ket0));
            continue;
        };
        let u = angles.matrix(gate);
        let (u00, u10) = (&u[0][0], &u[1][0]);
        let vr = pair(&u00.0, &u10.0);
        let vi = pair(&u00.1, &u10.1);
        // (re + i im) (x) (vr + i vi).
        let zeros = |d: usize| Tensor::zeros([batch, 2 * d], &device);
        let d = re.dims()[1];
        let new_re = match (&vr, &im, &vi) {
            (Some(vr), Some(im), Some(vi)) => {
                kron(re.clone(), vr.clone()) - kron(im.clone(), vi.clone())
            }
            (Some(vr), _, _) => kron(re.clone(), vr.clone()),
            (None, Some(im), Some(vi)) => kron(im.clone(), vi.clone()).neg(),
            _ => zeros(d),
        };
        let new_im = match (&vi, &im, &vr) {
            (Some(vi), Some(im), Some(vr)) => {
                Some(kron(re.clone(), vi.clone()) + kron(im.clone(), vr.clone()))
            }
            (Some(vi), _, _) => Some(kron(re.clone(), vi.clone())),
            (None, Some(im), Some(vr)) => Some(kron(im.clone(), vr.clone())),
            _ => None,
        };
        re = new_re;
        im = new_im;
    }
    State { re, im }
}

/// `state @ m` for complex `state` and `m`, skipping absent imaginary parts; `m` holds one
/// `[2^n, 2^n]` block for the whole batch or one per member (rows member-major).
fn apply_matrix<B: QuenchOps>(state: State<B>, m: State<B>) -> State<B> {
    let [rows, dim] = state.re.dims();
    let members = m.re.dims()[0] / dim;
    let product = |s: Tensor<B, 2>, m: Tensor<B, 2>| -> Tensor<B, 2> {
        if members == 1 {
            return precise_matmul(s, m);
        }
        let s: Tensor<B, 3> = s.reshape_to([members, rows / members, dim]);
        precise_matmul(s, m.reshape_to([members, dim, dim])).reshape_to([rows, dim])
    };
    let re = product(state.re.clone(), m.re.clone());
    let re = match (&state.im, &m.im) {
        (Some(si), Some(mi)) => re - product(si.clone(), mi.clone()),
        _ => re,
    };
    let im = match (state.im, m.im) {
        (Some(si), Some(mi)) => Some(product(state.re, mi) + product(si, m.re)),
        (Some(si), None) => Some(product(si, m.re)),
        (None, Some(mi)) => Some(product(state.re, mi)),
        (None, None) => None,
    };
    State { re, im }
}

/// Applies the one-qubit matrix `u` on `wire` to every state of the batch, whose entries are
/// constants or tensors `[group, 1, 1, 1]` (`group` divides the rows, member-major).
///
/// As `new = d * s + o * flip(s)` with `flip` the X permutation of the wire (`flip`, one
/// `select`), `d[k] = u[b][b]` and `o[k] = u[b][1 - b]` for the wire's bit `b` of `k`: whole,
/// contiguous tensors with broadcast coefficients `[group, 1, 2, 1]`, where slicing the two
/// halves and concatenating them costs strided copies.
fn apply_single<B: QuenchOps>(
    state: State<B>,
    wire: usize,
    group: usize,
    u: &[[Entry<B>; 2]; 2],
    flip: &Tensor<B, 1, Int>,
) -> State<B> {
    let [batch, dim] = state.re.dims();
    let shape = [group, (batch / group) << wire, 2, dim >> (wire + 1)];
    let device = state.re.device();
    // `[group or 1, 1, 2, 1]` from the coefficients for bit 0 and bit 1, `None` when both are
    // zero.
    let stack = |a: &Coef<B>, b: &Coef<B>| -> Option<Tensor<B, 4>> {
        let part = |c: &Coef<B>| match c {
            Coef::Zero => Tensor::zeros([1, 1, 1, 1], &device),
            Coef::Const(v) => Tensor::full([1, 1, 1, 1], *v, &device),
            Coef::Var(t) => t.clone(),
        };
        match (a, b) {
            (Coef::Zero, Coef::Zero) => None,
            (Coef::Var(_), _) | (_, Coef::Var(_)) => {
                let (a, b) = (part(a), part(b));
                let rows = a.dims()[0].max(b.dims()[0]);
                Some(Tensor::cat(
                    vec![a.expand([rows, 1, 1, 1]), b.expand([rows, 1, 1, 1])],
                    2,
                ))
            }
            _ => Some(Tensor::cat(vec![part(a), part(b)], 2)),
        }
    };
    let d = (stack(&u[0][0].0, &u[1][1].0), stack(&u[0][0].1, &u[1][1].1));
    let o = (stack(&u[0][1].0, &u[1][0].0), stack(&u[0][1].1, &u[1][0].1));
    let view = |t: Tensor<B, 2>| -> Tensor<B, 4> { t.reshape_to(shape) };
    let sr = view(state.re.clone());
    let si = state.im.clone().map(view);
    let flipped = (o.0.is_some() || o.1.is_some()).then(|| {
        (
            view(state.re.select(1, flip.clone())),
            state.im.map(|i| view(i.select(1, flip.clone()))),
        )
    });
    let times = |c: &Option<Tensor<B, 4>>, x: &Option<Tensor<B, 4>>| match (c, x) {
        (Some(c), Some(x)) => Some(x.clone() * c.clone()),
        _ => None,
    };
    let (fr, fi) = match flipped {
        Some((fr, fi)) => (Some(fr), fi),
        None => (None, None),
    };
    let sr = Some(sr);
    let real_terms = [
        (times(&d.0, &sr), false),
        (times(&d.1, &si), true),
        (times(&o.0, &fr), false),
        (times(&o.1, &fi), true),
    ];
    let imag_terms = [
        (times(&d.1, &sr), false),
        (times(&d.0, &si), false),
        (times(&o.1, &fr), false),
        (times(&o.0, &fi), false),
    ];
    let sum = |terms: [(Option<Tensor<B, 4>>, bool); 4]| -> Option<Tensor<B, 2>> {
        terms
            .into_iter()
            .filter_map(|(t, negative)| t.map(|t| if negative { t.neg() } else { t }))
            .reduce(|a, b| a + b)
            .map(|t| t.reshape_to([batch, dim]))
    };
    let re = sum(real_terms).unwrap_or_else(|| Tensor::zeros([batch, dim], &device));
    State {
        re,
        im: sum(imag_terms),
    }
}
