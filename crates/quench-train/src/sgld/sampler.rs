//! The SGLD update with per-chain inverse temperature and step-size schedule, and the source
//! of its Gaussian noise.

use burn::tensor::backend::Backend;
use burn::tensor::{Distribution, Tensor, TensorData};
use quench_device::SeededGenerator;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rand_distr::StandardNormal;

/// Where the Langevin noise `xi` is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoiseSource {
    /// By the backend on its device, with no host work or copy per step.
    Device,
    /// On the host, one stream per chain, then copied to the device (the original's way).
    Host,
}

/// The generator of Langevin noise for a batch of chains.
#[derive(Debug, Clone)]
pub enum Noise {
    /// `Tensor::random` on the device, from the backend's generator seeded at creation and
    /// held by this run until it drops.
    Device(SeededGenerator),
    /// One host stream per chain, in chain order; a chain's noise is then the same whichever
    /// chains share its program.
    Host(Vec<StdRng>),
}

impl Noise {
    /// Noise from the backend's generator, which this seeds with `seed` and holds (other
    /// threads' seeded draws wait) until the noise drops. On burn-ndarray the generator is
    /// process-wide and is the host's `StdRng`, so a lone chain gets the same noise as
    /// [`Noise::host`] with the same seed.
    pub fn device<B: Backend>(seed: u64, device: &B::Device) -> Self {
        Self::Device(SeededGenerator::acquire::<B>(device, seed))
    }

    /// Host noise, chain `c` drawing from `StdRng::seed_from_u64(chain_seeds[c])`.
    pub fn host(chain_seeds: &[u64]) -> Self {
        Self::Host(
            chain_seeds
                .iter()
                .map(|&s| StdRng::seed_from_u64(s))
                .collect(),
        )
    }

    /// Standard normal noise `[chains, rows, cols]`.
    pub fn draw<B: Backend>(&mut self, dims: [usize; 3], device: &B::Device) -> Tensor<B, 3> {
        match self {
            Self::Device(_) => Tensor::random(dims, Distribution::Normal(0.0, 1.0), device),
            Self::Host(streams) => {
                let per_chain = dims[1] * dims[2];
                let values: Vec<f32> = streams
                    .iter_mut()
                    .take(dims[0])
                    .flat_map(|rng| (0..per_chain).map(|_| rng.sample::<f32, _>(StandardNormal)))
                    .collect();
                Tensor::from_data(TensorData::new(values, dims), device)
            }
        }
    }

    /// Keeps the first `chains` chains' streams (after the others left the program).
    pub fn retain(&mut self, chains: usize) {
        if let Self::Host(streams) = self {
            streams.truncate(chains);
        }
    }
}

/// The per-chain coefficients of every step in one epoch, each `[chains, 1, 1]`: the update is
/// `theta - drift (grad + theta / sigma^2) - noise xi`.
#[derive(Debug, Clone)]
pub struct StepScales<B: Backend> {
    /// `lr / 2` where `beta > 0`; 0 at `beta = 0` and for finished chains.
    pub drift: Tensor<B, 3>,
    /// `sqrt(lr / beta)` where `beta > 0`, `lr` at `beta = 0`; 0 for finished chains.
    pub noise: Tensor<B, 3>,
}

/// Each chain's inverse temperature, step-size schedule `lr_t = a0 (t + 1)^(-1/2)` and epoch
/// count, as `[chains, 1, 1]` tensors on the device.
#[derive(Debug, Clone)]
pub struct ChainSchedule<B: Backend> {
    a0: Tensor<B, 3>,
    /// Epoch counts; exact in f32 up to 2^24 epochs.
    epochs: Tensor<B, 3>,
    /// 1/2 where `beta > 0`, else 0.
    drift_per_lr: Tensor<B, 3>,
    /// `beta^(-1/2)` where `beta > 0`, else 0.
    noise_per_root_lr: Tensor<B, 3>,
    /// 1 where `beta = 0` (pure noise, `theta - lr xi`), else 0.
    noise_per_lr: Tensor<B, 3>,
}

impl<B: Backend> ChainSchedule<B> {
    /// The schedule of chains with inverse temperatures `beta` (0 for pure noise, else
    /// positive), initial step sizes `a0` and epoch counts `epochs`: one value per chain in
    /// each, the three of the same length.
    pub fn new(beta: &[f64], a0: &[f64], epochs: &[usize], device: &B::Device) -> Self {
        let column = |values: Vec<f64>| {
            let len = values.len();
            let values: Vec<f32> = values.into_iter().map(|v| v as f32).collect();
            Tensor::from_data(TensorData::new(values, [len, 1, 1]), device)
        };
        let hot = |b: f64| b > 0.0;
        Self {
            a0: column(a0.to_vec()),
            epochs: column(epochs.iter().map(|&e| e as f64).collect()),
            drift_per_lr: column(
                beta.iter()
                    .map(|&b| if hot(b) { 0.5 } else { 0.0 })
                    .collect(),
            ),
            noise_per_root_lr: column(
                beta.iter()
                    .map(|&b| if hot(b) { b.sqrt().recip() } else { 0.0 })
                    .collect(),
            ),
            noise_per_lr: column(
                beta.iter()
                    .map(|&b| if hot(b) { 0.0 } else { 1.0 })
                    .collect(),
            ),
        }
    }

    /// Chains in the schedule.
    pub fn chains(&self) -> usize {
        self.a0.dims()[0]
    }

    /// The step coefficients of epoch `epoch` (from 0); a chain whose epoch count is at most
    /// `epoch` gets zeros, so its steps leave it where it is.
    pub fn scales(&self, epoch: usize) -> StepScales<B> {
        let decay = ((epoch + 1) as f64).sqrt().recip();
        let active = self.epochs.clone().greater_elem(epoch as f64).float();
        let lr = self.a0.clone().mul_scalar(decay) * active;
        StepScales {
            drift: lr.clone() * self.drift_per_lr.clone(),
            noise: lr.clone().sqrt() * self.noise_per_root_lr.clone()
                + lr * self.noise_per_lr.clone(),
        }
    }

    /// Keeps the first `chains` chains.
    pub fn retain(&mut self, chains: usize) {
        for t in [
            &mut self.a0,
            &mut self.epochs,
            &mut self.drift_per_lr,
            &mut self.noise_per_root_lr,
            &mut self.noise_per_lr,
        ] {
            *t = t.clone().narrow(0, 0, chains);
        }
    }
}

/// Stochastic-gradient Langevin dynamics with a Gaussian prior `N(0, sigma^2 I)`:
/// `theta <- theta - (lr/2) (grad L + theta / sigma^2) - sqrt(lr / beta) xi`.
///
/// For `beta > 0` and small steps its stationary law is `exp(-beta (L + |theta|^2 / (2
/// sigma^2)))`, the Gibbs posterior of `L` under the prior `N(0, sigma^2 / beta)`; with the
/// workload's `sigma = 1000` the prior is flat at any `beta` here. At `beta = 0` the step is
/// pure noise, `theta - lr xi`, as in the original.
#[derive(Debug, Clone)]
pub struct Sgld {
    /// The prior's standard deviation `sigma`.
    pub prior_sigma: f64,
    /// Where `xi` comes from.
    pub noise: Noise,
}

impl Sgld {
    /// One step of every chain: `params` and `grads` in the same order, each `[chains, a, b]`,
    /// with this epoch's `scales`.
    pub fn step<B: Backend>(
        &mut self,
        params: Vec<Tensor<B, 3>>,
        grads: Vec<Tensor<B, 3>>,
        scales: &StepScales<B>,
    ) -> Vec<Tensor<B, 3>> {
        let inv_var = self.prior_sigma.powi(2).recip();
        params
            .into_iter()
            .zip(grads)
            .map(|(p, g)| {
                let xi = self.noise.draw::<B>(p.dims(), &p.device());
                let drift = (g + p.clone().mul_scalar(inv_var)) * scales.drift.clone();
                p - drift - xi * scales.noise.clone()
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::NdArray;
    use quench_device::readback::to_host_f32;

    type Cpu = NdArray<f32>;

    #[test]
    fn scales_follow_the_schedule_and_the_temperature() {
        let device = Default::default();
        let schedule =
            ChainSchedule::<Cpu>::new(&[0.0, 4.0, 100.0], &[0.5, 0.5, 0.1], &[3, 3, 1], &device);
        let s = schedule.scales(2);
        let lr = [0.5 / 3f64.sqrt(), 0.5 / 3f64.sqrt()];
        let drift = to_host_f32(s.drift);
        let noise = to_host_f32(s.noise);
        assert_eq!(drift[0], 0.0, "beta = 0 takes no gradient step");
        assert!(
            (f64::from(noise[0]) - lr[0]).abs() < 1e-7,
            "beta = 0: noise lr"
        );
        assert!((f64::from(drift[1]) - lr[1] / 2.0).abs() < 1e-7);
        assert!((f64::from(noise[1]) - (lr[1] / 4.0).sqrt()).abs() < 1e-7);
        assert_eq!(
            (drift[2], noise[2]),
            (0.0, 0.0),
            "the 1-epoch chain is done"
        );
        let first = schedule.scales(0);
        assert!((f64::from(to_host_f32(first.noise)[2]) - (0.1f64 / 100.0).sqrt()).abs() < 1e-7);
    }

    #[test]
    fn finished_chains_stay_put_and_host_noise_is_per_chain() {
        let device = Default::default();
        let schedule = ChainSchedule::<Cpu>::new(&[1.0, 1.0], &[0.1, 0.1], &[5, 1], &device);
        let mut sgld = Sgld {
            prior_sigma: 1.0,
            noise: Noise::host(&[7, 8]),
        };
        let p = Tensor::<Cpu, 3>::ones([2, 2, 3], &device);
        let g = Tensor::<Cpu, 3>::ones([2, 2, 3], &device);
        let out = to_host_f32(sgld.step(vec![p], vec![g], &schedule.scales(1)).remove(0));
        assert!(
            out[..6].iter().all(|&v| v != 1.0),
            "the running chain moves"
        );
        assert_eq!(&out[6..], &[1.0; 6], "the finished chain does not");

        let mut alone = Noise::host(&[8]);
        let mut pair = Noise::host(&[7, 8]);
        let a = to_host_f32(alone.draw::<Cpu>([1, 2, 3], &device));
        let b = to_host_f32(pair.draw::<Cpu>([2, 2, 3], &device));
        assert_eq!(
            a,
            b[6..],
            "chain 8's noise does not depend on its neighbours"
        );
    }

    #[test]
    fn a_noiseless_step_is_gradient_descent_on_loss_plus_prior() {
        let device = Default::default();
        // beta = 1e12 makes the noise scale sqrt(lr / beta) = 3e-7: negligible here.
        let schedule = ChainSchedule::<Cpu>::new(&[1e12], &[0.2], &[1], &device);
        let mut sgld = Sgld {
            prior_sigma: 2.0,
            noise: Noise::host(&[1]),
        };
        let p = Tensor::<Cpu, 3>::full([1, 1, 1], 3.0, &device);
        let g = Tensor::<Cpu, 3>::full([1, 1, 1], 1.0, &device);
        let out = to_host_f32(sgld.step(vec![p], vec![g], &schedule.scales(0)).remove(0))[0];
        let want = 3.0 - 0.1 * (1.0 + 3.0 / 4.0);
        assert!((f64::from(out) - want).abs() < 1e-5, "{out} vs {want}");
    }
}
