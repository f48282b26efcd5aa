//! Gibbs-posterior SGLD over a grid of inverse temperatures and repetitions (guide 002).
//!
//! Each `(beta, repetition)` pair is a chain: a 1-hidden-layer ReLU network with one logit,
//! sampled from the Gibbs posterior `exp(-beta L)` of its repetition's training data by
//! stochastic-gradient Langevin dynamics,
//!
//! ```text
//! theta <- theta - (lr/2) (grad L + theta / sigma^2) - sqrt(lr / beta) xi,   xi ~ N(0, I),
//! lr_t = a0 (t + 1)^(-1/2) in epoch t,
//! ```
//!
//! with `L` the minibatch mean of the bounded cross-entropy ([`loss`]) mapped onto `[0, 1]`
//! (the loss of the PAC-Bayes bound; `loss = "raw"` trains on nats as the original did) and
//! `sigma` the prior's standard deviation. At `beta = 0` the chain is pure noise, `theta <- theta - lr xi`, as in
//! the original code (its grid runs beta = 0 for one epoch at a0 = 1e-7, so it stays at the
//! prior draw; the bound needs the training loss there).
//!
//! All chains run as one batched program: parameters `[chains, in, out]`, per-chain `beta`,
//! `a0` and epoch counts as `[chains, 1, 1]` tensors, and each chain's own data set with the
//! member axis on the data too. A chain that has done its epochs is masked (its step is the
//! identity); with compaction the finished chains also leave the program.
//!
//! - [`config`]: the grid ([`GridConfig`], `configs/sgld/*.toml`).
//! - [`data`]: SYNTH per repetition, MNIST-binary (or Fashion-MNIST in its place).
//! - [`loss`]: bounded cross-entropy, its `[0, 1]` rescaling, 0-1 error.
//! - [`sampler`]: the SGLD update, its noise source and per-chain schedule.
//! - [`chains`]: a batch of chains and its training step (the fused form is the operation
//!   `QuenchOps::sgld_step` of quench-device).
//! - [`experiment`]: the grid as one program ([`run_grid`]), or one chain at a time.
//! - [`results`] and [`bound`]: per-beta statistics and the PAC-Bayes bound.

pub mod bound;
pub mod chains;
pub mod config;
pub mod data;
pub mod error;
pub mod experiment;
pub mod loss;
pub mod results;
pub mod sampler;

// The grid and the sampler end to end through their public items, in the unit-test binary so the generic code is compiled once for both.
#[cfg(test)]
mod end_to_end;

pub use bound::{Bound, pac_bayes_bounds};
pub use chains::{ChainBatch, StepOptions};
pub use config::{DatasetKind, GridConfig, MNIST_CLASSES, MnistConfig, SynthConfig};
pub use data::GridData;
pub use error::SgldError;
pub use experiment::{Execution, run_grid, run_grid_shard, shard_chains};
pub use loss::{BoundedLoss, LossScale};
pub use quench_support::stats::MeanStd;
pub use results::{BetaSummary, ChainOutcome, GridResult};
pub use sampler::{ChainSchedule, Noise, NoiseSource, Sgld, StepScales};

#[cfg(test)]
quench_support::aligned_allocator!();
