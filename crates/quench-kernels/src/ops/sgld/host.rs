//! Host kernel of the SGLD step ([`crate::ops::sgld`]) on the CPU backend in f32: a chain's
//! whole step (forward, gradient, noise and update) over its own few kilobytes, a block of
//! hidden units at a time (`BLOCK`), chains spread over the cores, each chain's parameters
//! updated in place (the tensors are moved in; a shared one is copied first).

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
        dz: vec![0f32; batch],
        deltas: vec![0f32; batch * BLOCK],
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
    /// `[batch, hidden]`: the rectified activations.
    act: Vec<f32>,
    /// `[batch]`: d objective / d logit.
    dz: Vec<f32>,
    /// `[batch, BLOCK]`: one block's pre-activation gradients.
    deltas: Vec<f32>,
}

/// Hidden units per block: one AVX-512 vector of f32. Each pass below takes the hidden layer a
/// block at a time, its sums in fixed-size arrays the compiler keeps in vector registers:
/// the same sums in the same order as a pass over whole rows, without the row's partial sums
/// stored and reloaded for every input and sample (the passes over rows were bound by those
/// loads and stores). A layer whose width is not a multiple of the block ends in blocks of
/// one unit. Widths are constants (`W`): a block of run-time width compiled into masked and
/// shuffled code twice as slow as the passes over rows.
const BLOCK: usize = 16;
/// Inputs whose weight gradients one pass over a block's samples forms side by side.
const INPUT_GROUP: usize = 4;

/// Where a block of hidden units lies in a chain's layer.
#[derive(Clone, Copy)]
struct Block {
    /// The block's first hidden unit.
    first: usize,
    inputs: usize,
    hidden: usize,
}

/// The normal draws `xi` of a chain's hidden weights, hidden biases and output weights, laid
/// out as the parameters (the chain's `noise` is their scale).
#[derive(Clone, Copy)]
struct Xi<'a> {
    w1: &'a [f32],
    b1: &'a [f32],
    w2: &'a [f32],
}

/// A chain's Langevin update `theta - (drift (g + theta / sigma^2) + noise xi)`.
#[derive(Clone, Copy)]
struct Langevin {
    drift: f32,
    noise: f32,
    inv_var: f32,
}

impl Langevin {
    #[inline(always)]
    fn updated(self, theta: f32, g: f32, xi: f32) -> f32 {
        theta - (self.drift * (g + theta * self.inv_var) + self.noise * xi)
    }

    /// `values[first..first + W]` updated with gradients `g` and noise `xi[first..]`.
    #[inline(always)]
    fn block<const W: usize>(self, values: &mut [f32], xi: &[f32], g: &[f32; W], first: usize) {
        let (mut theta, xi) = (array::<W>(values, first), array::<W>(xi, first));
        for l in 0..W {
            theta[l] = self.updated(theta[l], g[l], xi[l]);
        }
        put(theta, values, first);
    }
}

/// `values[first..first + W]`. (A copy rather than `std::array::from_fn`, which was not
/// inlined, and so ran at the baseline width.)
#[inline(always)]
fn array<const W: usize>(values: &[f32], first: usize) -> [f32; W] {
    let mut block = [0f32; W];
    block.copy_from_slice(&values[first..first + W]);
    block
}

/// Writes `block` into `values` from `first`.
#[inline(always)]
fn put<const W: usize>(block: [f32; W], values: &mut [f32], first: usize) {
    values[first..first + W].copy_from_slice(&block);
}

/// One chain's step, as [`crate::ops::sgld::composed_step`].
#[inline(always)]
fn step_chain(mut c: Chain, inputs: usize, hidden: usize, k: &Constants, s: &mut Scratch) {
    let Scratch {
        xi,
        act,
        dz,
        deltas,
    } = s;
    fill_normals(c.key, k.draw, xi);
    let (xi_w1, rest) = xi.split_at(inputs * hidden);
    let (xi_b1, rest) = rest.split_at(hidden);
    let (xi_w2, xi_b2) = rest.split_at(hidden);
    let xi = Xi {
        w1: xi_w1,
        b1: xi_b1,
        w2: xi_w2,
    };
    let whole = hidden / BLOCK * BLOCK;
    let at = |first| Block {
        first,
        inputs,
        hidden,
    };
    for first in (0..whole).step_by(BLOCK) {
        forward::<BLOCK>(&c, at(first), act);
    }
    for first in whole..hidden {
        forward::<1>(&c, at(first), act);
    }
    // Each sample's logit and d objective / d logit.
    for (r, (row, d)) in act.chunks(hidden).zip(dz.iter_mut()).enumerate() {
        // In partial sums: one sum in order is a chain of `hidden` dependent adds, which
        // took half the step at `hidden = 500`.
        let z = *c.b2 + lane_dot(row, c.w2);
        let sign = 2.0 * c.labels[r] - 1.0;
        let p = 1.0 / (1.0 + (-sign * z).exp());
        let psi = k.floor + (1.0 - 2.0 * k.floor) * p;
        *d = -(1.0 - 2.0 * k.floor) * sign * p * (1.0 - p) / psi * k.per_sample;
    }
    let langevin = Langevin {
        drift: c.drift,
        noise: c.noise,
        inv_var: k.inv_var,
    };
    *c.b2 = langevin.updated(*c.b2, dz.iter().sum(), xi_b2[0]);
    let (deltas, _) = deltas.as_chunks_mut::<BLOCK>();
    for first in (0..whole).step_by(BLOCK) {
        backward::<BLOCK>(&mut c, at(first), langevin, xi, act, dz, deltas);
    }
    for first in whole..hidden {
        backward::<1>(&mut c, at(first), langevin, xi, act, dz, deltas);
    }
}

/// The forward pass of hidden units `at.first..at.first + W`: each sample's pre-activations
/// (the bias, then the inputs in order), rectified, into `act` (`[batch, hidden]`).
#[inline(always)]
fn forward<const W: usize>(c: &Chain, at: Block, act: &mut [f32]) {
    let bias = array::<W>(c.b1, at.first);
    for (r, row) in act.chunks_mut(at.hidden).enumerate() {
        let mut a = bias;
        for n in 0..at.inputs {
            let x = c.features[r * at.inputs + n];
            let w = array::<W>(c.w1, n * at.hidden + at.first);
            for l in 0..W {
                a[l] += x * w[l];
            }
        }
        put(a.map(relu), row, at.first);
    }
}

/// The backward pass and update of hidden units `at.first..at.first + W`: the output
/// weights' gradients and the pre-activations' (`d w2` where active, with the output weights
/// before their update, into `deltas`), summed into the hidden biases' and weights'
/// gradients; then the block's parameters updated.
#[inline(always)]
fn backward<const W: usize>(
    c: &mut Chain,
    at: Block,
    langevin: Langevin,
    xi: Xi,
    act: &[f32],
    dz: &[f32],
    deltas: &mut [[f32; BLOCK]],
) {
    let w2 = array::<W>(c.w2, at.first);
    let mut g2 = [0f32; W];
    let mut gb = [0f32; W];
    for ((row, &d), delta) in act.chunks(at.hidden).zip(dz).zip(deltas.iter_mut()) {
        let a = array::<W>(row, at.first);
        for l in 0..W {
            g2[l] += d * a[l];
            delta[l] = if a[l] <= 0.0 { 0.0 } else { d * w2[l] };
            gb[l] += delta[l];
        }
    }
    let mut n = 0;
    while n + INPUT_GROUP <= at.inputs {
        let grads = input_gradients::<INPUT_GROUP, W>(c.features, at.inputs, n, deltas);
        for (i, g) in grads.iter().enumerate() {
            langevin.block(c.w1, xi.w1, g, (n + i) * at.hidden + at.first);
        }
        n += INPUT_GROUP;
    }
    for n in n..at.inputs {
        let [g] = input_gradients::<1, W>(c.features, at.inputs, n, deltas);
        langevin.block(c.w1, xi.w1, &g, n * at.hidden + at.first);
    }
    langevin.block(c.w2, xi.w2, &g2, at.first);
    langevin.block(c.b1, xi.b1, &gb, at.first);
}

/// The gradients of inputs `n..n + G`'s weights into a block of `W` hidden units: each
/// input's value times the block's pre-activation gradients (the first `W` of each sample's
/// `deltas`), summed over the samples in order, the `G` sums side by side.
#[inline(always)]
fn input_gradients<const G: usize, const W: usize>(
    features: &[f32],
    inputs: usize,
    n: usize,
    deltas: &[[f32; BLOCK]],
) -> [[f32; W]; G] {
    let mut grads = [[0f32; W]; G];
    for (r, delta) in deltas.iter().enumerate() {
        for (i, g) in grads.iter_mut().enumerate() {
            let x = features[r * inputs + n + i];
            for l in 0..W {
                g[l] += x * delta[l];
            }
        }
    }
    grads
}
