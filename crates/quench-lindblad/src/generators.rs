//! The Lindbladian as real matrices, linear in the controls and the rates:
//! `M = M_H0 + sum_c u_c M_c + sum_k gamma_k M_k`, built on the host in f64 and uploaded once.

use quench_kernels::QuenchOps;
use std::sync::Arc;

use burn::tensor::Tensor;
use num_complex::Complex64;
use quench_kernels::ops::expmv::{GeneratorParts, real_norm_one};
use quench_kernels::readback::float_tensor;

use crate::{Basis, CMatrix, System};

/// The real generators of a system in the Gell-Mann [`Basis`], f64, each row-major
/// `[d^2, d^2]`: `M_ij = Tr(G_i L(G_j))` for the drift's commutator, each control's commutator
/// and each unit-rate dissipator.
///
/// Row 0 of every generator is set to exactly zero: `Tr L(A) = 0` for any Lindbladian, and
/// keeping the zero exact makes every step matrix map the trace coordinate `r_0` to itself
/// bit for bit, so the solvers conserve the trace without renormalising.
#[derive(Clone, Debug, PartialEq)]
pub struct HostGenerators {
    dim: usize,
    parts: GeneratorParts,
}

/// 1-norms of the generators, from which the exact solver bounds `||M t||` in advance.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct GeneratorNorms {
    drift: f64,
    controls: f64,
    jumps: f64,
}

impl GeneratorNorms {
    /// An upper bound on `||M||_1` for amplitudes within `+-control_bound` and rates within
    /// `[0, rate_bound]`.
    pub(crate) fn bound(&self, control_bound: f64, rate_bound: f64) -> f64 {
        self.drift + control_bound * self.controls + rate_bound * self.jumps
    }

    /// The largest of [`Self::bound`]'s three terms, as `(input, share)`: the drift, the
    /// controls at `control_bound` (the amplitudes) or the jumps at `rate_bound` (the rates).
    pub(crate) fn largest_part(&self, control_bound: f64, rate_bound: f64) -> (&'static str, f64) {
        [
            ("drift", self.drift),
            ("amplitudes", control_bound * self.controls),
            ("rates", rate_bound * self.jumps),
        ]
        .into_iter()
        .fold(("drift", f64::NEG_INFINITY), |best, part| {
            if part.1 > best.1 { part } else { best }
        })
    }
}

impl HostGenerators {
    /// The generators of `system`.
    pub fn new(system: &System) -> Self {
        let basis = Basis::gell_mann(system.dim());
        let n = basis.size();
        let minus_i = Complex64::new(0.0, -1.0);
        let trace_free = |mut m: Vec<f64>| {
            m[..n].fill(0.0);
            m
        };
        let hamiltonian =
            |h: &CMatrix| trace_free(basis.superoperator(|x| h.commutator(x).scale(minus_i)));
        let dissipator = |l: &CMatrix| {
            let l_dag = l.adjoint();
            let decay = &l_dag * l;
            trace_free(basis.superoperator(|x| {
                &(&(l * x) * &l_dag) - &decay.anticommutator(x).scale(Complex64::new(0.5, 0.0))
            }))
        };
        Self {
            dim: system.dim(),
            parts: GeneratorParts {
                n,
                drift: hamiltonian(system.drift()),
                controls: system.controls().iter().map(hamiltonian).collect(),
                jumps: system.jumps().iter().map(dissipator).collect(),
            },
        }
    }

    /// The Hilbert-space dimension `d`.
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// The length `d^2` of a real state vector.
    pub fn size(&self) -> usize {
        self.dim * self.dim
    }

    /// The generator `M_H0 + sum_c u_c M_c + sum_k gamma_k M_k`, row-major `[d^2, d^2]`.
    ///
    /// # Panics
    /// When the numbers of amplitudes or rates do not match the system.
    pub fn generator(&self, amplitudes: &[f64], rates: &[f64]) -> Vec<f64> {
        assert_eq!(
            amplitudes.len(),
            self.controls(),
            "one amplitude per control"
        );
        assert_eq!(rates.len(), self.jumps(), "one rate per jump");
        self.parts.generator(amplitudes, rates)
    }

    /// The number of control channels `C`.
    pub fn controls(&self) -> usize {
        self.parts.controls.len()
    }

    /// The number of jump operators `K`.
    pub fn jumps(&self) -> usize {
        self.parts.jumps.len()
    }

    /// The generator's parts, for the exact solver's kernels.
    pub(crate) fn parts(&self) -> &GeneratorParts {
        &self.parts
    }

    pub(crate) fn norms(&self) -> GeneratorNorms {
        let n = self.size();
        let sum = |parts: &[Vec<f64>]| parts.iter().map(|m| real_norm_one(m, n)).sum();
        GeneratorNorms {
            drift: real_norm_one(&self.parts.drift, n),
            controls: sum(&self.parts.controls),
            jumps: sum(&self.parts.jumps),
        }
    }
}

/// The generators of one system on one device: a `[d^4, 1 + C + K]` tensor whose columns
/// are the flattened `M_H0`, `M_1 .. M_C`, `M_1 .. M_K`, so that the generators of every task
/// and segment come out of one matrix product with their coefficients `[1, u, gamma]`.
/// Cloning is cheap (the tensor is shared). Get one from the
/// [`OperatorCache`](crate::OperatorCache) to upload each system once.
#[derive(Clone, Debug)]
pub struct Generators<B: QuenchOps> {
    stack: Tensor<B, 2>,
    host: Arc<HostGenerators>,
    norms: GeneratorNorms,
}

impl<B: QuenchOps> Generators<B> {
    /// Builds the generators of `system` and uploads them to `device`, bypassing the cache.
    pub fn upload(system: &System, device: &B::Device) -> Self {
        Self::from_host(&HostGenerators::new(system), device)
    }

    /// Uploads generators built on the host.
    pub fn from_host(host: &HostGenerators, device: &B::Device) -> Self {
        let n = host.size();
        let parts: Vec<&Vec<f64>> = std::iter::once(&host.parts.drift)
            .chain(&host.parts.controls)
            .chain(&host.parts.jumps)
            .collect();
        let columns = parts.len();
        let mut data = vec![0.0; n * n * columns];
        for (column, part) in parts.iter().enumerate() {
            for (index, &value) in part.iter().enumerate() {
                data[index * columns + column] = value;
            }
        }
        Self {
            stack: float_tensor(data, [n * n, columns], device),
            host: Arc::new(host.clone()),
            norms: host.norms(),
        }
    }

    /// The Hilbert-space dimension `d`.
    pub fn dim(&self) -> usize {
        self.host.dim()
    }

    /// The length `d^2` of a real state vector.
    pub fn size(&self) -> usize {
        self.host.size()
    }

    /// The number of control channels `C`.
    pub fn controls(&self) -> usize {
        self.host.controls()
    }

    /// The number of jump operators `K`.
    pub fn jumps(&self) -> usize {
        self.host.jumps()
    }

    /// Device memory held by the generators, in bytes.
    pub fn bytes(&self) -> usize {
        self.stack.shape().num_elements() * self.stack.dtype().size()
    }

    /// The stacked generators `[d^4, 1 + C + K]`.
    pub(crate) fn stack(&self) -> Tensor<B, 2> {
        self.stack.clone()
    }

    pub(crate) fn norms(&self) -> GeneratorNorms {
        self.norms
    }

    /// The same generators in host memory, for host kernels.
    pub(crate) fn host(&self) -> &HostGenerators {
        &self.host
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::operators::{pauli_x, pauli_z};
    use crate::presets;
    use quench_support::stats::max_abs_difference;

    #[test]
    fn generators_match_the_lindbladian_applied_in_the_basis() {
        let system = presets::two_qubit();
        let host = HostGenerators::new(&system);
        let basis = Basis::gell_mann(4);
        let (u, g) = ([0.3, -1.2, 0.7, 0.1], [0.05, 0.2, 0.4, 0.01]);
        let m = host.generator(&u, &g);
        let h = system.hamiltonian(&u);
        let lindbladian = |x: &CMatrix| {
            let mut out = h.commutator(x).scale(Complex64::new(0.0, -1.0));
            for (l, &rate) in system.jumps().iter().zip(&g) {
                let decay = &l.adjoint() * l;
                let d = &(&(l * x) * &l.adjoint())
                    - &decay.anticommutator(x).scale(Complex64::new(0.5, 0.0));
                out = &out + &d.scale(Complex64::new(rate, 0.0));
            }
            out
        };
        let expected = basis.superoperator(lindbladian);
        let worst = max_abs_difference(&m, &expected);
        assert!(worst < 1e-13, "{worst}");
        assert!(m[..16].iter().all(|&x| x == 0.0));
    }

    #[test]
    fn norm_bound_adds_the_scaled_parts() {
        let system = System::new(pauli_z(), vec![pauli_x()], vec![pauli_z()]).unwrap();
        let norms = HostGenerators::new(&system).norms();
        // -i[Z, .] rotates X and Y into each other at rate 2; the Z dissipator damps X, Y at 2.
        assert_eq!(norms.bound(10.0, 0.5), 2.0 + 10.0 * 2.0 + 0.5 * 2.0);
    }
}
