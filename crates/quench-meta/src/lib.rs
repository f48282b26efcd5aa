//! Meta-learned quantum control (guide 001): a policy maps a noise task to a pulse, trained
//! by first-order MAML or Reptile through the batched Lindblad simulator.
//!
//! [`tasks`] draws noise tasks and turns them into policy features; [`problem`] holds the
//! system, target and loss with the operators on the device; [`policy`] is the pulse network
//! and its saved form; [`maml`] the batched inner loop and meta-update; [`train`] a whole run
//! with validation and history; [`config`] its TOML configuration and the choices it names
//! (system, target, loss).

pub mod config;
pub mod error;
pub mod maml;
pub mod policy;
pub mod problem;
pub mod tasks;
pub mod train;

// The workload end to end through its public items (batching against one task at a time, learning, refused settings), in the unit-test binary so the generic code is compiled once for both.
#[cfg(test)]
mod end_to_end;

pub use config::{LossKind, MetaConfig, SystemChoice, Target};
pub use error::MetaError;
pub use maml::{Algorithm, InnerLoop, MetaLearner, StepStats, TaskGradients};
pub use policy::{PolicyShape, load_policy, save_policy};
pub use problem::{ControlBatch, ControlProblem, Operators};
pub use tasks::{Features, TaskFamily, TaskStream};
pub use train::{History, MetaRun, Validation};

#[cfg(test)]
quench_support::aligned_allocator!();
