//! What the CPU backend's host kernels share: access to burn-ndarray's f32 tensors
//! ([`tensor`]), a pool of large buffers ([`buffers`]), the matrix product ([`gemm`]), scalar
//! maths written to vectorise ([`math`]), small dense matrices and their polynomials
//! ([`small_matrix`]), the run-time choice of vector width ([`simd`]), the
//! split of work over the cores ([`lanes`]) and the counter-based generator every backend's
//! normals come from ([`threefry`]). Each operation's own kernel lives beside it, in
//! `quench_kernels::ops::<operation>::host` (`crates/quench-kernels/src/ops/<operation>/host.rs`).

pub mod buffers;
pub mod gemm;
pub mod lanes;
pub mod math;
pub mod simd;
pub mod small_matrix;
pub mod tensor;
pub mod threefry;

#[cfg(test)]
quench_support::aligned_allocator!();
