//! The systems of the meta-learning workload (guide 001, `WORKLOADS.md` section 2).

use num_complex::Complex64;

use crate::operators::{kron_all, pauli_x, pauli_y, pauli_z, sigma_minus};
use crate::{CMatrix, System};

fn scaled(operator: CMatrix, factor: f64) -> CMatrix {
    operator.scale(Complex64::new(factor, 0.0))
}

fn build(drift: CMatrix, controls: Vec<CMatrix>, jumps: Vec<CMatrix>) -> System {
    System::new(drift, controls, jumps)
        .expect("the preset operators are Hermitian and 2 x 2 or 4 x 4")
}

/// The guide's qubit: `H = 0.1 sz + u1 sx + u2 sy`, jumps `sx, sy, sz` of unit rate (the
/// task's single rate `G` is given to all three).
pub fn one_qubit() -> System {
    build(
        scaled(pauli_z(), 0.1),
        vec![pauli_x(), pauli_y()],
        vec![pauli_x(), pauli_y(), pauli_z()],
    )
}

/// The guide's two-qubit option: drift `0.5 ZZ`, controls `XI, IX, YI, ZZ`, jumps
/// `ZI, IZ, s-I, Is-` (`XI = X ⊗ I` acts on the first qubit).
pub fn two_qubit() -> System {
    let i = CMatrix::identity(2);
    let zz = kron_all(&[pauli_z(), pauli_z()]);
    build(
        scaled(zz.clone(), 0.5),
        vec![
            kron_all(&[pauli_x(), i.clone()]),
            kron_all(&[i.clone(), pauli_x()]),
            kron_all(&[pauli_y(), i.clone()]),
            zz,
        ],
        vec![
            kron_all(&[pauli_z(), i.clone()]),
            kron_all(&[i.clone(), pauli_z()]),
            kron_all(&[sigma_minus(), i.clone()]),
            kron_all(&[i, sigma_minus()]),
        ],
    )
}

/// The guide's direct-rate variant: no drift, controls `sx, sy`, jumps `s-` and `sz` of unit
/// rate; a task `(g_relax, g_deph)` gives them the rates `[g_relax, g_deph / 2]` (see
/// [`RelaxDephaseTask::rates`](crate::RelaxDephaseTask::rates)).
pub fn relax_dephase() -> System {
    build(
        CMatrix::zeros(2),
        vec![pauli_x(), pauli_y()],
        vec![sigma_minus(), pauli_z()],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_have_the_guide_shapes() {
        let shapes: Vec<_> = [one_qubit(), two_qubit(), relax_dephase()]
            .iter()
            .map(|s| (s.dim(), s.controls().len(), s.jumps().len()))
            .collect();
        assert_eq!(shapes, vec![(2, 2, 3), (4, 4, 4), (2, 2, 2)]);
    }

    #[test]
    fn two_qubit_jump_s_minus_i_acts_on_the_first_qubit() {
        let system = two_qubit();
        let s = &system.jumps()[2];
        assert_eq!(s.get(2, 0), Complex64::new(1.0, 0.0));
        assert_eq!(s.get(1, 0), Complex64::new(0.0, 0.0));
    }
}
