//! The checks a density matrix passes: a state given by the caller (Hermitian, unit trace, no
//! negative eigenvalue, and pure for a target) to [`STATE_TOLERANCE`], and a state a solver
//! computed (finite, unit trace, no negative eigenvalue) to [`RESULT_TOLERANCE`]. One set of
//! checks for the pulse documents ([`crate::job`]) and the library's other callers (the Python
//! package).

use crate::{CMatrix, LindbladError, Method};

/// Tolerance of the checks on a given state: its Hermiticity, trace and purity, and the
/// Cholesky pivots of its positive semidefiniteness.
pub const STATE_TOLERANCE: f64 = 1e-9;

/// How far a computed state may stray from a density matrix (trace 1, no negative eigenvalue)
/// before it is refused as unphysical: a sound step's integration error stays far below.
pub const RESULT_TOLERANCE: f64 = 1e-6;

/// Refuses `rho`, naming it `name`, unless its entries are finite and it is Hermitian, of unit
/// trace and positive semidefinite within [`STATE_TOLERANCE`].
///
/// # Errors
/// [`LindbladError::Input`] with the first entry that is not finite, the trace or the failing
/// Cholesky pivot, or [`LindbladError::NotHermitian`].
pub fn check_density_matrix(rho: &CMatrix, name: &str) -> Result<(), LindbladError> {
    rho.check_finite(name)?;
    check_hermitian(rho, name)?;
    let trace = rho.trace().re;
    if (trace - 1.0).abs() > STATE_TOLERANCE {
        return Err(LindbladError::input(
            name,
            format!("trace is {trace}, expected 1"),
        ));
    }
    if let Err((row, pivot)) = rho.check_positive_semidefinite(STATE_TOLERANCE) {
        return Err(LindbladError::input(
            name,
            format!(
                "not positive semidefinite (a density matrix has no negative eigenvalue): the \
                 Cholesky pivot of row {row} is {pivot:e}"
            ),
        ));
    }
    Ok(())
}

/// Refuses `target`, naming it `name`, unless it is a density matrix
/// ([`check_density_matrix`]) of a pure state: `Tr(target^2) = 1` within
/// [`STATE_TOLERANCE`].
///
/// # Errors
/// As [`check_density_matrix`], or [`LindbladError::Input`] with the purity.
pub fn check_pure_state(target: &CMatrix, name: &str) -> Result<(), LindbladError> {
    check_density_matrix(target, name)?;
    let purity = target.trace_product(target).re;
    if (purity - 1.0).abs() > STATE_TOLERANCE {
        return Err(LindbladError::input(
            name,
            format!("not a pure state (Tr({name}^2) = {purity})"),
        ));
    }
    Ok(())
}

/// Refuses `m`, naming it `name`, unless it is Hermitian within [`STATE_TOLERANCE`].
///
/// # Errors
/// [`LindbladError::NotHermitian`] with the largest deviation.
pub fn check_hermitian(m: &CMatrix, name: &str) -> Result<(), LindbladError> {
    m.check_hermitian(STATE_TOLERANCE)
        .map_err(|deviation| LindbladError::NotHermitian {
            name: name.to_string(),
            deviation,
        })
}

/// Why a computed `rho` is not a density matrix within [`RESULT_TOLERANCE`] (entries that are
/// not finite, a trace other than 1, a negative eigenvalue), if it is not.
///
/// # Errors
/// The reason, as a phrase: "its trace is 1.3".
pub fn check_physical(rho: &CMatrix) -> Result<(), String> {
    if rho.first_non_finite().is_some() {
        return Err(crate::error::NOT_FINITE_STATE.into());
    }
    let trace = rho.trace().re;
    if (trace - 1.0).abs() > RESULT_TOLERANCE {
        return Err(format!("its trace is {trace}"));
    }
    rho.check_positive_semidefinite(RESULT_TOLERANCE)
        .map_err(|(row, pivot)| {
            format!("it has a negative eigenvalue (pivot {pivot:e} at row {row})")
        })
}

/// Refuses task `task`'s computed state `rho` when it is not a density matrix
/// ([`check_physical`]), with what to change for a run with `method`.
///
/// # Errors
/// [`LindbladError::Unphysical`].
pub fn check_result(rho: &CMatrix, task: usize, method: Method) -> Result<(), LindbladError> {
    check_physical(rho).map_err(|reason| LindbladError::Unphysical {
        task,
        reason,
        hint: method.unphysical_hint(),
    })
}
