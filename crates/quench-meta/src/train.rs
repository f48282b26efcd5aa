//! A whole meta-learning run: meta-iterations, validation on fresh tasks, history.

use quench_kernels::QuenchBackend;
use std::path::Path;
use std::time::Instant;

use quench_lindblad::OperatorCache;
use quench_scale::{Shard, World};
use serde::{Deserialize, Serialize};

use super::config::MetaConfig;
use super::error::MetaError;
use super::maml::{InnerLoop, MetaLearner, StepStats, adapt, finite_stats};
use super::problem::{ControlBatch, ControlProblem};
use super::tasks::TaskStream;
use quench_train::ensemble::EnsembleMlp;
use quench_train::settings::Valid;

/// Mean, sample standard deviation and count of a per-task metric.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Spread {
    /// Mean over the tasks with a finite value.
    pub mean: f64,
    /// Sample standard deviation over them.
    pub std: f64,
    /// How many tasks had a finite value.
    pub tasks: usize,
}

/// The two fidelities of a policy on a set of tasks.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct FidelitySpread {
    /// `|Tr(rho sigma)|^2`, the guide's validation fidelity.
    pub squared_overlap: Spread,
    /// `Tr(rho sigma)`.
    pub state: Spread,
}

/// One validation: fresh tasks, fidelities before and after adaptation.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Validation {
    /// Meta-iterations done when it ran.
    pub iteration: usize,
    /// With the shared policy.
    pub before: FidelitySpread,
    /// After the inner loop on each task.
    pub after: FidelitySpread,
}

/// One meta-iteration of the history.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct IterationRecord {
    /// 1-based meta-iteration.
    pub iteration: usize,
    /// Losses and skipped tasks.
    #[serde(flatten)]
    pub stats: StepStats,
    /// Wall-clock seconds of this iteration.
    pub seconds: f64,
}

/// Everything a run recorded; written as JSON.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct History {
    /// The configuration that ran.
    pub config: MetaConfig,
    /// Every meta-iteration.
    pub iterations: Vec<IterationRecord>,
    /// Every validation.
    pub validations: Vec<Validation>,
}

impl History {
    /// Writes the history as pretty JSON, through a temporary file, so an interrupted write
    /// leaves the previous file intact.
    pub fn write_json(&self, path: &Path) -> Result<(), MetaError> {
        let write_err = |source| MetaError::Write {
            path: path.display().to_string(),
            source,
        };
        let text =
            serde_json::to_string_pretty(self).map_err(|e| write_err(std::io::Error::other(e)))?;
        quench_support::files::write_atomically(path, text.as_bytes()).map_err(write_err)
    }

    /// The last validation, if any ran.
    pub fn last_validation(&self) -> Option<&Validation> {
        self.validations.last()
    }
}

/// A meta-learning run in progress: problem, learner and task streams.
pub struct MetaRun<B: QuenchBackend> {
    /// The configuration.
    pub config: MetaConfig,
    /// The control problem, operators on the device.
    pub problem: ControlProblem<B>,
    /// The same problem with the validation solver.
    val_problem: ControlProblem<B>,
    /// The learner and its policy.
    pub learner: MetaLearner<B::InnerBackend>,
    train_tasks: TaskStream,
    val_tasks: TaskStream,
}

impl<B: QuenchBackend> MetaRun<B> {
    /// Sets up a run of `config` on `device`, taking the operators from `cache`.
    pub fn new(
        config: &Valid<MetaConfig>,
        cache: &mut OperatorCache<B>,
        device: &B::Device,
    ) -> Result<Self, MetaError> {
        let problem = ControlProblem::new(config, cache, device)?;
        let task_dim = config.tasks.axes().len();
        let policy = config
            .policy
            .init::<B::InnerBackend>(task_dim, config.seed, device);
        Ok(Self {
            learner: MetaLearner::new(
                policy,
                config.algorithm,
                config.meta_lr,
                config.grad_clip,
                device,
            ),
            train_tasks: config.train_task_stream(),
            val_tasks: config.val_task_stream(),
            val_problem: problem.clone().with_solver(config.val_solver),
            problem,
            config: MetaConfig::clone(config),
        })
    }

    fn inner(&self) -> InnerLoop {
        InnerLoop {
            steps: self.config.inner_steps,
            lr: self.config.inner_lr,
            fused: true,
        }
    }

    /// Draws the next meta-batch of training tasks and prepares it on the device.
    pub fn next_batch(&mut self) -> Result<ControlBatch<B>, MetaError> {
        self.next_batch_of(Shard::ALONE)
    }

    /// Rank `shard`'s part of the next meta-batch: every rank draws the `tasks_per_batch x
    /// ranks` tasks of the whole batch from the same stream and prepares its own block
    /// ([`Shard::block`]), so N ranks of `tasks_per_batch` tasks see the tasks one process of
    /// `N x tasks_per_batch` would.
    pub fn next_batch_of(&mut self, shard: Shard) -> Result<ControlBatch<B>, MetaError> {
        let per_rank = self.config.tasks_per_batch;
        let tasks = self.train_tasks.next_batch(per_rank * shard.ranks);
        self.problem.prepare(&tasks[shard.block(per_rank)])
    }

    /// One meta-iteration on a fresh meta-batch.
    pub fn step(&mut self) -> Result<StepStats, MetaError> {
        self.step_in(&World::alone())
    }

    /// One meta-iteration of rank `world.shard()`: its share of a fresh meta-batch, the
    /// meta-gradient joined over the ranks.
    pub fn step_in(&mut self, world: &World) -> Result<StepStats, MetaError> {
        let batch = self.next_batch_of(world.shard())?;
        let inner = self.inner();
        self.learner
            .step_in(world, &self.problem, &self.config.policy, &batch, inner)
    }

    /// Validates the current policy on `val_tasks` fresh tasks: adapted with the training
    /// solver, scored with the validation solver.
    pub fn validate(&mut self, iteration: usize) -> Result<Validation, MetaError> {
        let tasks = self.val_tasks.next_batch(self.config.val_tasks);
        let batch = self.problem.prepare(&tasks)?;
        let shape = &self.config.policy;
        let before = self.spread(&self.learner.policy, &batch)?;
        let (_, phi) = adapt(
            &self.problem,
            shape,
            &self.learner.policy,
            &batch,
            self.inner(),
        )?;
        let after = self.spread(&self.learner.policy.with_params(phi), &batch)?;
        Ok(Validation {
            iteration,
            before,
            after,
        })
    }

    fn spread(
        &self,
        policy: &EnsembleMlp<B::InnerBackend>,
        batch: &ControlBatch<B>,
    ) -> Result<FidelitySpread, MetaError> {
        let tracked = EnsembleMlp::<B>::from_params(
            policy
                .params()
                .into_iter()
                .map(burn::tensor::Tensor::from_inner)
                .collect(),
            policy.activation,
        );
        let amplitudes = self
            .config
            .policy
            .amplitudes(&tracked, batch.features.clone());
        let f = self.val_problem.fidelities(amplitudes, batch)?;
        let spread = |t: burn::tensor::Tensor<B, 1>| {
            let (mean, std, tasks) = finite_stats(t.inner());
            Spread { mean, std, tasks }
        };
        Ok(FidelitySpread {
            squared_overlap: spread(f.squared_overlap),
            state: spread(f.state),
        })
    }

    /// Runs every meta-iteration with validations every `val_interval` iterations (and after
    /// the last), calling `progress` after each iteration.
    pub fn train(
        &mut self,
        progress: impl FnMut(&IterationRecord, Option<&Validation>),
    ) -> Result<History, MetaError> {
        self.train_in(&World::alone(), progress)
    }

    /// [`train`](Self::train) as one rank of `world`, each meta-iteration a
    /// [`step_in`](Self::step_in). Validation needs no joining: every rank holds the same
    /// policy and validates the same fresh tasks.
    pub fn train_in(
        &mut self,
        world: &World,
        mut progress: impl FnMut(&IterationRecord, Option<&Validation>),
    ) -> Result<History, MetaError> {
        self.train_while(world, |record, validation| {
            progress(record, validation);
            true
        })
    }

    /// [`train_in`](Self::train_in), asking `go_on` after each iteration (and its validation)
    /// whether to run the next one: a run stopped early (a user's Ctrl-C, say) returns the
    /// history of the iterations that finished.
    pub fn train_while(
        &mut self,
        world: &World,
        mut go_on: impl FnMut(&IterationRecord, Option<&Validation>) -> bool,
    ) -> Result<History, MetaError> {
        let mut history = History {
            config: self.config.clone(),
            iterations: Vec::new(),
            validations: Vec::new(),
        };
        for iteration in 1..=self.config.iterations {
            let start = Instant::now();
            let stats = self.step_in(world)?;
            let tasks = self.config.tasks_per_batch * world.shard().ranks;
            if stats.skipped_tasks == tasks {
                return Err(MetaError::Diverged {
                    iteration,
                    reason: format!(
                        "the meta-gradient of every one of the {tasks} tasks was not finite"
                    ),
                });
            }
            if !(stats.loss_before.is_finite() && stats.loss_after.is_finite()) {
                return Err(MetaError::Diverged {
                    iteration,
                    reason: format!(
                        "the mean task loss was {} before adaptation and {} after",
                        stats.loss_before, stats.loss_after
                    ),
                });
            }
            let record = IterationRecord {
                iteration,
                stats,
                seconds: start.elapsed().as_secs_f64(),
            };
            history.iterations.push(record);
            let validation = if iteration % self.config.val_interval == 0
                || iteration == self.config.iterations
            {
                let v = self.validate(iteration)?;
                history.validations.push(v);
                Some(v)
            } else {
                None
            };
            if !go_on(&record, validation.as_ref()) {
                break;
            }
        }
        Ok(history)
    }
}
