//! Shared helpers of the integration tests: random pulses, tensors in the backend's own
//! float type, and the f64 reference for a whole batch.

use crate::CMatrix;
pub use crate::conformance::{Pulses, initial_states, max_density_error, tensor};
use burn::tensor::Tensor;
use quench_kernels::QuenchOps;

/// The values of a tensor as f64, read back from whichever device holds it.
pub fn values<B: QuenchOps, const D: usize>(t: Tensor<B, D>) -> Vec<f64> {
    quench_kernels::readback::to_host_f64(t)
}

/// The smallest eigenvalue of a Hermitian matrix: cyclic Jacobi rotations on its real
/// symmetric embedding `[[Re, -Im], [Im, Re]]`, which has the same eigenvalues, each twice.
pub fn min_eigenvalue(h: &CMatrix) -> f64 {
    let d = h.dim();
    let n = 2 * d;
    let mut a = vec![0.0; n * n];
    for r in 0..d {
        for c in 0..d {
            let z = h.get(r, c);
            a[r * n + c] = z.re;
            a[(r + d) * n + c + d] = z.re;
            a[r * n + c + d] = -z.im;
            a[(r + d) * n + c] = z.im;
        }
    }
    for _ in 0..50 {
        for p in 0..n {
            for q in p + 1..n {
                let apq = a[p * n + q];
                if apq.abs() < 1e-300 {
                    continue;
                }
                let theta = (a[q * n + q] - a[p * n + p]) / (2.0 * apq);
                let t = theta.signum() / (theta.abs() + (theta * theta + 1.0).sqrt());
                let (c, s) = (1.0 / (t * t + 1.0).sqrt(), t / (t * t + 1.0).sqrt());
                for k in 0..n {
                    let (akp, akq) = (a[k * n + p], a[k * n + q]);
                    a[k * n + p] = c * akp - s * akq;
                    a[k * n + q] = s * akp + c * akq;
                }
                for k in 0..n {
                    let (apk, aqk) = (a[p * n + k], a[q * n + k]);
                    a[p * n + k] = c * apk - s * aqk;
                    a[q * n + k] = s * apk + c * aqk;
                }
            }
        }
    }
    (0..n).map(|i| a[i * n + i]).fold(f64::INFINITY, f64::min)
}
