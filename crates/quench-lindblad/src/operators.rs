//! Standard qubit operators and pure states, in the convention of the guide:
//! `|0> = (1, 0)`, `sz = diag(1, -1)`, `s- = [[0, 0], [1, 0]]` (takes `|0>` to `|1>`).

use num_complex::Complex64;

use crate::CMatrix;

fn qubit(entries: [[(f64, f64); 2]; 2]) -> CMatrix {
    CMatrix::from_fn(2, |row, col| {
        let (re, im) = entries[row][col];
        Complex64::new(re, im)
    })
}

/// Pauli X, `[[0, 1], [1, 0]]`.
pub fn pauli_x() -> CMatrix {
    qubit([[(0.0, 0.0), (1.0, 0.0)], [(1.0, 0.0), (0.0, 0.0)]])
}

/// Pauli Y, `[[0, -i], [i, 0]]`.
pub fn pauli_y() -> CMatrix {
    qubit([[(0.0, 0.0), (0.0, -1.0)], [(0.0, 1.0), (0.0, 0.0)]])
}

/// Pauli Z, `diag(1, -1)`.
pub fn pauli_z() -> CMatrix {
    qubit([[(1.0, 0.0), (0.0, 0.0)], [(0.0, 0.0), (-1.0, 0.0)]])
}

/// The lowering operator of the guide, `s- = [[0, 0], [1, 0]]`: it takes `|0>` to `|1>`, the
/// state of eigenvalue -1 of `sz`, so `s-` relaxes towards `|1>`.
pub fn sigma_minus() -> CMatrix {
    qubit([[(0.0, 0.0), (0.0, 0.0)], [(1.0, 0.0), (0.0, 0.0)]])
}

/// The Hadamard gate, `[[1, 1], [1, -1]] / sqrt(2)`.
pub fn hadamard() -> CMatrix {
    let h = std::f64::consts::FRAC_1_SQRT_2;
    qubit([[(h, 0.0), (h, 0.0)], [(h, 0.0), (-h, 0.0)]])
}

/// The Kronecker product of a list of operators, the first acting on the slowest index
/// (`kron_all(&[x, i])` is `X ⊗ I`, "XI" in the guide).
///
/// # Panics
/// When `factors` is empty.
pub fn kron_all(factors: &[CMatrix]) -> CMatrix {
    let (first, rest) = factors.split_first().expect("at least one factor");
    rest.iter()
        .fold(first.clone(), |acc, factor| acc.kron(factor))
}

/// The density matrix `|psi><psi| / <psi|psi>` of a state vector.
pub fn pure_state(psi: &[Complex64]) -> CMatrix {
    let norm: f64 = psi.iter().map(Complex64::norm_sqr).sum();
    CMatrix::from_fn(psi.len(), |row, col| psi[row] * psi[col].conj() / norm)
}

/// The density matrix `|k><k|` of the `k`-th computational basis state in dimension `dim`.
pub fn basis_state(dim: usize, k: usize) -> CMatrix {
    let psi: Vec<Complex64> = (0..dim)
        .map(|i| Complex64::new(if i == k { 1.0 } else { 0.0 }, 0.0))
        .collect();
    pure_state(&psi)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paulis_obey_xy_equals_iz_and_square_to_one() {
        let i = Complex64::new(0.0, 1.0);
        assert_eq!(&pauli_x() * &pauli_y(), pauli_z().scale(i));
        for p in [pauli_x(), pauli_y(), pauli_z()] {
            assert_eq!(&p * &p, CMatrix::identity(2));
        }
    }

    #[test]
    fn sigma_minus_takes_zero_to_one() {
        let relaxed = basis_state(2, 0).conjugated_by(&sigma_minus());
        assert_eq!(relaxed, basis_state(2, 1));
    }

    #[test]
    fn hadamard_maps_zero_to_plus() {
        let plus = basis_state(2, 0).conjugated_by(&hadamard());
        assert!((plus.get(0, 1).re - 0.5).abs() < 1e-15);
        assert!((plus.trace().re - 1.0).abs() < 1e-15);
    }
}
