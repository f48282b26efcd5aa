//! Batched, differentiable Lindblad simulation for Quench.
//!
//! The host side works in f64 with complex matrices ([`CMatrix`]): qubit [`operators`], a
//! [`System`] (drift, control Hamiltonians, unit-rate jump operators), the guide's [`presets`],
//! [`noise`] models that turn a task into rates, and an f64 [`reference`](mod@reference) solver.
//!
//! The device side works in the orthonormal Hermitian [`Basis`] (generalised Gell-Mann), where a
//! density matrix is a real vector of length `d^2` and the Lindbladian a real `d^2 x d^2`
//! matrix, linear in the controls and rates. [`Generators`] hold those matrices on a device,
//! uploaded once per system by the [`OperatorCache`]; [`Solver::evolve`] evolves a [`Batch`] of
//! tasks, amplitudes `[tasks, segments, controls]`, with Euler, RK4 or the exact propagator,
//! all differentiable by Burn's autodiff; the [`fidelity`] functions score the results.
//!
//! ```
//! use burn::backend::NdArray;
//! use burn::tensor::{Tensor, TensorData};
//! use quench_lindblad::{Basis, Batch, OperatorCache, Output, Solver, fidelity, operators, presets};
//!
//! type B = NdArray<f32>;
//! let device = Default::default();
//! let system = presets::one_qubit();
//! let mut cache = OperatorCache::<B>::new();
//! let generators = cache.generators(&system, &device);
//!
//! // One task: a constant X drive of pi/2 over T = 1 flips |0> to |1> (the drift 0.1 Z
//! // detunes it slightly), without noise.
//! let basis = Basis::gell_mann(2);
//! let start = basis.coordinates(&operators::basis_state(2, 0)).unwrap();
//! let target = basis.coordinates(&operators::basis_state(2, 1)).unwrap();
//! let half_pi = std::f32::consts::FRAC_PI_2;
//! let batch = Batch {
//!     t_total: 1.0,
//!     amplitudes: Tensor::<B, 3>::from_data(TensorData::new([half_pi, 0.0].repeat(20), [1, 20, 2]), &device),
//!     rates: Tensor::zeros([1, 3], &device),
//!     initial: Tensor::from_data(TensorData::new(start, [1, 4]), &device),
//! };
//! let evolution = Solver::default().evolve(&generators, batch, Output::States).unwrap();
//! let target = Tensor::from_data(TensorData::new(target, [1, 4]), &device);
//! let fidelity: f32 = fidelity::state_fidelity(evolution.states, target).unwrap().into_scalar();
//! assert!(fidelity > 0.98);
//! ```
//!
//! # Pulse documents
//!
//! `cargo run --release -p quench-lindblad --example evolve -- INPUT.json` evolves the tasks
//! of a JSON document and writes JSON to stdout (an example:
//! `configs/lindblad/evolve-example.json`). A complex matrix is a list of rows, each entry a
//! pair `[re, im]`. The input object has the fields
//!
//! | field | type | meaning |
//! |---|---|---|
//! | `dim` | integer >= 1 | Hilbert-space dimension `d` |
//! | `t_total` | number > 0 | total pulse time `T`; segments last `T / segments` |
//! | `h0` | matrix | drift Hamiltonian, Hermitian |
//! | `controls` | list of matrices | control Hamiltonians, Hermitian |
//! | `jumps` | list of matrices | jump operators of unit rate |
//! | `rho0` | matrix | initial density matrix, Hermitian with unit trace |
//! | `target` | matrix, optional | pure target state; adds `fidelity = Tr(rho target)` |
//! | `method` | `"exact"`, `"rk4"` or `"euler"` | solver |
//! | `dt` | number > 0 | step for `rk4` and `euler` (required there; not used by `exact`, but checked when given) |
//! | `control_bound` | number >= 0, optional | amplitudes are clamped to `+-control_bound` (10) |
//! | `max_substeps` | integer >= 1, optional | most substeps of `rk4` and `euler` in all, `segments x max(1, floor(t_seg / dt))` (1,000,000) |
//! | `tasks` | list of objects | each `{ "rates": [one per jump], "amplitudes": [[one per control] per segment] }`; every task has the same number of segments |
//!
//! Rates must be non-negative. Every number must be finite: `1e400` (beyond the range of a
//! 64-bit float), `NaN` and `Infinity` are refused, naming the field. An amplitude beyond
//! `control_bound` is clamped and the example prints a warning line on stderr naming the
//! task, segment, value and bound, e.g. `warning: pulse.json: task 0, segment 3: amplitude
//! 1e300 of control 0 is beyond control_bound = 10 and is clamped to 10
//! (tasks[0].amplitudes[3][0])`. A `dt` so small that the run would take more than
//! `max_substeps` substeps in all is refused before any work, naming `dt` and the counts
//! (see [`Solver::max_substeps`]; the default is a thousand times what the shipped settings
//! take, and `exact` is never limited). The output is `{ "tasks": [ { "rho": matrix,
//! "fidelity": number } ] }`, `fidelity` only when a target was given. Malformed input exits
//! with status 1 and a message naming the field, e.g. `tasks[2].amplitudes[0]: expected 2
//! numbers (one per control), found 3`.

#![warn(missing_docs)]

pub mod basis;
mod batched;
pub mod cache;
pub mod conformance;
pub mod error;
mod exponential;
pub mod fidelity;
pub mod generators;
pub mod job;
pub mod matrix;
pub mod noise;
pub mod operators;
pub mod presets;
pub mod reference;
pub mod solver;
pub mod states;
pub mod system;
// The solvers end to end through the public items (closed forms, the f64 reference, finite differences), in the unit-test binary so the generic code is compiled once for both.
#[cfg(test)]
mod end_to_end;

pub use basis::Basis;
pub use cache::{CacheStats, OperatorCache};
pub use error::LindbladError;
pub use generators::{Generators, HostGenerators};
pub use job::{ClampedAmplitude, Job, JobReport, JobTask, TaskReport};
pub use matrix::CMatrix;
pub use noise::{RelaxDephaseTask, SpectralNoise, SpectralTask, SpectralTaskRanges, Spectrum};
pub use solver::{Batch, DEFAULT_MAX_SUBSTEPS, Evolution, Method, Output, Solver};
pub use system::System;

#[cfg(test)]
quench_support::aligned_allocator!();
