//! Host kernel of the SGLD step ([`crate::ops::sgld`]) on the CPU backend in f32: a chain's
//! whole step (forward, gradient, noise and update) in one pass over its own few kilobytes,
//! chains spread over the cores, each chain's parameters updated in place (the tensors are
//! moved in; a shared one is copied first).

use burn::tensor::TensorMetadata;
use burn::tensor::ops::FloatTensor;

use crate::ops::random::fill_normals;
use crate::threefry::StreamKey;
use quench_host::lanes::{host_cores, in_lanes};
use quench_host::math::{lane_dot, relu};
use quench_host::tensor::{Host, in_f32, owned, tensor, values};

/// What every chain's step shares.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Constants {
    /// The loss's floor `e^-l_max`.
    pub floor: f32,
    /// `factor / batch`: the objective is the scaled batch mean.
    pub per_sample: f32,
    /// The prior's precision.
    pub inv_var: f32,
    /// The streams' draw.
    pub draw: u64,
}

/// One chain's parameters and data, borrowed from the batch.
struct Chain<'a> {
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

/// The sizes of the chains' networks and minibatch.
#[derive(Debug, Clone, Copy)]
struct Sizes {
    inputs: usize,
    hidden: usize,
    batch: usize,
}

/// The updated `[w1, b1, w2, b2]` of every chain (shapes in [`crate::ops::sgld`]), chain `c`
/// with `drift[c]`, `noise[c]` and the draw of `keys[c]`.
///
/// # Panics
/// If the operands' shapes disagree (a caller's bug, not input).
pub(crate) fn sgld_step(
    params: [FloatTensor<Host>; 4],
    features: FloatTensor<Host>,
    labels: FloatTensor<Host>,
    [drift, noise]: [&[f32]; 2],
    keys: &[StreamKey],
    constants: Constants,
) -> [FloatTensor<Host>; 4] {
    let dims = params.each_ref().map(|p| p.shape().dims::<3>());
    let [chains, inputs, hidden] = dims[0];
    let [features, labels] = [features, labels].map(in_f32);
    let [f_chains, batch, f_inputs] = features.shape().dims::<3>();
    assert_eq!(
        (f_chains, f_inputs),
        (chains, inputs),
        "features [chains, batch, inputs]"
    );
    assert_eq!(labels.shape().dims::<3>(), [chains, batch, 1], "labels");
    assert_eq!(
        dims[1..],
        [[chains, 1, hidden], [chains, hidden, 1], [chains, 1, 1]],
        "bias, output weight and output bias"
    );
    assert!(
        drift.len() == chains && noise.len() == chains && keys.len() == chains,
        "one coefficient and key per chain"
    );
    let [mut w1, mut b1, mut w2, mut b2] = params.map(owned);
    let (x, y) = (values(&features), values(&labels));
    let sizes = Sizes {
        inputs,
        hidden,
        batch,
    };
    let jobs: Vec<Chain> = w1
        .chunks_mut(inputs * hidden)
        .zip(b1.chunks_mut(hidden))
        .zip(w2.chunks_mut(hidden))
        .zip(b2.iter_mut())
        .enumerate()
        .map(|(c, (((w1, b1), w2), b2))| Chain {
            w1,
            b1,
            w2,
            b2,
            features: &x[c * batch * inputs..(c + 1) * batch * inputs],
            labels: &y[c * batch..(c + 1) * batch],
            key: keys[c],
            drift: drift[c],
            noise: noise[c],
        })
        .collect();
    in_lanes(jobs, host_cores(), |group| {
        step_chains(group, sizes, constants)
    });
    drop((x, y));
    [
        tensor(w1, dims[0]),
        tensor(b1, dims[1]),
        tensor(w2, dims[2]),
        tensor(b2, dims[3]),
    ]
}

quench_host::simd_dispatch! {
    /// Steps `chains`, with one scratch reused; AVX-512 or AVX2 where the CPU has them, with
    /// the same values ([`quench_host::simd`]).
    fn step_chains(chains: Vec<Chain>, sizes: Sizes, k: Constants) => step_chains_portable
}

#[inline(always)]
fn step_chains_portable(chains: Vec<Chain>, sizes: Sizes, k: Constants) {
    let Sizes {
        inputs,
        hidden,
        batch,
    } = sizes;
    let mut scratch = Scratch {
        xi: vec![0f32; inputs * hidden + 2 * hidden + 1],
        act: vec![0f32; batch * hidden],
        grad: vec![0f32; hidden],
        dz: vec![0f32; batch],
    };
    for chain in chains {
        step_chain(chain, inputs, hidden, &k, &mut scratch);
    }
}

/// A chain's working memory.
struct Scratch {
    /// The noise, laid out as the composition draws it (weight, bias, output weight, output
    /// bias).
    xi: Vec<f32>,
    /// `[batch, hidden]`: pre-activations, then their gradients.
    act: Vec<f32>,
    /// `[hidden]`: one weight row's gradient.
    grad: Vec<f32>,
    /// `[batch]`: d objective / d logit.
    dz: Vec<f32>,
}

/// One chain's step, as [`crate::ops::sgld::composed_step`].
#[inline(always)]
fn step_chain(c: Chain, inputs: usize, hidden: usize, k: &Constants, s: &mut Scratch) {
    let Scratch { xi, act, grad, dz } = s;
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
    // Rectified in place: the gradient passes below read relu(a), and where it is zero.
    for a in act.iter_mut() {
        *a = relu(*a);
    }
    for (r, (row, d)) in act.chunks(hidden).zip(dz.iter_mut()).enumerate() {
        // In partial sums: one sum in order is a chain of `hidden` dependent adds, which
        // took half the step at `hidden = 500`.
        let z = *c.b2 + lane_dot(row, c.w2);
        let sign = 2.0 * c.labels[r] - 1.0;
        let p = 1.0 / (1.0 + (-sign * z).exp());
        let psi = k.floor + (1.0 - 2.0 * k.floor) * p;
        *d = -(1.0 - 2.0 * k.floor) * sign * p * (1.0 - p) / psi * k.per_sample;
    }
    // Output layer: its gradients need the activations and its weights before the update.
    grad.fill(0.0);
    for (row, &d) in act.chunks(hidden).zip(dz.iter()) {
        for (g, &a) in grad.iter_mut().zip(row) {
            *g += d * a;
        }
    }
    // The activations become the pre-activation gradients, d w2 where active.
    for (row, &d) in act.chunks_mut(hidden).zip(dz.iter()) {
        for (a, w) in row.iter_mut().zip(c.w2.iter()) {
            *a = if *a <= 0.0 { 0.0 } else { d * w };
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
