//! The SGLD sampler against posteriors known exactly: a Gaussian linear model (closed form),
//! the two-mode mixture of Welling & Teh (2011) (its posterior on a fine grid), and pure noise
//! at beta = 0.
//!
//! Every test runs thousands of independent chains as one batch, with stochastic minibatch
//! gradients and the workload's decaying step size, and compares each chain's final state
//! (one independent sample per chain) with the exact answer. Tolerances are about 4.5
//! standard errors of the estimate plus the sampler's known bias, so a correct sampler fails
//! with probability around 1e-5 per comparison while a wrong temperature, a missing prior term
//! or a chain stuck in one mode fails by many standard errors.

use quench_kernels::QuenchBackend;
use std::sync::Arc;

use crate::{ChainSchedule, Noise, Sgld};
use burn::tensor::{Tensor, TensorData};
use quench_data::{Dataset, Loader, LoaderConfig, Mode, TwoModeMixture};
use quench_kernels::readback::to_host_f32;
use quench_kernels::reductions::Reduce;
use quench_train::params::{gradients, require_grad};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rand_distr::StandardNormal;

/// Chains per temperature: standard errors of 3.2 % of a standard deviation for means and
/// 4.5 % for (Gaussian) variances.
const CHAINS: usize = 1_000;

/// A sampling run: `chains` chains of `dim` parameters (`[chains, dim, 1]`), minibatches of
/// `batch` rows of `data` per step, each chain with its own order.
struct Run<'a> {
    data: Arc<Dataset>,
    batch: usize,
    betas: &'a [f64],
    a0: f64,
    epochs: usize,
    prior_sigma: f64,
    noise: Noise,
}

impl Run<'_> {
    /// Runs on `device` from `start` (`[chains][dim]`) with the minibatch loss
    /// `loss(theta, rows)`, which maps `[chains, dim, 1]` and `[chains, batch, width]` to
    /// per-chain losses `[chains, 1, 1]`; returns every chain's final parameters.
    fn sample<B: QuenchBackend>(
        self,
        device: &B::Device,
        start: Vec<Vec<f64>>,
        loss: impl Fn(Tensor<B, 3>, Tensor<B, 3>) -> Tensor<B, 3>,
    ) -> Vec<Vec<f64>> {
        let (chains, dim) = (start.len(), start[0].len());
        let flat: Vec<f32> = start.iter().flatten().map(|&v| v as f32).collect();
        let mut theta = Tensor::<B::InnerBackend, 3>::from_data(
            TensorData::new(flat, [chains, dim, 1]),
            device,
        );
        let schedule = ChainSchedule::new(
            self.betas,
            &vec![self.a0; chains],
            &vec![self.epochs; chains],
        );
        let mut sgld = Sgld {
            prior_sigma: self.prior_sigma,
            noise: self.noise,
        };
        let seeds: Vec<u64> = (0..chains as u64).collect();
        let config = LoaderConfig {
            batch_size: self.batch,
            shuffle: true,
            drop_last: true,
            mode: Mode::Streaming {
                num_workers: 0,
                prefetch: 1,
                staging: false,
            },
        };
        let mut loader =
            Loader::<B::InnerBackend>::new(vec![self.data], &seeds, &config, device).unwrap();
        for epoch in 0..self.epochs {
            let scales = schedule.scales::<B::InnerBackend>(epoch, device);
            for batch in loader.epoch(epoch as u64) {
                let leaf = require_grad::<B>(vec![theta.clone()]);
                let total = loss(leaf[0].clone(), Tensor::from_inner(batch.features)).sum_all();
                let grads = gradients(&leaf, &total.backward());
                theta = sgld.step(vec![theta], grads, &scales).remove(0);
            }
        }
        to_host_f32(theta)
            .chunks(dim)
            .map(|c| c.iter().map(|&v| f64::from(v)).collect())
            .collect()
    }
}

/// Sample mean and (n - 1) variance of coordinate `i`.
fn moments(samples: &[Vec<f64>], i: usize) -> (f64, f64) {
    let n = samples.len() as f64;
    let mean = samples.iter().map(|s| s[i]).sum::<f64>() / n;
    let var = samples.iter().map(|s| (s[i] - mean).powi(2)).sum::<f64>() / (n - 1.0);
    (mean, var)
}

/// Sample covariance of coordinates 0 and 1.
fn covariance(samples: &[Vec<f64>]) -> f64 {
    let n = samples.len() as f64;
    let (m0, m1) = (moments(samples, 0).0, moments(samples, 1).0);
    samples
        .iter()
        .map(|s| (s[0] - m0) * (s[1] - m1))
        .sum::<f64>()
        / (n - 1.0)
}

/// `y = x . w + e` with `x ~ N(0, I_2)`, `e ~ N(0, 1)`: features `[x1, x2, y]` (the loader
/// serves features; the labels are unused).
fn regression_data(n: usize, w: [f64; 2], seed: u64) -> Dataset {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut features = Vec::with_capacity(3 * n);
    for _ in 0..n {
        let x: [f64; 2] = [rng.sample(StandardNormal), rng.sample(StandardNormal)];
        let e: f64 = rng.sample(StandardNormal);
        features.extend([x[0], x[1], x[0] * w[0] + x[1] * w[1] + e].map(|v| v as f32));
    }
    Dataset::new(features, vec![0; n], vec![3]).unwrap()
}

quench_kernels::device_test! {
    fn gaussian_linear_model_matches_its_exact_posterior_at_two_temperatures<B>(device) {
        let (n, batch, sigma) = (20, 10, 0.5);
        let data = regression_data(n, [1.0, -0.5], 3);
        // Exact: the update samples exp(-beta (L + |theta|^2 / (2 sigma^2))) with L the negative
        // log-likelihood, a Gaussian of precision beta A, A = X'X + I / sigma^2, and mean A^-1 X'y
        // at every beta.
        let (mut a, mut xty) = (
            [[1.0 / (sigma * sigma), 0.0], [0.0, 1.0 / (sigma * sigma)]],
            [0.0; 2],
        );
        for row in data.features().chunks(3) {
            let (x, y) = ([f64::from(row[0]), f64::from(row[1])], f64::from(row[2]));
            for i in 0..2 {
                xty[i] += x[i] * y;
                for j in 0..2 {
                    a[i][j] += x[i] * x[j];
                }
            }
        }
        let det = a[0][0] * a[1][1] - a[0][1] * a[1][0];
        let inv = [
            [a[1][1] / det, -a[0][1] / det],
            [-a[1][0] / det, a[0][0] / det],
        ];
        let mean = [0, 1].map(|i| inv[i][0] * xty[0] + inv[i][1] * xty[1]);

        let betas: Vec<f64> = [1.0, 4.0].iter().flat_map(|&b| vec![b; CHAINS]).collect();
        let mut rng = StdRng::seed_from_u64(11);
        let start = (0..2 * CHAINS)
            .map(|_| {
                (0..2)
                    .map(|_| rng.sample::<f64, _>(StandardNormal))
                    .collect()
            })
            .collect();
        // a0 = 0.02: lr * (largest eigenvalue of A, about 30) starts at 0.6 and ends at 0.013
        // after 2,000 epochs of 2 steps, so the discretisation and minibatch-noise biases of the
        // variance end near 1 %; the summed step sizes make over 20 relaxation times.
        let run = Run {
            data: Arc::new(data),
            batch,
            betas: &betas,
            a0: 0.02,
            epochs: 2_000,
            prior_sigma: sigma,
            noise: Noise::counter(&(0..2 * CHAINS as u64).collect::<Vec<_>>()),
        };
        let scale = n as f64 / batch as f64;
        let samples = run.sample::<B>(device, start, |theta, rows| {
            // x . theta as a broadcast product: a batched matmul of 2,000 tiny matrices costs
            // more in per-matrix overhead than the whole test's arithmetic.
            let x = rows.clone().narrow(2, 0, 2);
            let y = rows.narrow(2, 2, 1);
            let prediction = (x * theta.swap_dims(1, 2)).sum_along(2);
            (prediction - y)
                .powi_scalar(2)
                .sum_along(1)
                .mul_scalar(scale / 2.0)
        });

        for (k, beta) in [1.0, 4.0].into_iter().enumerate() {
            let group = &samples[k * CHAINS..(k + 1) * CHAINS];
            let cov = inv.map(|row| row.map(|v| v / beta));
            for i in 0..2 {
                let (m, v) = moments(group, i);
                let se = (cov[i][i] / CHAINS as f64).sqrt();
                assert!(
                    (m - mean[i]).abs() < 4.5 * se,
                    "beta {beta} mean {i}: {m} vs {}",
                    mean[i]
                );
                // 4.5 standard errors of a variance (4.5 % each) plus 1.5 % of bias.
                let rel = v / cov[i][i] - 1.0;
                assert!(
                    rel.abs() < 0.22,
                    "beta {beta} variance {i}: {v} vs {}",
                    cov[i][i]
                );
            }
            let c = covariance(group);
            let se = ((cov[0][0] * cov[1][1] + cov[0][1].powi(2)) / CHAINS as f64).sqrt();
            assert!(
                (c - cov[0][1]).abs() < 4.5 * se + 0.015 * cov[0][1].abs(),
                "beta {beta} cov {c} vs {}",
                cov[0][1]
            );
        }
    }

    fn welling_teh_mixture_visits_both_modes_in_proportion<B>(device) {
        let mixture = TwoModeMixture::default();
        // Seed 0 gives the paper's picture: two modes, near (0, 1) and (1, -1), 1.2 nats above the
        // saddle between them.
        let data = mixture.sample(100, 0);
        let x: Vec<f32> = data.features().to_vec();

        // Exact posterior on a 0.02 grid over [-4, 4]^2, which holds all but a negligible tail;
        // the posterior's spread (standard deviations above 0.4) makes the grid's error negligible.
        let h = 0.02;
        let grid: Vec<([f64; 2], f64)> = (0..=400)
            .flat_map(|i| {
                (0..=400).map(move |j| [-4.0 + h * f64::from(i), -4.0 + h * f64::from(j)])
            })
            .map(|t| (t, mixture.log_posterior(&x, t)))
            .collect();
        let top = grid.iter().map(|g| g.1).fold(f64::MIN, f64::max);
        let weights: Vec<f64> = grid.iter().map(|g| (g.1 - top).exp()).collect();
        let z: f64 = weights.iter().sum();
        let expect = |f: &dyn Fn([f64; 2]) -> f64| {
            grid.iter()
                .zip(&weights)
                .map(|(g, w)| w * f(g.0))
                .sum::<f64>()
                / z
        };
        let exact_mean = [expect(&|t| t[0]), expect(&|t| t[1])];
        let exact_var = [0, 1].map(|i| expect(&|t| t[i] * t[i]) - exact_mean[i].powi(2));
        let upper_mass = expect(&|t| f64::from(u8::from(t[1] > 0.0)));

        // The whole log posterior is the loss (minibatch likelihood scaled by n / batch, plus the
        // paper's prior N(0, 10) x N(0, 1)); the sampler's own prior is made flat.
        let (n, batch) = (data.len(), 20);
        let scale = n as f64 / batch as f64;
        // Every chain starts at the upper mode: the lower mode's mass can only come from chains
        // crossing the saddle.
        let start = vec![vec![0.0, 1.0]; CHAINS];
        let run = Run {
            data: Arc::new(data),
            batch,
            betas: &[1.0; CHAINS],
            // Curvature up to about 50: lr * 50 goes from 2.5 to 0.05 over 2,500 epochs of 5
            // steps; minibatch noise then inflates variances by about 5 %. The summed step sizes,
            // 25 time units, let the chains cross the saddle often enough to share out the mass.
            a0: 0.05,
            epochs: 2_500,
            prior_sigma: 1e6,
            noise: Noise::host(&(0..CHAINS as u64).collect::<Vec<_>>()),
        };
        let prior = mixture.prior_var;
        let sigma_x2 = mixture.sigma_x2;
        let samples = run.sample::<B>(device, start, |theta, rows| {
            let t1 = theta.clone().narrow(1, 0, 1);
            let t2 = theta.narrow(1, 1, 1);
            // ln(e^a + e^b) = a + ln(1 + e^(b - a)) with a, b the two components' exponents:
            // fewer operations than a log-sum-exp, and b - a stays small on this data.
            let d = rows - t1.clone();
            let a = d.clone().powi_scalar(2).div_scalar(-2.0 * sigma_x2);
            let b_minus_a = (d.mul_scalar(2.0) - t2.clone()) * t2.clone() / (2.0 * sigma_x2);
            let log_lik = a + b_minus_a.exp().log1p();
            let log_prior = t1.powi_scalar(2).div_scalar(-2.0 * prior[0])
                + t2.powi_scalar(2).div_scalar(-2.0 * prior[1]);
            (log_lik.sum_along(1).mul_scalar(scale) + log_prior).neg()
        });

        // Tolerances: 4.5 standard errors plus two biases. Chains start in the upper mode, and
        // the surplus there decays as exp(-0.14 t) over the 25 time units (summed step sizes) of
        // the run, leaving about 0.015 of the mass, which shifts each mean by that much times the
        // distance between the modes (about 1 in theta1, 2 in theta2); minibatch noise inflates
        // variances by about 5 %.
        let upper = samples.iter().filter(|s| s[1] > 0.0).count() as f64 / CHAINS as f64;
        let mass_se = (upper_mass * (1.0 - upper_mass) / CHAINS as f64).sqrt();
        assert!(
            (upper - upper_mass).abs() < 4.5 * mass_se + 0.015,
            "upper mode mass {upper} vs {upper_mass}"
        );
        for (i, separation) in [1.0, 2.0].into_iter().enumerate() {
            let (m, v) = moments(&samples, i);
            let se = (exact_var[i] / CHAINS as f64).sqrt();
            assert!(
                (m - exact_mean[i]).abs() < 4.5 * se + 0.015 * separation,
                "mean {i}: {m} vs {}",
                exact_mean[i]
            );
            // theta2 is bimodal (+-1), so its variance (1.5) is mostly the modes' separation: a
            // sampler stuck in one mode would give about 0.3.
            let rel = v / exact_var[i] - 1.0;
            assert!(rel.abs() < 0.25, "variance {i}: {v} vs {}", exact_var[i]);
        }
    }

    fn beta_zero_is_pure_noise_that_ignores_the_gradient<B>(device) {
        let (a0, epochs, steps) = (0.3, 50, 4);
        let schedule = ChainSchedule::new(&[0.0; CHAINS], &[a0; CHAINS], &[epochs; CHAINS]);
        let mut sgld = Sgld {
            prior_sigma: 0.1,
            noise: Noise::host(&(0..CHAINS as u64).collect::<Vec<_>>()),
        };
        let mut theta = Tensor::<B::InnerBackend, 3>::ones([CHAINS, 1, 1], device);
        for epoch in 0..epochs {
            let scales = schedule.scales::<B::InnerBackend>(epoch, device);
            for _ in 0..steps {
                // A strong pull towards -5 that a gradient step would follow.
                let grad = (theta.clone() + 5.0).mul_scalar(100.0);
                theta = sgld.step(vec![theta], vec![grad], &scales).remove(0);
            }
        }
        let samples: Vec<Vec<f64>> = to_host_f32(theta)
            .into_iter()
            .map(|v| vec![f64::from(v)])
            .collect();
        // theta - lr xi: the start plus a centred Gaussian of variance steps * sum_t lr_t^2.
        let var = steps as f64 * (0..epochs).map(|t| a0 * a0 / (t + 1) as f64).sum::<f64>();
        let (m, v) = moments(&samples, 0);
        assert!(
            (m - 1.0).abs() < 4.5 * (var / CHAINS as f64).sqrt(),
            "mean {m}"
        );
        assert!((v / var - 1.0).abs() < 0.15, "variance {v} vs {var}");
    }
}

quench_kernels::device_test! {
    fn zz_profile<B>(device) {
        use std::time::Instant;
        let data = Arc::new(regression_data(20, [1.0, -0.5], 3));
        let chains = 2 * CHAINS;
        let seeds: Vec<u64> = (0..chains as u64).collect();
        let config = LoaderConfig {
            batch_size: 10,
            shuffle: true,
            drop_last: true,
            mode: Mode::Streaming { num_workers: 0, prefetch: 1, staging: false },
        };
        let mut loader = Loader::<B::InnerBackend>::new(vec![data], &seeds, &config, device).unwrap();
        let mut theta = Tensor::<B::InnerBackend, 3>::zeros([chains, 2, 1], device);
        let schedule = ChainSchedule::new(&vec![1.0; chains], &vec![0.02; chains], &vec![100; chains]);
        for noise in [Noise::counter(&seeds), Noise::host(&seeds)] {
        let mut sgld = Sgld { prior_sigma: 0.5, noise };
        let t0 = Instant::now();
        let mut rows = Vec::new();
        for epoch in 0..20 { for b in loader.epoch(epoch) { rows.push(b.features); } }
        let _ = to_host_f32(rows.last().unwrap().clone());
        println!("loader 40 batches {:?}", t0.elapsed());
        let scales = schedule.scales::<B::InnerBackend>(0, device);
        let t0 = Instant::now();
        for _ in 0..40 { let g = theta.clone().zeros_like(); theta = sgld.step(vec![theta], vec![g], &scales).remove(0); }
        let _ = to_host_f32(theta.clone());
        println!("sgld step 40 {:?}", t0.elapsed());
        let t0 = Instant::now();
        for r in &rows {
            let leaf = require_grad::<B>(vec![theta.clone()]);
            let rows = Tensor::<B, 3>::from_inner(r.clone());
            let x = rows.clone().narrow(2, 0, 2);
            let y = rows.narrow(2, 2, 1);
            let prediction = (x * leaf[0].clone().swap_dims(1, 2)).sum_along(2);
            let total = (prediction - y).powi_scalar(2).sum_along(1).mul_scalar(1.0).sum_all();
            let grads = gradients(&leaf, &total.backward());
            theta = theta + grads[0].clone().mul_scalar(0.0);
        }
        let _ = to_host_f32(theta.clone());
        println!("loss+grad 40 {:?}", t0.elapsed());
        }
    }
}
