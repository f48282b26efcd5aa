//! `benchmark doctor`: what the chosen device is and what it measures.

use std::fmt::Write as _;

use burn::tensor::backend::AutodiffBackend;
use quench_device::diagnostics::{CopyDirection, Diagnostics, DiagnosticsConfig, diagnose};
use quench_device::machine::MachineInfo;
use quench_device::memory::peak_memory;
use quench_device::{DeviceError, OnDevice, Precision, Selection, run_on};

use crate::render::{seconds, significant};

/// Measures the device and returns the text `doctor` prints.
pub fn doctor(selection: &Selection, config: DiagnosticsConfig) -> anyhow::Result<String> {
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
    let (figures, support) = run_on(selection.device, Measure(config))??;
    let machine = MachineInfo::read(selection.device);
    Ok(render(selection, &machine, &figures, &support))
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
    for line in adapter_lines(quench_device::adapters::adapters()) {
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

/// The wgpu adapters, one line each, as `--device wgpu:N` names them; in a build without wgpu,
/// how to get them.
fn adapter_lines(adapters: &[quench_device::adapters::AdapterInfo]) -> Vec<String> {
    if !cfg!(feature = "wgpu") {
        return vec![
            "adapters   none listed: this binary was built without wgpu (--features wgpu)".into(),
        ];
    }
    if adapters.is_empty() {
        return vec![format!(
            "adapters   none: {}",
            quench_device::adapters::none_found_reason()
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
