//! CubeCL kernels of the SGLD step ([`crate::ops::sgld`]) for every CubeCL runtime: the
//! hidden layer's product (a cubek matmul) and two launches, where the composition takes
//! about thirty element-wise ops and reductions beside four hundred for the noise.
//!
//! Design. Logits: one unit per (chain, sample) walks the sample's `hidden` pre-activations
//! (the product, plus the bias, rectified) against the output weight, then writes `d objective
//! / d logit`: `hidden` values read and one written per sample. Update: one unit per (chain,
//! parameter value), every parameter of the chain in the noise's order (weight, bias, output
//! weight, output bias); the unit sums its value's gradient over the minibatch from the
//! pre-activations, `d objective / d logit` and the features (`batch` of each read, mostly
//! from cache: a cube's units share their chain's samples), draws its noise value with the
//! counter-based generator ([`crate::ops::random`]'s kernel function) and writes the updated
//! value into a new tensor (the other units still read the old output weight). Per value of
//! the hidden weight that is `3 batch` reads and one write, against the composition's
//! gradient tensors written and read again.
#![allow(clippy::too_many_arguments)]

use burn_cubecl::{BoolElement, CubeRuntime};
use cubecl::prelude::*;

use super::SgldStep;
use crate::ops::cube::{Cube, elementwise, empty_like, empty_shaped, from_cube, to_cube};
use crate::ops::random::cube::{counter_normal, key_halves, key_word};

/// A tensor of the backend, `[chains, ..]`.
type Values<R, BT> = burn::tensor::Tensor<Cube<R, BT>, 3>;

/// Sample `ABSOLUTE_POS` of its chain (`[chains, batch]` flattened): the logit `b2 +
/// sum_j relu(pre_j + b1_j) w2_j` and `dz = -(1 - 2 floor) s p (1 - p) / psi * per_sample`
/// with `s = 2 y - 1`, `p = sigmoid(s z)`, `psi = floor + (1 - 2 floor) p`.
#[cube(launch)]
fn logit_gradient_kernel<F: Float>(
    pre: &Tensor<F>,
    b1: &Tensor<F>,
    w2: &Tensor<F>,
    b2: &Tensor<F>,
    labels: &Tensor<F>,
    dz: &mut Tensor<F>,
    batch: u32,
    hidden: u32,
    floor: f32,
    per_sample: f32,
    #[define(F)] _dtype: StorageType,
) {
    let row = ABSOLUTE_POS;
    if row >= dz.len() {
        terminate!();
    }
    let hidden = hidden as usize;
    let chain = row / batch as usize;
    let mut z = b2[chain];
    for j in 0..hidden {
        let a = pre[row * hidden + j] + b1[chain * hidden + j];
        // Rectified where `a <= 0` only, as the composition's mask: a NaN passes and the
        // diverged chain stays NaN.
        if a <= F::new(0.0) {
        } else {
            z += a * w2[chain * hidden + j];
        }
    }
    let floor = F::cast_from(floor);
    let mixed = F::new(1.0) - F::new(2.0) * floor;
    let sign = F::new(2.0) * labels[row] - F::new(1.0);
    let p = F::new(1.0) / (F::new(1.0) + F::exp(-sign * z));
    let psi = floor + mixed * p;
    dz[row] = -mixed * sign * p * (F::new(1.0) - p) / psi * F::cast_from(per_sample);
}

/// Value `ABSOLUTE_POS` of its chain's parameters (`per_chain = inputs hidden + 2 hidden + 1`
/// values, in the noise's order): its gradient over the minibatch, its noise value and its
/// Langevin update `theta - (drift (g + theta inv_var) + noise xi)`. A unit is active where
/// its pre-activation is not `<= 0`, as in the logits' kernel.
#[cube(launch)]
fn update_kernel<F: Float, I: Numeric>(
    features: &Tensor<F>,
    pre: &Tensor<F>,
    dz: &Tensor<F>,
    w1: &Tensor<F>,
    b1: &Tensor<F>,
    w2: &Tensor<F>,
    b2: &Tensor<F>,
    drift: &Tensor<F>,
    noise: &Tensor<F>,
    keys: &Tensor<I>,
    w1_out: &mut Tensor<F>,
    b1_out: &mut Tensor<F>,
    w2_out: &mut Tensor<F>,
    b2_out: &mut Tensor<F>,
    inputs: u32,
    hidden: u32,
    batch: u32,
    inv_var: f32,
    draw: u32,
    #[define(F, I)] _dtypes: [StorageType; 2],
) {
    let inputs = inputs as usize;
    let hidden = hidden as usize;
    let batch = batch as usize;
    let weights = inputs * hidden;
    let per_chain = weights + 2 * hidden + 1;
    let position = ABSOLUTE_POS;
    if position >= per_chain * drift.len() {
        terminate!();
    }
    let chain = position / per_chain;
    let k = position - chain * per_chain;
    let zero = F::new(0.0);
    let rows = chain * batch;
    // The value's hidden unit (for the output bias none; it sums dz alone).
    let mut j = k % hidden;
    if k >= weights {
        j = (k - weights) % hidden;
    }
    let bias = b1[chain * hidden + j];
    let weight2 = w2[chain * hidden + j];
    let mut g = zero;
    let mut theta = b2[chain];
    if k < weights {
        // d w1[i, j] = sum_b x[b, i] dpre[b, j].
        let i = k / hidden;
        for b in 0..batch {
            if pre[(rows + b) * hidden + j] + bias <= zero {
            } else {
                g += features[(rows + b) * inputs + i] * dz[rows + b] * weight2;
            }
        }
        theta = w1[chain * weights + k];
    } else if k < weights + hidden {
        for b in 0..batch {
            if pre[(rows + b) * hidden + j] + bias <= zero {
            } else {
                g += dz[rows + b] * weight2;
            }
        }
        theta = bias;
    } else if k < weights + 2 * hidden {
        for b in 0..batch {
            let a = pre[(rows + b) * hidden + j] + bias;
            if a <= zero {
            } else {
                g += a * dz[rows + b];
            }
        }
        theta = weight2;
    } else {
        for b in 0..batch {
            g += dz[rows + b];
        }
    }
    let k0 = key_word(keys, chain, 0);
    let k1 = key_word(keys, chain, 1);
    let xi = F::cast_from(counter_normal(k0, k1, draw, k as u32));
    let updated = theta - (drift[chain] * (g + theta * F::cast_from(inv_var)) + noise[chain] * xi);
    if k < weights {
        w1_out[chain * weights + k] = updated;
    } else if k < weights + hidden {
        b1_out[chain * hidden + j] = updated;
    } else if k < weights + 2 * hidden {
        w2_out[chain * hidden + j] = updated;
    } else {
        b2_out[chain] = updated;
    }
}

/// [`crate::ops::QuenchOps::sgld_step`] on a CubeCL backend: the product and two launches (the
/// composition for an empty batch, chain set or layer, which launch nothing worth fusing).
pub(crate) fn sgld_step<R: CubeRuntime, BT: BoolElement>(
    params: [Values<R, BT>; 4],
    features: Values<R, BT>,
    labels: Values<R, BT>,
    step: &SgldStep<'_, Cube<R, BT>>,
) -> [Values<R, BT>; 4] {
    let [chains, inputs, hidden] = params[0].dims();
    let batch = features.dims()[1];
    if chains * inputs * hidden * batch == 0 {
        return super::composed_step(params, features, labels, step);
    }
    let [w1, b1, w2, b2] = params;
    let device = w1.device();
    let pre = to_cube(features.clone().matmul(w1.clone()));
    let [features, labels, w1, b1, w2, b2] = [features, labels, w1, b1, w2, b2].map(to_cube);
    let [drift, noise] = [&step.drift, &step.noise].map(|t| to_cube(t.clone()));
    let client = pre.client.clone();
    let dtype = pre.dtype;
    let dz = empty_shaped(&pre, [chains, batch]);
    let (count, dim) = elementwise(&client, chains * batch);
    logit_gradient_kernel::launch::<R>(
        &client,
        count,
        dim,
        pre.clone().into_tensor_arg(),
        b1.clone().into_tensor_arg(),
        w2.clone().into_tensor_arg(),
        b2.clone().into_tensor_arg(),
        labels.into_tensor_arg(),
        dz.clone().into_tensor_arg(),
        batch as u32,
        hidden as u32,
        step.floor as f32,
        (step.factor / batch.max(1) as f64) as f32,
        dtype.into(),
    );
    let keys = key_halves::<R, BT>(step.keys, step.draw, &device);
    let outputs = [&w1, &b1, &w2, &b2].map(empty_like);
    let per_chain = inputs * hidden + 2 * hidden + 1;
    let (count, dim) = elementwise(&client, chains * per_chain);
    let key_dtype = keys.dtype;
    update_kernel::launch::<R>(
        &client,
        count,
        dim,
        features.into_tensor_arg(),
        pre.into_tensor_arg(),
        dz.into_tensor_arg(),
        w1.into_tensor_arg(),
        b1.into_tensor_arg(),
        w2.into_tensor_arg(),
        b2.into_tensor_arg(),
        drift.into_tensor_arg(),
        noise.into_tensor_arg(),
        keys.into_tensor_arg(),
        outputs[0].clone().into_tensor_arg(),
        outputs[1].clone().into_tensor_arg(),
        outputs[2].clone().into_tensor_arg(),
        outputs[3].clone().into_tensor_arg(),
        inputs as u32,
        hidden as u32,
        batch as u32,
        step.inv_var as f32,
        step.draw as u32,
        [dtype.into(), key_dtype.into()],
    );
    outputs.map(from_cube)
}
