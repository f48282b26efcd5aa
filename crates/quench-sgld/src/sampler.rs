//! The SGLD update with per-chain inverse temperature and step-size schedule, and the source
//! of its Gaussian noise.

use burn::tensor::Tensor;
use quench_kernels::QuenchOps;
use quench_kernels::ops::random::NormalStreams;
use quench_kernels::ops::sgld::langevin_update;
use quench_kernels::readback::float_tensor;
use quench_kernels::views::ReshapeTo;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rand_distr::StandardNormal;

/// Where the Langevin noise `xi` is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoiseSource {
    /// Where the step runs, from counter-based streams (`quench_kernels::threefry`), one per
    /// chain: host code on the CPU backend, fused tensor ops on a GPU, with no per-step copy.
    Device,
    /// On the host, one `StdRng` stream per chain, then copied to the device (the original's
    /// way).
    Host,
}

/// The generator of Langevin noise for a batch of chains. Either way a chain's noise comes
/// from its own seed, so it is the same whichever chains share its program.
#[derive(Debug, Clone)]
pub enum Noise {
    /// Counter-based Threefry streams, one per chain, one draw per step.
    Counter(NormalStreams),
    /// One host `StdRng` stream per chain, drawn chain after chain for each parameter.
    Host(Vec<StdRng>),
}

impl Noise {
    /// Counter-based noise, chain `c` keyed by `chain_seeds[c]`.
    pub fn counter(chain_seeds: &[u64]) -> Self {
        Self::Counter(NormalStreams::new(chain_seeds))
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

    /// Standard normal noise for one step of parameters shaped `dims` (each `[chains, a, b]`).
    /// Counter noise is one draw of `sum a b` values per chain, split in parameter order.
    pub fn draw_step<B: QuenchOps>(
        &mut self,
        dims: &[[usize; 3]],
        device: &B::Device,
    ) -> Vec<Tensor<B, 3>> {
        match self {
            Self::Counter(streams) => {
                let total = dims.iter().map(|d| d[1] * d[2]).sum();
                let all = streams.next::<B>(total, device);
                let mut offset = 0;
                dims.iter()
                    .map(|&d| {
                        let part = all.clone().narrow(1, offset, d[1] * d[2]).reshape_to(d);
                        offset += d[1] * d[2];
                        part
                    })
                    .collect()
            }
            Self::Host(streams) => dims
                .iter()
                .map(|&d| {
                    let per_chain = d[1] * d[2];
                    let values: Vec<f32> = streams
                        .iter_mut()
                        .take(d[0])
                        .flat_map(|rng| {
                            (0..per_chain).map(|_| rng.sample::<f32, _>(StandardNormal))
                        })
                        .collect();
                    float_tensor(values, d, device)
                })
                .collect(),
        }
    }

    /// Keeps the first `chains` chains' streams (after the others left the program).
    pub fn retain(&mut self, chains: usize) {
        match self {
            Self::Counter(streams) => streams.retain(chains),
            Self::Host(streams) => streams.truncate(chains),
        }
    }
}

/// The per-chain coefficients of every step in one epoch: the update is
/// `theta - drift (grad + theta / sigma^2) - noise xi`.
#[derive(Debug, Clone)]
pub struct StepScales<B: QuenchOps> {
    /// `lr / 2` where `beta > 0`; 0 at `beta = 0` and for finished chains; `[chains, 1, 1]`.
    pub drift: Tensor<B, 3>,
    /// `sqrt(lr / beta)` where `beta > 0`, `lr` at `beta = 0`; 0 for finished chains;
    /// `[chains, 1, 1]`.
    pub noise: Tensor<B, 3>,
}

/// Each chain's inverse temperature, step-size schedule `lr_t = a0 (t + 1)^(-1/2)` and epoch
/// count.
#[derive(Debug, Clone, PartialEq)]
pub struct ChainSchedule {
    beta: Vec<f64>,
    a0: Vec<f64>,
    epochs: Vec<usize>,
}

impl ChainSchedule {
    /// The schedule of chains with inverse temperatures `beta` (0 for pure noise, else
    /// positive), initial step sizes `a0` and epoch counts `epochs`: one value per chain in
    /// each, the three of the same length.
    pub fn new(beta: &[f64], a0: &[f64], epochs: &[usize]) -> Self {
        Self {
            beta: beta.to_vec(),
            a0: a0.to_vec(),
            epochs: epochs.to_vec(),
        }
    }

    /// Chains in the schedule.
    pub fn chains(&self) -> usize {
        self.a0.len()
    }

    /// The step coefficients of epoch `epoch` (from 0) on `device`; a chain whose epoch count
    /// is at most `epoch` gets zeros, so its steps leave it where it is.
    pub fn scales<B: QuenchOps>(&self, epoch: usize, device: &B::Device) -> StepScales<B> {
        let decay = ((epoch + 1) as f64).sqrt().recip();
        let (drift, noise): (Vec<f32>, Vec<f32>) = (0..self.chains())
            .map(|c| {
                let lr = if self.epochs[c] > epoch {
                    self.a0[c] * decay
                } else {
                    0.0
                };
                let beta = self.beta[c];
                if beta > 0.0 {
                    ((lr / 2.0) as f32, (lr / beta).sqrt() as f32)
                } else {
                    (0.0, lr as f32)
                }
            })
            .unzip();
        let column = |values: &[f32]| float_tensor(values.to_vec(), [values.len(), 1, 1], device);
        StepScales {
            drift: column(&drift),
            noise: column(&noise),
        }
    }

    /// Keeps the first `chains` chains.
    pub fn retain(&mut self, chains: usize) {
        self.beta.truncate(chains);
        self.a0.truncate(chains);
        self.epochs.truncate(chains);
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
    /// The prior's precision `1 / sigma^2`.
    pub fn prior_precision(&self) -> f64 {
        self.prior_sigma.powi(2).recip()
    }

    /// One step of every chain: `params` and `grads` in the same order, each `[chains, a, b]`,
    /// with this epoch's `scales`.
    pub fn step<B: QuenchOps>(
        &mut self,
        params: Vec<Tensor<B, 3>>,
        grads: Vec<Tensor<B, 3>>,
        scales: &StepScales<B>,
    ) -> Vec<Tensor<B, 3>> {
        let inv_var = self.prior_precision();
        let Some(device) = params.first().map(|p| p.device()) else {
            return params;
        };
        let dims: Vec<[usize; 3]> = params.iter().map(|p| p.dims()).collect();
        let noise = self.noise.draw_step::<B>(&dims, &device);
        params
            .into_iter()
            .zip(grads)
            .zip(noise)
            .map(|((p, g), xi)| {
                let (drift, noise) = (scales.drift.clone(), scales.noise.clone());
                langevin_update(p, g, xi, drift, noise, inv_var)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::NdArray;
    use quench_kernels::readback::to_host_f32;

    type Cpu = NdArray<f32>;

    #[test]
    fn scales_follow_the_schedule_and_the_temperature() {
        let device = Default::default();
        let schedule = ChainSchedule::new(&[0.0, 4.0, 100.0], &[0.5, 0.5, 0.1], &[3, 3, 1]);
        let s = schedule.scales::<Cpu>(2, &device);
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
        let first = schedule.scales::<Cpu>(0, &device);
        assert!((f64::from(to_host_f32(first.noise)[2]) - (0.1f64 / 100.0).sqrt()).abs() < 1e-7);
    }

    #[test]
    fn finished_chains_stay_put_and_host_noise_is_per_chain() {
        let device = Default::default();
        let schedule = ChainSchedule::new(&[1.0, 1.0], &[0.1, 0.1], &[5, 1]);
        let mut sgld = Sgld {
            prior_sigma: 1.0,
            noise: Noise::host(&[7, 8]),
        };
        let p = Tensor::<Cpu, 3>::ones([2, 2, 3], &device);
        let g = Tensor::<Cpu, 3>::ones([2, 2, 3], &device);
        let out = to_host_f32(
            sgld.step(vec![p], vec![g], &schedule.scales(1, &device))
                .remove(0),
        );
        assert!(
            out[..6].iter().all(|&v| v != 1.0),
            "the running chain moves"
        );
        assert_eq!(&out[6..], &[1.0; 6], "the finished chain does not");

        for (mut alone, mut pair) in [
            (Noise::host(&[8]), Noise::host(&[7, 8])),
            (Noise::counter(&[8]), Noise::counter(&[7, 8])),
        ] {
            let draw = |noise: &mut Noise, chains| {
                let parts = noise.draw_step::<Cpu>(&[[chains, 2, 3], [chains, 1, 3]], &device);
                parts.into_iter().map(to_host_f32).collect::<Vec<_>>()
            };
            let (a, b) = (draw(&mut alone, 1), draw(&mut pair, 2));
            assert_eq!(
                a[0],
                b[0][6..],
                "chain 8's noise does not depend on its neighbours"
            );
            assert_eq!(a[1], b[1][3..]);
            assert_ne!(a[0][..3], a[1][..], "each parameter gets its own values");
        }
    }

    #[test]
    fn a_noiseless_step_is_gradient_descent_on_loss_plus_prior() {
        let device = Default::default();
        // beta = 1e12 makes the noise scale sqrt(lr / beta) = 3e-7: negligible here.
        let schedule = ChainSchedule::new(&[1e12], &[0.2], &[1]);
        let mut sgld = Sgld {
            prior_sigma: 2.0,
            noise: Noise::host(&[1]),
        };
        let p = Tensor::<Cpu, 3>::full([1, 1, 1], 3.0, &device);
        let g = Tensor::<Cpu, 3>::full([1, 1, 1], 1.0, &device);
        let out = to_host_f32(
            sgld.step(vec![p], vec![g], &schedule.scales(0, &device))
                .remove(0),
        )[0];
        let want = 3.0 - 0.1 * (1.0 + 3.0 / 4.0);
        assert!((f64::from(out) - want).abs() < 1e-5, "{out} vs {want}");
    }
}
