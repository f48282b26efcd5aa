//! The backends Quench runs on and the one place that maps a device chosen at run time onto
//! one of them ([`run_on`]). Choosing the device (probing GPUs, `auto`'s fallback) is
//! `quench_device::select`'s job.

use std::fmt;

use burn::backend::{Autodiff, NdArray};

use crate::ops::{QuenchBackend, QuenchOps};
use quench_host::lanes::{in_a_run, on_host_threads};
use quench_platform::adapters::{AdapterKind, adapters};
use quench_platform::error::BackendError;

/// The CPU backend: `burn_ndarray` in f32, with autodiff.
pub type CpuBackend = Autodiff<NdArray<f32>>;

/// The CUDA backend: `burn_cuda` in f32, with autodiff, without Burn's fusion layer (see
/// [`WgpuBackend`]).
#[cfg(feature = "cuda")]
pub type CudaBackend = Autodiff<burn::backend::Cuda<f32, i32>>;

/// The wgpu backend (Vulkan, Metal, DX12 through CubeCL's WGSL compiler) in f32, with
/// autodiff, without Burn's fusion layer: Burn 0.21's fusion computes wrong values where a
/// batched matmul has a single row per member and elementwise work follows it (the meta
/// policy's `[tasks, 1, features]` layers: gradients wrong by more than their size on
/// lavapipe; Burn issue 5122 reports the same on CUDA), so the `cuda` and `wgpu` features
/// leave Burn's `fusion` feature off and these names are the plain CubeCL backends.
#[cfg(feature = "wgpu")]
pub type WgpuBackend = Autodiff<burn::backend::Wgpu<f32, i32>>;

/// A device that was probed and can run work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SelectedDevice {
    /// The CPU backend.
    Cpu,
    /// The CUDA device with this ordinal; only constructed by a build with the `cuda` feature.
    Cuda(usize),
    /// A wgpu adapter; only constructed by a build with the `wgpu` feature.
    Wgpu(WgpuAdapter),
}

/// A wgpu adapter that was probed: its place in [`quench_platform::adapters::adapters`] and how Burn's
/// wgpu backend names it (the `nth` adapter of its `kind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WgpuAdapter {
    /// Its index in the adapter list (`wgpu:N`).
    pub index: usize,
    /// Its kind, as the driver reports it.
    pub kind: AdapterKind,
    /// Its position among the adapters of its kind.
    pub nth: usize,
}

impl WgpuAdapter {
    /// The adapter `index` names in [`adapters`] (for `None` the most preferred one: hardware
    /// before software); `None` when there is no such adapter. Nothing is opened: whether it
    /// works is `quench_device::select`'s probe.
    pub fn find(index: Option<usize>) -> Option<Self> {
        let all = adapters();
        let chosen = match index {
            None => quench_platform::adapters::best_any(all),
            Some(index) => all.get(index),
        }?;
        Some(Self {
            index: chosen.index,
            kind: chosen.kind,
            nth: chosen.nth_of_kind(all),
        })
    }

    /// Burn's name for this adapter.
    #[cfg(feature = "wgpu")]
    pub fn burn_device(&self) -> burn::backend::wgpu::WgpuDevice {
        use burn::backend::wgpu::WgpuDevice;
        match self.kind {
            AdapterKind::Discrete => WgpuDevice::DiscreteGpu(self.nth),
            AdapterKind::Integrated => WgpuDevice::IntegratedGpu(self.nth),
            AdapterKind::Virtual => WgpuDevice::VirtualGpu(self.nth),
            // Burn opens the first software adapter; `probe_wgpu` refuses any other, and
            // adapters of no stated kind.
            AdapterKind::Cpu | AdapterKind::Other => WgpuDevice::Cpu,
        }
    }
}

impl SelectedDevice {
    /// The backend family, as printed in reports: `ndarray`, `cuda` or `wgpu`.
    pub fn backend_name(&self) -> &'static str {
        match self {
            Self::Cpu => "ndarray",
            Self::Cuda(_) => "cuda",
            Self::Wgpu(_) => "wgpu",
        }
    }

    /// A wgpu adapter's name, API, kind and driver as its driver gives them
    /// ([`quench_platform::adapters::AdapterInfo::description`]); `None` for the other devices.
    pub fn adapter_name(&self) -> Option<String> {
        match self {
            Self::Wgpu(adapter) => adapters().get(adapter.index).map(|a| a.description()),
            Self::Cpu | Self::Cuda(_) => None,
        }
    }
}

impl fmt::Display for SelectedDevice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Cpu => write!(f, "cpu"),
            Self::Cuda(index) => write!(f, "cuda:{index}"),
            Self::Wgpu(adapter) => write!(f, "wgpu:{}", adapter.index),
        }
    }
}

/// A piece of work that is generic over the backend; [`run_on`] picks the backend.
///
/// Rust has no generic closures, so callers implement this trait on a small struct that
/// carries the work's inputs. The work and its output cross to the thread that runs it
/// ([`run_on`]), hence `Send`.
pub trait OnDevice: Send {
    /// What the work returns.
    type Output: Send;

    /// Runs the work on backend `B` and its `device`.
    fn run<B: QuenchBackend>(self, device: &B::Device) -> Self::Output;
}

/// Threads a computation may split independent rows over when backend `B` runs each op on
/// the calling thread, as the CPU backend (and its inner backend) does for elementwise work:
/// the cores available to the process. 1 for any other backend, whose ops are queued to a
/// device asynchronously.
pub fn host_lanes<B: QuenchOps>() -> usize {
    B::host_lanes()
}

/// Runs `task` on the backend behind `device`. On the CPU it runs on a thread of the runs'
/// pool ([`on_host_threads`]), so that the host kernels' parallel work is split from inside a
/// pool rather than handed over from outside at every kernel; a stop check installed on the
/// caller's thread ([`quench_support::interrupt::checked`], Python's Ctrl-C) is asked there
/// meanwhile and relayed to the run ([`quench_support::interrupt::relayed`]).
pub fn run_on<T: OnDevice>(device: SelectedDevice, task: T) -> Result<T::Output, BackendError> {
    match device {
        SelectedDevice::Cpu => {
            let run = || task.run::<CpuBackend>(&Default::default());
            // A run inside a run goes on in place, where its caller's check already is.
            if in_a_run() {
                return Ok(run());
            }
            Ok(quench_support::interrupt::relayed(|relay| {
                if relay.stays_here() {
                    run()
                } else {
                    on_host_threads(|| relay.install(run))
                }
            }))
        }
        #[cfg(feature = "cuda")]
        SelectedDevice::Cuda(index) => {
            let device = burn::backend::cuda::CudaDevice::new(index);
            Ok(task.run::<CudaBackend>(&device))
        }
        #[cfg(not(feature = "cuda"))]
        SelectedDevice::Cuda(index) => Err(BackendError::CudaNotCompiled {
            spec: quench_platform::DeviceSpec::Cuda(Some(index)).to_string(),
        }),
        #[cfg(feature = "wgpu")]
        SelectedDevice::Wgpu(adapter) => Ok(task.run::<WgpuBackend>(&adapter.burn_device())),
        #[cfg(not(feature = "wgpu"))]
        SelectedDevice::Wgpu(adapter) => Err(BackendError::WgpuNotCompiled {
            spec: quench_platform::DeviceSpec::Wgpu(Some(adapter.index)).to_string(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reductions::Reduce;
    use burn::tensor::{ElementConversion, Tensor};

    struct SumOnDevice(Vec<f32>);

    impl OnDevice for SumOnDevice {
        type Output = f32;
        fn run<B: QuenchBackend>(self, device: &B::Device) -> f32 {
            Tensor::<B, 1>::from_floats(self.0.as_slice(), device)
                .sum_all()
                .into_scalar()
                .elem()
        }
    }

    /// A run that starts a run of its own inside: whether it worked for a run, and the inner
    /// run's sum.
    struct Nested;

    impl OnDevice for Nested {
        type Output = (bool, f32);
        fn run<B: QuenchBackend>(self, _device: &B::Device) -> (bool, f32) {
            let inner = run_on(SelectedDevice::Cpu, SumOnDevice(vec![1.0, 2.0]));
            (in_a_run(), inner.unwrap_or(f32::NAN))
        }
    }

    #[test]
    fn a_run_with_a_stop_check_works_in_the_pool_and_a_run_inside_it_goes_on_in_place() {
        use std::sync::mpsc;
        use std::time::Duration;
        // On a thread of its own, so that a deadlock (a nested run waiting for the pool its
        // caller holds) fails the test instead of hanging the suite.
        let (sender, answer) = mpsc::channel();
        std::thread::spawn(move || {
            let outcome = quench_support::interrupt::checked(
                || false,
                || run_on(SelectedDevice::Cpu, Nested).ok(),
            );
            // The receiver waits below unless the test has already failed.
            let _ = sender.send(outcome);
        });
        let outcome = answer.recv_timeout(Duration::from_secs(120));
        assert_eq!(
            outcome.expect("the runs ended"),
            (Some((true, 3.0)), false),
            "in the runs' pool, the inner run's sum, no stop asked"
        );
    }

    #[test]
    fn the_host_lanes_follow_the_backend_not_its_exact_type() {
        use burn::backend::autodiff::checkpoint::strategy::BalancedCheckpointing;
        // A type check named two exact types; any autodiff strategy over the f32 CPU backend
        // runs its ops on the host all the same.
        let cores = quench_host::lanes::host_cores();
        assert_eq!(
            host_lanes::<Autodiff<NdArray<f32>, BalancedCheckpointing>>(),
            cores
        );
    }

    #[test]
    fn only_the_cpu_backend_gets_host_lanes() {
        let cores = quench_host::lanes::host_cores();
        assert_eq!(host_lanes::<CpuBackend>(), cores);
        assert_eq!(host_lanes::<NdArray<f32>>(), cores);
        assert_eq!(
            host_lanes::<NdArray<f64>>(),
            1,
            "not the backend the CPU runs on"
        );
    }

    #[test]
    fn the_cpu_runs_generic_work() {
        let sum = run_on(SelectedDevice::Cpu, SumOnDevice(vec![1.0, 2.0, 4.5])).unwrap();
        assert_eq!(sum, 7.5);
    }

    #[cfg(not(feature = "cuda"))]
    #[test]
    fn cuda_without_the_feature_names_the_rebuild() {
        let err = run_on(SelectedDevice::Cuda(1), SumOnDevice(vec![])).unwrap_err();
        assert!(matches!(err, BackendError::CudaNotCompiled { .. }));
        assert!(err.to_string().contains("--features cuda"), "{err}");
        assert!(err.to_string().contains("cuda:1"), "{err}");
    }
}
