//! Host kernels of the dense layer and layer normalisation ([`crate::ops::dense`]) on the CPU
//! backend in f32.
//!
//! The dense layer is one product per member through [`quench_host::gemm`], then one pass
//! adding the bias and applying the activation in place (and, where the layer keeps the
//! activation's derivative, writing it into a buffer of its own); backward, one pass for the
//! pre-activation gradient (the output's gradient times the kept derivative, or the derivative
//! found from the output), then `dx = dz W^T`, `dW = x^T dz` and the bias sums. Large layers
//! split over lanes: rows of `x` forward and for `dx`, rows of `dW` (columns of `x`)
//! for the weight gradient. Layer normalisation is three passes over each row forward (mean,
//! centred variance, output) and two backward, rows split over lanes.

use burn::tensor::TensorMetadata;
use burn::tensor::ops::FloatTensor;

use crate::ops::dense::Activation;
use quench_host::buffers::{recycle, recycle_tensor, take};
use quench_host::gemm::{MatRef, add_rows, gemm, gemm_strided};
use quench_host::lanes::{in_lanes, lanes_for};
use quench_host::layer_norm::{norm_rows, norm_rows_backward};
use quench_host::math::{gelu_and_derivative, relu, tanh};
use quench_host::tensor::{Host, in_f32, tensor, values};

/// `0..len` cut into `parts` nearly equal ranges.
fn ranges(len: usize, parts: usize) -> Vec<std::ops::Range<usize>> {
    let parts = parts.clamp(1, len.max(1));
    (0..parts)
        .map(|p| p * len / parts..(p + 1) * len / parts)
        .collect()
}

/// Work items over `buffer`, `[members, rows, width]`: per member, its rows cut into about
/// `parts / members` ranges, each with that range's rows of the buffer.
fn member_rows(
    buffer: &mut [f32],
    [members, rows, width]: [usize; 3],
    parts: usize,
) -> Vec<(usize, std::ops::Range<usize>, &mut [f32])> {
    let mut jobs = Vec::new();
    let mut rest = buffer;
    for m in 0..members {
        for range in ranges(rows, parts.div_ceil(members.max(1))) {
            let (part, tail) = rest.split_at_mut(range.len() * width);
            rest = tail;
            jobs.push((m, range, part));
        }
    }
    jobs
}

quench_host::simd_dispatch! {
    /// Adds `bias` to every row of `z` (`bias.len()` wide), then applies `activation` if any,
    /// in place; where the activation keeps its derivative
    /// ([`Activation::keeps_derivative`]), the derivative at each value into `derivatives`
    /// (`z`'s length; empty otherwise).
    fn bias_activate(z: &mut [f32], derivatives: &mut [f32], bias: &[f32], activation: Option<Activation>) => bias_activate_portable
}

#[inline(always)]
fn bias_activate_portable(
    z: &mut [f32],
    derivatives: &mut [f32],
    bias: &[f32],
    activation: Option<Activation>,
) {
    let keeps = activation.is_some_and(|a| a.keeps_derivative());
    debug_assert_eq!(derivatives.len(), if keeps { z.len() } else { 0 });
    let width = bias.len();
    if width == 0 {
        return;
    }
    let rows = z.chunks_exact_mut(width);
    // One loop per activation, so each vectorises on its own.
    macro_rules! in_place {
        ($f:expr) => {
            for row in rows {
                for (v, b) in row.iter_mut().zip(bias) {
                    *v = $f(*v + b);
                }
            }
        };
    }
    macro_rules! with_derivative {
        ($f:expr) => {
            for (row, derivatives) in rows.zip(derivatives.chunks_exact_mut(width)) {
                for ((v, d), b) in row.iter_mut().zip(derivatives).zip(bias) {
                    (*v, *d) = $f(*v + b);
                }
            }
        };
    }
    match activation {
        None => rows.for_each(|row| row.iter_mut().zip(bias).for_each(|(v, b)| *v += b)),
        Some(Activation::Relu) => in_place!(relu),
        Some(Activation::Tanh) => in_place!(tanh),
        Some(Activation::LeakyRelu(negative_slope)) => {
            let negative_slope = negative_slope as f32;
            // Slope 1 from zero up.
            with_derivative!(|v: f32| (
                if v > 0.0 { v } else { negative_slope * v },
                if v >= 0.0 { 1.0 } else { negative_slope },
            ))
        }
        Some(Activation::Gelu) => with_derivative!(gelu_and_derivative),
    }
}

quench_host::simd_dispatch! {
    /// `dz = dy f'(z)` from what the layer kept: the derivative `f'(z)` itself where the
    /// activation keeps it, else its output.
    pub(crate) fn pre_activation_gradient(dz: &mut [f32], kept: &[f32], dy: &[f32], activation: Activation) => pre_activation_gradient_portable
}

#[inline(always)]
fn pre_activation_gradient_portable(
    dz: &mut [f32],
    kept: &[f32],
    dy: &[f32],
    activation: Activation,
) {
    match activation {
        Activation::LeakyRelu(_) | Activation::Gelu => {
            for ((d, s), g) in dz.iter_mut().zip(kept).zip(dy) {
                *d = g * s;
            }
        }
        Activation::Tanh => {
            for ((d, y), g) in dz.iter_mut().zip(kept).zip(dy) {
                *d = g * (1.0 - y * y);
            }
        }
        // From its output: positive where the input is.
        Activation::Relu => {
            for ((d, k), g) in dz.iter_mut().zip(kept).zip(dy) {
                *d = if *k > 0.0 { *g } else { 0.0 };
            }
        }
    }
}

/// `activation(x W + b)` for `x` `[members, rows, fan_in]`, `weight` `[members, fan_in,
/// fan_out]`, `bias` `[members, 1, fan_out]`, and what the backward pass needs (the
/// activation's derivative where it keeps it, else the output).
pub(crate) fn dense_forward(
    x: FloatTensor<Host>,
    weight: FloatTensor<Host>,
    bias: FloatTensor<Host>,
    activation: Option<Activation>,
) -> [FloatTensor<Host>; 2] {
    let [x, weight, bias] = [x, weight, bias].map(in_f32);
    let (xs, ws) = (x.shape(), weight.shape());
    let (members, rows, fan_in, fan_out) = (xs[0], xs[1], xs[2], ws[2]);
    let shape = [members, rows, fan_out];
    let (xv, wv, bv) = (values(&x), values(&weight), values(&bias));
    // Every row is written by its product, then takes its bias and activation; an activation
    // that keeps its derivative writes it into its own buffer, every value.
    let mut out = take(members * rows * fan_out);
    let keeps_derivative = activation.is_some_and(|a| a.keeps_derivative());
    let mut derivatives = if keeps_derivative {
        take(out.len())
    } else {
        Vec::new()
    };
    if out.is_empty() {
        let empty = tensor(out, shape);
        return [empty.clone(), empty];
    }
    // As many lanes as the product needs, or the epilogue (about 8 operations per value).
    let parts = lanes_for(members * rows * fan_out * fan_in.max(8));
    // Jobs: (member, its rows' range, those rows of the output, and of the derivatives where
    // they are kept).
    let outs = member_rows(&mut out, shape, parts);
    let mut derivative_parts = if keeps_derivative {
        member_rows(&mut derivatives, shape, parts)
    } else {
        Vec::new()
    }
    .into_iter();
    let jobs: Vec<_> = outs
        .into_iter()
        .map(|(m, range, part)| (m, range, part, derivative_parts.next().map(|(_, _, d)| d)))
        .collect();
    let lanes = parts.min(jobs.len());
    in_lanes(jobs, lanes, |group| {
        for (m, range, part, derivatives) in group {
            let x_rows = &xv[(m * rows + range.start) * fan_in..(m * rows + range.end) * fan_in];
            gemm(
                part,
                MatRef::row_major(x_rows, range.len(), fan_in),
                MatRef::row_major(
                    &wv[m * fan_in * fan_out..(m + 1) * fan_in * fan_out],
                    fan_in,
                    fan_out,
                ),
                false,
            );
            // Right after its product, while a lane's rows are in the last-level cache (blocks
            // small enough for the second level cost a packing of the weight each and gained
            // nothing measurable: docs/benchmarks.md, twentieth session).
            let derivatives = derivatives.unwrap_or_default();
            bias_activate(
                part,
                derivatives,
                &bv[m * fan_out..(m + 1) * fan_out],
                activation,
            );
        }
    });
    drop((xv, wv, bv));
    let out = tensor(out, shape);
    if keeps_derivative {
        [out, tensor(derivatives, shape)]
    } else {
        [out.clone(), out]
    }
}

/// The dense layer's gradients `[x, weight, bias]` from its input, weight, what the forward
/// pass kept and the output's gradient `dy`.
pub(crate) fn dense_backward(
    x: FloatTensor<Host>,
    weight: FloatTensor<Host>,
    kept: FloatTensor<Host>,
    dy: FloatTensor<Host>,
    activation: Option<Activation>,
) -> [FloatTensor<Host>; 3] {
    let [x, weight, y, dy] = [x, weight, kept, dy].map(in_f32);
    let (xs, ws) = (x.shape(), weight.shape());
    let (members, rows, fan_in, fan_out) = (xs[0], xs[1], xs[2], ws[2]);
    let (xv, wv, yv, dyv) = (values(&x), values(&weight), values(&y), values(&dy));
    let dz: std::borrow::Cow<'_, [f32]> = match activation {
        None => dyv,
        Some(activation) => {
            // Scratch from the recycled buffers, every value written by the lanes below.
            let mut dz = take(dyv.len());
            let parts = lanes_for(dz.len() * 8);
            let chunk = dz.len().div_ceil(parts).max(1);
            let jobs: Vec<_> = dz.chunks_mut(chunk).enumerate().collect();
            in_lanes(jobs, parts, |group| {
                for (c, dz) in group {
                    let at = c * chunk..c * chunk + dz.len();
                    pre_activation_gradient(dz, &yv[at.clone()], &dyv[at], activation);
                }
            });
            dz.into()
        }
    };
    let parts = lanes_for(members * rows * fan_in * fan_out);
    let w_len = fan_in * fan_out;
    // dx by rows: dz [rows, fan_out] @ W^T [fan_out, fan_in], every row written.
    let mut dx = take(members * rows * fan_in);
    let jobs = member_rows(&mut dx, [members, rows, fan_in], parts);
    in_lanes(jobs, parts, |group| {
        for (m, range, part) in group {
            let dz_rows = &dz[(m * rows + range.start) * fan_out..(m * rows + range.end) * fan_out];
            gemm(
                part,
                MatRef::row_major(dz_rows, range.len(), fan_out),
                MatRef::row_major(&wv[m * w_len..(m + 1) * w_len], fan_in, fan_out).t(),
                false,
            );
        }
    });
    // dW by its rows (columns of x): x[:, block]^T [block, rows] @ dz [rows, fan_out], every
    // row written.
    let mut dw = take(members * w_len);
    let jobs = member_rows(&mut dw, [members, fan_in, fan_out], parts);
    in_lanes(jobs, parts, |group| {
        for (m, range, part) in group {
            let x_member = &xv[m * rows * fan_in + range.start..(m + 1) * rows * fan_in];
            gemm_strided(
                part,
                fan_out,
                MatRef::strided(x_member, rows, range.len(), fan_in).t(),
                MatRef::row_major(
                    &dz[m * rows * fan_out..(m + 1) * rows * fan_out],
                    rows,
                    fan_out,
                ),
                false,
            );
        }
    });
    let mut db = vec![0.0; members * fan_out];
    // (Chunks of at least one value: with no outputs there is no bias to sum into.)
    for (m, db) in db.chunks_mut(fan_out.max(1)).enumerate() {
        add_rows(db, &dz[m * rows * fan_out..(m + 1) * rows * fan_out]);
    }
    if let std::borrow::Cow::Owned(scratch) = dz {
        recycle(scratch);
    }
    drop((xv, wv, yv));
    // The input, the tape and the output's gradient are done with.
    [x, y, dy].into_iter().for_each(recycle_tensor);
    [
        tensor(dx, [members, rows, fan_in]),
        tensor(dw, [members, fan_in, fan_out]),
        tensor(db, [members, 1, fan_out]),
    ]
}

/// Layer normalisation of `x` `[members, rows, width]`: `(y, normed, inv_std)`, the last
/// `[members, rows, 1]`.
pub(crate) fn layer_norm_forward(
    x: FloatTensor<Host>,
    gamma: FloatTensor<Host>,
    beta: FloatTensor<Host>,
    eps: f64,
) -> [FloatTensor<Host>; 3] {
    let [x, gamma, beta] = [x, gamma, beta].map(in_f32);
    let xs = x.shape();
    let (members, rows, width) = (xs[0], xs[1], xs[2]);
    let (xv, gv, bv) = (values(&x), values(&gamma), values(&beta));
    // Every row of both is written.
    let mut y = take(members * rows * width);
    let mut normed = take(members * rows * width);
    let mut inv_std = vec![0.0; members * rows];
    let parts = lanes_for(members * rows * width * 4);
    let mut jobs = Vec::new();
    let (mut y_rest, mut n_rest, mut i_rest) = (&mut y[..], &mut normed[..], &mut inv_std[..]);
    for m in 0..members {
        for range in ranges(rows, parts.div_ceil(members)) {
            let len = range.len();
            let (y_part, y_tail) = y_rest.split_at_mut(len * width);
            let (n_part, n_tail) = n_rest.split_at_mut(len * width);
            let (i_part, i_tail) = i_rest.split_at_mut(len);
            (y_rest, n_rest, i_rest) = (y_tail, n_tail, i_tail);
            jobs.push((m, range, y_part, n_part, i_part));
        }
    }
    in_lanes(jobs, parts, |group| {
        for (m, range, y, normed, inv) in group {
            let x_rows = &xv[(m * rows + range.start) * width..(m * rows + range.end) * width];
            let member = m * width..(m + 1) * width;
            norm_rows(
                x_rows,
                &gv[member.clone()],
                &bv[member],
                eps as f32,
                y,
                normed,
                inv,
            );
        }
    });
    drop((xv, gv, bv));
    [
        tensor(y, [members, rows, width]),
        tensor(normed, [members, rows, width]),
        tensor(inv_std, [members, rows, 1]),
    ]
}

/// Layer normalisation's gradients `[x, gamma, beta]` from its tape and `dy`.
pub(crate) fn layer_norm_backward(
    normed: FloatTensor<Host>,
    inv_std: FloatTensor<Host>,
    gamma: FloatTensor<Host>,
    dy: FloatTensor<Host>,
) -> [FloatTensor<Host>; 3] {
    let [normed, inv_std, gamma, dy] = [normed, inv_std, gamma, dy].map(in_f32);
    let ns = normed.shape();
    let (members, rows, width) = (ns[0], ns[1], ns[2]);
    let (nv, iv, gv, dyv) = (
        values(&normed),
        values(&inv_std),
        values(&gamma),
        values(&dy),
    );
    // Every row written.
    let mut dx = take(members * rows * width);
    let parts = lanes_for(members * rows * width * 4);
    let jobs = member_rows(&mut dx, [members, rows, width], parts);
    // Each job's own gain and shift sums, added per member below in job order.
    let sums = in_lanes(jobs, parts, |group| {
        group
            .into_iter()
            .map(|(m, range, dx)| {
                let block = (m * rows + range.start) * width..(m * rows + range.end) * width;
                let mut d_gamma = vec![0.0; width];
                let mut d_beta = vec![0.0; width];
                norm_rows_backward(
                    &nv[block.clone()],
                    &iv[m * rows + range.start..m * rows + range.end],
                    &gv[m * width..(m + 1) * width],
                    &dyv[block],
                    dx,
                    &mut d_gamma,
                    &mut d_beta,
                );
                (m, d_gamma, d_beta)
            })
            .collect::<Vec<_>>()
    });
    let mut d_gamma = vec![0.0; members * width];
    let mut d_beta = vec![0.0; members * width];
    for (m, g, b) in sums.into_iter().flatten() {
        for (total, part) in d_gamma[m * width..(m + 1) * width].iter_mut().zip(&g) {
            *total += part;
        }
        for (total, part) in d_beta[m * width..(m + 1) * width].iter_mut().zip(&b) {
            *total += part;
        }
    }
    drop((nv, iv, gv, dyv));
    // The tape and the output's gradient are done with.
    [normed, dy].into_iter().for_each(recycle_tensor);
    [
        tensor(dx, [members, rows, width]),
        tensor(d_gamma, [members, 1, width]),
        tensor(d_beta, [members, 1, width]),
    ]
}
