//! `benchmark doctor`: what the chosen device is and what it measures.

use std::fmt::Write as _;

use burn::tensor::backend::AutodiffBackend;
use quench_device::diagnostics::{CopyDirection, Diagnostics, DiagnosticsConfig, diagnose};
use quench_device::machine::MachineInfo;
use quench_device::memory::peak_memory;
use quench_device::{DeviceError, Precision, Selection};
use quench_kernels::{OnDevice, run_on};

use crate::numbers::{seconds, significant};

/// What `doctor` measured on one device, and the text it prints.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Doctor {
    /// The host and the device.
    pub machine: MachineInfo,
    /// The device's figures: tiny-op latency, matmul throughput, copy bandwidths.
    pub figures: Diagnostics,
    /// Each precision (`f32`, `tf32`, `bf16`, `f16`) and why the device cannot run it (`None`
    /// where it can).
    pub precisions: Vec<(String, Option<String>)>,
    /// The report as `benchmark doctor` prints it, the host GEMM's figures included.
    pub text: String,
}

/// Measures the device and renders what `doctor` prints.
pub fn doctor(selection: &Selection, config: DiagnosticsConfig) -> anyhow::Result<Doctor> {
    struct Measure(DiagnosticsConfig);
    impl OnDevice for Measure {
        type Output = Result<(Diagnostics, Vec<(Precision, Result<(), String>)>), DeviceError>;
        fn run<B: AutodiffBackend>(self, device: &B::Device) -> Self::Output {
            let figures = diagnose::<B::InnerBackend>(device, &self.0)?;
            let support = Precision::ALL
                .iter()
                .map(|&p| (p, p.check::<B>(device).map_err(|e| e.to_string())))
                .collect();
            Ok((figures, support))
        }
    }
    let repeats = config.timing.repeats;
    let (figures, support) = run_on(selection.device, Measure(config))??;
    let machine = MachineInfo::read(selection.device);
    let mut text = render(selection, &machine, &figures, &support);
    text.push_str(&host_gemm(repeats));
    text.push_str(&host_memory(repeats));
    let precisions = support
        .into_iter()
        .map(|(precision, result)| (precision.to_string(), result.err()))
        .collect();
    Ok(Doctor {
        machine,
        figures,
        precisions,
        text,
    })
}

/// The host kernels' GEMM (the `gemm` crate) on their shapes, on one thread and on every core
/// at once (each its own product, as the kernels give each core its own rows): the roofline
/// the CPU kernels' GFLOP/s are read against.
fn host_gemm(repeats: usize) -> String {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut out = format!(
        "\nhost gemm  shape (the CPU kernels')                1 thread   {cores} threads (GFLOP/s)\n"
    );
    for shape in quench_host::gemm::KERNEL_SHAPES {
        let rate = |lanes: usize| {
            let times = quench_host::gemm::time_product(shape, lanes, repeats);
            quench_support::Stats::from_samples(&times)
                .map_or(f64::NAN, |t| lanes as f64 * shape.flops() / t.median / 1e9)
        };
        let (one, all) = (rate(1), rate(cores));
        let _ = writeln!(
            out,
            "           {:<40} {:>8}   {:>8}",
            shape.label,
            significant(one),
            significant(all)
        );
    }
    out
}

/// Bytes of each of the host memory check's three buffers: together far beyond a CPU's
/// last-level cache.
const STREAM_BYTES: usize = 128 << 20;

/// The host's memory bandwidth on one thread and on every core at once
/// ([`quench_host::bandwidth`]): the other roof of the CPU kernels, for the steps that move
/// more bytes than they compute on (an optimizer's update, a one-row product).
fn host_memory(repeats: usize) -> String {
    use quench_host::bandwidth::{Traffic, time_streams};
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut out = format!(
        "\nhost memory 3 x {} MiB                              1 thread   {cores} threads (GB/s)\n",
        STREAM_BYTES >> 20
    );
    for (traffic, label) in [
        (Traffic::Read, "read"),
        (
            Traffic::Update,
            "read and written back (an optimizer's update)",
        ),
    ] {
        let rate = |lanes: usize| {
            let rates = time_streams(traffic, STREAM_BYTES, lanes, repeats);
            quench_support::Stats::from_samples(&rates).map_or(f64::NAN, |r| r.median / 1e9)
        };
        let (one, all) = (rate(1), rate(cores));
        let _ = writeln!(
            out,
            "           {label:<46} {:>8}   {:>8}",
            significant(one),
            significant(all)
        );
    }
    out
}

fn render(
    selection: &Selection,
    machine: &MachineInfo,
    d: &Diagnostics,
    support: &[(Precision, Result<(), String>)],
) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "device     {} = {}",
        machine.device, machine.device_name
    );
    let _ = writeln!(out, "backend    {} ({})", machine.backend, d.backend);
    let _ = writeln!(
        out,
        "host       {} ({} cores)",
        machine.cpu_model, machine.cores
    );
    if let Some(why) = &selection.fallback {
        let _ = writeln!(out, "fallback   {why}");
    }
    for line in adapter_lines(quench_platform::adapters::adapters()) {
        let _ = writeln!(out, "{line}");
    }
    match peak_memory(selection.device) {
        Some(m) => {
            let _ = writeln!(out, "memory     {m}");
        }
        None => {
            let _ = writeln!(out, "memory     not reported by this platform");
        }
    }
    if selection.device != quench_kernels::SelectedDevice::Cpu {
        let _ = writeln!(out, "{}", kernel_cache_line());
    }
    let _ = writeln!(
        out,
        "\ntiny op    {} per op queued, {} round trip (median)",
        seconds(d.tiny_op.queued_us.median * 1e-6),
        seconds(d.tiny_op.round_trip_us.median * 1e-6)
    );
    let _ = writeln!(
        out,
        "\nmatmul     batch x n      median       GFLOP/s   max rel err"
    );
    for m in &d.matmul {
        let _ = writeln!(
            out,
            "           {:>6} x {:<5} {:>11}  {:>10}   {:.1e}",
            m.shape.batch,
            m.shape.n,
            seconds(m.seconds.median),
            significant(m.gflops),
            m.max_rel_error
        );
    }
    let _ = writeln!(out, "\ncopy       {} MiB", d.copy.bytes >> 20);
    for (label, dir) in [
        ("host->dev", CopyDirection::HostToDevice),
        ("dev->host", CopyDirection::DeviceToHost),
        ("dev->dev ", CopyDirection::DeviceToDevice),
    ] {
        let _ = writeln!(
            out,
            "           {label}  {} GB/s",
            significant(d.copy.gbs(dir))
        );
    }
    let _ = writeln!(out, "\nprecision");
    for (p, verdict) in support {
        let _ = match verdict {
            Ok(()) => writeln!(out, "           {p:<5} supported"),
            Err(why) => writeln!(out, "           {p:<5} refused: {why}"),
        };
    }
    let _ = writeln!(out, "\nwhat applies here");
    for line in advice(d, support) {
        let _ = writeln!(out, "           - {line}");
    }
    out
}

/// Where compiled kernels and autotune results are kept, and how many entries the folder holds.
fn kernel_cache_line() -> String {
    let location = quench_platform::kernel_cache::location();
    match &location.dir {
        Some(dir) => {
            let found = quench_platform::kernel_cache::entries(dir);
            format!(
                "kernels    cached in {location}: {} compiled kernels, {} autotuned shapes, {} MiB",
                found.kernels,
                found.tuned,
                found.bytes >> 20
            )
        }
        None => format!("kernels    cached {location}"),
    }
}

/// The wgpu adapters, one line each, as `--device wgpu:N` names them; in a build without wgpu,
/// how to get them.
fn adapter_lines(adapters: &[quench_platform::adapters::AdapterInfo]) -> Vec<String> {
    if !cfg!(feature = "wgpu") {
        return vec![
            "adapters   none listed: this binary was built without wgpu (--features wgpu)".into(),
        ];
    }
    if adapters.is_empty() {
        return vec![format!(
            "adapters   none: {}",
            quench_platform::adapters::none_found_reason()
        )];
    }
    adapters
        .iter()
        .enumerate()
        .map(|(i, adapter)| {
            let label = if i == 0 { "adapters" } else { "" };
            format!("{label:<10} {adapter}")
        })
        .collect()
}

/// The largest relative error of a sampled f32 matmul entry against f64 that f32 arithmetic
/// explains (the shapes' inner dimensions reach 1,024; the CPU measures at most 1.4e-7).
const F32_MATMUL_ERROR: f64 = 1e-5;

/// Which optimisations pay on this device, read off the measured figures.
fn advice(d: &Diagnostics, support: &[(Precision, Result<(), String>)]) -> Vec<String> {
    let mut lines = Vec::new();
    let launch = d.tiny_op.queued_us.median;
    if let (Some(small), Some(large)) = (d.matmul.first(), d.matmul.last()) {
        lines.push(format!(
            "batch independent members: an op costs {} to launch, and {} x {}x{} products run at {} GFLOP/s against {} at {}x{}",
            seconds(launch * 1e-6),
            small.shape.batch,
            small.shape.n,
            small.shape.n,
            significant(small.gflops),
            significant(large.gflops),
            large.shape.n,
            large.shape.n
        ));
    }
    // f32 products are within about 1e-7 of an f64 reference (the CPU measures 3e-8 to 1.4e-7);
    // CubeCL's autotuned matmul on NVIDIA tensor cores stages f32 operands as tf32 (10
    // mantissa bits), which the H200 measured at 2e-5 to 4e-4.
    if let Some(worst) = d.matmul.iter().map(|m| m.max_rel_error).reduce(f64::max)
        && worst > F32_MATMUL_ERROR
    {
        lines.push(format!(
            "f32 matmuls round their operands here (max rel err {worst:.1e} against f64, where f32 \
             arithmetic gives about 1e-7; tf32 tensor cores give about 5e-4): results agree with \
             f64 to that, not to f32's precision, and checks with f32 tolerances fail"
        ));
    }
    let h2d = d.copy.gbs(CopyDirection::HostToDevice);
    let d2d = d.copy.gbs(CopyDirection::DeviceToDevice);
    if d2d > 2.0 * h2d {
        lines.push(format!(
            "keep small data sets device-resident: host->device moves {} GB/s, device memory {} GB/s",
            significant(h2d),
            significant(d2d)
        ));
    } else {
        lines.push("device-resident data buys little here: host and device memory are one".into());
    }
    let low: Vec<String> = support
        .iter()
        .filter(|(p, ok)| *p != Precision::F32 && ok.is_ok())
        .map(|(p, _)| p.to_string())
        .collect();
    lines.push(if low.is_empty() {
        "mixed precision: not available on this backend; runs stay in f32".into()
    } else {
        format!(
            "mixed precision available ({}); it pays only where matmuls are large enough to be compute-bound",
            low.join(", ")
        )
    });
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use quench_device::diagnostics::{CopyFigures, MatmulFigure, MatmulShape, TinyOpLatency};
    use quench_support::stats::Stats;

    /// Figures as a device measures them, with the sampled matmul errors given.
    fn figures(errors: &[f64]) -> Diagnostics {
        let stats = |v| Stats::from_samples(&[v]).expect("one finite sample");
        Diagnostics {
            backend: "test".into(),
            tiny_op: TinyOpLatency {
                queued_us: stats(6.0),
                round_trip_us: stats(40.0),
            },
            matmul: errors
                .iter()
                .map(|&max_rel_error| MatmulFigure {
                    shape: MatmulShape { batch: 16, n: 256 },
                    seconds: stats(1e-4),
                    gflops: 1e4,
                    max_rel_error,
                })
                .collect(),
            copy: CopyFigures {
                bytes: 1 << 26,
                host_to_device: stats(0.1),
                device_to_host: stats(0.001),
                device_to_device: stats(6e-5),
            },
        }
    }

    fn names_rounded_operands(lines: &[String]) -> bool {
        lines.iter().any(|l| l.contains("round their operands"))
    }

    #[test]
    fn matmuls_below_f32_precision_are_named() {
        // The H200's figures (tf32 tensor cores): 4.1e-4 at 4x4, 2.4e-5 at 1024x1024.
        let tf32 = advice(&figures(&[4.1e-4, 2.4e-5]), &[]);
        assert!(names_rounded_operands(&tf32), "{tf32:?}");
        assert!(tf32.iter().any(|l| l.contains("4.1e-4")), "{tf32:?}");
        // The CPU's figures stay quiet.
        let cpu = advice(&figures(&[8.1e-8, 1.4e-7]), &[]);
        assert!(!names_rounded_operands(&cpu), "{cpu:?}");
    }
}
