//! Peak memory: the device pool where the backend reports it, the process RSS otherwise.

use std::fmt;

use serde::{Deserialize, Serialize};

use quench_kernels::SelectedDevice;

/// Where a memory figure comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MemorySource {
    /// Bytes the device's memory pool holds (CUDA, wgpu); pools keep what they reserved, so
    /// this is the high-water mark of the run's device allocations.
    DevicePool,
    /// The process's peak resident set size (`VmHWM`), for host backends.
    ProcessPeakRss,
}

/// A memory reading in bytes and what it measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryReading {
    /// Bytes.
    pub bytes: u64,
    /// What was read.
    pub source: MemorySource,
}

impl fmt::Display for MemoryReading {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = match self.source {
            MemorySource::DevicePool => "device pool",
            MemorySource::ProcessPeakRss => "peak RSS",
        };
        write!(
            f,
            "{:.1} MiB ({what})",
            self.bytes as f64 / (1024.0 * 1024.0)
        )
    }
}

/// The peak memory of `device` so far: the device pool for GPUs, the process RSS for the CPU.
/// `None` where the platform reports neither.
pub fn peak_memory(device: SelectedDevice) -> Option<MemoryReading> {
    match device {
        SelectedDevice::Cpu => peak_rss_bytes().map(|bytes| MemoryReading {
            bytes,
            source: MemorySource::ProcessPeakRss,
        }),
        SelectedDevice::Cuda(index) => cuda_pool_bytes(index).map(|bytes| MemoryReading {
            bytes,
            source: MemorySource::DevicePool,
        }),
        SelectedDevice::Wgpu(adapter) => wgpu_pool_bytes(adapter).map(|bytes| MemoryReading {
            bytes,
            source: MemorySource::DevicePool,
        }),
    }
}

/// Hands the host kernels' recycled buffers (at most 512 MiB, kept between a training
/// step and the next) back to the allocator: before a peak reading that must not count an
/// earlier run's buffers, or when a program is done with its host kernels. The next step
/// allocates afresh.
pub fn release_host_buffers() {
    quench_host::buffers::release();
}

/// Resets the process's peak RSS so that the next reading covers only what follows; returns
/// whether the kernel allowed it (Linux `clear_refs`, value 5).
pub fn reset_peak_rss() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

/// The process's peak resident set size in bytes, from `/proc/self/status` (Linux).
pub fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    parse_vm_hwm(&status)
}

fn parse_vm_hwm(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

#[cfg(feature = "cuda")]
fn cuda_pool_bytes(index: usize) -> Option<u64> {
    use burn::cubecl::Runtime;
    use burn::cubecl::cuda::{CudaDevice, CudaRuntime};

    crate::select::silently(|| {
        CudaRuntime::client(&CudaDevice::new(index))
            .memory_usage()
            .ok()
            .map(|usage| usage.bytes_reserved)
    })
    .ok()
    .flatten()
}

#[cfg(not(feature = "cuda"))]
fn cuda_pool_bytes(_index: usize) -> Option<u64> {
    None
}

#[cfg(feature = "wgpu")]
fn wgpu_pool_bytes(adapter: quench_kernels::WgpuAdapter) -> Option<u64> {
    use burn::backend::wgpu::WgpuRuntime;
    use burn::cubecl::Runtime;

    crate::select::silently(|| {
        WgpuRuntime::client(&adapter.burn_device())
            .memory_usage()
            .ok()
            .map(|usage| usage.bytes_reserved)
    })
    .ok()
    .flatten()
}

#[cfg(not(feature = "wgpu"))]
fn wgpu_pool_bytes(_adapter: quench_kernels::WgpuAdapter) -> Option<u64> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_peak_line_in_kib() {
        let status = "Name:\tx\nVmPeak:\t  9000 kB\nVmHWM:\t  1234 kB\nVmRSS:\t 1000 kB\n";
        assert_eq!(parse_vm_hwm(status), Some(1234 * 1024));
        assert_eq!(parse_vm_hwm("VmRSS: 5 kB\n"), None);
        assert_eq!(parse_vm_hwm("VmHWM: lots kB\n"), None);
    }

    /// Set in the child process that takes the reading.
    #[cfg(target_os = "linux")]
    const ALONE: &str = "QUENCH_PEAK_RSS_TEST_ALONE";

    /// The peak RSS is process-wide: other tests of this binary allocate and free in their
    /// threads between the reset and the reading, and a neighbour that frees memory right
    /// after the reset lowers the baseline the allocation is measured from. So the test runs
    /// itself again in a child process, alone, and the child takes the reading.
    #[cfg(target_os = "linux")]
    #[test]
    fn peak_rss_grows_with_a_large_allocation() {
        if std::env::var_os(ALONE).is_none() {
            let module = module_path!();
            let name = format!(
                "{}::peak_rss_grows_with_a_large_allocation",
                module.split_once("::").map_or(module, |(_, rest)| rest)
            );
            let child = std::process::Command::new(std::env::current_exe().unwrap())
                .args([name.as_str(), "--exact", "--test-threads=1", "--nocapture"])
                .env(ALONE, "1")
                .output()
                .unwrap();
            let out = String::from_utf8_lossy(&child.stdout);
            let err = String::from_utf8_lossy(&child.stderr);
            assert!(child.status.success(), "{out}{err}");
            assert!(out.contains("1 passed"), "the child ran the test: {out}");
            return;
        }
        reset_peak_rss();
        let before = peak_rss_bytes().unwrap();
        let block = vec![1u8; 64 << 20];
        let after = peak_rss_bytes().unwrap();
        assert!(block.iter().map(|&b| b as u64).sum::<u64>() == 64 << 20);
        assert!(after >= before + (60 << 20), "{before} -> {after}");
        let reading = peak_memory(SelectedDevice::Cpu).unwrap();
        assert_eq!(reading.source, MemorySource::ProcessPeakRss);
    }
}
