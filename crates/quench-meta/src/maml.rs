//! First-order MAML and Reptile with every task's adapted policy on the member axis: the K
//! inner steps of a whole meta-batch are K batched forward/backward passes, not tasks x K.

use burn::tensor::Tensor;
use quench_kernels::readback::{float_tensor, to_host_f32};
use quench_kernels::reductions::Reduce;
use quench_kernels::views::ReshapeTo;
use quench_kernels::{QuenchBackend, QuenchOps};
use quench_scale::World;
use serde::{Deserialize, Serialize};

use quench_kernels::ops::mlp;
use quench_train::ensemble::{Activation, EnsembleMlp};
use quench_train::optim::{AdamConfig, MemberAdam};
use quench_train::params::{
    clip_member_norms, finite_members, gradients, masked_member_mean, masked_member_sum,
    require_grad,
};

use super::error::MetaError;
use super::policy::PolicyShape;
use super::problem::{ControlBatch, ControlProblem};

/// The meta-learning algorithm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Algorithm {
    /// First-order MAML: the meta-gradient is the mean over tasks of the loss gradient at the
    /// adapted weights.
    #[default]
    Fomaml,
    /// Reptile: the meta-gradient is the mean over tasks of `theta - phi_task`, the step Adam
    /// takes towards the adapted weights.
    Reptile,
}

/// The inner loop's settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct InnerLoop {
    /// Plain SGD steps from the shared weights.
    pub steps: usize,
    /// SGD learning rate.
    pub lr: f64,
    /// Take the policy's gradients without autodiff (the seam's dense operations layer by
    /// layer, [`mlp::forward`] and [`mlp::backward`]), autodiff only through the simulator:
    /// one kernel per layer and pass instead of a graph of per-layer ops. The product's path;
    /// off for the original's way (autodiff throughout).
    pub fused: bool,
}

/// Per-task losses `[tasks]` and a parameter-shaped list with one member per task (the
/// gradients, or the adapted parameters).
type PerTask<B> = (Tensor<B, 1>, Vec<Tensor<B, 3>>);

/// Per-task losses at `params` and their gradients. Members do not interact, so the gradient
/// of the summed loss with respect to member `t` is task `t`'s own gradient.
fn loss_and_gradients<B: QuenchBackend>(
    problem: &ControlProblem<B>,
    shape: &PolicyShape,
    params: Vec<Tensor<B::InnerBackend, 3>>,
    activation: Activation,
    batch: &ControlBatch<B>,
    fused: bool,
) -> Result<PerTask<B::InnerBackend>, MetaError> {
    if fused {
        return policy_loss_and_gradients(problem, shape, &params, activation, batch);
    }
    let p = require_grad::<B>(params);
    let policy = EnsembleMlp::from_params(p.clone(), activation);
    let losses = problem.losses(shape.amplitudes(&policy, batch.features.clone()), batch)?;
    let grads = losses.clone().sum_all().backward();
    Ok((losses.inner(), gradients(&p, &grads)))
}

/// [`loss_and_gradients`] with the policy's passes outside autodiff: its forward pass and
/// its backward pass by the seam's operations, autodiff from the amplitudes `[tasks, segments,
/// controls]` through the simulator only. `params` has one member per task; returns the
/// losses `[tasks]` and the gradients in `params`' order.
fn policy_loss_and_gradients<B: QuenchBackend>(
    problem: &ControlProblem<B>,
    shape: &PolicyShape,
    params: &[Tensor<B::InnerBackend, 3>],
    activation: Activation,
    batch: &ControlBatch<B>,
) -> Result<PerTask<B::InnerBackend>, MetaError> {
    let [tasks, _, _] = batch.features.dims();
    let tape = mlp::forward(params, activation, batch.features.clone().inner(), vec![]);
    let scale = shape.output_scale;
    let raw = tape.output.clone().mul_scalar(scale);
    let amplitudes =
        Tensor::<B, 3>::from_inner(raw.reshape_to([tasks, shape.segments, shape.controls]))
            .require_grad();
    let losses = problem.losses(amplitudes.clone(), batch)?;
    let grads = losses.clone().sum_all().backward();
    let upstream = match amplitudes.grad(&grads) {
        Some(g) => g.mul_scalar(scale).reshape_to(tape.output.dims()),
        None => tape.output.zeros_like(),
    };
    Ok((
        losses.inner(),
        mlp::backward(params, activation, tape, upstream),
    ))
}

/// Adapts the shared policy `meta` (one member) to every task of `batch` at once. Returns each
/// task's loss before adaptation and the adapted parameters, one member per task.
pub fn adapt<B: QuenchBackend>(
    problem: &ControlProblem<B>,
    shape: &PolicyShape,
    meta: &EnsembleMlp<B::InnerBackend>,
    batch: &ControlBatch<B>,
    inner: InnerLoop,
) -> Result<PerTask<B::InnerBackend>, MetaError> {
    let tasks = batch.len();
    let mut before = None;
    let mut phi: Vec<_> = meta
        .params()
        .into_iter()
        .map(|p| p.repeat_dim(0, tasks))
        .collect();
    for _ in 0..inner.steps {
        let (losses, grads) = loss_and_gradients(
            problem,
            shape,
            phi.clone(),
            meta.activation,
            batch,
            inner.fused,
        )?;
        before.get_or_insert(losses);
        phi = phi
            .into_iter()
            .zip(grads)
            .map(|(w, g)| w - g * inner.lr)
            .collect();
    }
    let before = match before {
        Some(losses) => losses,
        None => evaluate(problem, shape, &meta.with_params(phi.clone()), batch)?,
    };
    Ok((before, phi))
}

/// The losses `[tasks]` of a policy (one member, or one per task) without tracking gradients.
pub fn evaluate<B: QuenchBackend>(
    problem: &ControlProblem<B>,
    shape: &PolicyShape,
    policy: &EnsembleMlp<B::InnerBackend>,
    batch: &ControlBatch<B>,
) -> Result<Tensor<B::InnerBackend, 1>, MetaError> {
    let tracked = EnsembleMlp::<B>::from_params(
        policy
            .params()
            .into_iter()
            .map(Tensor::from_inner)
            .collect(),
        policy.activation,
    );
    Ok(problem
        .losses(shape.amplitudes(&tracked, batch.features.clone()), batch)?
        .inner())
}

/// What one meta-iteration measured, read back once per iteration.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct StepStats {
    /// Mean task loss before adaptation.
    pub loss_before: f64,
    /// Mean task loss after adaptation.
    pub loss_after: f64,
    /// Tasks left out of the meta-gradient because their gradient was not finite.
    pub skipped_tasks: usize,
    /// Seconds this rank spent joining the ranks' meta-gradients once all had them (read
    /// back, all-reduce, upload); 0 in one process.
    #[serde(default)]
    pub reduce_seconds: f64,
    /// Seconds this rank waited for the slowest rank before the all-reduce (load imbalance,
    /// not communication); 0 in one process.
    #[serde(default)]
    pub wait_seconds: f64,
}

/// One meta-iteration's work before the update: every task's losses and its contribution to
/// the meta-gradient.
#[derive(Debug, Clone)]
pub struct TaskGradients<B: QuenchOps> {
    /// Each task's loss before adaptation, `[tasks]`.
    pub before: Tensor<B, 1>,
    /// Each task's loss after adaptation, `[tasks]`.
    pub after: Tensor<B, 1>,
    /// Each task's contribution to the meta-gradient in the policy's layout, one member per
    /// task (`[tasks, in, out]` weights, `[tasks, 1, out]` biases): for first-order MAML the
    /// loss gradient at the adapted weights, for Reptile `theta - phi`.
    pub per_task: Vec<Tensor<B, 3>>,
}

/// The meta-learner: the shared policy and its Adam state.
#[derive(Debug, Clone)]
pub struct MetaLearner<B: QuenchOps> {
    /// The shared (meta) policy, one member.
    pub policy: EnsembleMlp<B>,
    adam: MemberAdam<B>,
    meta_lr: Tensor<B, 3>,
    algorithm: Algorithm,
    grad_clip: f64,
}

impl<B: QuenchOps> MetaLearner<B> {
    /// A learner starting from `policy` with Adam at `meta_lr` and the meta-gradient's norm
    /// clipped at `grad_clip`.
    pub fn new(
        policy: EnsembleMlp<B>,
        algorithm: Algorithm,
        meta_lr: f64,
        grad_clip: f64,
        device: &B::Device,
    ) -> Self {
        Self {
            policy,
            adam: MemberAdam::new(AdamConfig::default(), 1, device),
            meta_lr: Tensor::full([1, 1, 1], meta_lr, device),
            algorithm,
            grad_clip,
        }
    }

    /// The per-task contribution to the meta-gradient at adapted parameters `phi`, and the
    /// losses after adaptation.
    fn gradients_at<A: QuenchBackend<InnerBackend = B>>(
        &self,
        problem: &ControlProblem<A>,
        shape: &PolicyShape,
        phi: Vec<Tensor<B, 3>>,
        batch: &ControlBatch<A>,
        inner: InnerLoop,
    ) -> Result<PerTask<B>, MetaError> {
        match self.algorithm {
            Algorithm::Fomaml => loss_and_gradients(
                problem,
                shape,
                phi,
                self.policy.activation,
                batch,
                inner.fused,
            ),
            Algorithm::Reptile => {
                let after = evaluate(problem, shape, &self.policy.with_params(phi.clone()), batch)?;
                let deltas = self
                    .policy
                    .params()
                    .into_iter()
                    .zip(phi)
                    .map(|(t, p)| t - p)
                    .collect();
                Ok((after, deltas))
            }
        }
    }

    /// Clips the meta-gradient `[1, ..]` and takes the Adam step.
    fn apply(&mut self, meta_grad: Vec<Tensor<B, 3>>) {
        let clipped = clip_member_norms(meta_grad, self.grad_clip);
        let updated = self
            .adam
            .step(self.policy.params(), clipped, self.meta_lr.clone(), None);
        self.policy = self.policy.with_params(updated);
    }

    /// One meta-iteration on `batch`: adapt every task at once, average the per-task
    /// meta-gradients (non-finite tasks masked out), clip, Adam step.
    pub fn step<A: QuenchBackend<InnerBackend = B>>(
        &mut self,
        problem: &ControlProblem<A>,
        shape: &PolicyShape,
        batch: &ControlBatch<A>,
        inner: InnerLoop,
    ) -> Result<StepStats, MetaError> {
        self.step_in(&World::alone(), problem, shape, batch, inner)
    }

    /// [`step`](Self::step) with `batch` this rank's share of the meta-batch of `world`:
    /// the meta-gradient is the mean over the finite tasks of every rank (one all-reduce), and
    /// every rank takes the same Adam step, so the policies stay identical.
    pub fn step_in<A: QuenchBackend<InnerBackend = B>>(
        &mut self,
        world: &World,
        problem: &ControlProblem<A>,
        shape: &PolicyShape,
        batch: &ControlBatch<A>,
        inner: InnerLoop,
    ) -> Result<StepStats, MetaError> {
        let gradients = self.meta_gradients(problem, shape, batch, inner)?;
        Ok(self.finish(gradients, world))
    }

    /// The same meta-iteration done the original's way, one task after another, each adapted
    /// alone: the measured reference of the benchmark's baseline, not the product path. The
    /// meta-gradient is joined over the ranks of `world` as in [`step_in`](Self::step_in).
    pub fn step_one_task_at_a_time<A: QuenchBackend<InnerBackend = B>>(
        &mut self,
        world: &World,
        problem: &ControlProblem<A>,
        shape: &PolicyShape,
        batch: &ControlBatch<A>,
        inner: InnerLoop,
    ) -> Result<StepStats, MetaError> {
        let gradients = self.meta_gradients_one_task_at_a_time(problem, shape, batch, inner)?;
        Ok(self.finish(gradients, world))
    }

    /// What [`step`](Self::step) computes before it averages and steps: every task of `batch`
    /// adapted at once, its losses and its contribution to the meta-gradient.
    pub fn meta_gradients<A: QuenchBackend<InnerBackend = B>>(
        &self,
        problem: &ControlProblem<A>,
        shape: &PolicyShape,
        batch: &ControlBatch<A>,
        inner: InnerLoop,
    ) -> Result<TaskGradients<B>, MetaError> {
        let (before, phi) = adapt(problem, shape, &self.policy, batch, inner)?;
        let (after, per_task) = self.gradients_at(problem, shape, phi, batch, inner)?;
        Ok(TaskGradients {
            before,
            after,
            per_task,
        })
    }

    /// [`meta_gradients`](Self::meta_gradients) the original's way, one task after another,
    /// each adapted alone (what
    /// [`step_one_task_at_a_time`](Self::step_one_task_at_a_time) averages).
    pub fn meta_gradients_one_task_at_a_time<A: QuenchBackend<InnerBackend = B>>(
        &self,
        problem: &ControlProblem<A>,
        shape: &PolicyShape,
        batch: &ControlBatch<A>,
        inner: InnerLoop,
    ) -> Result<TaskGradients<B>, MetaError> {
        let (mut before, mut after, mut grads) = (Vec::new(), Vec::new(), Vec::new());
        for t in 0..batch.len() {
            let alone = self.meta_gradients(problem, shape, &batch.task(t), inner)?;
            before.push(alone.before);
            after.push(alone.after);
            grads.push(alone.per_task);
        }
        let per_task: Vec<Tensor<B, 3>> = (0..grads.first().map_or(0, Vec::len))
            .map(|i| Tensor::cat(grads.iter().map(|g| g[i].clone()).collect(), 0))
            .collect();
        Ok(TaskGradients {
            before: Tensor::cat(before, 0),
            after: Tensor::cat(after, 0),
            per_task,
        })
    }

    /// Averages the per-task meta-gradients `[tasks, ..]` over the finite tasks of every rank
    /// of `world`, steps, and summarises the losses `[tasks]` of every rank.
    fn finish(&mut self, gradients: TaskGradients<B>, world: &World) -> StepStats {
        let TaskGradients {
            before,
            after,
            per_task,
        } = gradients;
        let tasks = before.dims()[0];
        let keep = finite_members(&per_task);
        let kept = quench_kernels::readback::to_host_i64(keep.clone().int().sum_all())[0] as usize;
        if world.shard().ranks == 1 {
            self.apply(masked_member_mean(per_task, keep));
            return StepStats {
                loss_before: finite_stats(before).0,
                loss_after: finite_stats(after).0,
                skipped_tasks: tasks - kept,
                reduce_seconds: 0.0,
                wait_seconds: 0.0,
            };
        }
        let sums = masked_member_sum(per_task, keep);
        let weighted = |(mean, _, n): (f64, f64, usize)| {
            if n == 0 {
                [0.0, 0.0]
            } else {
                [mean * n as f64, n as f64]
            }
        };
        let [before_sum, before_n] = weighted(finite_stats(before));
        let [after_sum, after_n] = weighted(finite_stats(after));
        let waiting = std::time::Instant::now();
        world.wait_for_all();
        let wait_seconds = waiting.elapsed().as_secs_f64();
        let start = std::time::Instant::now();
        // One all-reduce in f32, the gradients' own precision (each rank's part is an f32 sum
        // already), with the six totals behind them: counts stay exact below 2^24 tasks.
        let mut joined: Vec<f32> = sums.iter().flat_map(|t| to_host_f32(t.clone())).collect();
        let counts = joined.len();
        joined.extend(
            [
                kept as f64,
                tasks as f64,
                before_sum,
                before_n,
                after_sum,
                after_n,
            ]
            .map(|v| v as f32),
        );
        world.sum_f32(&mut joined);
        let [kept, tasks, before_sum, before_n, after_sum, after_n] = joined[counts..]
            .iter()
            .map(|&v| f64::from(v))
            .collect::<Vec<_>>()[..]
        else {
            unreachable!("six totals were appended")
        };
        let scale = 1.0 / kept.max(1.0) as f32;
        let mut at = 0;
        let mean: Vec<Tensor<B, 3>> = sums
            .iter()
            .map(|t| {
                let dims = t.dims();
                let len = dims.iter().product::<usize>();
                let values: Vec<f32> = joined[at..at + len].iter().map(|&v| v * scale).collect();
                at += len;
                float_tensor::<B, f32, 3>(values, dims, &t.device())
            })
            .collect();
        let reduce_seconds = start.elapsed().as_secs_f64();
        self.apply(mean);
        StepStats {
            loss_before: before_sum / before_n,
            loss_after: after_sum / after_n,
            skipped_tasks: (tasks - kept) as usize,
            reduce_seconds,
            wait_seconds,
        }
    }
}

/// Mean and sample standard deviation of the finite entries, and how many were finite (NaN
/// statistics when none is).
pub fn finite_stats<B: QuenchOps>(values: Tensor<B, 1>) -> (f64, f64, usize) {
    let v = to_host_f32(values);
    let finite: Vec<f64> = v
        .iter()
        .filter(|x| x.is_finite())
        .map(|&x| f64::from(x))
        .collect();
    let n = finite.len();
    if n == 0 {
        return (f64::NAN, f64::NAN, 0);
    }
    let mean = finite.iter().sum::<f64>() / n as f64;
    let var =
        finite.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n.saturating_sub(1).max(1) as f64;
    (mean, var.sqrt(), n)
}
