//! Signed permutations of the basis states, built on the host: X, Z, CNOT, CZ and SWAP map
//! every basis state to one basis state times +-1, and a run of them composes into one.

use crate::gate::{Gate, GateKind};

/// A signed permutation on the host: `new[k] = sign[k] * old[perm[k]]`.
pub(crate) struct HostPermutation {
    /// The basis index each amplitude is read from, `[2^n]`.
    pub(crate) perm: Vec<usize>,
    /// Each amplitude's sign, `[2^n]`.
    pub(crate) sign: Vec<f64>,
}

impl HostPermutation {
    /// The permutation of one of X, Z, CNOT, CZ, SWAP on a `qubits`-qubit state.
    pub(crate) fn of(gate: &Gate, qubits: usize) -> Self {
        let bit = |wire: usize| 1usize << (qubits - 1 - wire);
        let dim = 1usize << qubits;
        let a = bit(gate.wires[0]);
        let b = gate.wires.get(1).map_or(0, |&w| bit(w));
        let mut perm: Vec<usize> = (0..dim).collect();
        let mut sign = vec![1.0; dim];
        for k in 0..dim {
            match gate.kind {
                GateKind::X => perm[k] = k ^ a,
                GateKind::Z if k & a != 0 => sign[k] = -1.0,
                GateKind::Cnot if k & a != 0 => perm[k] = k ^ b,
                GateKind::Cz if k & a != 0 && k & b != 0 => sign[k] = -1.0,
                GateKind::Swap if (k & a != 0) != (k & b != 0) => perm[k] = k ^ a ^ b,
                _ => {}
            }
        }
        HostPermutation { perm, sign }
    }

    /// `self` followed by `next`.
    pub(crate) fn then(self, next: HostPermutation) -> Self {
        let perm = next.perm.iter().map(|&k| self.perm[k]).collect();
        let sign = next
            .perm
            .iter()
            .zip(&next.sign)
            .map(|(&k, s)| s * self.sign[k])
            .collect();
        HostPermutation { perm, sign }
    }
}

/// Adds `gate` to the run of permutations `pending` (after what it holds) when the gate is a
/// signed permutation; whether it was.
pub(crate) fn absorb(pending: &mut Option<HostPermutation>, gate: &Gate, qubits: usize) -> bool {
    if !gate.kind.is_signed_permutation() {
        return false;
    }
    let next = HostPermutation::of(gate, qubits);
    *pending = Some(match pending.take() {
        Some(before) => before.then(next),
        None => next,
    });
    true
}
