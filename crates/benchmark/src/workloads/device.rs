//! Workload `device`: the diagnostics figures as a benchmark, so reports carry the device's
//! tiny-operation latency, matmul throughput and copy bandwidth beside the workloads.

use burn::tensor::backend::AutodiffBackend;
use quench_device::diagnostics::{
    CopyDirection, MatmulShape, copy_bandwidth, matmul_throughput, tiny_op_latency,
};
use quench_device::{OnDevice, Precision, TimingConfig, run_on};
use serde::Deserialize;

use crate::workload::{
    Quality, RunContext, Tolerance, VariantInfo, VariantOutcome, VariantRun, Workload, parse_params,
};

/// The `device` workload.
pub struct DeviceFigures;

/// Parameters of the `device` workload in a suite.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct Params {
    /// Tiny operations queued per timed call.
    tiny_ops: usize,
    /// Buffer size of the copies, MiB.
    copy_mib: usize,
    /// Batch of each matmul variant, for n = 4, 32, 256 and 1024.
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

const MATMUL_SIDES: [usize; 4] = [4, 32, 256, 1_024];
const VARIANTS: [(&str, &str); 9] = [
    (
        "tiny-op",
        "one add on a 1-element tensor, many queued, one sync",
    ),
    (
        "tiny-op-round-trip",
        "one add on a 1-element tensor, read back",
    ),
    ("matmul-4", "batched 4x4 matrix products"),
    ("matmul-32", "batched 32x32 matrix products"),
    ("matmul-256", "batched 256x256 matrix products"),
    ("matmul-1024", "one 1024x1024 matrix product"),
    ("copy-h2d", "host to device copy"),
    ("copy-d2h", "device to host copy"),
    ("copy-d2d", "device to device copy (read + write counted)"),
];

impl Workload for DeviceFigures {
    fn name(&self) -> &'static str {
        "device"
    }

    fn summary(&self) -> &'static str {
        "latency of a tiny op, matmul throughput and copy bandwidth of the chosen device"
    }

    fn variants(&self) -> Vec<VariantInfo> {
        VARIANTS
            .iter()
            .map(|&(name, description)| VariantInfo {
                name,
                description,
                baseline: false,
                claim: None,
            })
            .collect()
    }

    fn check_params(&self, params: &toml::Table) -> anyhow::Result<()> {
        parse_params::<Params>(self.name(), params).map(drop)
    }

    fn run(
        &self,
        variant: &VariantInfo,
        params: &toml::Table,
        ctx: &RunContext,
    ) -> anyhow::Result<VariantRun> {
        let params: Params = parse_params(self.name(), params)?;
        let mut outcome = run_on(
            ctx.device,
            Figure {
                variant: variant.name,
                params,
                timing: ctx.timing,
            },
        )??;
        if ctx.precision != Precision::F32 {
            outcome.notes.push(format!(
                "measured in f32; the {} policy does not apply here",
                ctx.precision
            ));
        }
        Ok(VariantRun::Measured(outcome))
    }
}

struct Figure {
    variant: &'static str,
    params: Params,
    timing: TimingConfig,
}

impl OnDevice for Figure {
    type Output = anyhow::Result<VariantOutcome>;

    fn run<B: AutodiffBackend>(self, device: &B::Device) -> Self::Output {
        type Inner<B> = <B as AutodiffBackend>::InnerBackend;
        let Figure {
            variant,
            params,
            timing,
        } = self;
        if let Some(index) = ["matmul-4", "matmul-32", "matmul-256", "matmul-1024"]
            .iter()
            .position(|&name| name == variant)
        {
            let shape = MatmulShape {
                batch: params.matmul_batches[index].max(1),
                n: MATMUL_SIDES[index],
            };
            let fig = matmul_throughput::<Inner<B>>(device, timing, shape)?;
            return Ok(outcome(
                fig.seconds,
                &format!("{} x {n}x{n} product", shape.batch, n = shape.n),
                shape.flops() / 1e9,
                "GFLOP/s",
                Some(Quality {
                    metric: "max relative error vs f64".into(),
                    value: fig.max_rel_error,
                    higher_is_better: false,
                    tolerance: Tolerance::AtMost(1e-3),
                }),
            ));
        }
        match variant {
            "tiny-op" | "tiny-op-round-trip" => {
                let lat = tiny_op_latency::<Inner<B>>(device, timing, params.tiny_ops)?;
                let stats = if variant == "tiny-op" {
                    lat.queued_us
                } else {
                    lat.round_trip_us
                };
                Ok(outcome(stats.scaled(1e-6), "op", 1.0, "ops/s", None))
            }
            "copy-h2d" | "copy-d2h" | "copy-d2d" => {
                let direction = match variant {
                    "copy-h2d" => CopyDirection::HostToDevice,
                    "copy-d2h" => CopyDirection::DeviceToHost,
                    _ => CopyDirection::DeviceToDevice,
                };
                let figs = copy_bandwidth::<Inner<B>>(device, timing, params.copy_mib << 20)?;
                Ok(outcome(
                    figs.seconds(direction),
                    &format!("{} MiB copy", params.copy_mib),
                    figs.bytes_moved(direction) / 1e9,
                    "GB/s",
                    None,
                ))
            }
            other => anyhow::bail!("workload `device` has no variant `{other}`"),
        }
    }
}

fn outcome(
    per_iteration: quench_device::Stats,
    unit: &str,
    items: f64,
    throughput_unit: &str,
    quality: Option<Quality>,
) -> VariantOutcome {
    VariantOutcome {
        per_iteration,
        iteration_unit: unit.to_string(),
        iterations_per_run: 1.0,
        items_per_iteration: items,
        throughput_unit: throughput_unit.to_string(),
        quality,
        notes: Vec::new(),
    }
}
