//! Real circuits run one sample at a time: a state of `2^qubits` real amplitudes taken from
//! `|0...0>` through fixed real gates, `RY` rotations whose angles are the sample's inputs or
//! its member's weights, and signed permutations (runs of X, Z, CNOT, CZ and SWAP composed),
//! read out as `<Z_i>` of every qubit.
//!
//! Gradients by the adjoint method: every gate is orthogonal, so from the final state the
//! pass back uncomputes the state gate by gate (`psi <- U^T psi`) beside the loss's gradient
//! (`g <- U^T g`), and reads each rotation's angle gradient between the two,
//! `dL/dtheta = g^T (dU/dtheta) psi`: two passes over the gates and three state-sized
//! buffers, no tape. The host kernel and the CubeCL kernel of `quench_kernels::ops::circuit`
//! both run this algorithm; this module is the host's, in f64.
//!
//! Wire 0 is the most significant bit of a basis index (PennyLane's `|q0 q1 ... q_{n-1}>`).

/// The most qubits a program may have: three buffers of `2^20` f64 per row in flight are
/// 24 MiB per core, and a larger state is no longer "one sample at a time" work.
pub const MAX_QUBITS: usize = 20;

/// Step kinds in [`Tables::steps`].
pub const FIXED: i32 = 0;
/// A rotation by an input column.
pub const INPUT: i32 = 1;
/// A rotation by a weight.
pub const WEIGHT: i32 = 2;
/// A signed permutation.
pub const PERMUTATION: i32 = 3;

/// A program as a device kernel reads it ([`RealCircuit::tables`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Tables {
    /// `[kind, stride, index]` per step, `[steps, 3]`: the kind ([`FIXED`], [`INPUT`],
    /// [`WEIGHT`], [`PERMUTATION`]), the wire's stride (0 for a permutation), the angle's
    /// column or the permutation's number.
    pub steps: Vec<i32>,
    /// A fixed gate's four entries row-major per step (zeros for the others), `[steps, 4]`.
    pub matrices: Vec<f32>,
    /// The permutations' indices, `[permutations, 2^qubits]`; one of zeros where there is
    /// none, so that a kernel's binding has a buffer.
    pub perms: Vec<i32>,
    /// Their signs, the same shape.
    pub signs: Vec<f32>,
}

/// Where a rotation's angle is read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// Column `i` of the sample's inputs.
    Input(usize),
    /// Entry `i` of the sample's member's weights.
    Weight(usize),
}

/// One step of a [`RealCircuit`].
#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    /// A fixed orthogonal one-qubit gate `[[u00, u01], [u10, u11]]` on `wire`.
    Fixed {
        /// The wire it acts on.
        wire: usize,
        /// Its matrix, row-major.
        matrix: [[f64; 2]; 2],
    },
    /// `RY(theta) = [[cos theta/2, -sin theta/2], [sin theta/2, cos theta/2]]` on `wire`,
    /// `theta` radians from `angle`.
    Rotation {
        /// The wire it acts on.
        wire: usize,
        /// Where its angle is read.
        angle: Source,
    },
    /// `new[k] = signs[k] * old[perm[k]]` for every basis index `k`.
    Permutation {
        /// The basis index each amplitude is read from, `[2^qubits]`, a permutation.
        perm: Vec<usize>,
        /// Each amplitude's sign, `[2^qubits]`, every one +1 or -1.
        signs: Vec<f64>,
    },
}

/// A checked program of [`Step`]s on `qubits` qubits; see the module documentation.
#[derive(Clone, Debug, PartialEq)]
pub struct RealCircuit {
    qubits: usize,
    steps: Vec<Step>,
    inputs: usize,
    weights: usize,
}

/// The buffers one row's run needs, made once per thread ([`RealCircuit::workspace`]).
#[derive(Clone, Debug)]
pub struct Workspace {
    state: Vec<f64>,
    adjoint: Vec<f64>,
    scratch: Vec<f64>,
    gradients: Vec<f64>,
}

/// One row's angles: its inputs and its member's weights (each at least as many as the
/// program reads).
#[derive(Clone, Copy, Debug)]
pub struct Row<'a> {
    /// The sample's inputs.
    pub inputs: &'a [f32],
    /// Its member's weights.
    pub weights: &'a [f32],
}

impl RealCircuit {
    /// The program of `steps` on `qubits` qubits, or what is wrong with it: the qubit count
    /// out of `1..=MAX_QUBITS`, a wire out of range, a fixed matrix that is not finite and
    /// orthogonal (within `1e-9`), a permutation of another length than `2^qubits` or not a
    /// permutation, a sign other than +-1.
    pub fn new(qubits: usize, steps: Vec<Step>) -> Result<Self, String> {
        if qubits == 0 || qubits > MAX_QUBITS {
            return Err(format!("qubits {qubits}: 1 to {MAX_QUBITS}"));
        }
        let dim = 1usize << qubits;
        let (mut inputs, mut weights) = (0, 0);
        for (index, step) in steps.iter().enumerate() {
            let wire_ok = |wire: usize| {
                if wire < qubits {
                    Ok(())
                } else {
                    Err(format!("step {index}: wire {wire} of {qubits} qubits"))
                }
            };
            match step {
                Step::Fixed { wire, matrix } => {
                    wire_ok(*wire)?;
                    if !is_orthogonal(matrix) {
                        return Err(format!("step {index}: {matrix:?} is not orthogonal"));
                    }
                }
                Step::Rotation { wire, angle } => {
                    wire_ok(*wire)?;
                    match *angle {
                        Source::Input(i) => inputs = inputs.max(i + 1),
                        Source::Weight(i) => weights = weights.max(i + 1),
                    }
                }
                Step::Permutation { perm, signs } => {
                    if perm.len() != dim || signs.len() != dim {
                        return Err(format!(
                            "step {index}: a permutation of {} indices and {} signs, not {dim}",
                            perm.len(),
                            signs.len()
                        ));
                    }
                    let mut seen = vec![false; dim];
                    for &p in perm {
                        if p >= dim || std::mem::replace(&mut seen[p], true) {
                            return Err(format!("step {index}: index {p} repeated or >= {dim}"));
                        }
                    }
                    if let Some(s) = signs.iter().find(|s| s.abs() != 1.0) {
                        return Err(format!("step {index}: sign {s}, not +-1"));
                    }
                }
            }
        }
        Ok(Self {
            qubits,
            steps,
            inputs,
            weights,
        })
    }

    /// Qubits of the program.
    pub fn qubits(&self) -> usize {
        self.qubits
    }

    /// Amplitudes of its state, `2^qubits`.
    pub fn dimension(&self) -> usize {
        1 << self.qubits
    }

    /// Its steps, in order.
    pub fn steps(&self) -> &[Step] {
        &self.steps
    }

    /// Input columns it reads (one past the largest index).
    pub fn inputs(&self) -> usize {
        self.inputs
    }

    /// Weights it reads (one past the largest index).
    pub fn weights(&self) -> usize {
        self.weights
    }

    /// The distance between the wire's two amplitudes of a pair: `2^(qubits - 1 - wire)`.
    pub fn stride(&self, wire: usize) -> usize {
        1 << (self.qubits - 1 - wire)
    }

    /// The program as a device kernel reads it.
    pub fn tables(&self) -> Tables {
        let dim = self.dimension();
        let mut t = Tables {
            steps: Vec::new(),
            matrices: Vec::new(),
            perms: Vec::new(),
            signs: Vec::new(),
        };
        for step in &self.steps {
            let (kind, wire, index) = match step {
                Step::Fixed { wire, matrix } => {
                    t.matrices
                        .extend(matrix.iter().flatten().map(|&v| v as f32));
                    (FIXED, Some(*wire), 0)
                }
                Step::Rotation { wire, angle } => {
                    t.matrices.extend([0.0; 4]);
                    match *angle {
                        Source::Input(i) => (INPUT, Some(*wire), i),
                        Source::Weight(i) => (WEIGHT, Some(*wire), i),
                    }
                }
                Step::Permutation { perm, signs } => {
                    t.matrices.extend([0.0; 4]);
                    let number = t.perms.len() / dim;
                    t.perms.extend(perm.iter().map(|&p| p as i32));
                    t.signs.extend(signs.iter().map(|&s| s as f32));
                    (PERMUTATION, None, number)
                }
            };
            let stride = wire.map_or(0, |w| self.stride(w));
            t.steps.extend([kind, stride as i32, index as i32]);
        }
        if t.perms.is_empty() {
            t.perms = vec![0; dim];
            t.signs = vec![0.0; dim];
        }
        t
    }

    /// Buffers for one row at a time.
    pub fn workspace(&self) -> Workspace {
        let dim = self.dimension();
        Workspace {
            state: vec![0.0; dim],
            adjoint: vec![0.0; dim],
            scratch: vec![0.0; dim],
            gradients: vec![0.0; self.inputs + self.weights],
        }
    }

    /// The matrix a one-qubit step applies to `row`.
    fn matrix(&self, step: &Step, row: Row<'_>) -> Option<(usize, [[f64; 2]; 2])> {
        match *step {
            Step::Fixed { wire, matrix } => Some((wire, matrix)),
            Step::Rotation { wire, angle } => Some((wire, ry(theta(angle, row)))),
            Step::Permutation { .. } => None,
        }
    }

    /// `w.state` set to the row's final state.
    fn run(&self, row: Row<'_>, w: &mut Workspace) {
        w.state.fill(0.0);
        w.state[0] = 1.0;
        for step in &self.steps {
            match self.matrix(step, row) {
                Some((wire, m)) => apply(&mut w.state, self.stride(wire), m),
                None => permute(step, &mut w.state, &mut w.scratch, false),
            }
        }
    }

    /// `<Z_i>` of the row's final state into `z` `[qubits]`.
    pub fn expectations(&self, row: Row<'_>, w: &mut Workspace, z: &mut [f32]) {
        self.run(row, w);
        for (i, z) in z.iter_mut().enumerate() {
            let shift = self.qubits - 1 - i;
            *z = w
                .state
                .iter()
                .enumerate()
                .map(|(k, a)| z_sign(k, shift) * a * a)
                .sum::<f64>() as f32;
        }
    }

    /// The gradients of a loss with respect to the row's inputs and weights (written over
    /// `d_inputs` and `d_weights`, each at least as long as the program reads; the rest set to
    /// zero), given its gradient `d_z` `[qubits]` with respect to the row's `<Z_i>`.
    pub fn gradients(
        &self,
        row: Row<'_>,
        d_z: &[f32],
        w: &mut Workspace,
        d_inputs: &mut [f32],
        d_weights: &mut [f32],
    ) {
        self.run(row, w);
        // dL/dpsi_k = 2 psi_k sum_i dz_i <k|Z_i|k>.
        for (k, (g, a)) in w.adjoint.iter_mut().zip(&w.state).enumerate() {
            let signed: f64 = d_z
                .iter()
                .enumerate()
                .map(|(i, &d)| z_sign(k, self.qubits - 1 - i) * f64::from(d))
                .sum();
            *g = 2.0 * a * signed;
        }
        w.gradients.fill(0.0);
        for step in self.steps.iter().rev() {
            let Some((wire, m)) = self.matrix(step, row) else {
                permute(step, &mut w.state, &mut w.scratch, true);
                permute(step, &mut w.adjoint, &mut w.scratch, true);
                continue;
            };
            let stride = self.stride(wire);
            let transposed = [[m[0][0], m[1][0]], [m[0][1], m[1][1]]];
            apply(&mut w.state, stride, transposed);
            if let Step::Rotation { angle, .. } = *step {
                // dRY/dtheta = RY(theta + pi) / 2: [[-s, -c], [c, -s]] / 2.
                let [[c, _], [s, _]] = m;
                let derivative = [[-s / 2.0, -c / 2.0], [c / 2.0, -s / 2.0]];
                let slot = match angle {
                    Source::Input(i) => i,
                    Source::Weight(i) => self.inputs + i,
                };
                w.gradients[slot] += bilinear(&w.adjoint, &w.state, stride, derivative);
            }
            apply(&mut w.adjoint, stride, transposed);
        }
        let (from_inputs, from_weights) = w.gradients.split_at(self.inputs);
        for (out, from) in [(d_inputs, from_inputs), (d_weights, from_weights)] {
            out.fill(0.0);
            out.iter_mut().zip(from).for_each(|(o, g)| *o = *g as f32);
        }
    }
}

/// `RY(theta)`'s matrix.
pub fn ry(theta: f64) -> [[f64; 2]; 2] {
    let (s, c) = (theta / 2.0).sin_cos();
    [[c, -s], [s, c]]
}

/// The angle `source` names in `row`.
fn theta(source: Source, row: Row<'_>) -> f64 {
    f64::from(match source {
        Source::Input(i) => row.inputs[i],
        Source::Weight(i) => row.weights[i],
    })
}

/// `<k|Z|k>` of the qubit at bit `shift` of basis index `k`: +1 where the bit is 0 (wire `i`
/// of `n` qubits is bit `n - 1 - i`).
pub fn z_sign(k: usize, shift: usize) -> f64 {
    if (k >> shift) & 1 == 0 { 1.0 } else { -1.0 }
}

/// Whether `m` is finite and `m m^T = I` within `1e-9`.
fn is_orthogonal(m: &[[f64; 2]; 2]) -> bool {
    let dot = |a: [f64; 2], b: [f64; 2]| a[0] * b[0] + a[1] * b[1];
    m.iter().flatten().all(|v| v.is_finite())
        && (dot(m[0], m[0]) - 1.0).abs() < 1e-9
        && (dot(m[1], m[1]) - 1.0).abs() < 1e-9
        && dot(m[0], m[1]).abs() < 1e-9
}

/// Each amplitude pair `(k, k + stride)` (bit of the wire 0, then 1) of `state`.
fn pairs(dim: usize, stride: usize) -> impl Iterator<Item = usize> {
    (0..dim)
        .step_by(2 * stride)
        .flat_map(move |block| block..block + stride)
}

/// `m` applied to every amplitude pair of `state` at `stride`.
fn apply(state: &mut [f64], stride: usize, m: [[f64; 2]; 2]) {
    for k in pairs(state.len(), stride) {
        let (x0, x1) = (state[k], state[k + stride]);
        state[k] = m[0][0] * x0 + m[0][1] * x1;
        state[k + stride] = m[1][0] * x0 + m[1][1] * x1;
    }
}

/// `g^T (m on the wire at stride) psi`.
fn bilinear(g: &[f64], psi: &[f64], stride: usize, m: [[f64; 2]; 2]) -> f64 {
    pairs(psi.len(), stride)
        .map(|k| {
            let (x0, x1) = (psi[k], psi[k + stride]);
            g[k] * (m[0][0] * x0 + m[0][1] * x1) + g[k + stride] * (m[1][0] * x0 + m[1][1] * x1)
        })
        .sum()
}

/// A permutation step applied to `state` (or, `inverse`, its transpose), through `scratch`.
fn permute(step: &Step, state: &mut [f64], scratch: &mut [f64], inverse: bool) {
    let Step::Permutation { perm, signs } = step else {
        return;
    };
    for (k, (&p, &s)) in perm.iter().zip(signs).enumerate() {
        if inverse {
            scratch[p] = s * state[k];
        } else {
            scratch[k] = s * state[p];
        }
    }
    state.copy_from_slice(scratch);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `RY(x_0)` on qubit 0, `RY(w_0)` on qubit 1, CNOT 0 -> 1 (as a permutation), H on 1.
    fn small() -> RealCircuit {
        // CNOT with control 0 (bit 1 of k) and target 1 (bit 0): k = 2, 3 exchanged.
        let h = std::f64::consts::FRAC_1_SQRT_2;
        RealCircuit::new(
            2,
            vec![
                Step::Rotation {
                    wire: 0,
                    angle: Source::Input(0),
                },
                Step::Rotation {
                    wire: 1,
                    angle: Source::Weight(0),
                },
                Step::Permutation {
                    perm: vec![0, 1, 3, 2],
                    signs: vec![1.0; 4],
                },
                Step::Fixed {
                    wire: 1,
                    matrix: [[h, h], [h, -h]],
                },
            ],
        )
        .unwrap()
    }

    fn z(program: &RealCircuit, x: f32, w: f32) -> [f32; 2] {
        let mut z = [0.0; 2];
        let row = Row {
            inputs: &[x],
            weights: &[w],
        };
        program.expectations(row, &mut program.workspace(), &mut z);
        z
    }

    #[test]
    fn one_rotation_reads_out_its_cosine_and_its_gradient_is_minus_the_sine() {
        let program = RealCircuit::new(
            1,
            vec![Step::Rotation {
                wire: 0,
                angle: Source::Input(0),
            }],
        )
        .unwrap();
        let mut w = program.workspace();
        for theta in [0.0f32, 0.4, 2.0, -1.3] {
            let row = Row {
                inputs: &[theta],
                weights: &[],
            };
            let mut z = [0.0];
            program.expectations(row, &mut w, &mut z);
            // f32 rounding of a value within [-1, 1].
            assert!((z[0] - theta.cos()).abs() < 1e-6, "{theta}: {}", z[0]);
            let (mut dx, mut dw) = ([7.0], []);
            program.gradients(row, &[1.0], &mut w, &mut dx, &mut dw);
            assert!((dx[0] + theta.sin()).abs() < 1e-6, "{theta}: {}", dx[0]);
        }
    }

    #[test]
    fn the_adjoint_gradients_are_the_central_differences() {
        // The circuit's values are smooth in the angles with second derivatives of at most
        // one: central differences at h = 1e-3 err by h^2 / 6 plus f32's rounding of the
        // values (2^-24) over 2h, about 1e-4 in all.
        let program = small();
        let (x, w) = (0.7f32, -1.1f32);
        let d_z = [0.3f32, -0.8];
        let (mut dx, mut dw) = ([0.0], [0.0]);
        let row = Row {
            inputs: &[x],
            weights: &[w],
        };
        program.gradients(row, &d_z, &mut program.workspace(), &mut dx, &mut dw);
        let loss = |x: f32, w: f32| {
            let z = z(&program, x, w);
            f64::from(d_z[0] * z[0] + d_z[1] * z[1])
        };
        let h = 1e-3f32;
        let fx = (loss(x + h, w) - loss(x - h, w)) / f64::from(2.0 * h);
        let fw = (loss(x, w + h) - loss(x, w - h)) / f64::from(2.0 * h);
        assert!((f64::from(dx[0]) - fx).abs() < 2e-4, "{} {fx}", dx[0]);
        assert!((f64::from(dw[0]) - fw).abs() < 2e-4, "{} {fw}", dw[0]);
        assert!(
            fx.abs() > 0.05 && fw.abs() > 0.05,
            "a test of nonzero slopes"
        );
    }

    #[test]
    fn the_bell_like_state_reads_out_as_computed_by_hand() {
        // RY(pi/2) on 0 then CNOT: (|00> + |11>)/sqrt 2; then H on 1 gives
        // (|00> + |01> + |10> - |11>)/2: every <Z_i> zero; with x = 0 the state stays |00>,
        // H on 1 gives (|00> + |01>)/sqrt 2: <Z_0> = 1, <Z_1> = 0.
        let program = small();
        let [a, b] = z(&program, std::f32::consts::FRAC_PI_2, 0.0);
        assert!(a.abs() < 1e-6 && b.abs() < 1e-6, "{a} {b}");
        let [a, b] = z(&program, 0.0, 0.0);
        assert!((a - 1.0).abs() < 1e-6 && b.abs() < 1e-6, "{a} {b}");
    }

    #[test]
    fn malformed_programs_are_refused_with_the_step_named() {
        let refuse = |qubits, step: Step| RealCircuit::new(qubits, vec![step]).unwrap_err();
        assert!(
            refuse(
                0,
                Step::Fixed {
                    wire: 0,
                    matrix: [[1.0, 0.0], [0.0, 1.0]]
                }
            )
            .contains("qubits 0")
        );
        assert!(
            refuse(
                2,
                Step::Rotation {
                    wire: 2,
                    angle: Source::Input(0)
                }
            )
            .contains("wire 2")
        );
        assert!(
            refuse(
                1,
                Step::Fixed {
                    wire: 0,
                    matrix: [[1.0, 1.0], [0.0, 1.0]]
                }
            )
            .contains("orthogonal")
        );
        let bad = Step::Permutation {
            perm: vec![0, 0],
            signs: vec![1.0; 2],
        };
        assert!(refuse(1, bad).contains("repeated"));
        let bad = Step::Permutation {
            perm: vec![1, 0],
            signs: vec![1.0, 0.5],
        };
        assert!(refuse(1, bad).contains("sign 0.5"));
    }
}
