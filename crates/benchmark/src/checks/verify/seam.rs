//! The seam's operations against exact references: `precise_matmul` against an f64 product, and
//! the counter-based normals' composition against their host kernel.

use super::Check;
use burn::tensor::{Tensor, TensorData};
use quench_kernels::ops::random::{normals, normals_host, normals_tensor};
use quench_kernels::readback::to_host_f32;
use quench_kernels::threefry::StreamKey;
use quench_kernels::{QuenchBackend, precise_matmul};
use quench_support::stats::max_or_nan;

/// What [`matmul_precision`] found.
pub(super) struct MatmulPrecision {
    /// `precise_matmul`'s check.
    pub check: Check,
    /// The backend's own matmul's largest error, relative as in the check: the bound of each
    /// product that a composition of Burn ops (autodiff's, say) makes on this device.
    pub backend_error: f64,
}

/// The seam's `precise_matmul` against an f64 product on the host, `[8, 64, 64] @ [8, 64, 64]`
/// of standard normals: each entry's error relative to `sum_k |a_ik b_kj|`, whose bound in f32
/// is `k 2^-24`. The backend's own matmul is measured beside it and named, where a GPU staging
/// f32 operands as tf32 shows near 1e-3.
pub(super) fn matmul_precision<B: QuenchBackend>(device: &B::Device) -> MatmulPrecision {
    const BATCH: usize = 8;
    const N: usize = 64;
    let a = normals_host(&[StreamKey::from_seed(1)], 0, BATCH * N * N);
    let b = normals_host(&[StreamKey::from_seed(2)], 0, BATCH * N * N);
    let tensor = |values: &[f32]| {
        Tensor::<B::InnerBackend, 3>::from_data(
            TensorData::new(values.to_vec(), [BATCH, N, N]),
            device,
        )
    };
    let precise = to_host_f32(precise_matmul(tensor(&a), tensor(&b)));
    let plain = to_host_f32(tensor(&a).matmul(tensor(&b)));
    // Each entry's f64 value and the sum of its terms' magnitudes, once for both products.
    let reference: Vec<(f64, f64)> = (0..BATCH * N * N)
        .map(|entry| {
            let (t, row, col) = (entry / (N * N), entry / N % N, entry % N);
            (0..N)
                .map(|k| f64::from(a[(t * N + row) * N + k]) * f64::from(b[(t * N + k) * N + col]))
                .fold((0.0, 0.0), |(s, m), x| (s + x, m + x.abs()))
        })
        .collect();
    let error = |got: &[f32]| {
        max_or_nan(
            got.iter()
                .zip(&reference)
                .map(|(&g, &(sum, scale))| (f64::from(g) - sum).abs() / scale),
        )
    };
    let backend_error = error(&plain);
    MatmulPrecision {
        check: Check::measured(
            &format!(
                "matmul: precise_matmul in f32 vs f64 (the backend's own matmul: {backend_error:.1e})"
            ),
            error(&precise),
            N as f64 * 2f64.powi(-24),
        ),
        backend_error,
    }
}

/// Counter-based normals on the device, by its operation (a CubeCL kernel on a GPU) and as
/// its integer tensor ops, against the host kernel: the same Threefry words, so the same
/// noise to the float transform's rounding (4 streams x 10,001 values, two draws).
pub(super) fn counter_noise<B: QuenchBackend>(device: &B::Device) -> Check {
    let keys: Vec<StreamKey> = [0u64, 7, u64::MAX, 0x5EED]
        .iter()
        .map(|&s| StreamKey::from_seed(s))
        .collect();
    let error = max_or_nan([0u64, (1 << 32) + 5].iter().flat_map(|&draw| {
        let host = normals_host(&keys, draw, 10_001);
        let forms = [
            to_host_f32(normals::<B::InnerBackend>(&keys, draw, 10_001, device)),
            to_host_f32(normals_tensor::<B::InnerBackend>(
                &keys, draw, 10_001, device,
            )),
        ];
        forms.map(|values| {
            max_or_nan(
                host.iter()
                    .zip(&values)
                    .map(|(h, t)| f64::from((h - t).abs())),
            )
        })
    }));
    Check::measured(
        "noise: counter-based normals on the device (its operation, its tensor ops) = host kernel",
        error,
        1e-4,
    )
}
