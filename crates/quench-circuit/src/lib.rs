//! Batched, differentiable state-vector simulation of small qubit circuits (guide 003).
//!
//! A [`Circuit`] is a checked list of [`Gate`]s on `n` qubits, starting from `|0...0>`; each
//! rotation's [`Angle`] is fixed, a per-sample input (an encoding, `[batch, inputs]`) or a
//! shared weight (`[weights]`, trained). A [`Simulator`] compiles it for a Burn device and runs
//! a whole batch as one tensor program, states `[batch, 2^n]`, real while every gate is real;
//! [`Mode::Fused`] turns runs of shared gates into one matrix per call, and reads out a real
//! circuit's `<Z_i>` ([`Simulator::expectations`]) as one fused operation of the seam
//! (a kernel each way on a GPU). Gradients come from Burn's autodiff (the fused read-out's by
//! the adjoint method); the f64 [`reference`] simulates one circuit at a time on the host and
//! gives parameter-shift gradients to check them against.
//!
//! Wire 0 is the most significant bit of a basis index (`|q0 q1 ... q_{n-1}>`), and the
//! rotations are PennyLane's, so expectations match PennyLane's `qml.expval(qml.PauliZ(i))`.
//!
//! ```
//! use burn::backend::NdArray;
//! use burn::tensor::{Tensor, TensorData};
//! use quench_circuit::{Circuit, Gate, GateKind, Mode, Simulator};
//!
//! type B = NdArray<f32>;
//! let device = Default::default();
//! // A Bell pair: H on 0, CNOT 0 -> 1; then <Z_0> = <Z_1> = 0 and <Z_0 Z_1> = 1.
//! let bell = Circuit::new(2, vec![Gate::new(GateKind::H, &[0]), Gate::new(GateKind::Cnot, &[0, 1])])?;
//! let simulator = Simulator::<B>::new(bell, Mode::Fused, &device)?;
//! let state = simulator.run(1, None, None)?;
//! let z: Vec<f32> = simulator.z_expectations(&state)?.into_data().to_vec().unwrap();
//! let zz: Vec<f32> = simulator.zz_expectations(&state, &[(0, 1)])?.into_data().to_vec().unwrap();
//! assert!(z.iter().all(|v| v.abs() < 1e-6) && (zz[0] - 1.0).abs() < 1e-6);
//! # Ok::<(), quench_circuit::CircuitError>(())
//! ```

pub mod circuit;
pub mod error;
pub mod gate;
pub mod json;
pub mod limits;
mod permutation;
mod program;
pub mod reference;
pub mod simulate;

pub use circuit::Circuit;
pub use error::CircuitError;
pub use gate::{Angle, Gate, GateKind};
pub use limits::{MAX_ANGLES, MAX_FUSED_QUBITS, MAX_QUBITS};
pub use simulate::{Mode, Simulator, State, fusion_pays};

#[cfg(test)]
quench_support::aligned_allocator!();
