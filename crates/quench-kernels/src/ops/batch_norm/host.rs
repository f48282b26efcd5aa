//! Host kernel of batch normalisation in training mode ([`crate::ops::batch_norm`]) on the CPU
//! backend in f32: per member, the channel statistics accumulated over the rows (rows are
//! contiguous, so each pass runs along the channels and vectorises), then one pass writing
//! the standardised input and the output; backward one pass accumulating the gain's and
//! shift's gradients, one writing the input's. Members run on the lanes.

use burn::tensor::TensorMetadata;
use burn::tensor::ops::FloatTensor;

use quench_host::batch_norm::{Backward, Forward, backward_member, forward_member};
use quench_host::lanes::in_lanes;
use quench_host::lanes::lanes_for;
use quench_host::tensor::{Host, in_f32, tensor, values};

/// `[output, normed, mean, var, inv_std]` of `x` `[members, rows, channels]`; the statistics
/// `[members, 1, channels]`.
pub(crate) fn batch_norm_forward(
    x: FloatTensor<Host>,
    gamma: FloatTensor<Host>,
    beta: FloatTensor<Host>,
    eps: f64,
    rectify: bool,
) -> [FloatTensor<Host>; 5] {
    let [x, gamma, beta] = [x, gamma, beta].map(in_f32);
    let xs = x.shape();
    let (members, rows, width) = (xs[0], xs[1], xs[2]);
    let per_member = [members, 1, width];
    assert_eq!(
        gamma.shape().dims::<3>(),
        per_member,
        "gamma: one gain per member"
    );
    assert_eq!(
        beta.shape().dims::<3>(),
        per_member,
        "beta: one shift per member"
    );
    let (xv, gv, bv) = (values(&x), values(&gamma), values(&beta));
    let [mut output, mut normed] = [(); 2].map(|_| vec![0.0; members * rows * width]);
    let [mut mean, mut var, mut inv_std] = [(); 3].map(|_| vec![0.0; members * width]);
    let block = (rows * width).max(1);
    let jobs: Vec<(usize, Forward<'_>)> = output
        .chunks_mut(block)
        .zip(normed.chunks_mut(block))
        .zip(mean.chunks_mut(width.max(1)))
        .zip(var.chunks_mut(width.max(1)))
        .zip(inv_std.chunks_mut(width.max(1)))
        .enumerate()
        .map(|(m, ((((output, normed), mean), var), inv_std))| {
            let out = Forward {
                rows: [output, normed],
                stats: [mean, var, inv_std],
            };
            (m, out)
        })
        .collect();
    if rows > 0 {
        in_lanes(jobs, lanes_for(members * rows * width * 8), |group| {
            for (m, out) in group {
                let member = m * width..(m + 1) * width;
                let x = &xv[m * rows * width..(m + 1) * rows * width];
                let (gamma, beta) = (&gv[member.clone()], &bv[member]);
                forward_member(x, gamma, beta, eps as f32, rectify, out);
            }
        });
    }
    drop((xv, gv, bv));
    let full = [members, rows, width];
    let stats = [members, 1, width];
    [
        tensor(output, full),
        tensor(normed, full),
        tensor(mean, stats),
        tensor(var, stats),
        tensor(inv_std, stats),
    ]
}

/// Batch normalisation's gradients `[x, gamma, beta]` from its tape and `dy`.
pub(crate) fn batch_norm_backward(
    [normed, inv_std]: [FloatTensor<Host>; 2],
    rectified: Option<FloatTensor<Host>>,
    gamma: FloatTensor<Host>,
    dy: FloatTensor<Host>,
) -> [FloatTensor<Host>; 3] {
    let [normed, inv_std, gamma, dy] = [normed, inv_std, gamma, dy].map(in_f32);
    let rectified = rectified.map(in_f32);
    let ns = normed.shape();
    let (members, rows, width) = (ns[0], ns[1], ns[2]);
    let (nv, iv, gv, dyv) = (
        values(&normed),
        values(&inv_std),
        values(&gamma),
        values(&dy),
    );
    let rv = rectified.as_ref().map(values);
    let mut dx = vec![0.0; members * rows * width];
    let [mut dgamma, mut dbeta] = [(); 2].map(|_| vec![0.0; members * width]);
    let block = (rows * width).max(1);
    // Per member: its rows of dx and its gain's and shift's gradients.
    let jobs: Vec<(usize, [&mut [f32]; 3])> = dx
        .chunks_mut(block)
        .zip(dgamma.chunks_mut(width.max(1)))
        .zip(dbeta.chunks_mut(width.max(1)))
        .map(|((dx, dgamma), dbeta)| [dx, dgamma, dbeta])
        .enumerate()
        .collect();
    if rows > 0 {
        in_lanes(jobs, lanes_for(members * rows * width * 8), |group| {
            for (m, [dx, dgamma, dbeta]) in group {
                let member_rows = m * rows * width..(m + 1) * rows * width;
                let member = m * width..(m + 1) * width;
                let input = Backward {
                    rows: [&nv[member_rows.clone()], &dyv[member_rows.clone()]],
                    rectified: rv.as_deref().map(|r| &r[member_rows]),
                    channel: [&gv[member.clone()], &iv[member]],
                };
                backward_member(input, dx, dgamma, dbeta);
            }
        });
    }
    drop((nv, iv, gv, dyv, rv));
    let stats = [members, 1, width];
    [
        tensor(dx, [members, rows, width]),
        tensor(dgamma, stats),
        tensor(dbeta, stats),
    ]
}
