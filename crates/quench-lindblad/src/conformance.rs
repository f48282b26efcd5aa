//! Conformance of the solvers with the f64 reference on random pulses: what the accuracy tests
//! assert and what `benchmark verify` measures on a user's device, written once.

use burn::tensor::{Element, Tensor, TensorData};
use quench_kernels::QuenchOps;
use quench_support::stats::max_or_nan;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::reference::ReferenceChannel;
use crate::{Basis, Batch, CMatrix, Generators, LindbladError, Output, Solver, System, operators};

/// Random tasks: amplitudes uniform in `[-amplitude, amplitude]` and rates in `[0, rate]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Pulses {
    /// `[tasks][segments][controls]`.
    pub amplitudes: Vec<Vec<Vec<f64>>>,
    /// `[tasks][jumps]`.
    pub rates: Vec<Vec<f64>>,
}

impl Pulses {
    /// `tasks` tasks of `segments` segments on `system`, drawn from `seed`.
    pub fn random(
        system: &System,
        tasks: usize,
        segments: usize,
        amplitude: f64,
        rate: f64,
        seed: u64,
    ) -> Self {
        let mut rng = StdRng::seed_from_u64(seed);
        let controls = system.controls().len();
        let jumps = system.jumps().len();
        let amplitudes = (0..tasks)
            .map(|_| {
                (0..segments)
                    .map(|_| {
                        (0..controls)
                            .map(|_| rng.random_range(-amplitude..=amplitude))
                            .collect()
                    })
                    .collect()
            })
            .collect();
        let rates = (0..tasks)
            .map(|_| (0..jumps).map(|_| rng.random_range(0.0..=rate)).collect())
            .collect();
        Self { amplitudes, rates }
    }

    /// Number of tasks.
    pub fn tasks(&self) -> usize {
        self.rates.len()
    }

    /// The amplitudes as `[tasks, segments, controls]`.
    pub fn amplitude_tensor<B: QuenchOps>(&self, device: &B::Device) -> Tensor<B, 3> {
        let tasks = self.tasks();
        let segments = self.amplitudes[0].len();
        let controls = self.amplitudes[0][0].len();
        let data: Vec<f64> = self
            .amplitudes
            .iter()
            .flatten()
            .flatten()
            .copied()
            .collect();
        tensor(data, [tasks, segments, controls], device)
    }

    /// The rates as `[tasks, jumps]`.
    pub fn rate_tensor<B: QuenchOps>(&self, device: &B::Device) -> Tensor<B, 2> {
        let data: Vec<f64> = self.rates.iter().flatten().copied().collect();
        tensor(data, [self.tasks(), self.rates[0].len()], device)
    }

    /// The reference channel of task `t`.
    pub fn channel(&self, system: &System, t_total: f64, t: usize) -> ReferenceChannel {
        ReferenceChannel::new(system, t_total, &self.amplitudes[t], &self.rates[t])
    }
}

/// A tensor in the backend's own float type (NdArray<f32> and NdArray<f64> share a device
/// whose default dtype is fixed by whichever touches it first).
pub fn tensor<B: QuenchOps, const D: usize>(
    data: Vec<f64>,
    shape: [usize; D],
    device: &B::Device,
) -> Tensor<B, D> {
    Tensor::from_data(
        TensorData::new(data, shape),
        (device, <B::FloatElem as Element>::dtype()),
    )
}

/// The same initial state for every task, `[tasks, d^2]`.
///
/// # Errors
/// When `rho` is not of the basis's dimension.
pub fn initial_states<B: QuenchOps>(
    basis: &Basis,
    rho: &CMatrix,
    tasks: usize,
    device: &B::Device,
) -> Result<Tensor<B, 2>, LindbladError> {
    Ok(tensor(
        basis.coordinates(rho)?.repeat(tasks),
        [tasks, basis.size()],
        device,
    ))
}

/// The largest `|a_ij - b_ij|` between the density matrices of real state vectors `[tasks, d^2]`
/// and reference density matrices; NaN if any entry is, infinite if the counts disagree.
pub fn max_density_error(basis: &Basis, states: &[f64], reference: &[CMatrix]) -> f64 {
    if states.len() != reference.len() * basis.size() {
        return f64::INFINITY;
    }
    max_or_nan(
        states
            .chunks(basis.size())
            .zip(reference)
            // Every chunk has d^2 entries (counted above), so `operator` takes it.
            .map(|(s, r)| {
                basis
                    .operator(s)
                    .map_or(f64::NAN, |rho| rho.max_abs_diff(r))
            }),
    )
}

/// The largest density-matrix element error of `solver`'s final states against the f64
/// reference, for `pulses` over `t_total` on `system`, every task starting in `|0><0|`.
pub fn state_error<B: QuenchOps>(
    system: &System,
    solver: Solver,
    pulses: &Pulses,
    t_total: f64,
    device: &B::Device,
) -> Result<f64, LindbladError> {
    let basis = Basis::gell_mann(system.dim());
    let rho0 = operators::basis_state(system.dim(), 0);
    let generators = Generators::<B>::upload(system, device);
    let batch = Batch {
        t_total,
        amplitudes: pulses.amplitude_tensor(device),
        rates: pulses.rate_tensor(device),
        initial: initial_states(&basis, &rho0, pulses.tasks(), device)?,
    };
    let states = solver.evolve(&generators, batch, Output::States)?.states;
    let states: Vec<f64> = states
        .into_data()
        .convert::<f64>()
        .to_vec()
        .unwrap_or_else(|_| unreachable!("converted to f64 just above"));
    let reference: Vec<CMatrix> = (0..pulses.tasks())
        .map(|t| pulses.channel(system, t_total, t).apply(&rho0))
        .collect();
    Ok(max_density_error(&basis, &states, &reference))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_broken_result_never_looks_exact() {
        let basis = Basis::gell_mann(2);
        let rho = operators::basis_state(2, 0);
        let exact = basis.coordinates(&rho).unwrap();
        assert!(max_density_error(&basis, &exact, std::slice::from_ref(&rho)) < 1e-12);
        let mut nan = exact.clone();
        nan[1] = f64::NAN;
        assert!(max_density_error(&basis, &nan, std::slice::from_ref(&rho)).is_nan());
        assert_eq!(max_density_error(&basis, &[], &[rho]), f64::INFINITY);
    }
}
