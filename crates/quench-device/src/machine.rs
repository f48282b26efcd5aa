//! What machine a run happened on: CPU model and cores, GPU model, for reports.

use serde::{Deserialize, Serialize};

use quench_kernels::SelectedDevice;

/// The host and device a run used.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MachineInfo {
    /// The CPU model as the OS reports it.
    pub cpu_model: String,
    /// Logical cores available to this process.
    pub cores: usize,
    /// The device work ran on (`cpu`, `cuda:0`, `wgpu:0`).
    pub device: String,
    /// A human name of that device: the CPU model, or the GPU model where the driver says it.
    pub device_name: String,
    /// The Burn backend family (`ndarray`, `cuda`, `wgpu`).
    pub backend: String,
}

impl MachineInfo {
    /// Reads the machine's description for `device`.
    pub fn read(device: SelectedDevice) -> Self {
        let cpu_model = cpu_model();
        let device_name = match device {
            SelectedDevice::Cpu => cpu_model.clone(),
            SelectedDevice::Cuda(index) => {
                gpu_model(index).unwrap_or_else(|| format!("CUDA device {index}"))
            }
            SelectedDevice::Wgpu(adapter) => device
                .adapter_name()
                .unwrap_or_else(|| format!("wgpu adapter {}", adapter.index)),
        };
        Self {
            cpu_model,
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
            device: device.to_string(),
            device_name,
            backend: device.backend_name().to_string(),
        }
    }
}

/// The CPU model from `/proc/cpuinfo`, or the architecture where that is not readable.
pub fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|text| field_value(&text, "model name"))
        .unwrap_or_else(|| std::env::consts::ARCH.to_string())
}

/// The GPU model that the NVIDIA driver lists for the `index`-th GPU, if it does.
fn gpu_model(index: usize) -> Option<String> {
    let mut entries: Vec<_> = std::fs::read_dir("/proc/driver/nvidia/gpus")
        .ok()?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .collect();
    entries.sort();
    let info = std::fs::read_to_string(entries.get(index)?.join("information")).ok()?;
    field_value(&info, "Model")
}

fn field_value(text: &str, key: &str) -> Option<String> {
    text.lines().find_map(|line| {
        let (k, v) = line.split_once(':')?;
        (k.trim() == key).then(|| v.trim().to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_a_field_among_lines() {
        let text = "processor\t: 0\nmodel name\t: Example CPU @ 2GHz\nflags: x\n";
        assert_eq!(
            field_value(text, "model name").as_deref(),
            Some("Example CPU @ 2GHz")
        );
        assert_eq!(field_value(text, "model"), None);
    }

    #[test]
    fn cpu_machine_names_its_backend() {
        let info = MachineInfo::read(SelectedDevice::Cpu);
        assert_eq!(info.backend, "ndarray");
        assert_eq!(info.device, "cpu");
        assert!(info.cores >= 1);
        assert!(!info.cpu_model.is_empty());
    }
}
