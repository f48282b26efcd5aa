//! The meta-learning configuration: one TOML file per setting (`configs/lindblad/*.toml`).

use serde::{Deserialize, Serialize};

use quench_lindblad::operators::{hadamard, pauli_x, pauli_y, pauli_z};
use quench_lindblad::{CMatrix, LindbladError, Solver, System, presets};

use super::error::MetaError;
use super::maml::Algorithm;
use super::policy::PolicyShape;
use super::tasks::{Features, TaskFamily, TaskStream};
use quench_train::settings::Validate;

/// A lower bound of one task's inner step (or its share of the policy's step), seconds, for
/// the work budget: a forward and backward pass of the policy's MLP and a simulation of the
/// pulse's segments. Measured: about 200 us on the 2-core VM (the `all` variant's 17 ms
/// meta-iteration of 16 tasks and 5 inner steps) and about 10 us on an H200 batching 1,024
/// tasks (18.5x the VM's tasks per second); 2 us is a fifth of the fastest.
pub const INNER_STEP_SECONDS: f64 = 2e-6;

/// A lower bound of one inner step of a whole meta-batch, however few its tasks, seconds: the
/// policy's forward and backward passes and the simulation are each several operations on
/// the batch (about 340 kernel launches a step on a GPU, counted on lavapipe: at least 5 us
/// each; about 330 us for 16 tasks on the 2-core VM's CPU). 100 us is below both; without it
/// a huge `inner_steps` over few tasks passed the budget at [`INNER_STEP_SECONDS`] a task.
pub const INNER_STEP_FLOOR_SECONDS: f64 = 1e-4;

/// A lower bound of what a meta-iteration costs beyond its tasks' steps, seconds: a batch of
/// tasks drawn, the meta-gradient joined and the policy's Adam step; on a GPU several hundred
/// kernel launches of at least 5 us each (the device-agreement suite counts about 1,500 a
/// meta-iteration). 100 us is below either.
pub const ITERATION_SECONDS: f64 = 1e-4;

/// Everything a meta-learning run needs; the defaults are the guide's GPU-optimised setting
/// with the exact solver.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MetaConfig {
    /// First-order MAML or Reptile.
    pub algorithm: Algorithm,
    /// Meta-iterations.
    pub iterations: usize,
    /// Tasks per meta-batch.
    pub tasks_per_batch: usize,
    /// Inner SGD steps per task.
    pub inner_steps: usize,
    /// Inner SGD learning rate.
    pub inner_lr: f64,
    /// Adam learning rate of the meta-update.
    pub meta_lr: f64,
    /// Largest norm of the meta-gradient.
    pub grad_clip: f64,
    /// Fresh tasks per validation.
    pub val_tasks: usize,
    /// Meta-iterations between validations (and after the last one).
    pub val_interval: usize,
    /// The simulated system.
    pub system: SystemChoice,
    /// How tasks are drawn and turned into rates.
    pub tasks: TaskFamily,
    /// How the policy sees a task.
    pub features: Features,
    /// The target of the pulse.
    pub target: Target,
    /// The training loss.
    pub loss: LossKind,
    /// Total pulse time `T`.
    pub t_total: f64,
    /// The policy network and pulse discretisation.
    pub policy: PolicyShape,
    /// The simulator of training and of the validation's inner loop.
    pub solver: Solver,
    /// The simulator that scores validation fidelities (exact by default), so that a coarse
    /// training step cannot flatter its own result.
    pub val_solver: Solver,
    /// Seed of the policy initialisation and of the training tasks.
    pub seed: u64,
    /// Seed of the validation tasks: a separate stream, so they are never training tasks.
    pub val_seed: u64,
}

impl MetaConfig {
    /// The stream of training tasks (seed `seed + 1`; the policy takes `seed`).
    pub fn train_task_stream(&self) -> TaskStream {
        TaskStream::new(self.tasks, self.seed.wrapping_add(1))
    }

    /// The stream of validation tasks (seed `val_seed`).
    pub fn val_task_stream(&self) -> TaskStream {
        TaskStream::new(self.tasks, self.val_seed)
    }
}

impl Validate for MetaConfig {
    type Error = MetaError;

    /// Checks every number before any work: counts at least 1, rates and scales finite and in
    /// range, the policy's widths non-zero. The error names the field and its value.
    fn validate(&self) -> Result<(), MetaError> {
        for (field, value) in [
            ("iterations", self.iterations),
            ("tasks_per_batch", self.tasks_per_batch),
            ("val_tasks", self.val_tasks),
            ("val_interval", self.val_interval),
            ("policy.segments", self.policy.segments),
            ("policy.controls", self.policy.controls),
        ] {
            if value == 0 {
                return Err(MetaError::config(field, value, "must be at least 1"));
            }
        }
        if let Some(width) = self.policy.hidden.iter().position(|&w| w == 0) {
            return Err(MetaError::config(
                "policy.hidden",
                format!("{:?}", self.policy.hidden),
                format!("layer {width} has no units; every width must be at least 1"),
            ));
        }
        let positive = |field: &'static str, value: f64| {
            if value.is_finite() && value > 0.0 {
                Ok(())
            } else {
                Err(MetaError::config(
                    field,
                    value,
                    "must be a finite number above 0",
                ))
            }
        };
        positive("meta_lr", self.meta_lr)?;
        positive("grad_clip", self.grad_clip)?;
        positive("t_total", self.t_total)?;
        positive("policy.output_scale", self.policy.output_scale)?;
        positive("policy.init_gain", self.policy.init_gain)?;
        // The simulators' own checks, here rather than at the first evolution: a step, a bound
        // or a substep count they refuse is the configuration's error, named as such.
        for (field, solver, tasks) in [
            ("solver", &self.solver, self.tasks_per_batch),
            ("val_solver", &self.val_solver, self.val_tasks),
        ] {
            solver
                .validate()
                .and_then(|()| solver.check_substeps(self.t_total, self.policy.segments, tasks))
                .map_err(|err| match err {
                    LindbladError::InvalidValue {
                        name,
                        value,
                        reason,
                    } => MetaError::config(field, format!("{{ {name} = {value} }}"), reason),
                    // Too many substeps, or a run past the time budget: the method says which.
                    other => MetaError::config(
                        field,
                        format!("{{ method = {:?} }}", solver.method),
                        other,
                    ),
                })?;
        }
        if !(self.inner_lr.is_finite() && self.inner_lr >= 0.0) {
            return Err(MetaError::config(
                "inner_lr",
                self.inner_lr,
                "must be a finite number, 0 or above",
            ));
        }
        // Memory first: a size beyond the host is refused as such, before its work is.
        quench_support::budget::check_fits(|| "this configuration".into(), self.memory_estimate())
            .map_err(|too_large| {
                MetaError::config(
                    "tasks_per_batch, val_tasks, policy.hidden, policy.segments",
                    format!(
                        "{}, {}, {:?}, {}",
                        self.tasks_per_batch,
                        self.val_tasks,
                        self.policy.hidden,
                        self.policy.segments
                    ),
                    too_large,
                )
            })?;
        // A meta-iteration adapts every task of its batch `inner_steps` times and then steps
        // the policy: each step a policy pass and a simulation, at least INNER_STEP_SECONDS a
        // task and INNER_STEP_FLOOR_SECONDS for the batch, and the iteration's own
        // ITERATION_SECONDS.
        let per_step =
            (self.tasks_per_batch as f64 * INNER_STEP_SECONDS).max(INNER_STEP_FLOOR_SECONDS);
        let per_iteration = (self.inner_steps as f64 + 1.0) * per_step + ITERATION_SECONDS;
        quench_support::budget::check_work(
            || {
                format!(
                    "iterations = {}, tasks_per_batch = {}, inner_steps = {}",
                    self.iterations, self.tasks_per_batch, self.inner_steps
                )
            },
            self.iterations as f64,
            per_iteration,
        )
        .map_err(|too_long| {
            MetaError::config(
                "iterations, tasks_per_batch, inner_steps",
                format!(
                    "{}, {}, {}",
                    self.iterations, self.tasks_per_batch, self.inner_steps
                ),
                too_long,
            )
        })
    }
}

/// An upper bound of a task vector's axes (the families have 3), for the policy's first layer
/// in [`MetaConfig::memory_estimate`].
const TASK_AXES_BOUND: u128 = 8;

impl MetaConfig {
    /// About the most bytes a run of this configuration holds at once, in f32: the policy's
    /// parameters with their gradients and Adam's two moments; per training task the adapted
    /// copy, its gradient and the host kernel's trace (four copies), and the generators of
    /// every segment (`segments x (d^2)^2`) with the solver's Taylor terms and states (four
    /// more); per validation task one adapted copy and the generators. Saturates rather than
    /// overflowing, so that absurd settings give an absurd estimate, not a small one.
    pub fn memory_estimate(&self) -> u128 {
        let widths: Vec<u128> = std::iter::once(TASK_AXES_BOUND)
            .chain(self.policy.hidden.iter().map(|&w| w as u128))
            .chain(std::iter::once(
                (self.policy.segments as u128).saturating_mul(self.policy.controls as u128),
            ))
            .collect();
        let params = widths.windows(2).fold(0u128, |sum, w| {
            sum.saturating_add(w[0].saturating_add(1).saturating_mul(w[1]))
        });
        let n = (self.system.system().dim() as u128).pow(2);
        let generators = (self.policy.segments as u128).saturating_mul(n * n);
        let per_task = params
            .saturating_mul(4)
            .saturating_add(generators.saturating_mul(4));
        let per_val_task = params.saturating_add(generators);
        let floats = params
            .saturating_mul(4)
            .saturating_add(per_task.saturating_mul(self.tasks_per_batch as u128))
            .saturating_add(per_val_task.saturating_mul(self.val_tasks as u128));
        floats.saturating_mul(4)
    }
}

impl Default for MetaConfig {
    fn default() -> Self {
        Self {
            algorithm: Algorithm::Fomaml,
            iterations: 1_000,
            tasks_per_batch: 16,
            inner_steps: 5,
            inner_lr: 0.01,
            meta_lr: 0.001,
            grad_clip: 1.0,
            val_tasks: 20,
            val_interval: 50,
            system: SystemChoice::OneQubit,
            tasks: TaskFamily::OneOverF,
            features: Features::Normalised,
            target: Target::X,
            loss: LossKind::SquaredOverlap,
            t_total: 1.0,
            policy: PolicyShape::default(),
            solver: Solver::default(),
            val_solver: Solver::default(),
            seed: 0,
            val_seed: 1_000_003,
        }
    }
}

/// The simulated system (`WORKLOADS.md` section 2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SystemChoice {
    /// `H = 0.1 sz + u1 sx + u2 sy`, jumps `sqrt(G) sx, sy, sz`.
    #[default]
    OneQubit,
    /// Drift `0.5 ZZ`, controls `XI, IX, YI, ZZ`, jumps `ZI, IZ, s-I, Is-`.
    TwoQubit,
    /// No drift, controls `sx, sy`, jumps `sqrt(g_relax) s-`, `sqrt(g_deph / 2) sz`.
    RelaxDephase,
}

impl SystemChoice {
    /// The system's operators.
    pub fn system(self) -> System {
        match self {
            Self::OneQubit => presets::one_qubit(),
            Self::TwoQubit => presets::two_qubit(),
            Self::RelaxDephase => presets::relax_dephase(),
        }
    }
}

/// The target gate `U`; the target state is `U |0>` (`U ⊗ U |00>` on two qubits).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Target {
    /// Pauli X.
    #[default]
    X,
    /// Pauli Y.
    Y,
    /// Pauli Z.
    Z,
    /// Hadamard.
    H,
}

impl Target {
    /// The single-qubit unitary.
    pub fn unitary(self) -> CMatrix {
        match self {
            Self::X => pauli_x(),
            Self::Y => pauli_y(),
            Self::Z => pauli_z(),
            Self::H => hadamard(),
        }
    }
}

/// What the policy minimises, `1 - F` for one of three fidelities.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LossKind {
    /// The guide's `|Tr(rho sigma)|^2` clamped to `[0, 1]` (a quirk: the square of the fidelity).
    #[default]
    SquaredOverlap,
    /// The state fidelity `Tr(rho sigma)` for the pure target.
    StateFidelity,
    /// The average gate fidelity of the whole propagator with the target gate.
    GateFidelity,
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn shipped_configurations_load_with_the_guide_settings() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../configs/lindblad");
        let original: MetaConfig = quench_support::load_toml(&dir.join("original.toml")).unwrap();
        assert_eq!(
            (
                original.tasks_per_batch,
                original.inner_steps,
                original.val_tasks
            ),
            (200, 10, 100)
        );
        assert_eq!((original.inner_lr, original.meta_lr), (0.02, 0.02));
        assert_eq!(
            original.solver.method,
            quench_lindblad::Method::Rk4 { dt: 0.01 }
        );
        let gpu: MetaConfig = quench_support::load_toml(&dir.join("gpu.toml")).unwrap();
        assert_eq!(
            (gpu.tasks_per_batch, gpu.inner_steps, gpu.val_tasks),
            (16, 5, 20)
        );
        assert_eq!((gpu.inner_lr, gpu.meta_lr), (0.01, 0.001));
        assert_eq!(
            gpu.solver.method,
            quench_lindblad::Method::Euler { dt: 0.02 }
        );
        let small: MetaConfig = quench_support::load_toml(&dir.join("test.toml")).unwrap();
        assert!(small.iterations <= 50);
    }

    #[test]
    fn sizes_beyond_any_hosts_memory_are_refused_before_any_work() {
        // The original's configuration holds about 100 MB at once.
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../configs/lindblad");
        let original: MetaConfig = quench_support::load_toml(&dir.join("original.toml")).unwrap();
        assert!(
            original.memory_estimate() < 1 << 30,
            "{}",
            original.memory_estimate()
        );
        assert!(original.validate().is_ok());
        // Each of these aborted the process in allocation (the repro of segments was
        // 1e6, about 100 GB; here larger, so that no host's memory holds any of them).
        for change in [
            (|c: &mut MetaConfig| c.tasks_per_batch = 100_000_000) as fn(&mut MetaConfig),
            |c| c.val_tasks = 100_000_000,
            |c| c.policy.hidden = vec![1_000_000_000],
            |c| c.policy.segments = 100_000_000,
            |c| c.policy.hidden = vec![usize::MAX, usize::MAX],
        ] {
            let mut config = MetaConfig::default();
            change(&mut config);
            assert!(
                config.memory_estimate() > 1 << 42,
                "{}",
                config.memory_estimate()
            );
            let err = config.validate().unwrap_err().to_string();
            assert!(
                err.contains("tasks_per_batch, val_tasks, policy.hidden"),
                "{err}"
            );
            assert!(err.contains("in host memory"), "{err}");
        }
    }

    #[test]
    fn meta_iterations_that_would_not_end_are_refused_whatever_the_batch() {
        // A billion meta-iterations of one task and no inner step: at least 1e9 x (100 us for
        // the policy's step + 100 us), 56 hours, over the default limit of 24.
        let config = MetaConfig {
            iterations: 1_000_000_000,
            tasks_per_batch: 1,
            inner_steps: 0,
            ..MetaConfig::default()
        };
        let err = config.validate().unwrap_err().to_string();
        for part in ["iterations", "1000000000", "would take at least"] {
            assert!(err.contains(part), "{part}: {err}");
        }
        // A hundred times fewer is accepted: the floor is not a guess of the real cost.
        let config = MetaConfig {
            iterations: 10_000_000,
            ..config
        };
        assert!(config.validate().is_ok());
        // One iteration of a billion inner steps over 16 tasks: at least 1e9 x 100 us, 28
        // hours (at 2 us a task it passed as 9).
        let config = MetaConfig {
            iterations: 1,
            tasks_per_batch: 16,
            inner_steps: 1_000_000_000,
            ..MetaConfig::default()
        };
        let err = config.validate().unwrap_err().to_string();
        assert!(err.contains("inner_steps"), "{err}");
    }

    #[test]
    fn simulator_settings_are_refused_as_the_configurations_field() {
        let shipped: MetaConfig = quench_support::load_toml(
            &Path::new(env!("CARGO_MANIFEST_DIR")).join("../../configs/lindblad/test.toml"),
        )
        .unwrap();
        shipped.validate().unwrap();
        let refused = |edit: &dyn Fn(&mut MetaConfig), words: &[&str]| {
            let mut config = shipped.clone();
            edit(&mut config);
            let err = config.validate().unwrap_err().to_string();
            for word in words {
                assert!(err.contains(word), "`{word}` not in {err}");
            }
        };
        refused(
            &|c| c.solver.method = quench_lindblad::Method::Rk4 { dt: 0.0 },
            &["solver = { dt = 0 }", "positive"],
        );
        refused(
            &|c| c.val_solver.control_bound = -1.0,
            &["val_solver = { control_bound = -1 }"],
        );
        // A step whose substeps exceed the solver's limit: refused before any work.
        refused(
            &|c| c.solver.method = quench_lindblad::Method::Euler { dt: 1e-12 },
            &["solver", "substeps"],
        );
    }

    #[test]
    fn unknown_keys_are_refused_with_their_name() {
        let err =
            quench_support::config::parse_toml::<MetaConfig>("inner_step = 3", Path::new("m.toml"))
                .unwrap_err();
        assert!(err.to_string().contains("inner_step"), "{err}");
    }
}
