//! quench-meta: a batched meta-step against the same step one task at a time.

use super::Check;
use quench_kernels::QuenchBackend;
use quench_lindblad::OperatorCache;
use quench_meta::{Algorithm, InnerLoop, MetaConfig, MetaRun, Target};
use quench_train::params::{max_abs_difference, max_relative_difference};
use quench_train::settings::Valid;

/// One FOMAML meta-step with 4 tasks batched against the same step one task at a time: the
/// per-task meta-gradients, relative to their size. `backend_matmul_error` is the backend's own
/// matmul's relative error, as the matmul check measured it on this device.
pub(super) fn meta_step<B: QuenchBackend>(
    device: &B::Device,
    backend_matmul_error: f64,
) -> anyhow::Result<Check> {
    // Towards H the losses start near 0.5 with gradients of a readable size (towards X they
    // start at 1 to f32 precision, with gradients of about 1e-9).
    let config = Valid::new(MetaConfig {
        algorithm: Algorithm::Fomaml,
        tasks_per_batch: 4,
        inner_steps: 2,
        val_tasks: 2,
        target: Target::H,
        seed: 11,
        ..MetaConfig::default()
    })?;
    let mut run = MetaRun::<B>::new(&config, &mut OperatorCache::new(), device)?;
    let batch = run.next_batch()?;
    let shape = run.config.policy.clone();
    // The product's step (hand-derived policy gradients on the CPU) against the original's
    // way, autodiff throughout. Compared before Adam, whose first step is about the learning
    // rate times each entry's sign.
    let original = InnerLoop {
        steps: 2,
        lr: 0.05,
        fused: false,
    };
    let product = InnerLoop {
        fused: true,
        ..original
    };
    let learner = &run.learner;
    let batched = learner.meta_gradients(&run.problem, &shape, &batch, product)?;
    let alone =
        learner.meta_gradients_one_task_at_a_time(&run.problem, &shape, &batch, original)?;
    // Equal gradients prove nothing if they are all zero.
    let zero: Vec<_> = alone.per_task.iter().map(|g| g.zeros_like()).collect();
    let error = if max_abs_difference(&alone.per_task, &zero) > 0.0 {
        max_relative_difference(&batched.per_task, &alone.per_task)
    } else {
        f64::INFINITY
    };
    // In f32 the two part by rounding only, well under 1e-4. Both make the policy's products
    // with the backend's own matmul, which a GPU may make with its operands rounded to tf32
    // (2.5e-4 measured on an H200), and at different shapes (all tasks at once, one task),
    // for which it picks different kernels. To first order the errors of the products on a
    // gradient's path add: the first layer's weight gradient passes through 2 per layer (the
    // forward product and the backward one, or the weights' own), and each side errs by that
    // sum, so the two part by at most twice it.
    let products_on_path = 2 * (shape.hidden.len() + 1);
    let tolerance = f64::max(1e-4, 2.0 * products_on_path as f64 * backend_matmul_error);
    Ok(Check::measured(
        "meta step: batched, hand-derived policy gradients = one task at a time, autodiff (relative)",
        error,
        tolerance,
    ))
}
