//! The control problem the policy is trained on: a system, a task family, a target and a loss,
//! with the simulator's operators uploaded once.

use burn::tensor::{Tensor, TensorData};
use quench_kernels::QuenchOps;
use quench_lindblad::operators::{basis_state, kron_all};
use quench_lindblad::{
    Basis, Batch, Evolution, Generators, OperatorCache, Output, RelaxDephaseTask, SpectralNoise,
    SpectralTask, System, fidelity,
};

use super::config::{LossKind, MetaConfig, SystemChoice};
use super::error::MetaError;
use super::tasks::{Features, TaskFamily, feature_tensor};

/// Fidelities of a batch, `[tasks]` each.
#[derive(Debug, Clone)]
pub struct Fidelities<B: QuenchOps> {
    /// `|Tr(rho sigma)|^2`, the guide's metric.
    pub squared_overlap: Tensor<B, 1>,
    /// `Tr(rho sigma)`.
    pub state: Tensor<B, 1>,
}

/// Tasks prepared on the device once for all the steps that use them.
#[derive(Debug, Clone)]
pub struct ControlBatch<B: QuenchOps> {
    /// Policy inputs `[tasks, 1, task_dim]`.
    pub features: Tensor<B, 3>,
    /// Jump rates `[tasks, jumps]`.
    pub rates: Tensor<B, 2>,
    /// Initial states `[tasks, d^2]`.
    pub initial: Tensor<B, 2>,
}

impl<B: QuenchOps> ControlBatch<B> {
    /// Tasks in the batch.
    pub fn len(&self) -> usize {
        self.features.dims()[0]
    }

    /// Whether the batch has no task.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Task `index` alone, as a batch of one.
    pub fn task(&self, index: usize) -> Self {
        Self {
            features: self.features.clone().narrow(0, index, 1),
            rates: self.rates.clone().narrow(0, index, 1),
            initial: self.initial.clone().narrow(0, index, 1),
        }
    }
}

/// How the simulator's operators are obtained on every loss call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Operators {
    /// Built and uploaded once (the operator cache).
    #[default]
    Cached,
    /// Rebuilt on the host and uploaded on every call: the original's way, for its benchmark
    /// baseline only.
    RebuiltPerCall,
}

/// A system, task family, target and loss, with the operators on the device.
#[derive(Debug, Clone)]
pub struct ControlProblem<B: QuenchOps> {
    system: System,
    family: TaskFamily,
    features: Features,
    loss: LossKind,
    t_total: f64,
    solver: quench_lindblad::Solver,
    noise: Option<SpectralNoise>,
    generators: Generators<B>,
    operators: Operators,
    initial: Tensor<B, 2>,
    target_state: Tensor<B, 2>,
    target_process: Tensor<B, 3>,
    device: B::Device,
}

impl<B: QuenchOps> ControlProblem<B> {
    /// The problem of `config`, its generators taken from `cache`.
    pub fn new(
        config: &MetaConfig,
        cache: &mut OperatorCache<B>,
        device: &B::Device,
    ) -> Result<Self, MetaError> {
        let system = config.system.system();
        match (config.tasks, config.system) {
            (TaskFamily::DirectRates, SystemChoice::RelaxDephase) => {}
            (TaskFamily::DirectRates, other) => {
                return Err(MetaError::config(
                    "tasks",
                    "direct-rates",
                    format!("direct rates need the relax-dephase system, not {other:?}"),
                ));
            }
            (_, SystemChoice::RelaxDephase) => {
                return Err(MetaError::config(
                    "system",
                    "relax-dephase",
                    "its two jumps take direct rates: use tasks = \"direct-rates\"",
                ));
            }
            _ => {}
        }
        if config.policy.controls != system.controls().len() {
            return Err(MetaError::config(
                "policy.controls",
                config.policy.controls,
                format!("the system has {} controls", system.controls().len()),
            ));
        }
        if !(config.t_total.is_finite() && config.t_total > 0.0) {
            return Err(MetaError::config(
                "t_total",
                config.t_total,
                "must be positive",
            ));
        }
        config.solver.validate()?;
        let dim = system.dim();
        let qubits = if dim == 4 { 2 } else { 1 };
        let unitary = kron_all(&vec![config.target.unitary(); qubits]);
        let ground = basis_state(dim, 0);
        let target_state = ground.conjugated_by(&unitary);
        let basis = Basis::gell_mann(dim);
        let n = dim * dim;
        let row = |v: Vec<f64>| {
            Tensor::<B, 2>::from_data(
                TensorData::new(v.into_iter().map(|x| x as f32).collect::<Vec<_>>(), [1, n]),
                device,
            )
        };
        let process: Vec<f32> = basis
            .unitary_superoperator(&unitary)
            .into_iter()
            .map(|x| x as f32)
            .collect();
        Ok(Self {
            generators: cache.generators(&system, device),
            noise: config
                .tasks
                .spectrum()
                .map(|s| SpectralNoise::guide(s, config.policy.segments, config.t_total)),
            initial: row(basis.coordinates(&ground)?),
            target_state: row(basis.coordinates(&target_state)?),
            target_process: Tensor::from_data(TensorData::new(process, [1, n, n]), device),
            system,
            family: config.tasks,
            features: config.features,
            loss: config.loss,
            t_total: config.t_total,
            solver: config.solver,
            operators: Operators::Cached,
            device: device.clone(),
        })
    }

    /// The same problem with operators obtained as `operators` says.
    pub fn with_operators(mut self, operators: Operators) -> Self {
        self.operators = operators;
        self
    }

    /// The same problem with another solver.
    pub fn with_solver(mut self, solver: quench_lindblad::Solver) -> Self {
        self.solver = solver;
        self
    }

    /// The task family.
    pub fn family(&self) -> TaskFamily {
        self.family
    }

    /// The jump rates of each task, `[tasks][jumps]`, computed on the host.
    pub fn rates(&self, tasks: &[Vec<f64>]) -> Result<Vec<Vec<f64>>, MetaError> {
        let jumps = self.system.jumps().len();
        tasks
            .iter()
            .map(|task| match (self.noise, task.as_slice()) {
                (Some(noise), &[alpha, amplitude, omega_c]) => {
                    let g = noise.rate(&SpectralTask {
                        alpha,
                        amplitude,
                        omega_c,
                    })?;
                    Ok(vec![g; jumps])
                }
                (None, &[g_deph, g_relax]) => {
                    Ok(RelaxDephaseTask { g_relax, g_deph }.rates()?.to_vec())
                }
                _ => Err(MetaError::config(
                    "tasks",
                    format!("{task:?}"),
                    format!(
                        "a {:?} task has {} values",
                        self.family,
                        self.family.axes().len()
                    ),
                )),
            })
            .collect()
    }

    /// Uploads `tasks` once: features, rates and initial states.
    pub fn prepare(&self, tasks: &[Vec<f64>]) -> Result<ControlBatch<B>, MetaError> {
        let rates = self.rates(tasks)?;
        let jumps = self.system.jumps().len();
        let flat: Vec<f32> = rates.iter().flatten().map(|&r| r as f32).collect();
        let count = tasks.len();
        Ok(ControlBatch {
            features: feature_tensor(self.family, self.features, tasks, &self.device),
            rates: Tensor::from_data(TensorData::new(flat, [count, jumps]), &self.device),
            initial: self.initial.clone().repeat_dim(0, count),
        })
    }

    /// Evolves the batch under `amplitudes` `[tasks, segments, controls]`, without the
    /// solver's finiteness checks (read-backs that would stall a GPU's queue every call): the
    /// meta loop fails its run on a loss that is not finite instead.
    pub fn evolve(
        &self,
        amplitudes: Tensor<B, 3>,
        batch: &ControlBatch<B>,
        output: Output,
    ) -> Result<Evolution<B>, MetaError> {
        let generators = match self.operators {
            Operators::Cached => self.generators.clone(),
            Operators::RebuiltPerCall => Generators::upload(&self.system, &self.device),
        };
        let run = Batch {
            t_total: self.t_total,
            amplitudes,
            rates: batch.rates.clone(),
            initial: batch.initial.clone(),
        };
        Ok(self
            .solver
            .evolve_without_finite_checks(&generators, run, output)?)
    }

    /// The loss `1 - F` of every task, `[tasks]`, differentiable on an autodiff backend.
    pub fn losses(
        &self,
        amplitudes: Tensor<B, 3>,
        batch: &ControlBatch<B>,
    ) -> Result<Tensor<B, 1>, MetaError> {
        let output = if self.loss == LossKind::GateFidelity {
            Output::StatesAndPropagators
        } else {
            Output::States
        };
        let evolution = self.evolve(amplitudes, batch, output)?;
        let f = match (self.loss, evolution.propagators) {
            (LossKind::SquaredOverlap, _) => {
                fidelity::squared_overlap(evolution.states, self.target_state.clone())?
            }
            (LossKind::StateFidelity, _) => {
                fidelity::state_fidelity(evolution.states, self.target_state.clone())?
            }
            (LossKind::GateFidelity, Some(p)) => {
                fidelity::average_gate_fidelity(p, self.target_process.clone())?
            }
            (LossKind::GateFidelity, None) => unreachable!("propagators were requested"),
        };
        Ok(f.neg().add_scalar(1.0))
    }

    /// Both state fidelities of every task.
    pub fn fidelities(
        &self,
        amplitudes: Tensor<B, 3>,
        batch: &ControlBatch<B>,
    ) -> Result<Fidelities<B>, MetaError> {
        let states = self.evolve(amplitudes, batch, Output::States)?.states;
        Ok(Fidelities {
            squared_overlap: fidelity::squared_overlap(states.clone(), self.target_state.clone())?,
            state: fidelity::state_fidelity(states, self.target_state.clone())?,
        })
    }
}
