//! The one place that maps a run-time device choice onto a concrete Burn backend.

use std::fmt;

use burn::backend::{Autodiff, NdArray};
use burn::tensor::backend::AutodiffBackend;

use crate::error::DeviceError;
use crate::spec::DeviceSpec;

/// The CPU backend: `burn_ndarray` in f32, with autodiff.
pub type CpuBackend = Autodiff<NdArray<f32>>;

/// The CUDA backend: `burn_cuda` in f32 with fusion, with autodiff.
#[cfg(feature = "cuda")]
pub type CudaBackend = Autodiff<burn::backend::Cuda<f32, i32>>;

/// A device that was probed and can run work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SelectedDevice {
    /// The CPU backend.
    Cpu,
    /// The CUDA device with this ordinal; only constructed by a build with the `cuda` feature.
    Cuda(usize),
}

impl SelectedDevice {
    /// The backend family, as printed in reports: `ndarray` or `cuda`.
    pub fn backend_name(&self) -> &'static str {
        match self {
            Self::Cpu => "ndarray",
            Self::Cuda(_) => "cuda",
        }
    }
}

impl fmt::Display for SelectedDevice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Cpu => write!(f, "cpu"),
            Self::Cuda(index) => write!(f, "cuda:{index}"),
        }
    }
}

/// The outcome of [`select`]: the device to use and, when `auto` fell back, why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selection {
    /// The device that work will run on.
    pub device: SelectedDevice,
    /// One line saying why `auto` did not pick a GPU; `None` when nothing fell back.
    pub fallback: Option<String>,
}

/// A piece of work that is generic over the backend; [`run_on`] picks the backend.
///
/// Rust has no generic closures, so callers implement this trait on a small struct that
/// carries the work's inputs.
pub trait OnDevice {
    /// What the work returns.
    type Output;

    /// Runs the work on backend `B` and its `device`.
    fn run<B: AutodiffBackend>(self, device: &B::Device) -> Self::Output;
}

/// Resolves a request into a usable device, probing CUDA without ever panicking.
///
/// `auto` takes `cuda:0` when a build with CUDA finds a working device, else the CPU with a
/// one-line reason. An explicit `cuda`/`cuda:N` that cannot be used is an error.
pub fn select(spec: DeviceSpec) -> Result<Selection, DeviceError> {
    match spec {
        DeviceSpec::Cpu => Ok(Selection {
            device: SelectedDevice::Cpu,
            fallback: None,
        }),
        DeviceSpec::Cuda(index) => {
            probe_cuda(spec, index)?;
            Ok(Selection {
                device: SelectedDevice::Cuda(index),
                fallback: None,
            })
        }
        DeviceSpec::Auto => match probe_cuda(spec, 0) {
            Ok(()) => Ok(Selection {
                device: SelectedDevice::Cuda(0),
                fallback: None,
            }),
            Err(DeviceError::CudaNotCompiled { .. }) => Ok(Selection {
                device: SelectedDevice::Cpu,
                fallback: Some("this binary was built without CUDA support; using the CPU".into()),
            }),
            Err(err) => Ok(Selection {
                device: SelectedDevice::Cpu,
                fallback: Some(format!("{err}; using the CPU")),
            }),
        },
    }
}

/// Runs `task` on the backend behind `device`.
pub fn run_on<T: OnDevice>(device: SelectedDevice, task: T) -> Result<T::Output, DeviceError> {
    match device {
        SelectedDevice::Cpu => Ok(task.run::<CpuBackend>(&Default::default())),
        #[cfg(feature = "cuda")]
        SelectedDevice::Cuda(index) => {
            let device = burn::backend::cuda::CudaDevice::new(index);
            Ok(task.run::<CudaBackend>(&device))
        }
        #[cfg(not(feature = "cuda"))]
        SelectedDevice::Cuda(index) => Err(DeviceError::CudaNotCompiled {
            spec: DeviceSpec::Cuda(index).to_string(),
        }),
    }
}

#[cfg(not(feature = "cuda"))]
fn probe_cuda(spec: DeviceSpec, _index: usize) -> Result<(), DeviceError> {
    Err(DeviceError::CudaNotCompiled {
        spec: spec.to_string(),
    })
}

/// Creates the device, runs one small computation and reads it back.
///
/// The CUDA runtime panics when the driver library is missing or the ordinal does not exist,
/// so the probe runs under `catch_unwind` with the panic hook silenced: the user gets one line,
/// not a backtrace.
#[cfg(feature = "cuda")]
fn probe_cuda(_spec: DeviceSpec, index: usize) -> Result<(), DeviceError> {
    use burn::tensor::{ElementConversion, Tensor};
    type Probe = burn::backend::Cuda<f32, i32>;

    let outcome = silently(|| {
        let device = burn::backend::cuda::CudaDevice::new(index);
        let x = Tensor::<Probe, 1>::from_floats([1.0, 2.0, 3.0], &device);
        (x + 1.0).sum().into_scalar().elem::<f32>()
    });
    match outcome {
        Ok(sum) if (sum - 9.0).abs() < 1e-6 => Ok(()),
        Ok(sum) => Err(DeviceError::CudaUnavailable {
            index,
            reason: format!("a test computation returned {sum} instead of 9"),
        }),
        Err(reason) => Err(DeviceError::CudaUnavailable { index, reason }),
    }
}

/// Runs `work`, turning a panic into its message without printing anything.
#[cfg(any(feature = "cuda", test))]
pub(crate) fn silently<R>(work: impl FnOnce() -> R) -> Result<R, String> {
    use std::panic::{self, AssertUnwindSafe};
    let previous = panic::take_hook();
    panic::set_hook(Box::new(|_| {}));
    let outcome = panic::catch_unwind(AssertUnwindSafe(work));
    panic::set_hook(previous);
    outcome.map_err(|payload| panic_message(payload.as_ref()))
}

#[cfg(any(feature = "cuda", test))]
fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    let text = payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "the CUDA runtime failed to initialise".to_string());
    text.lines()
        .find(|line| !line.trim().is_empty())
        .unwrap_or("the CUDA runtime failed to initialise")
        .trim()
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::tensor::{ElementConversion, Tensor};

    struct SumOnDevice(Vec<f32>);

    impl OnDevice for SumOnDevice {
        type Output = f32;
        fn run<B: AutodiffBackend>(self, device: &B::Device) -> f32 {
            Tensor::<B, 1>::from_floats(self.0.as_slice(), device)
                .sum()
                .into_scalar()
                .elem()
        }
    }

    #[test]
    fn cpu_is_always_selectable_and_runs_generic_work() {
        let selection = select(DeviceSpec::Cpu).unwrap();
        assert_eq!(selection.device, SelectedDevice::Cpu);
        assert!(selection.fallback.is_none());
        let sum = run_on(selection.device, SumOnDevice(vec![1.0, 2.0, 4.5])).unwrap();
        assert_eq!(sum, 7.5);
    }

    #[test]
    fn auto_always_yields_a_device_and_explains_a_fallback() {
        let selection = select(DeviceSpec::Auto).unwrap();
        match selection.device {
            SelectedDevice::Cpu => {
                let why = selection.fallback.expect("a fallback must say why");
                assert!(why.ends_with("using the CPU"), "{why}");
                assert_eq!(why.lines().count(), 1);
            }
            SelectedDevice::Cuda(0) => assert!(selection.fallback.is_none()),
            other => panic!("auto picked {other}"),
        }
    }

    #[cfg(not(feature = "cuda"))]
    #[test]
    fn explicit_cuda_without_the_feature_names_the_rebuild() {
        let err = select(DeviceSpec::Cuda(1)).unwrap_err();
        assert!(matches!(err, DeviceError::CudaNotCompiled { .. }));
        assert!(err.to_string().contains("--features cuda"), "{err}");
        assert!(err.to_string().contains("cuda:1"), "{err}");
    }

    #[test]
    fn silently_turns_panics_into_their_first_line() {
        let err = silently(|| -> u8 { panic!("no driver\nbacktrace follows") }).unwrap_err();
        assert_eq!(err, "no driver");
        assert_eq!(silently(|| 3).unwrap(), 3);
    }
}
