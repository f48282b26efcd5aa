//! Shared helpers of the integration tests: random pulses, tensors in the backend's own
//! float type, and the f64 reference for a whole batch.

#![allow(dead_code)]

use burn::tensor::{Element, Tensor, TensorData, backend::Backend};
use quench_lindblad::reference::ReferenceChannel;
use quench_lindblad::{Basis, CMatrix, System};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Random tasks: amplitudes uniform in `[-amplitude, amplitude]` and rates in `[0, rate]`.
pub struct Pulses {
    pub amplitudes: Vec<Vec<Vec<f64>>>,
    pub rates: Vec<Vec<f64>>,
}

impl Pulses {
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

    pub fn tasks(&self) -> usize {
        self.rates.len()
    }

    pub fn amplitude_tensor<B: Backend>(&self, device: &B::Device) -> Tensor<B, 3> {
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

    pub fn rate_tensor<B: Backend>(&self, device: &B::Device) -> Tensor<B, 2> {
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
pub fn tensor<B: Backend, const D: usize>(
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
pub fn initial_states<B: Backend>(
    basis: &Basis,
    rho: &CMatrix,
    tasks: usize,
    device: &B::Device,
) -> Tensor<B, 2> {
    tensor(
        basis.coordinates(rho).repeat(tasks),
        [tasks, basis.size()],
        device,
    )
}

/// The values of a tensor as f64.
pub fn values<B: Backend, const D: usize>(t: Tensor<B, D>) -> Vec<f64> {
    t.into_data().convert::<f64>().to_vec::<f64>().unwrap()
}

/// The largest `|a_ij - b_ij|` between the density matrices of real state vectors `[tasks, d^2]`
/// and reference density matrices.
pub fn max_density_error(basis: &Basis, states: &[f64], reference: &[CMatrix]) -> f64 {
    states
        .chunks(basis.size())
        .zip(reference)
        .map(|(s, r)| basis.operator(s).max_abs_diff(r))
        .fold(0.0, f64::max)
}

/// The smallest eigenvalue of a Hermitian matrix: cyclic Jacobi rotations on its real
/// symmetric embedding `[[Re, -Im], [Im, Re]]`, which has the same eigenvalues, each twice.
pub fn min_eigenvalue(h: &CMatrix) -> f64 {
    let d = h.dim();
    let n = 2 * d;
    let mut a = vec![0.0; n * n];
    for r in 0..d {
        for c in 0..d {
            let z = h.get(r, c);
            a[r * n + c] = z.re;
            a[(r + d) * n + c + d] = z.re;
            a[r * n + c + d] = -z.im;
            a[(r + d) * n + c] = z.im;
        }
    }
    for _ in 0..50 {
        for p in 0..n {
            for q in p + 1..n {
                let apq = a[p * n + q];
                if apq.abs() < 1e-300 {
                    continue;
                }
                let theta = (a[q * n + q] - a[p * n + p]) / (2.0 * apq);
                let t = theta.signum() / (theta.abs() + (theta * theta + 1.0).sqrt());
                let (c, s) = (1.0 / (t * t + 1.0).sqrt(), t / (t * t + 1.0).sqrt());
                for k in 0..n {
                    let (akp, akq) = (a[k * n + p], a[k * n + q]);
                    a[k * n + p] = c * akp - s * akq;
                    a[k * n + q] = s * akp + c * akq;
                }
                for k in 0..n {
                    let (apk, aqk) = (a[p * n + k], a[q * n + k]);
                    a[p * n + k] = c * apk - s * aqk;
                    a[q * n + k] = s * apk + c * aqk;
                }
            }
        }
    }
    (0..n).map(|i| a[i * n + i]).fold(f64::INFINITY, f64::min)
}
