//! Workload `device`: the diagnostics figures as a benchmark, so reports carry the device's
//! tiny-operation latency, matmul throughput and copy bandwidth beside the workloads.

use burn::tensor::backend::AutodiffBackend;
use quench_device::diagnostics::{
    CopyDirection, MatmulShape, copy_bandwidth, matmul_throughput, tiny_op_latency,
};
use quench_kernels::QuenchBackend;
use quench_support::Stats;
use quench_support::budget::check_fits;
use serde::Deserialize;

use crate::workload::{
    PrecisionRole, Quality, TableWorkload, Tolerance, Variant, VariantContext, VariantOutcome,
};

/// The `device` workload.
pub struct DeviceFigures;

/// Parameters of the `device` workload in a suite.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Params {
    /// Tiny operations queued per timed call.
    tiny_ops: usize,
    /// Buffer size of the copies, MiB.
    copy_mib: usize,
    /// Batch of each matmul variant, for n = 4, 32, 256 and 1024 ([`MATMUL_SIZES`]).
    matmul_batches: [usize; 4],
}

impl Default for Params {
    fn default() -> Self {
        Self {
            tiny_ops: 200,
            copy_mib: 64,
            matmul_batches: [16_384, 1_024, 16, 1],
        }
    }
}

/// The most tiny operations one timed call may queue (`tiny_ops`).
const MAX_TINY_OPS: usize = 1_000_000;

/// The sizes `n` of the matmul variants' `n x n` products, in `matmul_batches`' order.
const MATMUL_SIZES: [usize; 4] = [4, 32, 256, 1_024];

/// What one variant measures.
#[derive(Debug, Clone, Copy)]
pub enum Measure {
    /// Tiny operations queued back to back, one sync.
    TinyOp,
    /// One tiny operation read back.
    RoundTrip,
    /// Batched `n x n` products, `n = MATMUL_SIZES[index]`; the batch is
    /// `matmul_batches[index]`.
    Matmul { index: usize },
    /// One copy of the buffer.
    Copy(CopyDirection),
}

const fn figure(
    name: &'static str,
    description: &'static str,
    setting: Measure,
) -> Variant<Measure> {
    Variant {
        name,
        description,
        baseline: false,
        claim: None,
        precision: PrecisionRole::F32,
        setting,
    }
}

const VARIANTS: [Variant<Measure>; 9] = [
    figure(
        "tiny-op",
        "one add on a 1-element tensor, many queued, one sync",
        Measure::TinyOp,
    ),
    figure(
        "tiny-op-round-trip",
        "one add on a 1-element tensor, read back",
        Measure::RoundTrip,
    ),
    figure(
        "matmul-4",
        "batched 4x4 matrix products",
        Measure::Matmul { index: 0 },
    ),
    figure(
        "matmul-32",
        "batched 32x32 matrix products",
        Measure::Matmul { index: 1 },
    ),
    figure(
        "matmul-256",
        "batched 256x256 matrix products",
        Measure::Matmul { index: 2 },
    ),
    figure(
        "matmul-1024",
        "one 1024x1024 matrix product",
        Measure::Matmul { index: 3 },
    ),
    figure(
        "copy-h2d",
        "host to device copy",
        Measure::Copy(CopyDirection::HostToDevice),
    ),
    figure(
        "copy-d2h",
        "device to host copy",
        Measure::Copy(CopyDirection::DeviceToHost),
    ),
    figure(
        "copy-d2d",
        "device to device copy (read + write counted)",
        Measure::Copy(CopyDirection::DeviceToDevice),
    ),
];

impl TableWorkload for DeviceFigures {
    type Params = Params;
    type Prepared = Params;
    type Setting = Measure;
    const NAME: &'static str = "device";
    const SUMMARY: &'static str =
        "latency of a tiny op, matmul throughput and copy bandwidth of the chosen device";

    fn table(&self) -> &[Variant<Measure>] {
        &VARIANTS
    }

    /// Nothing to load: the figures measure the device alone. Refuses sizes whose buffers
    /// cannot fit in host memory (every buffer starts on the host), naming the setting.
    fn prepare(&self, params: Params) -> anyhow::Result<Params> {
        if !(1..=MAX_TINY_OPS).contains(&params.tiny_ops) {
            anyhow::bail!(
                "[workloads.device] tiny_ops = {}: must be 1 to {MAX_TINY_OPS} (the latency's \
                 median is steady from a few hundred operations; a million take about 10 s a \
                 repeat at a GPU's launch latency, and more only make the run longer)",
                params.tiny_ops
            );
        }
        // A zero size would time nothing and print an infinite rate (matmul_batches was
        // silently 1).
        if params.copy_mib == 0 {
            anyhow::bail!("[workloads.device] copy_mib = 0: must be at least 1 (MiB per copy)");
        }
        if let Some(index) = params.matmul_batches.iter().position(|&b| b == 0) {
            anyhow::bail!(
                "[workloads.device] matmul_batches[{index}] = 0: must be at least 1 (products \
                 per timed call)"
            );
        }
        // The copies hold about five buffers of the size at once: the host values, the copy
        // sent, the device's tensor, the values read back and the device-to-device product.
        check_fits(
            || format!("[workloads.device] copy_mib = {}", params.copy_mib),
            (params.copy_mib as u128).saturating_mul(5 << 20),
        )?;
        // A product's operands, its output and the one before it, and their values read back
        // for the sampled error: about eight `batch x n x n` f32 tensors.
        for (index, (&batch, n)) in params.matmul_batches.iter().zip(MATMUL_SIZES).enumerate() {
            check_fits(
                || format!("[workloads.device] matmul_batches[{index}] = {batch} (n = {n})"),
                (batch as u128).saturating_mul(8 * 4 * (n * n) as u128),
            )?;
        }
        Ok(params)
    }

    fn run_variant<B: QuenchBackend>(
        &self,
        variant: &Variant<Measure>,
        params: &Params,
        ctx: &VariantContext,
        device: &B::Device,
    ) -> anyhow::Result<VariantOutcome> {
        type Inner<B> = <B as AutodiffBackend>::InnerBackend;
        let timing = ctx.timing;
        match variant.setting {
            measure @ (Measure::TinyOp | Measure::RoundTrip) => {
                let lat = tiny_op_latency::<Inner<B>>(device, timing, params.tiny_ops)?;
                let stats = match measure {
                    Measure::TinyOp => lat.queued_us,
                    _ => lat.round_trip_us,
                };
                Ok(outcome(stats.scaled(1e-6), "op", 1.0, "ops/s", None))
            }
            Measure::Matmul { index } => {
                let n = MATMUL_SIZES[index];
                let shape = MatmulShape {
                    batch: params.matmul_batches[index],
                    n,
                };
                let fig = matmul_throughput::<Inner<B>>(device, timing, shape)?;
                Ok(outcome(
                    fig.seconds,
                    &format!("{} x {n}x{n} product", shape.batch),
                    shape.flops() / 1e9,
                    "GFLOP/s",
                    Some(Quality {
                        metric: "max rel err vs f64".into(),
                        value: fig.max_rel_error,
                        higher_is_better: false,
                        tolerance: Tolerance::AtMost(1e-3),
                        chance: None,
                        caveat: None,
                    }),
                ))
            }
            Measure::Copy(direction) => {
                let figs = copy_bandwidth::<Inner<B>>(device, timing, params.copy_mib << 20)?;
                Ok(outcome(
                    figs.seconds(direction),
                    &format!("{} MiB copy", params.copy_mib),
                    figs.bytes_moved(direction) / 1e9,
                    "GB/s",
                    None,
                ))
            }
        }
    }
}

fn outcome(
    per_iteration: Stats,
    unit: &str,
    items: f64,
    throughput_unit: &str,
    quality: Option<Quality>,
) -> VariantOutcome {
    VariantOutcome {
        training_loss: None,
        sharded: None,
        per_iteration,
        // Its figures come from the diagnostics' own loops, not the harness that counts.
        counts: None,
        iteration_unit: unit.to_string(),
        iterations_per_run: 1.0,
        items_per_iteration: items,
        throughput_unit: throughput_unit.to_string(),
        quality,
        notes: Vec::new(),
    }
}
