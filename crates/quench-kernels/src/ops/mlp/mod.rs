//! Member MLPs, `members` independent networks of the same widths on a leading member axis,
//! and their training step as an operation ([`QuenchOps::mlp_train_step`]): the backward pass
//! from a loss at the output, an optional L1 penalty and per-member gradient clipping, and
//! the Adam update of every parameter, in one call.
//!
//! [`forward`] and [`backward`] chain the dense operation ([`QuenchOps::dense_forward`],
//! [`QuenchOps::dense_backward`]) layer by layer, so each backend's dense kernel serves them.
//! The training step's default composes them with Burn's element-wise ops and
//! [`QuenchOps::adam_step`] for the parameter list ([`composed_train_step`]). The CPU backend's
//! host kernel (`mlp::host`) fuses the backward pass with Adam where no clipping needs the whole
//! gradient first: each weight's gradient is formed where it is used and never stored, and
//! the gradient below a layer is taken from its weights before they move (six streams per
//! weight where the backward pass and then Adam take nine: the GAN's generator step, 1.6M
//! weights, is memory-bound). It serves the qRNG GAN's players, the qRNG classifier and,
//! through [`forward`] and [`backward`], the meta-learning policy's inner loop.
//!
//! Parameters are listed as a member MLP holds them: per layer, input first, weight `[members,
//! fan_in, fan_out]` then bias `[members, 1, fan_out]`. The activation follows every layer but
//! the last, whose output is raw (logits).

use burn::tensor::activation::{log_softmax, softmax};
use burn::tensor::backend::Backend;
use burn::tensor::{Int, Tensor};

use super::QuenchOps;
use super::adam::{AdamConfig, AdamStep};
use super::dense::Activation;
use super::view::ViewTo;
use crate::reductions::Reduce;
use crate::views::ReshapeTo;

#[cfg(any(feature = "cuda", feature = "wgpu"))]
pub(crate) mod cube;
pub(crate) mod host;

/// What a member MLP's forward pass keeps for its backward pass.
#[derive(Debug, Clone)]
pub struct MlpTape<B: Backend> {
    /// Every layer's input `[members, rows, fan_in]`, input first; a hidden layer's input is
    /// the layer below after its activation and dropout mask.
    pub inputs: Vec<Tensor<B, 3>>,
    /// Every hidden layer's [`DenseOutput::kept`](super::dense::DenseOutput::kept) `[members,
    /// rows, width]` (its activation's derivative or its output, before the dropout mask).
    pub kept: Vec<Tensor<B, 3>>,
    /// Every hidden layer's dropout mask (`0` where a unit is dropped, `1 / keep` elsewhere)
    /// `[members, rows, width]`; empty without dropout.
    pub masks: Vec<Tensor<B, 3>>,
    /// The network's output `[members, rows, outputs]`.
    pub output: Tensor<B, 3>,
}

/// The loss a training step descends, given at the network's output.
#[derive(Debug, Clone)]
pub enum MlpObjective<B: Backend> {
    /// The loss's gradient at the output, `[members, rows, outputs]`, computed by the caller
    /// (the GAN's players, whose losses couple the two networks).
    Upstream(Tensor<B, 3>),
    /// Each member's mean softmax cross-entropy over its rows, against class labels
    /// `[members, rows]` in `0..outputs`.
    CrossEntropy(Tensor<B, 2, Int>),
}

/// A training step's settings: the optimiser's constants and this step's per-member
/// coefficients, the network's activation and the regularisation.
#[derive(Debug, Clone)]
pub struct MlpStep<'a, B: QuenchOps> {
    /// Adam's constants.
    pub adam: AdamConfig,
    /// This step's per-member coefficients (rates, corrections, the members that step).
    pub coefficients: &'a AdamStep<B>,
    /// The hidden layers' nonlinearity.
    pub activation: Activation,
    /// The L1 coefficient: `l1 sum |p|` over every parameter joins each member's loss, its
    /// subgradient `l1 sign(p)` (0 at 0, as autodiff takes it) the gradient. 0: none.
    pub l1: f64,
    /// Each member's whole gradient scaled to a norm of at most this, as PyTorch's
    /// `clip_grad_norm_` (coefficient `max / (norm + 1e-6)`, capped at 1). `None`: no clip.
    pub clip_norm: Option<f64>,
}

/// The parameters and moments after a training step, and the losses it descended.
#[derive(Debug, Clone)]
pub struct MlpStepped<B: Backend> {
    /// The updated parameters, in the order given.
    pub params: Vec<Tensor<B, 3>>,
    /// The updated `[first, second]` moments of every parameter.
    pub moments: Vec<[Tensor<B, 3>; 2]>,
    /// Each member's loss `[members]` before the step (cross-entropy plus the L1 penalty) for
    /// [`MlpObjective::CrossEntropy`]; `None` for a gradient given by the caller.
    pub losses: Option<Tensor<B, 1>>,
}

/// The layers of `params` as `(weight, bias)` pairs.
fn layers<B: Backend>(
    params: &[Tensor<B, 3>],
) -> impl Iterator<Item = (&Tensor<B, 3>, &Tensor<B, 3>)> {
    params.chunks_exact(2).map(|pair| (&pair[0], &pair[1]))
}

/// The forward pass of the member MLP `params` on `x` `[members, rows, fan_in]`, with the
/// dropout `masks` (one per hidden layer, or none) after the hidden activations; the tape
/// holds the output `[members, rows, outputs]`.
pub fn forward<B: QuenchOps>(
    params: &[Tensor<B, 3>],
    activation: Activation,
    x: Tensor<B, 3>,
    masks: Vec<Tensor<B, 3>>,
) -> MlpTape<B> {
    let last = params.len() / 2 - 1;
    let mut inputs = Vec::with_capacity(last + 1);
    let mut kept = Vec::with_capacity(last);
    let mut h = x;
    for (l, (weight, bias)) in layers(params).enumerate() {
        let hidden = (l < last).then_some(activation);
        let out = B::dense_forward(h.clone(), weight, bias, hidden);
        inputs.push(h);
        h = match masks.get(l) {
            Some(mask) if l < last => out.output * mask.clone(),
            _ => out.output,
        };
        if l < last {
            kept.push(out.kept);
        }
    }
    MlpTape {
        inputs,
        kept,
        masks,
        output: h,
    }
}

/// The gradients of `sum(output * upstream)` with respect to every parameter, in `params`'
/// order, for the pass that made `tape` (consumed); `upstream` `[members, rows, outputs]`.
pub fn backward<B: QuenchOps>(
    params: &[Tensor<B, 3>],
    activation: Activation,
    tape: MlpTape<B>,
    upstream: Tensor<B, 3>,
) -> Vec<Tensor<B, 3>> {
    let MlpTape {
        mut inputs,
        mut kept,
        masks,
        output,
    } = tape;
    let count = params.len() / 2;
    let mut grads = Vec::with_capacity(params.len());
    let mut delta = upstream;
    for l in (0..count).rev() {
        let (weight, x) = (&params[2 * l], inputs.pop());
        let x = x.unwrap_or_else(|| unreachable!("the tape has one input per layer"));
        // The output layer is affine: what it keeps is its output, which its backward ignores.
        let (kept, hidden) = match l + 1 < count {
            true => (kept.pop(), Some(activation)),
            false => (Some(output.clone()), None),
        };
        let kept = kept.unwrap_or_else(|| unreachable!("the tape keeps every hidden layer"));
        let g = B::dense_backward(x, weight, kept, delta, hidden);
        grads.push(g.bias);
        grads.push(g.weight);
        delta = match (l.checked_sub(1)).and_then(|below| masks.get(below)) {
            Some(mask) => g.x * mask.clone(),
            None => g.x,
        };
    }
    grads.reverse();
    grads
}

/// Each member's mean softmax cross-entropy `[members]` over its rows of `logits` `[members,
/// rows, classes]` against `labels` `[members, rows]`, and its gradient at the logits,
/// `(softmax - one-hot) / rows`.
pub fn cross_entropy<B: Backend>(
    logits: Tensor<B, 3>,
    labels: Tensor<B, 2, Int>,
) -> (Tensor<B, 1>, Tensor<B, 3>) {
    let [members, rows, classes] = logits.dims();
    let labels = labels.reshape_to([members, rows, 1]);
    let loss = log_softmax(logits.clone(), 2)
        .gather(2, labels.clone())
        .mean_along(1)
        .reshape_to([members])
        .neg();
    let indices = Tensor::<B, 1, Int>::arange(0..classes as i64, &logits.device())
        .reshape_to([1, 1, classes])
        .expand([members, rows, classes]);
    let one_hot = labels
        .expand([members, rows, classes])
        .equal(indices)
        .float();
    let gradient = (softmax(logits, 2) - one_hot).div_scalar(rows.max(1) as f64);
    (loss, gradient)
}

/// The sum of each member's entries, `[members, 1, 1]`: one reduction over the flattened
/// member, along its contiguous axis (burn-ndarray sums a middle axis slice by slice, which
/// for a parameter list took a tenth of a Transformer epoch).
pub fn member_sums<B: QuenchOps>(t: Tensor<B, 3>) -> Tensor<B, 3> {
    let [members, rows, cols] = t.dims();
    t.view_to([members, rows * cols])
        .sum_along(1)
        .reshape_to([members, 1, 1])
}

/// The L2 norm of every member's whole gradient: `[members, 1, 1]`.
pub fn member_norms<B: QuenchOps>(grads: &[Tensor<B, 3>]) -> Tensor<B, 3> {
    grads
        .iter()
        .map(|g| member_sums(g.clone().powi_scalar(2)))
        .reduce(|a, b| a + b)
        .map(|s| s.sqrt())
        .unwrap_or_else(|| unreachable!("a parameter list is never empty"))
}

/// Scales each member's gradient so that its norm is at most `max_norm`, as PyTorch's
/// `clip_grad_norm_` does for one network (coefficient `max_norm / (norm + 1e-6)`, capped at 1).
pub fn clip_member_norms<B: QuenchOps>(
    grads: Vec<Tensor<B, 3>>,
    max_norm: f64,
) -> Vec<Tensor<B, 3>> {
    let denominator = member_norms(&grads) + 1e-6;
    // A division, not `recip`: burn-ndarray's `recip` is the CPU's 12-bit estimate
    // (`crate::testing::RECIP_ESTIMATE_BOUND`).
    let coef = (denominator.ones_like().mul_scalar(max_norm) / denominator).clamp_max(1.0);
    grads.into_iter().map(|g| g * coef.clone()).collect()
}

/// A member's loss at the network's output against class labels: each member's loss
/// `[members]` and its gradient at the logits `[members, rows, classes]` ([`cross_entropy`]
/// composed; a backend's kernel where it has one).
pub(crate) type OutputLoss<B> = fn(Tensor<B, 3>, Tensor<B, 2, Int>) -> (Tensor<B, 1>, Tensor<B, 3>);

/// The update of every parameter from its raw gradient: the L1 subgradient, the clip, Adam
/// ([`composed_update`]; a backend's kernels where it has them).
pub(crate) type Update<B> = for<'a> fn(
    &MlpStep<'a, B>,
    Vec<Tensor<B, 3>>,
    Vec<Tensor<B, 3>>,
    Vec<[Tensor<B, 3>; 2]>,
) -> Updated<B>;

/// What an [`Update`] gives back.
pub(crate) struct Updated<B: Backend> {
    /// The updated parameters, in the order given.
    pub params: Vec<Tensor<B, 3>>,
    /// Their updated `[first, second]` moments.
    pub moments: Vec<[Tensor<B, 3>; 2]>,
    /// Each member's L1 penalty `l1 sum |p|` `[members]` before the step; `None` without L1.
    pub penalty: Option<Tensor<B, 1>>,
}

/// The update's default in Burn's element-wise ops and [`QuenchOps::adam_step`]: the L1
/// subgradient `l1 sign(p)` added, each member's gradient clipped ([`clip_member_norms`]),
/// then Adam.
pub(crate) fn composed_update<B: QuenchOps>(
    step: &MlpStep<'_, B>,
    params: Vec<Tensor<B, 3>>,
    mut grads: Vec<Tensor<B, 3>>,
    moments: Vec<[Tensor<B, 3>; 2]>,
) -> Updated<B> {
    let mut penalty = None;
    if step.l1 != 0.0 {
        let members = params[0].dims()[0];
        let sums = params
            .iter()
            .map(|p| member_sums(p.clone().abs()))
            .reduce(|a, b| a + b)
            .unwrap_or_else(|| unreachable!("a parameter list is never empty"));
        penalty = Some(sums.reshape_to([members]).mul_scalar(step.l1));
        grads = grads
            .into_iter()
            .zip(&params)
            .map(|(g, p)| g + p.clone().sign().mul_scalar(step.l1))
            .collect();
    }
    if let Some(max_norm) = step.clip_norm {
        grads = clip_member_norms(grads, max_norm);
    }
    let (params, moments) = B::adam_step(step.adam, params, grads, moments, step.coefficients);
    Updated {
        params,
        moments,
        penalty,
    }
}

/// The default of [`QuenchOps::mlp_train_step`] in the seam's other operations and Burn's
/// element-wise ops: [`backward`], the penalty and the clip, then [`QuenchOps::adam_step`].
pub fn composed_train_step<B: QuenchOps>(
    step: &MlpStep<'_, B>,
    params: Vec<Tensor<B, 3>>,
    moments: Vec<[Tensor<B, 3>; 2]>,
    tape: MlpTape<B>,
    objective: MlpObjective<B>,
) -> MlpStepped<B> {
    train_step_with(
        step,
        params,
        moments,
        tape,
        objective,
        cross_entropy,
        composed_update,
    )
}

/// The training step with the loss at the output and the update computed by `loss` and
/// `update`, the backward pass between them by [`backward`]: the composition, and a CubeCL
/// backend's fused form of it ([`composed_train_step`], `mlp::cube`).
pub(crate) fn train_step_with<B: QuenchOps>(
    step: &MlpStep<'_, B>,
    params: Vec<Tensor<B, 3>>,
    moments: Vec<[Tensor<B, 3>; 2]>,
    tape: MlpTape<B>,
    objective: MlpObjective<B>,
    loss: OutputLoss<B>,
    update: Update<B>,
) -> MlpStepped<B> {
    let (upstream, losses) = match objective {
        MlpObjective::Upstream(upstream) => (upstream, None),
        MlpObjective::CrossEntropy(labels) => {
            let (loss, gradient) = loss(tape.output.clone(), labels);
            (gradient, Some(loss))
        }
    };
    let grads = backward(&params, step.activation, tape, upstream);
    let updated = update(step, params, grads, moments);
    let losses = match (losses, updated.penalty) {
        (Some(loss), Some(penalty)) => Some(loss + penalty),
        (losses, _) => losses,
    };
    MlpStepped {
        params: updated.params,
        moments: updated.moments,
        losses,
    }
}

/// One training step of the member MLP `params` with Adam moments `moments` (zeros before
/// the first), for the pass that made `tape` (consumed) and the loss `objective`
/// ([`QuenchOps::mlp_train_step`]).
pub fn train_step<B: QuenchOps>(
    step: &MlpStep<'_, B>,
    params: Vec<Tensor<B, 3>>,
    moments: Vec<[Tensor<B, 3>; 2]>,
    tape: MlpTape<B>,
    objective: MlpObjective<B>,
) -> MlpStepped<B> {
    B::mlp_train_step(step, params, moments, tape, objective)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::readback::{float_tensor, to_host_f32};
    use burn::backend::{Autodiff, NdArray};
    use burn::tensor::{Bool, TensorData};
    use quench_support::stats::max_abs_difference;

    type Host = NdArray<f32>;

    use crate::testing::spread;

    fn tensor<B: Backend>(
        shape: [usize; 3],
        salt: u32,
        scale: f32,
        device: &B::Device,
    ) -> Tensor<B, 3> {
        float_tensor(spread(shape.iter().product(), salt, scale), shape, device)
    }

    /// A member MLP of `widths`, weights at PyTorch's default scale `1 / sqrt(fan_in)`.
    fn network<B: Backend>(
        members: usize,
        widths: &[usize],
        device: &B::Device,
    ) -> Vec<Tensor<B, 3>> {
        widths
            .windows(2)
            .enumerate()
            .flat_map(|(l, w)| {
                let scale = 1.0 / (w[0] as f32).sqrt();
                [
                    tensor([members, w[0], w[1]], 2 * l as u32 + 1, scale, device),
                    tensor([members, 1, w[1]], 2 * l as u32 + 2, scale, device),
                ]
            })
            .collect()
    }

    /// Inverted-dropout masks at keep 0.75 for every hidden layer of `widths`.
    fn masks<B: Backend>(
        members: usize,
        rows: usize,
        widths: &[usize],
        device: &B::Device,
    ) -> Vec<Tensor<B, 3>> {
        widths[1..widths.len() - 1]
            .iter()
            .enumerate()
            .map(|(l, &w)| {
                let keep: Vec<f32> = spread(members * rows * w, 90 + l as u32, 1.0)
                    .into_iter()
                    .map(|u| if u < 0.5 { 1.0 / 0.75 } else { 0.0 })
                    .collect();
                float_tensor(keep, [members, rows, w], device)
            })
            .collect()
    }

    /// One case of the training step: the network's shape and what the step asks for.
    struct Case {
        widths: &'static [usize],
        rows: usize,
        activation: Activation,
        cross_entropy: bool,
        l1: f64,
        clip_norm: Option<f64>,
        dropout: bool,
    }

    const CASES: [Case; 3] = [
        // The GAN generator's form: one row per member, wide enough that the host kernel
        // splits its layers over the cores; the fused backward pass with Adam.
        Case {
            widths: &[1100, 400, 1000],
            rows: 1,
            activation: Activation::LeakyRelu(0.2),
            cross_entropy: false,
            l1: 0.0,
            clip_norm: None,
            dropout: false,
        },
        // The GAN discriminator's: many rows, a narrow output.
        Case {
            widths: &[2, 9, 1],
            rows: 33,
            activation: Activation::Tanh,
            cross_entropy: false,
            l1: 0.0,
            clip_norm: None,
            dropout: false,
        },
        // The qRNG classifier's: cross-entropy, L1, a clip that binds, dropout.
        Case {
            widths: &[12, 7, 5, 3],
            rows: 4,
            activation: Activation::Relu,
            cross_entropy: true,
            l1: 0.01,
            clip_norm: Some(0.05),
            dropout: true,
        },
    ];

    const MEMBERS: usize = 3;
    const LR: f64 = 0.01;

    /// Three steps of `case` on backend `B` by `run`, member 1 frozen at the second step:
    /// every step's losses and the final parameters, read back.
    fn three_steps<B: QuenchOps>(
        case: &Case,
        device: &B::Device,
        run: impl Fn(
            &MlpStep<'_, B>,
            Vec<Tensor<B, 3>>,
            Vec<[Tensor<B, 3>; 2]>,
            MlpTape<B>,
            MlpObjective<B>,
        ) -> MlpStepped<B>,
    ) -> (Vec<Vec<f32>>, Vec<Vec<f32>>) {
        let (rows, widths) = (case.rows, case.widths);
        let outputs = widths[widths.len() - 1];
        let mut params = network::<B>(MEMBERS, widths, device);
        let mut moments: Vec<[Tensor<B, 3>; 2]> = params
            .iter()
            .map(|p| [p.zeros_like(), p.zeros_like()])
            .collect();
        let config = AdamConfig {
            beta1: 0.7,
            weight_decay: 0.005,
            ..AdamConfig::default()
        };
        let mut losses = Vec::new();
        for step in 0..3u32 {
            let steps = Tensor::<B, 3>::full([MEMBERS, 1, 1], f64::from(step + 1), device);
            let lr = Tensor::<B, 3>::full([1, 1, 1], LR, device);
            let active = (step == 1).then(|| {
                Tensor::<B, 3, Bool>::from_data(
                    TensorData::new(vec![true, false, true], [MEMBERS, 1, 1]),
                    device,
                )
            });
            let coefficients = AdamStep::new(config, steps, lr, active);
            let step_settings = MlpStep {
                adam: config,
                coefficients: &coefficients,
                activation: case.activation,
                l1: case.l1,
                clip_norm: case.clip_norm,
            };
            let x = tensor::<B>([MEMBERS, rows, widths[0]], 40 + step, 1.5, device);
            let masks = if case.dropout {
                masks::<B>(MEMBERS, rows, widths, device)
            } else {
                Vec::new()
            };
            let tape = forward(&params, case.activation, x, masks);
            let objective = if case.cross_entropy {
                let labels: Vec<i64> = spread(MEMBERS * rows, 60 + step, 1.0)
                    .into_iter()
                    .map(|u| (((u + 1.0) / 2.0 * outputs as f32) as i64).min(outputs as i64 - 1))
                    .collect();
                MlpObjective::CrossEntropy(Tensor::from_data(
                    TensorData::new(labels, [MEMBERS, rows]),
                    device,
                ))
            } else {
                MlpObjective::Upstream(tensor([MEMBERS, rows, outputs], 70 + step, 1.0, device))
            };
            let stepped = run(&step_settings, params, moments, tape, objective);
            params = stepped.params;
            moments = stepped.moments;
            losses.extend(stepped.losses.map(to_host_f32));
        }
        (losses, params.into_iter().map(to_host_f32).collect())
    }

    /// The host kernel and the composition against each other. Adam moves each weight by
    /// about `lr` whatever its gradient's size, and the two sum a gradient in different orders
    /// (f32 rounding, relative 1e-6 at these sizes; more where momentum nearly cancels a
    /// gradient of the other sign): after three steps they agree to a thousandth of a step.
    /// The losses are the same cross-entropies and penalties summed in different orders:
    /// relative 1e-5 (150 parameters' magnitudes summed in f32 at most).
    #[test]
    fn the_host_step_is_the_composition() {
        let device = Default::default();
        for case in &CASES {
            let host = three_steps::<Host>(case, &device, |s, p, m, t, o| {
                Host::mlp_train_step(s, p, m, t, o)
            });
            let composed = three_steps::<Host>(case, &device, |s, p, m, t, o| {
                composed_train_step(s, p, m, t, o)
            });
            for (k, (h, c)) in host.1.iter().zip(&composed.1).enumerate() {
                let worst = max_abs_difference(h, c);
                assert!(
                    worst < 1e-3 * LR,
                    "{:?} parameter {k}: {worst}",
                    case.widths
                );
            }
            assert_eq!(host.0.len(), composed.0.len());
            for (h, c) in host.0.iter().zip(&composed.0) {
                let worst = max_abs_difference(h, c)
                    / (1.0 + c.iter().fold(0.0, |a: f64, &v| a.max(f64::from(v.abs()))));
                assert!(worst < 1e-5, "{:?} losses {h:?} against {c:?}", case.widths);
            }
        }
    }

    /// A member outside the step's mask keeps its parameters bit for bit, in both forms.
    #[test]
    fn a_frozen_member_stays() {
        let device = Default::default();
        let case = &CASES[2];
        let params = network::<Host>(MEMBERS, case.widths, &device);
        let config = AdamConfig::default();
        let active = Tensor::<Host, 3, Bool>::from_data(
            TensorData::new(vec![false, true, false], [MEMBERS, 1, 1]),
            &device,
        );
        let coefficients = AdamStep::new(
            config,
            Tensor::ones([MEMBERS, 1, 1], &device),
            Tensor::full([1, 1, 1], LR, &device),
            Some(active),
        );
        let step = MlpStep {
            adam: config,
            coefficients: &coefficients,
            activation: case.activation,
            l1: case.l1,
            clip_norm: case.clip_norm,
        };
        let x = tensor::<Host>([MEMBERS, case.rows, case.widths[0]], 5, 1.0, &device);
        let upstream = tensor::<Host>([MEMBERS, case.rows, 3], 6, 1.0, &device);
        for fused in [false, true] {
            let step = MlpStep {
                clip_norm: if fused { None } else { step.clip_norm },
                l1: if fused { 0.0 } else { step.l1 },
                ..step.clone()
            };
            let tape = forward(&params, case.activation, x.clone(), vec![]);
            let moments = params
                .iter()
                .map(|p| [p.zeros_like(), p.zeros_like()])
                .collect();
            let stepped = Host::mlp_train_step(
                &step,
                params.clone(),
                moments,
                tape,
                MlpObjective::Upstream(upstream.clone()),
            );
            for (before, after) in params.iter().zip(&stepped.params) {
                let [before, after] = [before, after].map(|t| to_host_f32(t.clone()));
                let per = before.len() / MEMBERS;
                assert_eq!(
                    before[..per],
                    after[..per],
                    "fused {fused}: member 0 is frozen"
                );
                assert_ne!(
                    before[per..2 * per],
                    after[per..2 * per],
                    "fused {fused}: member 1 steps"
                );
            }
        }
    }

    /// [`forward`] and [`backward`] with dropout give autodiff's values and gradients of
    /// `sum(output * upstream)` (the same products and sums, each a few f32 roundings of
    /// values of order 1). GELU's derivative against autodiff's, which goes through the CPU's
    /// reciprocal estimate, is the dense operation's own test.
    #[test]
    fn the_passes_are_autodiffs() {
        type Diff = Autodiff<Host>;
        let device = Default::default();
        for activation in [
            Activation::Tanh,
            Activation::Relu,
            Activation::LeakyRelu(0.1),
        ] {
            let widths = [5, 7, 6, 4];
            let rows = 2;
            let params = network::<Host>(MEMBERS, &widths, &device);
            let x = tensor::<Host>([MEMBERS, rows, 5], 7, 1.0, &device);
            let upstream = tensor::<Host>([MEMBERS, rows, 4], 8, 1.0, &device);
            let masks = masks::<Host>(MEMBERS, rows, &widths, &device);
            let tape = forward(&params, activation, x.clone(), masks.clone());
            let output = to_host_f32(tape.output.clone());
            let grads = backward(&params, activation, tape, upstream.clone());

            let tracked: Vec<Tensor<Diff, 3>> = params
                .iter()
                .map(|p| Tensor::from_inner(p.clone()).require_grad())
                .collect();
            let mut h = Tensor::<Diff, 3>::from_inner(x);
            for (l, pair) in tracked.chunks_exact(2).enumerate() {
                h = h.matmul(pair[0].clone()) + pair[1].clone();
                if l < 2 {
                    h = activation.apply(h) * Tensor::from_inner(masks[l].clone());
                }
            }
            let want = to_host_f32(h.clone());
            let all = (h * Tensor::from_inner(upstream)).sum_all().backward();
            assert!(
                max_abs_difference(&output, &want) < 1e-5,
                "{activation:?} output"
            );
            for (k, (got, p)) in grads.into_iter().zip(&tracked).enumerate() {
                let want = to_host_f32(p.grad(&all).expect("a gradient"));
                let worst = max_abs_difference(&to_host_f32(got), &want);
                assert!(worst < 1e-5, "{activation:?} parameter {k}: {worst}");
            }
        }
    }

    crate::device_test! {
        /// The device's training step (its composition on a GPU) takes the CPU's host
        /// kernel's steps, to the tolerance of `the_host_step_is_the_composition`.
        fn the_training_step_is_the_same_on_every_device<B>(device) {
            // Unbounded, and as on a device that binds 13 tensors a launch (a CubeCL backend
            // then updates one parameter per Adam launch and three per penalty launch).
            for case in &CASES[1..] {
                let cpu = three_steps::<Host>(case, &Default::default(), |s, p, m, t, o| {
                    train_step(s, p, m, t, o)
                });
                for limit in [None, Some(13)] {
                    let here = crate::ops::binding_limit::with_binding_limit(limit, || {
                        three_steps::<B::InnerBackend>(case, device, |s, p, m, t, o| {
                            train_step(s, p, m, t, o)
                        })
                    });
                    for (k, (h, c)) in here.1.iter().zip(&cpu.1).enumerate() {
                        let worst = max_abs_difference(h, c);
                        assert!(worst < 1e-3 * LR, "{:?} parameter {k}: {worst}", case.widths);
                    }
                    // The losses (cross-entropy plus the L1 penalty, the classifier's case): a
                    // row's loss of three classes rounds to a few f32 epsilons of its ~1, and
                    // the penalty `l1 sum |p|` sums ~150 values of ~0.3 in another order, at
                    // most 150 eps 50 l1 = 1e-5 apart; 1e-4 leaves room for the exponentials'
                    // few ulps.
                    assert_eq!(here.0.len(), cpu.0.len());
                    for (step, (h, c)) in here.0.iter().zip(&cpu.0).enumerate() {
                        let worst = max_abs_difference(h, c);
                        assert!(worst < 1e-4, "{:?} step {step} losses: {worst}", case.widths);
                    }
                }
            }
        }
    }
}
