//! The fused SGLD step of the workload's `in -> hidden -> 1` ReLU network: gradients derived
//! by hand instead of an autodiff graph, and the Langevin update applied as they come.
//!
//! Two forms of the same arithmetic:
//! - [`mlp_gradients`], tensor ops over the chain axis, for backends that queue work to a
//!   device (fused there by Burn); the update is then [`Sgld::step`](super::Sgld::step).
//! - [`HostChains`], for the CPU backend: the chains' parameters stay in host memory, and a
//!   chain's whole step (forward, gradient, noise and update) is one pass over its own few
//!   kilobytes, chains split over the cores. Its noise is the same counter-based draw as the
//!   tensor form's, so both follow the same trajectory to f32 rounding.
//!
//! Shapes: weight `[chains, in, hidden]`, bias `[chains, 1, hidden]`, output weight
//! `[chains, hidden, 1]`, output bias `[chains, 1, 1]`; features `[chains, batch, in]`,
//! labels 0/1 `[chains, batch, 1]`.

use burn::tensor::Tensor;
use quench_device::lanes::in_lanes;
use quench_device::readback::{float_tensor, to_host_f32};
use quench_device::reductions::Reduce;
use quench_device::threefry::{NormalStreams, StreamKey, fill_normals};
use quench_device::{QuenchOps, host_lanes};

use super::{BoundedLoss, HostScales};

/// The gradients of each chain's objective `factor * mean_batch(loss)` with respect to
/// `params` (weight, bias, output weight, output bias), in that order.
pub fn mlp_gradients<B: QuenchOps>(
    params: &[Tensor<B, 3>],
    features: Tensor<B, 3>,
    labels: Tensor<B, 3>,
    loss: &BoundedLoss,
    factor: f64,
) -> Vec<Tensor<B, 3>> {
    let [w1, b1, w2, b2] = [0, 1, 2, 3].map(|i| params[i].clone());
    let batch = features.dims()[1];
    let pre = features.clone().matmul(w1) + b1;
    let active = pre.clone().greater_elem(0.0);
    let hidden = pre.mask_fill(active.clone().bool_not(), 0.0);
    let logits = hidden.clone().matmul(w2.clone()) + b2;
    // d objective / d logit, [chains, batch, 1].
    let dz = loss
        .logit_gradient(logits, labels)
        .mul_scalar(factor / batch as f64);
    let dw2 = hidden.swap_dims(1, 2).matmul(dz.clone());
    let db2 = dz.clone().sum_along(1);
    let dpre = dz
        .matmul(w2.swap_dims(1, 2))
        .mask_fill(active.bool_not(), 0.0);
    let dw1 = features.swap_dims(1, 2).matmul(dpre.clone());
    let db1 = dpre.sum_along(1);
    vec![dw1, db1, dw2, db2]
}

/// The parameters of a batch of chains in host memory, chain after chain, for the CPU
/// backend's fused step.
#[derive(Debug, Clone, PartialEq)]
pub struct HostChains {
    inputs: usize,
    hidden: usize,
    /// `[chains, in, hidden]`.
    w1: Vec<f32>,
    /// `[chains, hidden]`.
    b1: Vec<f32>,
    /// `[chains, hidden]`.
    w2: Vec<f32>,
    /// `[chains]`.
    b2: Vec<f32>,
}

/// The per-step constants every chain's kernel needs.
#[derive(Debug, Clone, Copy)]
struct Constants {
    batch: usize,
    inv_var: f32,
    floor: f32,
    /// `factor / batch`: the objective is the scaled batch mean.
    per_sample: f32,
    draw: u64,
}

/// One chain's parameters and data, borrowed from the batch.
struct ChainView<'a> {
    w1: &'a mut [f32],
    b1: &'a mut [f32],
    w2: &'a mut [f32],
    b2: &'a mut f32,
    features: &'a [f32],
    labels: &'a [f32],
    key: StreamKey,
    drift: f32,
    noise: f32,
}

impl HostChains {
    /// The host copy of `params` (weight, bias, output weight, output bias).
    pub fn from_tensors<B: QuenchOps>(params: &[Tensor<B, 3>]) -> Self {
        let [_, inputs, hidden] = params[0].dims();
        let [w1, b1, w2, b2] = [0, 1, 2, 3].map(|i| to_host_f32(params[i].clone()));
        Self {
            inputs,
            hidden,
            w1,
            b1,
            w2,
            b2,
        }
    }

    /// Chains held.
    pub fn chains(&self) -> usize {
        self.b2.len()
    }

    /// The parameters of chains `range` as tensors on `device`, in the tensor layout.
    pub fn to_tensors<B: QuenchOps>(
        &self,
        range: std::ops::Range<usize>,
        device: &B::Device,
    ) -> Vec<Tensor<B, 3>> {
        let n = range.len();
        let (i, h) = (self.inputs, self.hidden);
        let part = |values: &[f32], per: usize, shape: [usize; 3]| {
            let slice = values[range.start * per..range.end * per].to_vec();
            float_tensor(slice, shape, device)
        };
        vec![
            part(&self.w1, i * h, [n, i, h]),
            part(&self.b1, h, [n, 1, h]),
            part(&self.w2, h, [n, h, 1]),
            part(&self.b2, 1, [n, 1, 1]),
        ]
    }

    /// Keeps the first `chains` chains.
    pub fn retain(&mut self, chains: usize) {
        let (i, h) = (self.inputs, self.hidden);
        self.w1.truncate(chains * i * h);
        self.b1.truncate(chains * h);
        self.w2.truncate(chains * h);
        self.b2.truncate(chains);
    }

    /// One SGLD step of every chain on its minibatch: `features` `[chains, batch, in]` and
    /// `labels` `[chains, batch]` (0/1) row-major, with this epoch's `scales`, the prior's
    /// `prior_sigma`, and one draw of `noise` (the same values as the tensor form's).
    #[allow(clippy::too_many_arguments)]
    pub fn step(
        &mut self,
        features: &[f32],
        labels: &[f32],
        scales: &HostScales,
        loss: &BoundedLoss,
        factor: f64,
        prior_sigma: f64,
        noise: &mut NormalStreams,
    ) {
        let chains = self.chains();
        let batch = labels.len() / chains.max(1);
        let (i, h) = (self.inputs, self.hidden);
        let constants = Constants {
            batch,
            inv_var: prior_sigma.powi(2).recip() as f32,
            floor: (-loss.l_max).exp() as f32,
            per_sample: (factor / batch.max(1) as f64) as f32,
            draw: noise.draws(),
        };
        let keys = noise.keys();
        let views: Vec<ChainView> = self
            .w1
            .chunks_mut(i * h)
            .zip(self.b1.chunks_mut(h))
            .zip(self.w2.chunks_mut(h))
            .zip(self.b2.iter_mut())
            .enumerate()
            .map(|(c, (((w1, b1), w2), b2))| ChainView {
                w1,
                b1,
                w2,
                b2,
                features: &features[c * batch * i..(c + 1) * batch * i],
                labels: &labels[c * batch..(c + 1) * batch],
                key: keys[c],
                drift: scales.drift[c],
                noise: scales.noise[c],
            })
            .collect();
        in_lanes(views, host_lanes::<quench_device::CpuBackend>(), |group| {
            step_chains(group, i, h, constants)
        });
        // The draw was computed chain by chain above, at `constants.draw`.
        noise.skip();
    }
}

quench_device::simd_dispatch! {
    /// Steps `chains`, each with its own scratch reused; AVX-512 or AVX2 where the CPU has
    /// them, with the same values (`quench_device::simd`).
    fn step_chains(chains: Vec<ChainView>, inputs: usize, hidden: usize, k: Constants) => step_chains_portable
}

#[inline(always)]
fn step_chains_portable(chains: Vec<ChainView>, inputs: usize, hidden: usize, k: Constants) {
    let params = inputs * hidden + 2 * hidden + 1;
    let mut xi = vec![0f32; params];
    let mut act = vec![0f32; k.batch * hidden];
    let mut grad = vec![0f32; hidden];
    let mut dz = vec![0f32; k.batch];
    for chain in chains {
        step_chain(
            chain, inputs, hidden, &k, &mut xi, &mut act, &mut grad, &mut dz,
        );
    }
}

/// One chain's step, as [`mlp_gradients`] then the SGLD update, with the noise `xi` laid out
/// as the tensor form draws it (weight, bias, output weight, output bias).
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn step_chain(
    c: ChainView,
    inputs: usize,
    hidden: usize,
    k: &Constants,
    xi: &mut [f32],
    act: &mut [f32],
    grad: &mut [f32],
    dz: &mut [f32],
) {
    fill_normals(c.key, k.draw, xi);
    let (xi_w1, rest) = xi.split_at(inputs * hidden);
    let (xi_b1, rest) = rest.split_at(hidden);
    let (xi_w2, xi_b2) = rest.split_at(hidden);
    // Forward: pre-activations, one weight row at a time over every sample (the weight is
    // read once; the activations, batch x hidden, stay in cache), then each sample's logit
    // and d objective / d logit.
    for row in act.chunks_mut(hidden) {
        row.copy_from_slice(c.b1);
    }
    for (n, w_row) in c.w1.chunks(hidden).enumerate() {
        for (r, row) in act.chunks_mut(hidden).enumerate() {
            let x = c.features[r * inputs + n];
            for (a, w) in row.iter_mut().zip(w_row) {
                *a += x * w;
            }
        }
    }
    for (r, row) in act.chunks(hidden).enumerate() {
        let mut z = *c.b2;
        for (a, w) in row.iter().zip(c.w2.iter()) {
            z += a.max(0.0) * w;
        }
        let sign = 2.0 * c.labels[r] - 1.0;
        let p = 1.0 / (1.0 + (-sign * z).exp());
        let psi = k.floor + (1.0 - 2.0 * k.floor) * p;
        dz[r] = -(1.0 - 2.0 * k.floor) * sign * p * (1.0 - p) / psi * k.per_sample;
    }
    // Output layer: its gradients need the activations and its weights before the update.
    grad.fill(0.0);
    for (row, &d) in act.chunks(hidden).zip(dz.iter()) {
        for (g, a) in grad.iter_mut().zip(row) {
            *g += d * a.max(0.0);
        }
    }
    // The activations become the pre-activation gradients, d (row) w2 where active.
    for (row, &d) in act.chunks_mut(hidden).zip(dz.iter()) {
        for (a, w) in row.iter_mut().zip(c.w2.iter()) {
            *a = if *a > 0.0 { d * w } else { 0.0 };
        }
    }
    let update = |theta: &mut f32, g: f32, xi: f32| {
        *theta -= c.drift * (g + *theta * k.inv_var) + c.noise * xi;
    };
    for ((w, &g), &x) in c.w2.iter_mut().zip(grad.iter()).zip(xi_w2) {
        update(w, g, x);
    }
    update(c.b2, dz.iter().sum(), xi_b2[0]);
    // Hidden layer, one input row of the weight at a time.
    for (n, (w_row, xi_row)) in
        c.w1.chunks_mut(hidden)
            .zip(xi_w1.chunks(hidden))
            .enumerate()
    {
        grad.fill(0.0);
        for (r, row) in act.chunks(hidden).enumerate() {
            let x = c.features[r * inputs + n];
            for (g, d) in grad.iter_mut().zip(row) {
                *g += x * d;
            }
        }
        for ((w, &g), &x) in w_row.iter_mut().zip(grad.iter()).zip(xi_row) {
            update(w, g, x);
        }
    }
    grad.fill(0.0);
    for row in act.chunks(hidden) {
        for (g, d) in grad.iter_mut().zip(row) {
            *g += d;
        }
    }
    for ((b, &g), &x) in c.b1.iter_mut().zip(grad.iter()).zip(xi_b1) {
        update(b, g, x);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ChainSchedule, Noise, Sgld};
    use burn::tensor::Distribution;
    use quench_device::SeededGenerator;
    use quench_device::stats::max_abs_difference;
    use quench_train::ensemble::{Activation, EnsembleLinear, EnsembleMlp};
    use quench_train::params::{gradients, require_grad};

    /// Parameters of `chains` networks `4 -> 24 -> 1`, features and labels of batch 5.
    fn case<B: QuenchOps>(
        chains: usize,
        device: &B::Device,
    ) -> (Vec<Tensor<B, 3>>, Tensor<B, 3>, Tensor<B, 3>) {
        let _lease = SeededGenerator::acquire::<B>(device, 3);
        let normal = |dims: [usize; 3], scale: f64| {
            Tensor::<B, 3>::random(dims, Distribution::Normal(0.0, scale), device)
        };
        let params = vec![
            normal([chains, 4, 24], 0.6),
            normal([chains, 1, 24], 0.3),
            normal([chains, 24, 1], 0.5),
            normal([chains, 1, 1], 0.2),
        ];
        let x = normal([chains, 5, 4], 1.0);
        let y = Tensor::<B, 3>::random([chains, 5, 1], Distribution::Bernoulli(0.5), device);
        (params, x, y)
    }

    quench_device::device_test! {
        fn hand_gradients_are_autodiffs<B>(device) {
            let (params, x, y) = case::<B::InnerBackend>(3, device);
            let loss = BoundedLoss { l_max: 4.0 };
            let factor = 0.25;
            let leaves = require_grad::<B>(params.clone());
            let mut it = leaves.clone().into_iter();
            let mut layer = || EnsembleLinear {
                weight: it.next().expect("four parameters"),
                bias: it.next().expect("four parameters"),
            };
            let model = EnsembleMlp {
                layers: vec![layer(), layer()],
                activation: Activation::Relu,
            };
            let logits = model.forward(Tensor::from_inner(x.clone()));
            let objective = loss
                .per_sample(logits, Tensor::from_inner(y.clone()))
                .mean_along(1)
                .sum_all()
                .mul_scalar(factor);
            let want = gradients(&leaves, &objective.backward());
            let got = mlp_gradients(&params, x, y, &loss, factor);
            for (k, (g, w)) in got.into_iter().zip(want).enumerate() {
                assert_eq!(g.dims(), w.dims(), "parameter {k}");
                let (g, w) = (to_host_f32(g), to_host_f32(w));
                let worst = max_abs_difference(&g, &w);
                assert!(worst < 1e-5, "parameter {k}: {worst}");
            }
        }

        fn the_tensor_step_draws_the_host_kernels_noise<B>(device) {
            type Inner<B> = <B as burn::tensor::backend::AutodiffBackend>::InnerBackend;
            let chains = 5;
            let (params, x, y) = case::<Inner<B>>(chains, device);
            let loss = BoundedLoss { l_max: 4.0 };
            let factor = loss.training_factor(super::super::LossScale::Unit);
            let seeds: Vec<u64> = (10..10 + chains as u64).collect();
            // Two temperatures, one chain finished: its step must leave it in place.
            let schedule = ChainSchedule::new(
                &[0.0, 1.0, 30.0, 30.0, 200.0],
                &[0.1, 0.2, 0.3, 0.3, 0.3],
                &[3, 3, 3, 1, 3],
            );
            let scales = schedule.scales::<Inner<B>>(1, device);
            let mut sgld = Sgld {
                prior_sigma: 2.0,
                noise: Noise::counter(&seeds),
            };
            let mut host = HostChains::from_tensors(&params);
            let mut tensors = params.clone();
            let mut streams = NormalStreams::new(&seeds);
            let (xs, ys) = (to_host_f32(x.clone()), to_host_f32(y.clone()));
            for _ in 0..3 {
                let grads = mlp_gradients(&tensors, x.clone(), y.clone(), &loss, factor);
                tensors = sgld.step(tensors, grads, &scales);
                host.step(&xs, &ys, &scales.host, &loss, factor, 2.0, &mut streams);
            }
            let from_host = host.to_tensors::<Inner<B>>(0..chains, device);
            for (k, (h, t)) in from_host.into_iter().zip(tensors).enumerate() {
                let (h, t) = (to_host_f32(h), to_host_f32(t));
                let worst = max_abs_difference(&h, &t);
                assert!(worst < 1e-5, "parameter {k}: {worst}");
            }
            let start = HostChains::from_tensors(&params);
            let finished = |p: &HostChains| p.to_tensors::<Inner<B>>(3..4, device);
            for (a, b) in finished(&host).into_iter().zip(finished(&start)) {
                assert_eq!(
                    to_host_f32(a),
                    to_host_f32(b),
                    "the finished chain stays put"
                );
            }
            assert_ne!(host, start, "the running chains move");
        }
    }
}
