//! Open quantum systems: drift, control Hamiltonians and jump operators.

use std::hash::{Hash, Hasher};

use crate::{CMatrix, LindbladError};

/// The largest dimension a system may have: at 32 the Liouvillian has about a million
/// entries (16 MiB) and is built in about 10^9 multiply-adds, a second; the work grows as
/// d^6.
pub const MAX_DIM: usize = 32;

/// Refuses a dimension above [`MAX_DIM`], naming `field`, with the Liouvillian's size: the one
/// check of [`System::new`] and the pulse documents (which make it before reading a matrix).
///
/// # Errors
/// [`LindbladError::Input`] naming `field`.
pub fn check_dim(dim: usize, field: &str) -> Result<(), LindbladError> {
    if dim <= MAX_DIM {
        return Ok(());
    }
    let d = dim as f64;
    Err(LindbladError::input(
        field,
        format!(
            "{dim} is more than {MAX_DIM}: the Liouvillian would have d^4 = {:.3e} entries \
             ({:.3e} bytes) and building it about d^6 = {:.3e} multiply-adds",
            d.powi(4),
            16.0 * d.powi(4),
            d.powi(6)
        ),
    ))
}

/// Tolerance of the Hermiticity check, relative to the operator's 1-norm.
const HERMITIAN_TOLERANCE: f64 = 1e-10;

/// An open quantum system of dimension `d` with piecewise-constant controls:
///
/// `drho/dt = -i [H0 + sum_c u_c H_c, rho] + sum_k gamma_k (L_k rho L_k^dag - {L_k^dag L_k, rho} / 2)`
///
/// with drift `H0`, control Hamiltonians `H_c` (amplitudes `u_c`, dimensionless, time in the
/// units of `1 / H`) and jump operators `L_k` of unit rate (the rates `gamma_k` are given per
/// task when evolving).
#[derive(Clone, Debug, PartialEq)]
pub struct System {
    dim: usize,
    drift: CMatrix,
    controls: Vec<CMatrix>,
    jumps: Vec<CMatrix>,
}

impl System {
    /// A system from its drift, control Hamiltonians and unit-rate jump operators; refuses
    /// a dimension above [`MAX_DIM`], operators of a dimension other than the drift's,
    /// entries that are not finite and non-Hermitian Hamiltonians.
    pub fn new(
        drift: CMatrix,
        controls: Vec<CMatrix>,
        jumps: Vec<CMatrix>,
    ) -> Result<Self, LindbladError> {
        let dim = drift.dim();
        if dim == 0 {
            return Err(LindbladError::Dimension {
                name: "drift".into(),
                expected: 1,
                found: "an empty matrix".into(),
            });
        }
        check_dim(dim, "drift")?;
        let named = std::iter::once(("drift".to_string(), &drift, true))
            .chain(
                controls
                    .iter()
                    .enumerate()
                    .map(|(c, h)| (format!("controls[{c}]"), h, true)),
            )
            .chain(
                jumps
                    .iter()
                    .enumerate()
                    .map(|(k, l)| (format!("jumps[{k}]"), l, false)),
            );
        for (name, operator, hermitian) in named {
            if operator.dim() != dim {
                return Err(LindbladError::Dimension {
                    name,
                    expected: dim,
                    found: format!("a {0} x {0} matrix", operator.dim()),
                });
            }
            operator.check_finite(&name)?;
            if hermitian && let Err(deviation) = operator.check_hermitian(HERMITIAN_TOLERANCE) {
                return Err(LindbladError::NotHermitian { name, deviation });
            }
        }
        Ok(Self {
            dim,
            drift,
            controls,
            jumps,
        })
    }

    /// The Hilbert-space dimension `d`.
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// The drift Hamiltonian `H0`.
    pub fn drift(&self) -> &CMatrix {
        &self.drift
    }

    /// The control Hamiltonians `H_c`, one per control channel.
    pub fn controls(&self) -> &[CMatrix] {
        &self.controls
    }

    /// The jump operators `L_k`, each of unit rate.
    pub fn jumps(&self) -> &[CMatrix] {
        &self.jumps
    }

    /// The Hamiltonian `H0 + sum_c u_c H_c` for one segment's amplitudes.
    ///
    /// # Panics
    /// When `amplitudes.len()` differs from the number of controls.
    pub fn hamiltonian(&self, amplitudes: &[f64]) -> CMatrix {
        assert_eq!(
            amplitudes.len(),
            self.controls.len(),
            "one amplitude per control"
        );
        self.controls
            .iter()
            .zip(amplitudes)
            .fold(self.drift.clone(), |acc, (h, &u)| {
                &acc + &h.scale(num_complex::Complex64::new(u, 0.0))
            })
    }

    /// A 64-bit fingerprint of the operators, the key of the
    /// [`OperatorCache`](crate::OperatorCache); equal systems have equal keys.
    pub fn key(&self) -> u64 {
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        self.dim.hash(&mut hasher);
        for (group, operators) in [
            std::slice::from_ref(&self.drift),
            &self.controls[..],
            &self.jumps[..],
        ]
        .into_iter()
        .enumerate()
        {
            (group, operators.len()).hash(&mut hasher);
            for entry in operators.iter().flat_map(CMatrix::as_slice) {
                entry.re.to_bits().hash(&mut hasher);
                entry.im.to_bits().hash(&mut hasher);
            }
        }
        hasher.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::operators::{pauli_x, pauli_y, pauli_z, sigma_minus};
    use num_complex::Complex64;

    #[test]
    fn non_hermitian_control_is_refused_by_name() {
        let error = System::new(pauli_z(), vec![pauli_x(), sigma_minus()], vec![]).unwrap_err();
        assert!(
            matches!(&error, LindbladError::NotHermitian { name, .. } if name == "controls[1]")
        );
    }

    #[test]
    fn an_operator_with_a_non_finite_entry_is_refused_by_name() {
        use num_complex::Complex64;
        let with = |value: Complex64| {
            CMatrix::from_fn(2, move |i, j| {
                if (i, j) == (0, 1) {
                    value
                } else {
                    pauli_z().get(i, j)
                }
            })
        };
        let nan = with(Complex64::new(f64::NAN, 0.0));
        let error = System::new(nan.clone(), vec![pauli_x()], vec![]).unwrap_err();
        assert_eq!(
            error.to_string(),
            "drift: entry (0, 1) is NaN+0i, not finite"
        );
        let infinite = with(Complex64::new(0.0, f64::INFINITY));
        let error = System::new(pauli_z(), vec![], vec![sigma_minus(), infinite]).unwrap_err();
        assert!(
            error.to_string().starts_with("jumps[1]: entry (0, 1)"),
            "{error}"
        );
    }

    #[test]
    fn jump_of_other_dimension_is_refused_by_name() {
        let error = System::new(pauli_z(), vec![], vec![CMatrix::identity(3)]).unwrap_err();
        assert!(
            error.to_string().starts_with("jumps[0]: expected a 2 x 2"),
            "{error}"
        );
    }

    #[test]
    fn key_tells_systems_apart_and_hamiltonian_adds_controls() {
        let a = System::new(pauli_z(), vec![pauli_x(), pauli_y()], vec![sigma_minus()]).unwrap();
        let b = System::new(pauli_z(), vec![pauli_y(), pauli_x()], vec![sigma_minus()]).unwrap();
        assert_eq!(a.key(), a.clone().key());
        assert_ne!(a.key(), b.key());
        let h = a.hamiltonian(&[2.0, 0.0]);
        assert_eq!(h.get(0, 1), Complex64::new(2.0, 0.0));
        assert_eq!(h.get(1, 1), Complex64::new(-1.0, 0.0));
    }
}
