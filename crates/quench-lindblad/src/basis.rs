//! The orthonormal Hermitian operator basis in which states and generators become real.
//!
//! With Hermitian `G_i` and `Tr(G_i G_j) = delta_ij`, every Hermitian operator is
//! `A = sum_i a_i G_i` with real `a_i = Tr(G_i A)`, and every map that preserves Hermiticity
//! (a Lindbladian, a channel) is a real `d^2 x d^2` matrix `M_ij = Tr(G_i L(G_j))`. Real
//! tensors are all a backend needs to support, and `Tr(A B) = sum_i a_i b_i` turns fidelities
//! into dot products.

use num_complex::Complex64;

use crate::error::LindbladError;

use crate::CMatrix;

/// The generalised Gell-Mann basis of dimension `d`, normalised so that `Tr(G_i G_j) =
/// delta_ij`: `G_0 = I / sqrt(d)`; then for each pair `j < k` the symmetric
/// `(E_jk + E_kj) / sqrt(2)` and the antisymmetric `(-i E_jk + i E_kj) / sqrt(2)`; then the
/// diagonal `(E_00 + ... + E_{l-1,l-1} - l E_ll) / sqrt(l (l + 1))` for `l = 1 .. d-1`.
/// For a qubit this is `(I, X, Y, Z) / sqrt(2)`.
#[derive(Clone, Debug, PartialEq)]
pub struct Basis {
    dim: usize,
    elements: Vec<CMatrix>,
}

impl Basis {
    /// The generalised Gell-Mann basis of dimension `dim` (`dim^2` elements).
    pub fn gell_mann(dim: usize) -> Self {
        let real = |x: f64| Complex64::new(x, 0.0);
        let mut elements = vec![CMatrix::identity(dim).scale(real(1.0 / (dim as f64).sqrt()))];
        let h = std::f64::consts::FRAC_1_SQRT_2;
        for j in 0..dim {
            for k in j + 1..dim {
                elements.push(CMatrix::from_fn(dim, |r, c| {
                    real(if (r, c) == (j, k) || (r, c) == (k, j) {
                        h
                    } else {
                        0.0
                    })
                }));
                elements.push(CMatrix::from_fn(dim, |r, c| match (r, c) {
                    (r, c) if (r, c) == (j, k) => Complex64::new(0.0, -h),
                    (r, c) if (r, c) == (k, j) => Complex64::new(0.0, h),
                    _ => real(0.0),
                }));
            }
        }
        for l in 1..dim {
            let norm = 1.0 / ((l * (l + 1)) as f64).sqrt();
            elements.push(CMatrix::from_fn(dim, |r, c| {
                real(match (r == c, r.cmp(&l)) {
                    (true, std::cmp::Ordering::Less) => norm,
                    (true, std::cmp::Ordering::Equal) => -(l as f64) * norm,
                    _ => 0.0,
                })
            }));
        }
        Self { dim, elements }
    }

    /// The Hilbert-space dimension `d`.
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// The number of elements, `d^2`: the length of a real state vector.
    pub fn size(&self) -> usize {
        self.elements.len()
    }

    /// The basis operators `G_0 .. G_{d^2 - 1}`.
    pub fn elements(&self) -> &[CMatrix] {
        &self.elements
    }

    /// The real coordinates `Re Tr(G_i A)`, length `d^2`; exact for Hermitian `A`, and the
    /// coordinates of the Hermitian part of `A` otherwise.
    ///
    /// # Errors
    /// When `operator` is not `d x d`.
    pub fn coordinates(&self, operator: &CMatrix) -> Result<Vec<f64>, LindbladError> {
        if operator.dim() != self.dim {
            return Err(LindbladError::Dimension {
                name: "operator".into(),
                expected: self.dim,
                found: format!("a {0} x {0} matrix", operator.dim()),
            });
        }
        Ok(self
            .elements
            .iter()
            .map(|g| g.trace_product(operator).re)
            .collect())
    }

    /// The Hermitian operator `sum_i coordinates[i] G_i`.
    ///
    /// # Errors
    /// When `coordinates.len() != d^2`.
    pub fn operator(&self, coordinates: &[f64]) -> Result<CMatrix, LindbladError> {
        if coordinates.len() != self.size() {
            return Err(LindbladError::Shape {
                name: "coordinates",
                expected: format!("[{}]", self.size()),
                found: vec![coordinates.len()],
            });
        }
        Ok(self
            .elements
            .iter()
            .zip(coordinates)
            .fold(CMatrix::zeros(self.dim), |acc, (g, &a)| {
                &acc + &g.scale(Complex64::new(a, 0.0))
            }))
    }

    /// The real matrix `M_ij = Re Tr(G_i map(G_j))` of a linear map on operators, row-major
    /// `[d^2, d^2]`; for a map that preserves Hermiticity it represents the map exactly.
    pub fn superoperator(&self, map: impl Fn(&CMatrix) -> CMatrix) -> Vec<f64> {
        let n = self.size();
        let images: Vec<CMatrix> = self.elements.iter().map(map).collect();
        let mut matrix = vec![0.0; n * n];
        for (i, g) in self.elements.iter().enumerate() {
            for (j, image) in images.iter().enumerate() {
                matrix[i * n + j] = g.trace_product(image).re;
            }
        }
        matrix
    }

    /// The real superoperator `[d^2, d^2]` of the unitary channel `A -> U A U^dagger`, the
    /// target of the average gate fidelity.
    pub fn unitary_superoperator(&self, unitary: &CMatrix) -> Vec<f64> {
        self.superoperator(|a| a.conjugated_by(unitary))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::operators::{pauli_x, pauli_y, pauli_z};

    #[test]
    fn operators_and_coordinates_of_the_wrong_size_are_refused_by_name() {
        let basis = Basis::gell_mann(2);
        let err = basis.coordinates(&CMatrix::zeros(3)).unwrap_err();
        assert!(
            err.to_string().contains("operator: expected a 2 x 2"),
            "{err}"
        );
        let err = basis.operator(&[0.5; 3]).unwrap_err();
        assert!(
            err.to_string()
                .contains("coordinates: expected shape [4], found [3]"),
            "{err}"
        );
    }

    #[test]
    fn gell_mann_is_orthonormal_and_hermitian_in_dimensions_two_to_four() {
        for dim in 2..=4 {
            let basis = Basis::gell_mann(dim);
            assert_eq!(basis.size(), dim * dim);
            for (i, gi) in basis.elements().iter().enumerate() {
                assert!(gi.hermiticity_deviation() < 1e-15);
                for (j, gj) in basis.elements().iter().enumerate() {
                    let expected = if i == j { 1.0 } else { 0.0 };
                    assert!(
                        (gi.trace_product(gj) - expected).norm() < 1e-14,
                        "{dim} {i} {j}"
                    );
                }
            }
        }
    }

    #[test]
    fn qubit_basis_is_the_scaled_paulis() {
        let basis = Basis::gell_mann(2);
        let s = Complex64::new(std::f64::consts::FRAC_1_SQRT_2, 0.0);
        for (g, p) in basis.elements()[1..]
            .iter()
            .zip([pauli_x(), pauli_y(), pauli_z()])
        {
            assert!(g.max_abs_diff(&p.scale(s)) < 1e-15);
        }
    }

    #[test]
    fn coordinates_round_trip_a_hermitian_operator() {
        let basis = Basis::gell_mann(3);
        let a = CMatrix::from_fn(3, |r, c| {
            let x = (r * 3 + c) as f64;
            if r == c {
                Complex64::new(x, 0.0)
            } else if r < c {
                Complex64::new(x, x / 2.0)
            } else {
                Complex64::new((c * 3 + r) as f64, -((c * 3 + r) as f64) / 2.0)
            }
        });
        let back = basis.operator(&basis.coordinates(&a).unwrap()).unwrap();
        assert!(back.max_abs_diff(&a) < 1e-13);
    }

    #[test]
    fn superoperator_of_the_identity_map_is_the_identity() {
        let basis = Basis::gell_mann(2);
        let m = basis.superoperator(CMatrix::clone);
        for i in 0..4 {
            for j in 0..4 {
                let expected = if i == j { 1.0 } else { 0.0 };
                assert!((m[i * 4 + j] - expected).abs() < 1e-15);
            }
        }
    }
}
