//! The f64 host reference: the exact exponential of the complex Liouvillian of each segment,
//! independent of the real basis and of the device code, for tests.
//!
//! Operators are vectorised by stacking columns, `vec(A X B) = (B^T ⊗ A) vec(X)`.

use num_complex::Complex64;

use crate::{Basis, CMatrix, System};

/// The Liouvillian `[d^2, d^2]` (column-stacking) of `system` with one segment's amplitudes
/// and the rates: `-i (I ⊗ H - H^T ⊗ I) + sum_k gamma_k (conj(L) ⊗ L - (I ⊗ L^dag L) / 2 -
/// ((L^dag L)^T ⊗ I) / 2)`.
///
/// # Panics
/// When the numbers of amplitudes or rates do not match the system.
pub fn liouvillian(system: &System, amplitudes: &[f64], rates: &[f64]) -> CMatrix {
    assert_eq!(rates.len(), system.jumps().len(), "one rate per jump");
    let identity = CMatrix::identity(system.dim());
    let h = system.hamiltonian(amplitudes);
    let unitary = &identity.kron(&h) - &h.transpose().kron(&identity);
    let mut total = unitary.scale(Complex64::new(0.0, -1.0));
    for (l, &rate) in system.jumps().iter().zip(rates) {
        let decay = &l.adjoint() * l;
        let jump = &l.conj().kron(l)
            - &(&identity.kron(&decay) + &decay.transpose().kron(&identity))
                .scale(Complex64::new(0.5, 0.0));
        total = &total + &jump.scale(Complex64::new(rate, 0.0));
    }
    total
}

/// The matrix exponential by scaling to `||A / 2^s||_1 <= 1/2`, a degree-20 Taylor polynomial
/// (truncation below 1e-25) and `s` squarings; accurate to a few f64 roundoffs for the small,
/// moderately scaled matrices of the tests.
pub fn expm(a: &CMatrix) -> CMatrix {
    let norm = a.norm_one();
    let squarings = if norm > 0.5 {
        (norm / 0.5).log2().ceil() as i32
    } else {
        0
    };
    let x = a.scale(Complex64::new(2f64.powi(-squarings), 0.0));
    let identity = CMatrix::identity(a.dim());
    let mut result = identity.clone();
    for k in (1..=20).rev() {
        result = &identity + &(&x * &result).scale(Complex64::new(1.0 / k as f64, 0.0));
    }
    for _ in 0..squarings {
        result = &result * &result;
    }
    result
}

/// The channel of a whole pulse, in the column-stacking Liouville representation.
#[derive(Clone, Debug, PartialEq)]
pub struct ReferenceChannel {
    dim: usize,
    liouville: CMatrix,
}

impl ReferenceChannel {
    /// The channel of `system` under piecewise-constant `amplitudes` (one row of controls per
    /// segment, segments of `t_total / segments`) and fixed `rates`; amplitudes are taken as
    /// given, without the solvers' clamping.
    pub fn new(system: &System, t_total: f64, amplitudes: &[Vec<f64>], rates: &[f64]) -> Self {
        let t_segment = t_total / amplitudes.len() as f64;
        let liouville = amplitudes.iter().fold(
            CMatrix::identity(system.dim() * system.dim()),
            |total, segment| {
                let generator = liouvillian(system, segment, rates);
                &expm(&generator.scale(Complex64::new(t_segment, 0.0))) * &total
            },
        );
        Self {
            dim: system.dim(),
            liouville,
        }
    }

    /// The state after the pulse from `rho`.
    pub fn apply(&self, rho: &CMatrix) -> CMatrix {
        let d = self.dim;
        let n = d * d;
        let image: Vec<Complex64> = (0..n)
            .map(|row| {
                (0..n)
                    .map(|col| self.liouville.get(row, col) * rho.get(col % d, col / d))
                    .sum()
            })
            .collect();
        CMatrix::from_fn(d, |row, col| image[col * d + row])
    }

    /// The channel as a real superoperator `[d^2, d^2]` in `basis`, comparable with the
    /// solvers' propagators.
    pub fn superoperator(&self, basis: &Basis) -> Vec<f64> {
        basis.superoperator(|x| self.apply(x))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::operators::{basis_state, pauli_x, pauli_z};

    #[test]
    fn expm_of_a_rotation_generator_is_the_rotation() {
        // exp(-i theta X) = cos(theta) I - i sin(theta) X.
        let theta = 3.7;
        let e = expm(&pauli_x().scale(Complex64::new(0.0, -theta)));
        let expected = &CMatrix::identity(2).scale(Complex64::new(theta.cos(), 0.0))
            - &pauli_x().scale(Complex64::new(0.0, theta.sin()));
        assert!(e.max_abs_diff(&expected) < 1e-14);
    }

    #[test]
    fn closed_system_rotates_the_state() {
        // H = u X over time t flips |0> to |1> when u t = pi / 2.
        let system = System::new(CMatrix::zeros(2), vec![pauli_x()], vec![pauli_z()]).unwrap();
        let u = std::f64::consts::FRAC_PI_2;
        let channel = ReferenceChannel::new(&system, 1.0, &[vec![u]], &[0.0]);
        let rho = channel.apply(&basis_state(2, 0));
        assert!(rho.max_abs_diff(&basis_state(2, 1)) < 1e-14);
    }
}
