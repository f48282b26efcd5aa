//! The sizes a circuit and its simulation are held to, in one leaf module that the circuit,
//! the simulator and the error type all read.

/// The most qubits a circuit may have: one state of 2^30 amplitudes is 4 GiB in f32.
pub const MAX_QUBITS: usize = 30;

/// The most input or weight columns a circuit may read (an angle's index is below this): far
/// above any circuit one can simulate, and low enough that a column count never overflows.
pub const MAX_ANGLES: usize = 1 << 24;

/// The most qubits for which [`Mode::Fused`](crate::simulate::Mode::Fused) builds `2^n x 2^n` matrices. Measured on the CPU
/// (2 cores, guide 003's circuit with 4 layers, 2026-11-26): a fused call costs about as much
/// as gate by gate at `2^n` rows per member, for every `n` from 6 to 10 (fused pays 1.9-5.3x
/// above it, loses up to 100x below it), and from 9 qubits on the matrices alone take 0.2 to
/// 1.5 s per call to build; at 8 qubits fused pays 4.3x at 1,024 rows.
pub const MAX_FUSED_QUBITS: usize = 8;
