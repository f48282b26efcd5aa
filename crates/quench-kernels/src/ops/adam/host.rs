//! Host kernel of the member Adam update ([`crate::ops::adam`]) on the CPU backend in f32: one
//! pass per value reading the parameter, gradient and moments where they are and writing the
//! three results, each member's slices cut into pieces over the lanes when large.

use burn::tensor::TensorMetadata;
use burn::tensor::ops::FloatTensor;

use crate::ops::adam::{AdamConfig, AdamStep, AdamUpdate};
use crate::readback::to_host_f32;
use quench_host::lanes::{host_cores, in_lanes};
use quench_host::tensor::{Host, in_f32, tensor, values};

/// Values below which an update runs on the calling thread only.
const THREADED_FROM: usize = 1 << 16;

/// One piece: the inputs `[p, g, m, v]` and the outputs `[p, m, v]` of a member's slice.
struct Piece<'a> {
    update: Option<AdamUpdate>,
    inputs: [&'a [f32]; 4],
    outputs: [&'a mut [f32]; 3],
}

quench_host::simd_dispatch! {
    /// The update of one piece (a copy where its member does not step).
    fn run(piece: Piece<'_>) => run_portable
}

#[inline(always)]
fn run_portable(piece: Piece<'_>) {
    let [p, g, m, v] = piece.inputs;
    let [p_out, m_out, v_out] = piece.outputs;
    let Some(update) = piece.update else {
        p_out.copy_from_slice(p);
        m_out.copy_from_slice(m);
        v_out.copy_from_slice(v);
        return;
    };
    let values = p.iter().zip(g).zip(m).zip(v);
    let outputs = p_out.iter_mut().zip(m_out.iter_mut()).zip(v_out.iter_mut());
    for ((((&p, &g), &m), &v), ((p_out, m_out), v_out)) in values.zip(outputs) {
        let (mut p, mut m, mut v) = (p, m, v);
        update.apply(&mut p, g, &mut m, &mut v);
        (*p_out, *m_out, *v_out) = (p, m, v);
    }
}

/// The updated `[param, m, v]` of `param`, `grad`, `m`, `v` (`[members, rows, cols]`), member
/// `i` by `updates[i]` (`None`: unchanged).
pub(crate) fn adam_step(
    param: FloatTensor<Host>,
    grad: FloatTensor<Host>,
    [m, v]: [FloatTensor<Host>; 2],
    updates: &[Option<AdamUpdate>],
) -> [FloatTensor<Host>; 3] {
    let [param, grad, m, v] = [param, grad, m, v].map(in_f32);
    let shape = param.shape();
    let dims = [shape[0], shape[1], shape[2]];
    let inputs = [&param, &grad, &m, &v].map(values);
    let len = inputs[0].len();
    let [mut p_out, mut m_out, mut v_out] = [(); 3].map(|_| vec![0f32; len]);
    let per = (dims[1] * dims[2]).max(1);
    let lanes = if len >= THREADED_FROM {
        host_cores()
    } else {
        1
    };
    let piece = len.div_ceil(lanes).max(1);
    let mut jobs = Vec::new();
    let outputs = p_out
        .chunks_mut(per)
        .zip(m_out.chunks_mut(per))
        .zip(v_out.chunks_mut(per));
    for (member, ((p_out, m_out), v_out)) in outputs.enumerate() {
        let at = member * per;
        let slices = outputs_in_pieces([p_out, m_out, v_out], piece);
        for (k, outputs) in slices.into_iter().enumerate() {
            let start = at + k * piece;
            let n = outputs[0].len();
            jobs.push(Piece {
                update: updates.get(member).copied().flatten(),
                inputs: [0, 1, 2, 3].map(|i| &inputs[i][start..start + n]),
                outputs,
            });
        }
    }
    in_lanes(jobs, lanes, |group| group.into_iter().for_each(run));
    drop(inputs);
    [p_out, m_out, v_out].map(|values| tensor(values, dims))
}

/// Each of `members` members' update for the step's coefficients `step`, read back (free
/// on the host); `None` for a member that does not step. A coefficient of one member stands
/// for all.
pub(crate) fn updates(
    config: AdamConfig,
    step: &AdamStep<Host>,
    members: usize,
) -> Vec<Option<AdamUpdate>> {
    let host = |t: &burn::tensor::Tensor<Host, 3>| to_host_f32(t.clone());
    let (step_size, root) = (host(&step.step_size), host(&step.root_correction));
    let decay = step.decay.as_ref().map(host);
    let active: Option<Vec<bool>> = step
        .active
        .as_ref()
        .map(|a| a.clone().into_data().iter::<bool>().collect());
    (0..members)
        .map(|m| {
            let steps = active.as_ref().is_none_or(|a| member_value(a, m));
            steps.then(|| {
                let decay = decay.as_ref().map_or(1.0, |d| member_value(d, m));
                AdamUpdate::with(
                    config,
                    member_value(&step_size, m),
                    member_value(&root, m),
                    decay,
                )
            })
        })
        .collect()
}

/// Member `m`'s value of a per-member coefficient; one value stands for every member.
fn member_value<T: Copy>(values: &[T], m: usize) -> T {
    values[if values.len() == 1 { 0 } else { m }]
}

/// The coefficients of [`crate::ops::QuenchOps::adam_coefficients`] in f64 from each member's
/// step count `steps` and rate `lr` (one value of either stands for every member): `lr / (1 -
/// beta1^t)`, `sqrt(1 - beta2^t)` and, where the step decays, `1 - lr wd`, each rounded to f32
/// once; the corrections `-expm1(t ln beta)` exactly, where the composition takes its series.
pub(crate) fn coefficients(
    config: AdamConfig,
    steps: &[f32],
    lr: &[f32],
) -> (Vec<f32>, Vec<f32>, Option<Vec<f32>>) {
    let members = steps.len().max(lr.len());
    let correction = |t: f64, beta: f64| (-(t * beta.ln()).exp_m1()).max(1e-12);
    let at = |values: &[f32], m: usize| f64::from(member_value(values, m));
    let (mut step_size, mut root) = (Vec::with_capacity(members), Vec::with_capacity(members));
    for m in 0..members {
        let (t, rate) = (at(steps, m), at(lr, m));
        step_size.push((rate / correction(t, config.beta1)) as f32);
        root.push(correction(t, config.beta2).sqrt() as f32);
    }
    let decay = config.decays().then(|| {
        (0..members)
            .map(|m| (1.0 - at(lr, m) * config.weight_decay) as f32)
            .collect()
    });
    (step_size, root, decay)
}

/// Three equal slices cut into pieces of at most `piece` values, side by side.
fn outputs_in_pieces(outputs: [&mut [f32]; 3], piece: usize) -> Vec<[&mut [f32]; 3]> {
    let [p, m, v] = outputs;
    p.chunks_mut(piece)
        .zip(m.chunks_mut(piece))
        .zip(v.chunks_mut(piece))
        .map(|((p, m), v)| [p, m, v])
        .collect()
}
