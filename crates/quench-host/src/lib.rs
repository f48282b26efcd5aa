//! What the CPU backend's host kernels share: access to burn-ndarray's f32 tensors
//! ([`tensor`]), a pool of large buffers ([`buffers`]), the matrix product ([`gemm`]), scalar
//! maths written to vectorise ([`math`]), small dense matrices and their polynomials
//! ([`small_matrix`]), real quantum circuits one sample at a time ([`circuit`]), an LSTM layer's row over its
//! sequence ([`lstm`]), the attention's softmax rows ([`softmax`]), layer normalisation's rows ([`layer_norm`]), a
//! member's batch normalisation ([`batch_norm`]), the run-time choice of vector width ([`simd`]), the
//! split of work over the cores ([`lanes`]), the counter-based generator every backend's
//! normals come from ([`threefry`]) and its streams drawn on the host ([`streams`]). Each operation's own kernel lives beside it, in
//! `quench_kernels::ops::<operation>::host` (`crates/quench-kernels/src/ops/<operation>/host.rs`).

pub mod bandwidth;
pub mod batch_norm;
pub mod buffers;
pub mod circuit;
pub mod gemm;
pub mod lanes;
pub mod layer_norm;
pub mod lstm;
pub mod math;
pub mod simd;
pub mod small_matrix;
pub mod softmax;
pub mod streams;
pub mod tensor;
pub mod threefry;

#[cfg(test)]
quench_support::aligned_allocator!();
