//! A small dense complex matrix for host-side operator algebra in f64.

use std::ops::{Add, Mul, Sub};

use num_complex::Complex64;
use quench_support::stats::max_or_nan;

use crate::LindbladError;

/// A dense square complex matrix in f64, stored row-major: the host-side operator type
/// (Hamiltonians, jump operators, density matrices, Liouvillians).
///
/// The arithmetic operators (`&a + &b`, `&a - &b`, `&a * &b` for the matrix product) panic
/// when the dimensions differ, like slice indexing: mixing dimensions is a programming error,
/// and every public constructor of a [`System`](crate::System) checks them first.
#[derive(Clone, Debug, PartialEq)]
pub struct CMatrix {
    dim: usize,
    data: Vec<Complex64>,
}

impl CMatrix {
    /// The `dim x dim` zero matrix.
    pub fn zeros(dim: usize) -> Self {
        Self {
            dim,
            data: vec![Complex64::new(0.0, 0.0); dim * dim],
        }
    }

    /// The `dim x dim` identity.
    pub fn identity(dim: usize) -> Self {
        Self::from_fn(dim, |row, col| {
            Complex64::new(if row == col { 1.0 } else { 0.0 }, 0.0)
        })
    }

    /// The `dim x dim` matrix with entry `(row, col)` equal to `entry(row, col)`.
    pub fn from_fn(dim: usize, entry: impl Fn(usize, usize) -> Complex64) -> Self {
        let data = (0..dim * dim)
            .map(|index| entry(index / dim, index % dim))
            .collect();
        Self { dim, data }
    }

    /// A matrix from its rows; `name` labels the error when the rows do not form a square.
    pub fn from_rows(name: &str, rows: &[Vec<Complex64>]) -> Result<Self, LindbladError> {
        let dim = rows.len();
        if let Some((index, row)) = rows.iter().enumerate().find(|(_, row)| row.len() != dim) {
            return Err(LindbladError::Dimension {
                name: format!("{name}[{index}]"),
                expected: dim,
                found: format!("a row of {} entries", row.len()),
            });
        }
        Ok(Self {
            dim,
            data: rows.concat(),
        })
    }

    /// A matrix from real entries, row-major, `dim * dim` of them.
    ///
    /// # Panics
    /// When `entries.len() != dim * dim`.
    pub fn from_real(dim: usize, entries: &[f64]) -> Self {
        assert_eq!(entries.len(), dim * dim, "a {dim} x {dim} matrix");
        Self {
            dim,
            data: entries.iter().map(|&x| Complex64::new(x, 0.0)).collect(),
        }
    }

    /// The number of rows (= columns).
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// The entry at `(row, col)`.
    pub fn get(&self, row: usize, col: usize) -> Complex64 {
        self.data[row * self.dim + col]
    }

    /// The entries, row-major.
    pub fn as_slice(&self) -> &[Complex64] {
        &self.data
    }

    /// The rows, each a vector of entries.
    pub fn rows(&self) -> Vec<Vec<Complex64>> {
        self.data
            .chunks(self.dim.max(1))
            .map(<[_]>::to_vec)
            .collect()
    }

    /// The conjugate transpose.
    pub fn adjoint(&self) -> Self {
        Self::from_fn(self.dim, |row, col| self.get(col, row).conj())
    }

    /// The transpose.
    pub fn transpose(&self) -> Self {
        Self::from_fn(self.dim, |row, col| self.get(col, row))
    }

    /// The entrywise complex conjugate.
    pub fn conj(&self) -> Self {
        Self {
            dim: self.dim,
            data: self.data.iter().map(Complex64::conj).collect(),
        }
    }

    /// Every entry multiplied by `factor`.
    pub fn scale(&self, factor: Complex64) -> Self {
        Self {
            dim: self.dim,
            data: self.data.iter().map(|&x| x * factor).collect(),
        }
    }

    /// The Kronecker product `self ⊗ other`: `self` acts on the first (slower) index.
    pub fn kron(&self, other: &Self) -> Self {
        let d = other.dim;
        Self::from_fn(self.dim * d, |row, col| {
            self.get(row / d, col / d) * other.get(row % d, col % d)
        })
    }

    /// The trace.
    pub fn trace(&self) -> Complex64 {
        (0..self.dim).map(|i| self.get(i, i)).sum()
    }

    /// `Tr(self * other)` without forming the product.
    pub fn trace_product(&self, other: &Self) -> Complex64 {
        assert_eq!(self.dim, other.dim, "dimensions of a trace of a product");
        let d = self.dim;
        (0..d)
            .flat_map(|i| (0..d).map(move |k| (i, k)))
            .map(|(i, k)| self.get(i, k) * other.get(k, i))
            .sum()
    }

    /// The commutator `[self, other] = self other - other self`.
    pub fn commutator(&self, other: &Self) -> Self {
        &(self * other) - &(other * self)
    }

    /// The anticommutator `{self, other} = self other + other self`.
    pub fn anticommutator(&self, other: &Self) -> Self {
        &(self * other) + &(other * self)
    }

    /// The largest `|A_ij - conj(A_ji)|`: zero exactly for a Hermitian matrix; NaN where an
    /// entry is NaN (so that no check passes it).
    pub fn hermiticity_deviation(&self) -> f64 {
        let d = self.dim;
        max_or_nan(
            (0..d)
                .flat_map(|i| (0..d).map(move |j| (i, j)))
                .map(|(i, j)| (self.get(i, j) - self.get(j, i).conj()).norm()),
        )
    }

    /// Checks that the matrix is Hermitian within `tolerance` relative to its size (the
    /// deviation at most `tolerance` times the 1-norm, or times 1 for a smaller norm); on
    /// failure, the deviation (NaN where an entry is NaN: refused too).
    pub fn check_hermitian(&self, tolerance: f64) -> Result<(), f64> {
        let deviation = self.hermiticity_deviation();
        if deviation.is_nan() || deviation > tolerance * self.norm_one().max(1.0) {
            return Err(deviation);
        }
        Ok(())
    }

    /// The first entry (row, column and value, row-major) that is not a finite number, if any.
    pub fn first_non_finite(&self) -> Option<(usize, usize, Complex64)> {
        let at = self
            .data
            .iter()
            .position(|z| !(z.re.is_finite() && z.im.is_finite()))?;
        Some((at / self.dim, at % self.dim, self.data[at]))
    }

    /// Refuses this matrix, naming it `name`, when an entry is not a finite number: the one
    /// check of a system's operators ([`crate::System::new`]) and of a given state
    /// ([`crate::states::check_density_matrix`]).
    ///
    /// # Errors
    /// [`LindbladError::Input`] with the first such entry.
    pub fn check_finite(&self, name: &str) -> Result<(), LindbladError> {
        match self.first_non_finite() {
            Some((row, col, value)) => Err(LindbladError::input(
                name,
                format!("entry ({row}, {col}) is {value}, not finite"),
            )),
            None => Ok(()),
        }
    }

    /// Checks that this Hermitian matrix is positive semidefinite within `tolerance`: the
    /// Cholesky factorisation of `self + tolerance I` must succeed (every pivot positive), so
    /// an eigenvalue below `-tolerance` fails it. On failure: the row whose pivot was not
    /// positive, and that pivot (about the most negative eigenvalue, for small matrices).
    pub fn check_positive_semidefinite(&self, tolerance: f64) -> Result<(), (usize, f64)> {
        let d = self.dim;
        let mut l = vec![Complex64::new(0.0, 0.0); d * d];
        for j in 0..d {
            let pivot = self.get(j, j).re + tolerance
                - (0..j).map(|k| l[j * d + k].norm_sqr()).sum::<f64>();
            if pivot.is_nan() || pivot <= 0.0 {
                return Err((j, pivot - tolerance));
            }
            let root = pivot.sqrt();
            l[j * d + j] = Complex64::new(root, 0.0);
            for i in j + 1..d {
                let dot: Complex64 = (0..j).map(|k| l[i * d + k] * l[j * d + k].conj()).sum();
                l[i * d + j] = (self.get(i, j) - dot) / root;
            }
        }
        Ok(())
    }

    /// The induced 1-norm: the largest column sum of absolute values; NaN where an entry is
    /// NaN.
    pub fn norm_one(&self) -> f64 {
        max_or_nan(
            (0..self.dim).map(|col| (0..self.dim).map(|row| self.get(row, col).norm()).sum()),
        )
    }

    /// The largest `|self_ij - other_ij|`; NaN when any entry is NaN (so that a broken result
    /// can never look exact).
    pub fn max_abs_diff(&self, other: &Self) -> f64 {
        assert_eq!(self.dim, other.dim, "dimensions of a difference");
        max_or_nan(
            self.data
                .iter()
                .zip(&other.data)
                .map(|(a, b)| (a - b).norm()),
        )
    }

    /// `U self U^dagger`: the matrix in the frame rotated by `unitary`.
    pub fn conjugated_by(&self, unitary: &Self) -> Self {
        &(unitary * self) * &unitary.adjoint()
    }

    /// `op` applied entry by entry to two matrices of one dimension (`what` names the
    /// operation in the panic of a programming error).
    fn elementwise(
        &self,
        other: &Self,
        what: &str,
        op: impl Fn(Complex64, Complex64) -> Complex64,
    ) -> Self {
        assert_eq!(self.dim, other.dim, "dimensions of a {what}");
        Self {
            dim: self.dim,
            data: self
                .data
                .iter()
                .zip(&other.data)
                .map(|(&a, &b)| op(a, b))
                .collect(),
        }
    }
}

impl Add for &CMatrix {
    type Output = CMatrix;

    fn add(self, other: &CMatrix) -> CMatrix {
        self.elementwise(other, "sum", |a, b| a + b)
    }
}

impl Sub for &CMatrix {
    type Output = CMatrix;

    fn sub(self, other: &CMatrix) -> CMatrix {
        self.elementwise(other, "difference", |a, b| a - b)
    }
}

impl Mul for &CMatrix {
    type Output = CMatrix;

    /// The matrix product.
    fn mul(self, other: &CMatrix) -> CMatrix {
        assert_eq!(self.dim, other.dim, "dimensions of a product");
        let d = self.dim;
        let mut data = vec![Complex64::new(0.0, 0.0); d * d];
        for i in 0..d {
            for k in 0..d {
                let a = self.data[i * d + k];
                if a == Complex64::new(0.0, 0.0) {
                    continue;
                }
                for j in 0..d {
                    data[i * d + j] += a * other.data[k * d + j];
                }
            }
        }
        CMatrix { dim: d, data }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(re: f64, im: f64) -> Complex64 {
        Complex64::new(re, im)
    }

    #[test]
    fn product_kron_and_trace_follow_the_definitions() {
        let a = CMatrix::from_rows(
            "a",
            &[
                vec![c(1.0, 0.0), c(0.0, 2.0)],
                vec![c(3.0, 0.0), c(4.0, -1.0)],
            ],
        )
        .unwrap();
        let b = CMatrix::from_rows(
            "b",
            &[
                vec![c(0.0, 1.0), c(1.0, 0.0)],
                vec![c(2.0, 0.0), c(0.0, 0.0)],
            ],
        )
        .unwrap();
        let product = &a * &b;
        assert_eq!(product.get(0, 0), c(0.0, 1.0) + c(0.0, 4.0));
        assert_eq!(product.get(1, 1), c(3.0, 0.0));
        assert_eq!(a.trace_product(&b), product.trace());
        let k = a.kron(&b);
        assert_eq!(k.dim(), 4);
        assert_eq!(k.get(1, 2), a.get(0, 1) * b.get(1, 0));
        assert_eq!(k.get(3, 2), a.get(1, 1) * b.get(1, 0));
        assert_eq!(k.trace(), a.trace() * b.trace());
    }

    #[test]
    fn ragged_rows_are_refused_with_the_row_named() {
        let error = CMatrix::from_rows("h0", &[vec![c(1.0, 0.0), c(0.0, 0.0)], vec![c(0.0, 0.0)]])
            .unwrap_err();
        assert!(error.to_string().starts_with("h0[1]"), "{error}");
    }

    #[test]
    fn hermiticity_deviation_detects_a_non_hermitian_entry() {
        let mut rows = CMatrix::identity(2).rows();
        assert_eq!(
            CMatrix::from_rows("i", &rows)
                .unwrap()
                .hermiticity_deviation(),
            0.0
        );
        rows[0][1] = c(0.0, 1.0);
        rows[1][0] = c(0.0, 1.0);
        assert_eq!(
            CMatrix::from_rows("a", &rows)
                .unwrap()
                .hermiticity_deviation(),
            2.0
        );
    }

    #[test]
    fn a_nan_entry_makes_the_deviation_and_the_norm_nan() {
        // A maximum that skipped NaN would read 0 for the deviation and 1 for the norm.
        let nan = CMatrix::from_fn(2, |i, j| match (i, j) {
            (0, 1) => c(f64::NAN, 0.0),
            (1, 0) => c(0.0, 0.0),
            _ => c(1.0, 0.0),
        });
        assert!(nan.hermiticity_deviation().is_nan());
        assert!(nan.norm_one().is_nan());
        assert!(nan.check_hermitian(1e9).is_err_and(f64::is_nan));
        assert_eq!(nan.first_non_finite().map(|(r, c, _)| (r, c)), Some((0, 1)));
        assert_eq!(CMatrix::identity(3).norm_one(), 1.0);
        assert_eq!(CMatrix::identity(3).check_hermitian(0.0), Ok(()));
        assert_eq!(CMatrix::identity(3).first_non_finite(), None);
        // A deviation of 0.1 within the tolerance times the 1-norm (here 3.1), not times 1.
        let skewed = CMatrix::from_fn(2, |i, j| match (i, j) {
            (0, 1) => c(1.0, 0.0),
            (1, 0) => c(1.1, 0.0),
            _ => c(2.0, 0.0),
        });
        assert_eq!(skewed.check_hermitian(0.05), Ok(()));
        assert!(skewed.check_hermitian(0.02).is_err());
    }
}
