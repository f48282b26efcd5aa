//! The exact final states of a batch of linear systems `dv/dt = M v`, piecewise constant in
//! time, as an operation ([`QuenchOps::exact_states`]): every task's state `[n]` carried
//! through its segments, `v <- exp(M_s t_segment) v`, with `M_s = M_0 + sum_c u_sc M_c + sum_k
//! gamma_k D_k` (for the Lindblad solver, the Lindbladian in a real basis: `n = d^2`).
//!
//! The caller supplies the default composition, because it belongs to the caller's error
//! control (the Lindblad solver's Taylor polynomial, squarings and product tree of whole
//! propagators, which autodiff differentiates). The CPU backend without autodiff has a host
//! kernel (`expmv::host`) that forms no propagator: `exp(A) v` as a truncated Taylor series of
//! matrix-vector products in `p` substeps of degree `m`, both chosen from each segment's own
//! 1-norm (the idea of Al-Mohy and Higham's `expmv`), in f64 to the backend's unit roundoff,
//! tasks over the cores: 17x faster than the composition at 4,096 tasks on two cores.

use burn::tensor::backend::Backend;
use burn::tensor::{DType, Tensor};

use super::QuenchOps;

pub(crate) mod host;

/// A generator `M = M_0 + sum_c u_c M_c + sum_k gamma_k D_k` in host memory, f64, each part
/// row-major `[n, n]`.
#[derive(Clone, Debug, PartialEq)]
pub struct GeneratorParts {
    /// The side `n` of every part.
    pub n: usize,
    /// `M_0`, the part without a coefficient.
    pub drift: Vec<f64>,
    /// `M_c`, one per control amplitude.
    pub controls: Vec<Vec<f64>>,
    /// `D_k`, one per rate.
    pub jumps: Vec<Vec<f64>>,
}

impl GeneratorParts {
    /// `M_0 + sum_c u_c M_c + sum_k gamma_k D_k`, row-major `[n, n]`, for as many
    /// `amplitudes` and `rates` as there are parts (extra coefficients are ignored).
    pub fn generator(&self, amplitudes: &[f64], rates: &[f64]) -> Vec<f64> {
        let mut m = self.drift.clone();
        add_terms(&mut m, &self.controls, amplitudes);
        add_terms(&mut m, &self.jumps, rates);
        m
    }

    /// `M_0 + sum_k gamma_k D_k` written into `out` (`[n, n]`): the part of the generator that
    /// stays fixed over a task's segments.
    pub(crate) fn fixed_part_into(&self, rates: &[f64], out: &mut [f64]) {
        out.copy_from_slice(&self.drift);
        add_terms(out, &self.jumps, rates);
    }

    /// `fixed + sum_c u_c M_c` written into `out`: one segment's generator from
    /// [`Self::fixed_part_into`]'s matrix and the segment's amplitudes.
    pub(crate) fn with_controls_into(&self, fixed: &[f64], amplitudes: &[f64], out: &mut [f64]) {
        out.copy_from_slice(fixed);
        add_terms(out, &self.controls, amplitudes);
    }
}

/// `m += sum_i coefficients[i] parts[i]`.
fn add_terms(m: &mut [f64], parts: &[Vec<f64>], coefficients: &[f64]) {
    for (part, &coefficient) in parts.iter().zip(coefficients) {
        m.iter_mut()
            .zip(part)
            .for_each(|(a, b)| *a += coefficient * b);
    }
}

/// The 1-norm (largest column sum of magnitudes) of a row-major `[n, n]` matrix; NaN when an
/// entry is NaN (`f64::max` would drop it).
pub fn real_norm_one(matrix: &[f64], n: usize) -> f64 {
    (0..n)
        .map(|col| (0..n).map(|row| matrix[row * n + col].abs()).sum())
        .fold(0.0, |most: f64, sum: f64| {
            if sum.is_nan() || sum > most {
                sum
            } else {
                most
            }
        })
}

/// `phi^{m+1} e^phi / (m+1)!`, a bound on the tail of the exponential series after degree `m`
/// for a matrix of norm `phi`.
pub fn remainder_bound(phi: f64, degree: usize) -> f64 {
    let mut term = phi.exp();
    for k in 1..=degree + 1 {
        term *= phi / k as f64;
    }
    term
}

/// The unit roundoff of a float type: `2^-53` for f64, `2^-24` for f32 (and the bound the
/// solvers keep for the lower precisions, whose products accumulate in f32).
pub fn unit_roundoff(dtype: DType) -> f64 {
    match dtype {
        DType::F64 => 2f64.powi(-53),
        _ => 2f64.powi(-24),
    }
}

/// A batch of exact evolutions to their final states.
#[derive(Debug, Clone)]
pub struct ExactStates<'a, B: Backend> {
    /// The generator's parts, f64 in host memory (what the device's tensors were made from).
    pub generators: &'a GeneratorParts,
    /// Each task's control amplitudes per segment, `[tasks, segments, controls]`, clamped to
    /// `+-control_bound` before use.
    pub amplitudes: Tensor<B, 3>,
    /// Each task's rates `[tasks, jumps]`, clamped to `[0, rate_bound]` before use.
    pub rates: Tensor<B, 2>,
    /// Each task's initial state `[tasks, n]`.
    pub initial: Tensor<B, 2>,
    /// The length of every segment (the time unit of the generators' inverse).
    pub t_segment: f64,
    /// The amplitudes' clamp.
    pub control_bound: f64,
    /// The rates' clamp.
    pub rate_bound: f64,
    /// A bound on `||M_s t_segment||_1` for every segment the clamps let through.
    pub segment_bound: f64,
}

/// The final states `[tasks, n]` of `input` ([`QuenchOps::exact_states`]), by `composed`
/// where the backend has no kernel of its own.
pub fn exact_states<'a, B: QuenchOps>(
    input: ExactStates<'a, B>,
    composed: impl FnOnce(ExactStates<'a, B>) -> Tensor<B, 2>,
) -> Tensor<B, 2> {
    B::exact_states(input, composed)
}
