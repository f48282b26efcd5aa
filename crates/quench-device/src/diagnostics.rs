//! Measured figures of a device: the latency of a tiny operation, matmul throughput at sizes
//! from batched 4x4 to 1024x1024, and copy bandwidth.

use burn::tensor::backend::Backend;
use burn::tensor::{Distribution, Tensor, TensorData};
use serde::{Deserialize, Serialize};

use crate::error::DeviceError;
use crate::timing::{TimingConfig, measure_on};
use quench_kernels::SeededGenerator;
use quench_kernels::readback::to_host_f32;
use quench_support::stats::Stats;

/// A batched square matrix product: `batch` products of `n x n` by `n x n`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct MatmulShape {
    /// Independent products in one call.
    pub batch: usize,
    /// Side of each matrix.
    pub n: usize,
}

impl MatmulShape {
    /// Floating-point operations of one call: `2 batch n^3`.
    pub fn flops(&self) -> f64 {
        2.0 * self.batch as f64 * (self.n as f64).powi(3)
    }
}

/// Settings of [`diagnose`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DiagnosticsConfig {
    /// Warm-up and repeats of every figure.
    pub timing: TimingConfig,
    /// Tiny operations queued back to back for the per-operation latency.
    pub tiny_ops: usize,
    /// Matrix-product shapes to measure.
    pub matmul: Vec<MatmulShape>,
    /// Size of the copied buffer, MiB.
    pub copy_mib: usize,
}

impl Default for DiagnosticsConfig {
    fn default() -> Self {
        Self {
            timing: TimingConfig {
                warmup: 2,
                repeats: 5,
            },
            tiny_ops: 200,
            matmul: vec![
                MatmulShape {
                    batch: 16_384,
                    n: 4,
                },
                MatmulShape {
                    batch: 1_024,
                    n: 32,
                },
                MatmulShape { batch: 16, n: 256 },
                MatmulShape { batch: 1, n: 1_024 },
            ],
            copy_mib: 64,
        }
    }
}

/// The cost of one tiny operation (an add on a one-element tensor), microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct TinyOpLatency {
    /// Per operation when many are queued and the device is synchronised once: the launch
    /// cost that dominates small workloads.
    pub queued_us: Stats,
    /// One operation followed by reading its result back to the host.
    pub round_trip_us: Stats,
}

/// Measured throughput of one matmul shape.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct MatmulFigure {
    /// The shape measured.
    pub shape: MatmulShape,
    /// Seconds per call.
    pub seconds: Stats,
    /// GFLOP/s at the median time.
    pub gflops: f64,
    /// Largest relative error of sampled entries against an f64 host reference.
    pub max_rel_error: f64,
}

/// Copy times of one buffer, seconds per copy.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct CopyFigures {
    /// Bytes of the buffer.
    pub bytes: u64,
    /// Host to device (tensor creation from host data).
    pub host_to_device: Stats,
    /// Device to host (reading a tensor back).
    pub device_to_host: Stats,
    /// Device to device (an elementwise copy: the buffer is read once and written once).
    pub device_to_device: Stats,
}

impl CopyFigures {
    /// Bytes that cross memory in one copy of `direction`; a device-to-device copy reads and
    /// writes the buffer, so it counts twice.
    pub fn bytes_moved(&self, direction: CopyDirection) -> f64 {
        match direction {
            CopyDirection::DeviceToDevice => 2.0 * self.bytes as f64,
            _ => self.bytes as f64,
        }
    }

    /// Seconds per copy in `direction`.
    pub fn seconds(&self, direction: CopyDirection) -> Stats {
        match direction {
            CopyDirection::HostToDevice => self.host_to_device,
            CopyDirection::DeviceToHost => self.device_to_host,
            CopyDirection::DeviceToDevice => self.device_to_device,
        }
    }

    /// Bandwidth in GB/s (10^9 bytes per second) at the median time.
    pub fn gbs(&self, direction: CopyDirection) -> f64 {
        self.bytes_moved(direction) / self.seconds(direction).median / 1e9
    }
}

/// The three copies [`copy_bandwidth`] measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CopyDirection {
    /// Host memory to the device.
    HostToDevice,
    /// The device back to host memory.
    DeviceToHost,
    /// Within device memory.
    DeviceToDevice,
}

impl CopyDirection {
    /// All three, in report order.
    pub const ALL: [CopyDirection; 3] =
        [Self::HostToDevice, Self::DeviceToHost, Self::DeviceToDevice];
}

/// All measured figures of one device.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Diagnostics {
    /// The backend's own name for itself and the device.
    pub backend: String,
    /// Latency of a tiny operation.
    pub tiny_op: TinyOpLatency,
    /// Matmul throughput per shape.
    pub matmul: Vec<MatmulFigure>,
    /// Copy bandwidths.
    pub copy: CopyFigures,
}

/// Measures every figure of [`Diagnostics`] on `device`.
pub fn diagnose<B: Backend>(
    device: &B::Device,
    config: &DiagnosticsConfig,
) -> Result<Diagnostics, DeviceError> {
    let tiny_op = tiny_op_latency::<B>(device, config.timing, config.tiny_ops)?;
    let matmul = config
        .matmul
        .iter()
        .map(|&shape| matmul_throughput::<B>(device, config.timing, shape))
        .collect::<Result<Vec<_>, _>>()?;
    let copy = copy_bandwidth::<B>(device, config.timing, config.copy_mib << 20)?;
    Ok(Diagnostics {
        backend: B::name(device),
        tiny_op,
        matmul,
        copy,
    })
}

/// Latency of a tiny operation, queued (`ops` in a row, one sync) and as a round trip.
pub fn tiny_op_latency<B: Backend>(
    device: &B::Device,
    timing: TimingConfig,
    ops: usize,
) -> Result<TinyOpLatency, DeviceError> {
    let ops = ops.max(1);
    let x = Tensor::<B, 1>::from_floats([1.0], device);
    let queued = measure_on::<B, _>(device, timing, || {
        let mut y = x.clone();
        for _ in 0..ops {
            y = y + 1.0;
        }
        y
    })?;
    let round_trip = measure_on::<B, _>(device, timing, || (x.clone() + 1.0).into_data())?;
    Ok(TinyOpLatency {
        queued_us: queued.seconds.scaled(1e6 / ops as f64),
        round_trip_us: round_trip.seconds.scaled(1e6),
    })
}

/// The seed of the matmul inputs, so that every doctor run multiplies the same matrices.
const MATMUL_INPUT_SEED: u64 = 0x6d61_746d;

/// Throughput of a batched matmul on random data, with sampled entries checked in f64.
pub fn matmul_throughput<B: Backend>(
    device: &B::Device,
    timing: TimingConfig,
    shape: MatmulShape,
) -> Result<MatmulFigure, DeviceError> {
    let dims = [shape.batch, shape.n, shape.n];
    let (a, b) = {
        let _generator = SeededGenerator::acquire::<B>(device, MATMUL_INPUT_SEED);
        let uniform = Distribution::Uniform(-1.0, 1.0);
        (
            Tensor::<B, 3>::random(dims, uniform, device),
            Tensor::<B, 3>::random(dims, uniform, device),
        )
    };
    let m = measure_on::<B, _>(device, timing, || a.clone().matmul(b.clone()))?;
    let max_rel_error =
        sampled_matmul_error(&a.into_data(), &b.into_data(), &m.output.into_data(), shape);
    Ok(MatmulFigure {
        shape,
        seconds: m.seconds,
        gflops: shape.flops() / m.seconds.median / 1e9,
        max_rel_error,
    })
}

/// The largest relative error of 64 entries spread over the output, against f64 dot products.
fn sampled_matmul_error(a: &TensorData, b: &TensorData, c: &TensorData, shape: MatmulShape) -> f64 {
    let (Ok(a), Ok(b), Ok(c)) = (a.to_vec::<f32>(), b.to_vec::<f32>(), c.to_vec::<f32>()) else {
        return f64::NAN;
    };
    let n = shape.n;
    let total = shape.batch * n * n;
    let step = (total / 64).max(1);
    let errors = (0..total).step_by(step).map(|flat| {
        let (k, i, j) = (flat / (n * n), (flat / n) % n, flat % n);
        let exact: f64 = (0..n)
            .map(|l| a[k * n * n + i * n + l] as f64 * b[k * n * n + l * n + j] as f64)
            .sum();
        let scale: f64 = (0..n)
            .map(|l| (a[k * n * n + i * n + l] as f64 * b[k * n * n + l * n + j] as f64).abs())
            .sum::<f64>()
            .max(f64::MIN_POSITIVE);
        (c[flat] as f64 - exact).abs() / scale
    });
    // A NaN product must not read as exact.
    quench_support::stats::max_or_nan(errors)
}

/// Host-to-device, device-to-host and device-to-device bandwidth for a buffer of `bytes`.
pub fn copy_bandwidth<B: Backend>(
    device: &B::Device,
    timing: TimingConfig,
    bytes: usize,
) -> Result<CopyFigures, DeviceError> {
    let len = (bytes / 4).max(1);
    let host: Vec<f32> = (0..len).map(|i| (i % 1_000) as f32 * 0.5).collect();
    let data = TensorData::new(host, [len]);
    let h2d = measure_on::<B, _>(device, timing, || {
        Tensor::<B, 1>::from_data(data.clone(), device)
    })?;
    let on_device = h2d.output;
    // Through Quench's read-back, the copy every read of a result takes: Burn's own `into_data`
    // of a tensor that is still shared walks it element by element on the CPU backend (about
    // 40 ns a value, 0.7 s for 64 MiB), which measures that walk, not a copy.
    let d2h = measure_on::<B, _>(device, timing, || to_host_f32(on_device.clone()))?;
    let d2d = measure_on::<B, _>(device, timing, || on_device.clone() * 1.0)?;
    Ok(CopyFigures {
        bytes: (len * 4) as u64,
        host_to_device: h2d.seconds,
        device_to_host: d2h.seconds,
        device_to_device: d2d.seconds,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::NdArray;

    type Cpu = NdArray<f32>;

    fn quick() -> TimingConfig {
        TimingConfig {
            warmup: 0,
            repeats: 2,
        }
    }

    #[test]
    fn matmul_figures_are_positive_and_accurate() {
        let device = Default::default();
        for shape in [
            MatmulShape { batch: 64, n: 4 },
            MatmulShape { batch: 2, n: 48 },
        ] {
            let fig = matmul_throughput::<Cpu>(&device, quick(), shape).unwrap();
            assert!(fig.gflops > 0.0 && fig.gflops.is_finite());
            assert!(fig.max_rel_error < 1e-5, "{}", fig.max_rel_error);
        }
    }

    #[test]
    fn sampled_error_detects_a_wrong_product() {
        let shape = MatmulShape { batch: 1, n: 2 };
        let a = TensorData::new(vec![1.0f32, 2.0, 3.0, 4.0], [1, 2, 2]);
        let b = TensorData::new(vec![1.0f32, 0.0, 0.0, 1.0], [1, 2, 2]);
        assert_eq!(sampled_matmul_error(&a, &b, &a, shape), 0.0);
        let wrong = TensorData::new(vec![1.0f32, 2.0, 3.0, 5.0], [1, 2, 2]);
        assert!(sampled_matmul_error(&a, &b, &wrong, shape) > 0.1);
    }

    #[test]
    fn diagnose_reports_every_figure() {
        let config = DiagnosticsConfig {
            timing: quick(),
            tiny_ops: 10,
            matmul: vec![MatmulShape { batch: 8, n: 4 }],
            copy_mib: 1,
        };
        let d = diagnose::<Cpu>(&Default::default(), &config).unwrap();
        assert_eq!(d.matmul.len(), 1);
        assert!(d.tiny_op.queued_us.median > 0.0);
        assert!(d.tiny_op.round_trip_us.median > 0.0);
        assert_eq!(d.copy.bytes, 1 << 20);
        for direction in CopyDirection::ALL {
            assert!(d.copy.gbs(direction) > 0.0);
        }
        assert_eq!(
            d.copy.bytes_moved(CopyDirection::DeviceToDevice),
            2.0 * d.copy.bytes_moved(CopyDirection::HostToDevice)
        );
        assert!(d.backend.contains("ndarray"), "{}", d.backend);
    }
}
