//! The training core of Quench's workloads, all over a leading member axis.
//!
//! Every workload (the crates `quench-meta`, `quench-sgld`, `quench-qrng`, `quench-hybrid` and
//! `quench-temporal`) is a set of independent small problems (tasks, chains, seeds, pairs).
//! They share one representation: parameters are rank-3 tensors whose first axis is the member
//! (`[members, in, out]` weights, `[members, 1, out]` biases), applied with batched matmuls, and
//! per-member hyper-parameters are `[members, 1, 1]` tensors broadcast over it. The pieces that
//! every workload uses live here once: [`ensemble`] (layers and MLPs), [`init`]
//! (initialisations), [`optim`] (member-axis Adam and gradient clipping) and [`params`]
//! (gradients, norms and masks per member), [`amp`] (mixed-precision steps and loss scaling),
//! [`classify`] (classification loss and dropout), [`binary`] (binary classification by SGD,
//! the loader workload's model), [`epochs`] (the epoch loop over seed-batched members) and
//! [`stopping`] (its early stopping with best weights), [`settings`]
//! (range checks of settings).

pub mod amp;
pub mod binary;
pub mod classify;
pub mod ensemble;
pub mod epochs;
pub mod init;
pub mod optim;
pub mod params;
pub mod settings;
pub mod stopping;

#[cfg(test)]
quench_support::aligned_allocator!();
