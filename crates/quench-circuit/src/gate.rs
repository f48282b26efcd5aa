//! Gates: what each one is, the wires it acts on and where its angle comes from.

use num_complex::Complex64;

/// The gates of the simulator. Rotations follow PennyLane's conventions:
/// `RX(t) = exp(-i t X / 2)`, `RY(t) = exp(-i t Y / 2)`, `RZ(t) = exp(-i t Z / 2)`,
/// `Phase(t) = diag(1, e^{i t})`. Two-qubit gates take `[control, target]` (CNOT, CZ) or the
/// two wires to exchange (SWAP).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GateKind {
    /// Hadamard.
    H,
    /// Pauli X (NOT).
    X,
    /// Pauli Y.
    Y,
    /// Pauli Z.
    Z,
    /// Rotation about X by an angle.
    Rx,
    /// Rotation about Y by an angle.
    Ry,
    /// Rotation about Z by an angle.
    Rz,
    /// Phase shift of |1> by an angle.
    Phase,
    /// Controlled NOT, wires `[control, target]`.
    Cnot,
    /// Controlled Z, wires `[control, target]` (symmetric).
    Cz,
    /// Exchange of two wires.
    Swap,
}

impl GateKind {
    /// Every gate, in the order of the JSON names.
    pub const ALL: [GateKind; 11] = [
        GateKind::H,
        GateKind::X,
        GateKind::Y,
        GateKind::Z,
        GateKind::Rx,
        GateKind::Ry,
        GateKind::Rz,
        GateKind::Phase,
        GateKind::Cnot,
        GateKind::Cz,
        GateKind::Swap,
    ];

    /// The gate's lower-case name, as in the JSON interface.
    pub fn name(self) -> &'static str {
        match self {
            GateKind::H => "h",
            GateKind::X => "x",
            GateKind::Y => "y",
            GateKind::Z => "z",
            GateKind::Rx => "rx",
            GateKind::Ry => "ry",
            GateKind::Rz => "rz",
            GateKind::Phase => "phase",
            GateKind::Cnot => "cnot",
            GateKind::Cz => "cz",
            GateKind::Swap => "swap",
        }
    }

    /// The gate called `name` (case-insensitive), if there is one.
    pub fn from_name(name: &str) -> Option<GateKind> {
        Self::ALL
            .into_iter()
            .find(|kind| kind.name().eq_ignore_ascii_case(name))
    }

    /// Wires the gate acts on.
    pub fn arity(self) -> usize {
        match self {
            GateKind::Cnot | GateKind::Cz | GateKind::Swap => 2,
            _ => 1,
        }
    }

    /// Whether the gate takes an angle.
    pub fn takes_angle(self) -> bool {
        matches!(
            self,
            GateKind::Rx | GateKind::Ry | GateKind::Rz | GateKind::Phase
        )
    }

    /// Whether the gate's matrix is real for every angle, so a real state stays real.
    pub fn is_real(self) -> bool {
        matches!(
            self,
            GateKind::X
                | GateKind::Z
                | GateKind::Ry
                | GateKind::Cnot
                | GateKind::Cz
                | GateKind::Swap
                | GateKind::H
        )
    }

    /// Whether the gate maps every basis state to one basis state times +-1: X, Z, CNOT, CZ
    /// and SWAP, which the simulator applies as a signed permutation of the amplitudes.
    pub fn is_signed_permutation(self) -> bool {
        matches!(
            self,
            GateKind::X | GateKind::Z | GateKind::Cnot | GateKind::Cz | GateKind::Swap
        )
    }

    /// The 2 x 2 matrix `[[u00, u01], [u10, u11]]` of a one-qubit gate at `angle` (ignored by
    /// gates without one). `None` for two-qubit gates.
    pub fn matrix(self, angle: f64) -> Option<[[Complex64; 2]; 2]> {
        let re = |x: f64| Complex64::new(x, 0.0);
        let (c, s) = ((angle / 2.0).cos(), (angle / 2.0).sin());
        let h = std::f64::consts::FRAC_1_SQRT_2;
        Some(match self {
            GateKind::H => [[re(h), re(h)], [re(h), re(-h)]],
            GateKind::X => [[re(0.0), re(1.0)], [re(1.0), re(0.0)]],
            GateKind::Y => [
                [re(0.0), Complex64::new(0.0, -1.0)],
                [Complex64::new(0.0, 1.0), re(0.0)],
            ],
            GateKind::Z => [[re(1.0), re(0.0)], [re(0.0), re(-1.0)]],
            GateKind::Rx => [
                [re(c), Complex64::new(0.0, -s)],
                [Complex64::new(0.0, -s), re(c)],
            ],
            GateKind::Ry => [[re(c), re(-s)], [re(s), re(c)]],
            GateKind::Rz => [
                [Complex64::new(c, -s), re(0.0)],
                [re(0.0), Complex64::new(c, s)],
            ],
            GateKind::Phase => [
                [re(1.0), re(0.0)],
                [re(0.0), Complex64::from_polar(1.0, angle)],
            ],
            GateKind::Cnot | GateKind::Cz | GateKind::Swap => return None,
        })
    }
}

/// Where a gate's angle comes from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Angle {
    /// The same fixed value for every circuit of the batch, radians.
    Fixed(f64),
    /// Column `i` of the per-sample inputs `[batch, inputs]` (an encoding).
    Input(usize),
    /// Entry `i` of the shared weights `[weights]` (trained, the same for the whole batch).
    Weight(usize),
}

/// One gate of a circuit.
#[derive(Debug, Clone, PartialEq)]
pub struct Gate {
    /// What the gate is.
    pub kind: GateKind,
    /// The wires it acts on; wire 0 is the most significant bit of a basis index, as in
    /// PennyLane (`|q0 q1 ... q_{n-1}>`).
    pub wires: Vec<usize>,
    /// Its angle, for rotations and phase gates.
    pub angle: Option<Angle>,
}

impl Gate {
    /// A gate without an angle on `wires`.
    pub fn new(kind: GateKind, wires: &[usize]) -> Self {
        Gate {
            kind,
            wires: wires.to_vec(),
            angle: None,
        }
    }

    /// A rotation or phase gate on `wire` with `angle`.
    pub fn rotation(kind: GateKind, wire: usize, angle: Angle) -> Self {
        Gate {
            kind,
            wires: vec![wire],
            angle: Some(angle),
        }
    }

    /// Whether the gate's action is the same for the whole batch (it has no per-sample angle).
    pub fn is_shared(&self) -> bool {
        !matches!(self.angle, Some(Angle::Input(_)))
    }
}
