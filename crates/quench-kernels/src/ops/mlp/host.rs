//! Host kernel of the member MLP's training step ([`crate::ops::mlp`]) on the CPU backend in
//! f32. Without a clip, the backward pass is fused with Adam layer by layer (each weight row's
//! gradient formed, used and dropped; the gradient below the layer taken from the weights
//! before they move), large layers split by weight rows over the cores. With a clip, which
//! needs each member's whole gradient first, the gradients come from the dense kernels, then
//! the penalty, the clip and Adam run in one pass each over host memory.

use std::borrow::Cow;

use burn::tensor::ops::FloatTensor;
use burn::tensor::{Int, Tensor, TensorPrimitive};

use super::{MlpObjective, MlpStep, MlpStepped, MlpTape};
use crate::ops::adam::AdamUpdate;
use crate::ops::adam::host::{adam_step, updates};
use crate::ops::dense::Activation;
use crate::ops::dense::host::pre_activation_gradient;
use quench_host::lanes::{in_lanes, lanes_for};
use quench_host::math::{lane_abs_sum, lane_dot};
use quench_host::tensor::{Host, from_values, host_values, tensor, values};

/// A tensor's primitive (its buffer shared, not copied), whose values `values` then borrows
/// in place where contiguous.
fn primitive(t: Tensor<Host, 3>) -> FloatTensor<Host> {
    t.into_primitive().tensor()
}

/// [`crate::ops::QuenchOps::mlp_train_step`] on the CPU backend.
pub(crate) fn train_step(
    step: &MlpStep<'_, Host>,
    params: Vec<Tensor<Host, 3>>,
    moments: Vec<[Tensor<Host, 3>; 2]>,
    tape: MlpTape<Host>,
    objective: MlpObjective<Host>,
) -> MlpStepped<Host> {
    let members = params[0].dims()[0];
    let updates = updates(step.adam, step.coefficients, members);
    let (upstream, mut losses) = match objective {
        MlpObjective::Upstream(upstream) => (upstream, None),
        MlpObjective::CrossEntropy(labels) => {
            let (gradient, losses) = cross_entropy(&tape.output, labels);
            (gradient, Some(losses))
        }
    };
    let (params, moments) = if step.clip_norm.is_none() && step.l1 == 0.0 {
        fused_step(
            step.activation,
            params,
            moments,
            tape,
            host_values(upstream),
            &updates,
        )
    } else {
        let grads = super::backward(&params, step.activation, tape, upstream);
        let mut grads: Vec<Vec<f32>> = grads.into_iter().map(host_values).collect();
        if step.l1 != 0.0 {
            let shared: Vec<FloatTensor<Host>> = params.iter().cloned().map(primitive).collect();
            let values: Vec<Cow<'_, [f32]>> = shared.iter().map(values).collect();
            let penalty = add_l1(&mut grads, &values, step.l1 as f32, members);
            if let Some(losses) = &mut losses {
                losses
                    .iter_mut()
                    .zip(penalty)
                    .for_each(|(l, p)| *l += step.l1 as f32 * p);
            }
        }
        if let Some(max_norm) = step.clip_norm {
            clip(&mut grads, max_norm as f32, members);
        }
        let mut stepped = Vec::with_capacity(params.len());
        let mut new_moments = Vec::with_capacity(params.len());
        for ((p, g), [m, v]) in params.into_iter().zip(grads).zip(moments) {
            let shape = p.dims();
            let [p, m, v] = adam_step(
                p.into_primitive().tensor(),
                tensor(g, shape),
                [m, v].map(|t| t.into_primitive().tensor()),
                &updates,
            )
            .map(|t| Tensor::from_primitive(TensorPrimitive::Float(t)));
            stepped.push(p);
            new_moments.push([m, v]);
        }
        (stepped, new_moments)
    };
    let losses = losses.map(|l| {
        let len = l.len();
        Tensor::from_primitive(TensorPrimitive::Float(tensor(l, [len])))
    });
    MlpStepped {
        params,
        moments,
        losses,
    }
}

/// Each member's mean cross-entropy over its rows of `logits` `[members, rows, classes]`
/// against `labels` `[members, rows]`, and its gradient at the logits, `(softmax - one-hot) /
/// rows`, as the composition's log-softmax takes it (the maximum subtracted first).
fn cross_entropy(
    logits: &Tensor<Host, 3>,
    labels: Tensor<Host, 2, Int>,
) -> (Tensor<Host, 3>, Vec<f32>) {
    let [members, rows, classes] = logits.dims();
    let shared = primitive(logits.clone());
    let logits = values(&shared);
    let labels: Vec<i64> = labels.into_data().iter::<i64>().collect();
    let mut gradient = vec![0f32; logits.len()];
    let mut losses = vec![0f32; members];
    let per_row = 1.0 / rows.max(1) as f32;
    for (r, ((z, g), &label)) in logits
        .chunks_exact(classes.max(1))
        .zip(gradient.chunks_exact_mut(classes.max(1)))
        .zip(&labels)
        .enumerate()
    {
        let max = z.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let sum: f32 = z.iter().map(|&v| (v - max).exp()).sum();
        let label = label as usize;
        losses[r / rows] += (max + sum.ln() - z.get(label).copied().unwrap_or(f32::NAN)) * per_row;
        for (k, (g, &v)) in g.iter_mut().zip(z).enumerate() {
            let p = (v - max).exp() / sum;
            *g = (p - f32::from(u8::from(k == label))) * per_row;
        }
    }
    (from_values(gradient, [members, rows, classes]), losses)
}

/// Adds `l1 sign(p)` to every gradient (0 at 0, the subgradient autodiff takes) and returns
/// each member's `sum |p|`.
fn add_l1(grads: &mut [Vec<f32>], values: &[Cow<'_, [f32]>], l1: f32, members: usize) -> Vec<f32> {
    let mut penalty = vec![0f32; members];
    for (grads, values) in grads.iter_mut().zip(values) {
        let per = values.len() / members.max(1);
        for (m, (grads, values)) in grads
            .chunks_mut(per.max(1))
            .zip(values.chunks(per.max(1)))
            .enumerate()
        {
            for (g, &p) in grads.iter_mut().zip(values) {
                let sign = if p > 0.0 {
                    1.0
                } else if p < 0.0 {
                    -1.0
                } else {
                    0.0
                };
                *g += l1 * sign;
            }
            // In partial sums: added into `penalty[m]` value by value, each add waited on
            // the one before (most of the step).
            penalty[m] += lane_abs_sum(values);
        }
    }
    penalty
}

/// Scales each member's whole gradient to a norm of at most `max_norm` (coefficient
/// `max_norm / (norm + 1e-6)`, capped at 1, as the composition's
/// [`clip_member_norms`](super::clip_member_norms)).
fn clip(grads: &mut [Vec<f32>], max_norm: f32, members: usize) {
    let mut squares = vec![0f32; members];
    for values in grads.iter() {
        let per = (values.len() / members.max(1)).max(1);
        for (s, member) in squares.iter_mut().zip(values.chunks(per)) {
            // In partial sums: one sum in order is a chain of dependent adds.
            *s += lane_dot(member, member);
        }
    }
    let coefficients: Vec<f32> = squares
        .iter()
        .map(|s| (max_norm / (s.sqrt() + 1e-6)).min(1.0))
        .collect();
    for values in grads.iter_mut() {
        let per = (values.len() / members.max(1)).max(1);
        for (c, member) in coefficients.iter().zip(values.chunks_mut(per)) {
            member.iter_mut().for_each(|v| *v *= c);
        }
    }
}

/// What one weight's Adam update costs, in multiply-adds (its square root and two divisions
/// take several cycles each), for the choice of lanes: counting the weight gradient's
/// multiply-adds alone ran the GAN generator's first layer (1.6M weights at one row) on one
/// thread.
const ADAM_MULTIPLY_ADDS: usize = 16;

/// A layer's sizes for one fused step.
#[derive(Clone, Copy)]
struct LayerShape {
    rows: usize,
    fan_in: usize,
    fan_out: usize,
    /// Whether the gradient below the layer is needed (not for the first layer).
    below_wanted: bool,
}

/// Consecutive weight rows of one member, with their moments.
struct WeightRows<'a> {
    member: usize,
    /// The index of the first of them among the layer's `fan_in` rows.
    first_row: usize,
    weight: &'a mut [f32],
    first: &'a mut [f32],
    second: &'a mut [f32],
}

quench_host::simd_dispatch! {
    /// Updates the rows (where their member steps) and returns `(member, first_row, below)`,
    /// `below` the gradient at the layer's input for these rows, `[rows, weight rows]` (empty
    /// when not wanted), taken from the weights before the update.
    fn step_rows(
        job: WeightRows<'_>,
        shape: LayerShape,
        input: &[f32],
        delta: &[f32],
        update: Option<&AdamUpdate>,
    ) -> (usize, usize, Vec<f32>) => step_rows_portable
}

#[inline(always)]
fn step_rows_portable(
    job: WeightRows<'_>,
    shape: LayerShape,
    input: &[f32],
    delta: &[f32],
    update: Option<&AdamUpdate>,
) -> (usize, usize, Vec<f32>) {
    let LayerShape {
        rows,
        fan_in,
        fan_out,
        below_wanted,
    } = shape;
    let count = job.weight.len() / fan_out;
    let mut below = vec![0.0f32; if below_wanted { rows * count } else { 0 }];
    let deltas = &delta[job.member * rows * fan_out..(job.member + 1) * rows * fan_out];
    let inputs = &input[job.member * rows * fan_in..(job.member + 1) * rows * fan_in];
    // Where the member steps and the layer sees more than one row, the rows' weight
    // gradients first (a single row's is formed value by value in the update).
    let gradients = match update {
        Some(_) if rows > 1 => weight_gradients(inputs, deltas, job.first_row, count, shape),
        _ => Vec::new(),
    };
    let weight_rows = job
        .weight
        .chunks_exact_mut(fan_out)
        .zip(job.first.chunks_exact_mut(fan_out))
        .zip(job.second.chunks_exact_mut(fan_out));
    for (k, ((w, m1), m2)) in weight_rows.enumerate() {
        if below_wanted {
            for (r, d) in deltas.chunks_exact(fan_out).enumerate() {
                // In partial sums: one sum in order is a chain of `fan_out` dependent adds
                // (4,096 in the GAN's last layer).
                below[r * count + k] = lane_dot(w, d);
            }
        }
        let Some(update) = update else { continue };
        if rows == 1 {
            // The gradient `x_i d`, formed value by value: no buffer filled and read back.
            let xi = inputs[job.first_row + k];
            for (((w, m1), m2), &d) in w.iter_mut().zip(m1).zip(m2).zip(deltas) {
                update.apply(w, xi * d, m1, m2);
            }
        } else {
            let gradient = &gradients[k * fan_out..(k + 1) * fan_out];
            update.apply_all(w, gradient, m1, m2);
        }
    }
    (job.member, job.first_row, below)
}

/// The gradients of weight rows `first_row..first_row + count` of one member, `[count,
/// fan_out]`: row `i`'s is `sum_r input[r, i] delta[r, :]`, summed over the rows in order.
/// The rows go in the outer loop, so that the `count` sums advance side by side: a weight
/// row at a time, a layer one output wide (the GAN discriminator's last) made each sum a
/// chain of `rows` dependent adds.
#[inline(always)]
fn weight_gradients(
    inputs: &[f32],
    deltas: &[f32],
    first_row: usize,
    count: usize,
    shape: LayerShape,
) -> Vec<f32> {
    let LayerShape {
        fan_in, fan_out, ..
    } = shape;
    let mut gradients = vec![0.0f32; count * fan_out];
    for (x, d) in inputs
        .chunks_exact(fan_in)
        .zip(deltas.chunks_exact(fan_out))
    {
        let x = &x[first_row..first_row + count];
        if fan_out == 1 {
            // One value per weight row: the sums side by side in one vector.
            for (g, &xi) in gradients.iter_mut().zip(x) {
                *g += xi * d[0];
            }
        } else {
            for (g, &xi) in gradients.chunks_exact_mut(fan_out).zip(x) {
                g.iter_mut().zip(d).for_each(|(g, &v)| *g += xi * v);
            }
        }
    }
    gradients
}

/// The backward pass fused with Adam, last layer first: the updated parameters and moments.
fn fused_step(
    activation: Activation,
    params: Vec<Tensor<Host, 3>>,
    moments: Vec<[Tensor<Host, 3>; 2]>,
    tape: MlpTape<Host>,
    upstream: Vec<f32>,
    updates: &[Option<AdamUpdate>],
) -> (Vec<Tensor<Host, 3>>, Vec<[Tensor<Host, 3>; 2]>) {
    let shapes: Vec<[usize; 3]> = params.iter().map(Tensor::dims).collect();
    let members = shapes[0][0];
    let rows = tape.output.dims()[1];
    let mut values: Vec<Vec<f32>> = params.into_iter().map(host_values).collect();
    let mut moments: Vec<[Vec<f32>; 2]> = moments
        .into_iter()
        .map(|pair| pair.map(host_values))
        .collect();
    let shared: [Vec<FloatTensor<Host>>; 3] =
        [tape.inputs, tape.kept, tape.masks].map(|ts| ts.into_iter().map(primitive).collect());
    let [inputs, kept, masks] = shared.each_ref().map(|ts| {
        ts.iter()
            .map(quench_host::tensor::values)
            .collect::<Vec<_>>()
    });
    let mut delta = upstream;
    for l in (0..values.len() / 2).rev() {
        let [_, fan_in, fan_out] = shapes[2 * l];
        let (weight, rest) = values[2 * l..].split_at_mut(1);
        let (weight, bias) = (&mut weight[0], &mut rest[0]);
        let (weight_moments, rest) = moments[2 * l..].split_at_mut(1);
        let ([w_first, w_second], [b_first, b_second]) = (&mut weight_moments[0], &mut rest[0]);
        for (m, update) in updates.iter().enumerate() {
            let Some(update) = update else { continue };
            let span = m * fan_out..(m + 1) * fan_out;
            let mut sum = vec![0.0f32; fan_out];
            for d in delta[m * rows * fan_out..(m + 1) * rows * fan_out].chunks_exact(fan_out) {
                sum.iter_mut().zip(d).for_each(|(s, &v)| *s += v);
            }
            update.apply_all(
                &mut bias[span.clone()],
                &sum,
                &mut b_first[span.clone()],
                &mut b_second[span],
            );
        }
        let below_wanted = l > 0;
        let lanes = lanes_for(members * fan_in * fan_out * (rows + ADAM_MULTIPLY_ADDS));
        let piece = fan_in.div_ceil(lanes).max(1) * fan_out;
        let mut jobs = Vec::new();
        for (m, ((w, m1), m2)) in weight
            .chunks_mut(fan_in * fan_out)
            .zip(w_first.chunks_mut(fan_in * fan_out))
            .zip(w_second.chunks_mut(fan_in * fan_out))
            .enumerate()
        {
            for (k, ((w, m1), m2)) in w
                .chunks_mut(piece)
                .zip(m1.chunks_mut(piece))
                .zip(m2.chunks_mut(piece))
                .enumerate()
            {
                jobs.push(WeightRows {
                    member: m,
                    first_row: k * piece / fan_out,
                    weight: w,
                    first: m1,
                    second: m2,
                });
            }
        }
        let shape = LayerShape {
            rows,
            fan_in,
            fan_out,
            below_wanted,
        };
        let input = &inputs[l];
        let belows = in_lanes(jobs, lanes, |group| {
            group
                .into_iter()
                .map(|job| {
                    let update = updates.get(job.member).and_then(Option::as_ref);
                    step_rows(job, shape, input, &delta, update)
                })
                .collect::<Vec<_>>()
        });
        if !below_wanted {
            break;
        }
        // Gather the jobs' `[rows, their weight rows]` blocks into `[members, rows, fan_in]`,
        // then through the dropout mask and the activation's slope.
        let mut below = vec![0.0f32; members * rows * fan_in];
        for (m, first_row, block) in belows.into_iter().flatten() {
            let width = block.len() / rows.max(1);
            for (r, values) in block.chunks_exact(width.max(1)).enumerate() {
                let at = (m * rows + r) * fan_in + first_row;
                below[at..at + width].copy_from_slice(values);
            }
        }
        if let Some(mask) = masks.get(l - 1) {
            below
                .iter_mut()
                .zip(mask.iter())
                .for_each(|(b, &k)| *b *= k);
        }
        let mut next = vec![0.0f32; below.len()];
        pre_activation_gradient(&mut next, &kept[l - 1], &below, activation);
        delta = next;
    }
    let params = values
        .into_iter()
        .zip(&shapes)
        .map(|(v, &shape)| from_values(v, shape))
        .collect();
    let moments = moments
        .into_iter()
        .zip(&shapes)
        .map(|(pair, &shape)| pair.map(|v| from_values(v, shape)))
        .collect();
    (params, moments)
}
