//! Choosing the device a run uses: probing GPUs without ever panicking, `auto`'s fallback to
//! the CPU with a reason, and CubeCL's kernel cache made before the first GPU is touched. The
//! backends and the dispatch onto them are `quench_kernels::backends`.

use quench_kernels::{SelectedDevice, WgpuAdapter};
use quench_platform::BackendError;
use quench_platform::adapters::adapters;
use quench_platform::spec::DeviceSpec;

use crate::error::DeviceError;

/// The outcome of [`select`]: the device to use and, when `auto` fell back, why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selection {
    /// The device that work will run on.
    pub device: SelectedDevice,
    /// One line saying why `auto` did not pick a GPU; `None` when nothing fell back.
    pub fallback: Option<String>,
}

/// Resolves a request into a usable device, probing GPUs without ever panicking.
///
/// `auto` takes `cuda:0` when a build with CUDA finds a working device, else the most
/// preferred hardware wgpu adapter (discrete, then integrated) in a build with wgpu, else the
/// CPU with a one-line reason; a software adapter (lavapipe, SwiftShader, WARP) is never
/// `auto`'s. An explicit `cuda`, `cuda:N`, `wgpu` or `wgpu:N` that cannot be used is an error.
pub fn select(spec: DeviceSpec) -> Result<Selection, DeviceError> {
    // Before any GPU is probed: CubeCL reads its configuration, caches included, once.
    #[cfg(any(feature = "wgpu", feature = "cuda"))]
    if spec != DeviceSpec::Cpu {
        quench_platform::kernel_cache::install(None, false)?;
    }
    match spec {
        DeviceSpec::Cpu => Ok(Selection {
            device: SelectedDevice::Cpu,
            fallback: None,
        }),
        DeviceSpec::Cuda(index) => {
            let index = index.unwrap_or(0);
            probe_cuda(spec, index)?;
            Ok(Selection {
                device: SelectedDevice::Cuda(index),
                fallback: None,
            })
        }
        DeviceSpec::Wgpu(index) => Ok(Selection {
            device: SelectedDevice::Wgpu(probe_wgpu(spec, index)?),
            fallback: None,
        }),
        DeviceSpec::Auto => {
            let cuda = match probe_cuda(spec, 0) {
                Ok(()) => {
                    return Ok(Selection {
                        device: SelectedDevice::Cuda(0),
                        fallback: None,
                    });
                }
                Err(DeviceError::Backend(BackendError::CudaNotCompiled { .. })) => {
                    "this binary was built without CUDA support".to_string()
                }
                Err(err) => err.to_string(),
            };
            let wgpu = match auto_wgpu() {
                Ok(adapter) => {
                    return Ok(Selection {
                        device: SelectedDevice::Wgpu(adapter),
                        fallback: None,
                    });
                }
                Err(None) => String::new(),
                Err(Some(why)) => format!("; {why}"),
            };
            Ok(Selection {
                device: SelectedDevice::Cpu,
                fallback: Some(format!("{cuda}{wgpu}; using the CPU")),
            })
        }
    }
}

/// The hardware wgpu adapter `auto` takes, or why there is none: `None` in a build without
/// wgpu (which has nothing to say about it).
fn auto_wgpu() -> Result<WgpuAdapter, Option<String>> {
    if !cfg!(feature = "wgpu") {
        return Err(None);
    }
    let all = adapters();
    let Some(best) = quench_platform::adapters::best_hardware(all) else {
        let software: Vec<&str> = all
            .iter()
            .filter(|a| a.is_software())
            .map(|a| a.name.as_str())
            .collect();
        return Err(Some(if all.is_empty() {
            format!(
                "no wgpu adapter ({})",
                quench_platform::adapters::none_found_reason()
            )
        } else if software.is_empty() {
            "no discrete or integrated GPU among the wgpu adapters".to_string()
        } else {
            format!(
                "wgpu found only the software adapter {} (`--device wgpu` runs on it)",
                software.join(", ")
            )
        }));
    };
    probe_wgpu(DeviceSpec::Auto, Some(best.index)).map_err(|err| Some(err.to_string()))
}

/// What a command-line program does with its `--device` value: probes and selects the device,
/// and prints `note: WHY` on stderr when `auto` fell back to the CPU.
pub fn select_announced(spec: DeviceSpec) -> Result<Selection, DeviceError> {
    let selection = select(spec)?;
    if let Some(why) = &selection.fallback {
        eprintln!("note: {why}");
    }
    Ok(selection)
}

#[cfg(not(feature = "wgpu"))]
fn probe_wgpu(spec: DeviceSpec, _index: Option<usize>) -> Result<WgpuAdapter, DeviceError> {
    Err(BackendError::WgpuNotCompiled {
        spec: spec.to_string(),
    }
    .into())
}

/// Finds the adapter `index` names (the most preferred one for `None`: hardware before
/// software), opens it and runs one small computation, reading it back. Nothing panics: a
/// missing loader or driver, an index out of range and a failing device are errors that say
/// what to install or which adapters there are.
#[cfg(feature = "wgpu")]
fn probe_wgpu(spec: DeviceSpec, index: Option<usize>) -> Result<WgpuAdapter, DeviceError> {
    use burn::tensor::{ElementConversion, Tensor};
    use quench_kernels::reductions::Reduce;
    type Probe = burn::backend::Wgpu<f32, i32>;

    let all = adapters();
    let unavailable = |reason: String| DeviceError::WgpuUnavailable {
        spec: spec.to_string(),
        reason,
    };
    if all.is_empty() {
        return Err(unavailable(quench_platform::adapters::none_found_reason()));
    }
    let adapter = WgpuAdapter::find(index).ok_or_else(|| {
        unavailable(format!(
            "this machine has {} wgpu adapter(s): {}",
            all.len(),
            quench_platform::adapters::listing(all)
        ))
    })?;
    let chosen = &all[adapter.index];
    // Burn's wgpu backend opens adapters by kind and position, and of the software ones only
    // the first; an adapter of no stated kind it cannot name at all.
    use quench_platform::adapters::AdapterKind;
    if chosen.kind == AdapterKind::Other || (chosen.kind == AdapterKind::Cpu && adapter.nth > 0) {
        return Err(unavailable(format!(
            "{chosen} cannot be opened by Burn's wgpu backend (it names adapters by type, and \
             only the first software adapter); the adapters: {}",
            quench_platform::adapters::listing(all)
        )));
    }
    let outcome = silently(|| {
        let x = Tensor::<Probe, 1>::from_floats([1.0, 2.0, 3.0], &adapter.burn_device());
        (x + 1.0).sum_all().into_scalar().elem::<f32>()
    });
    match outcome {
        Ok(sum) if (sum - 9.0).abs() < 1e-6 => Ok(adapter),
        Ok(sum) => Err(unavailable(format!(
            "{chosen}: a test computation returned {sum} instead of 9"
        ))),
        Err(panics) => Err(unavailable(format!("{chosen} failed to start: {panics}"))),
    }
}

#[cfg(not(feature = "cuda"))]
fn probe_cuda(spec: DeviceSpec, _index: usize) -> Result<(), DeviceError> {
    Err(BackendError::CudaNotCompiled {
        spec: spec.to_string(),
    }
    .into())
}

/// Creates the device, runs one small computation and reads it back.
///
/// The CUDA runtime panics when the driver library is missing or the ordinal does not exist,
/// so the probe runs under `catch_unwind` with the panic hook silenced: the user gets one line,
/// not a backtrace, and [`cuda_failure_reason`] turns the panics' text into the cause and the
/// fix.
#[cfg(feature = "cuda")]
fn probe_cuda(_spec: DeviceSpec, index: usize) -> Result<(), DeviceError> {
    use burn::cubecl::Runtime;
    use burn::cubecl::cuda::CudaRuntime;
    use burn::tensor::{ElementConversion, Tensor};
    use quench_kernels::reductions::Reduce;
    type Probe = burn::backend::Cuda<f32, i32>;

    let outcome = silently(|| {
        let device = burn::backend::cuda::CudaDevice::new(index);
        let x = Tensor::<Probe, 1>::from_floats([1.0, 2.0, 3.0], &device);
        (x + 1.0).sum_all().into_scalar().elem::<f32>()
    });
    match outcome {
        Ok(sum) if (sum - 9.0).abs() < 1e-6 => Ok(()),
        Ok(sum) => Err(DeviceError::CudaUnavailable {
            index,
            reason: format!("a test computation returned {sum} instead of 9"),
        }),
        Err(panics) => {
            // Counting the devices needs the driver but creates no context; without a
            // driver it panics as the probe did, and the count stays unknown.
            let count = silently(|| CudaRuntime::enumerate_devices(0, &()).len()).ok();
            Err(DeviceError::CudaUnavailable {
                index,
                reason: cuda_failure_reason(&panics, index, count),
            })
        }
    }
}

/// Why CUDA device `index` cannot be used, in plain words with the fix, from `panics`: the
/// text of the panics raised while it was probed (see [`silently`]). cudarc and CubeCL report a
/// missing driver, a missing device or an old driver by panicking, mostly as ``called
/// `Result::unwrap()` on an `Err` value: DriverError(CUDA_ERROR_..., "...")``. `device_count` is
/// what the driver reports, where it could be asked. Anything else keeps the original text.
#[cfg(any(feature = "cuda", test))]
pub(crate) fn cuda_failure_reason(
    panics: &str,
    index: usize,
    device_count: Option<usize>,
) -> String {
    const CPU: &str = "or use --device cpu";
    let has = |needle: &str| panics.contains(needle);
    if has("load the \"cuda\" shared library") || has("load the \"nvcuda\" shared library") {
        return format!(
            "no NVIDIA driver found (libcuda.so could not be loaded): install the NVIDIA \
             driver, {CPU}"
        );
    }
    if has("CUDA_ERROR_STUB_LIBRARY") {
        return format!(
            "no NVIDIA driver found (the libcuda.so that was loaded is the CUDA toolkit's stub, \
             not a driver): install the NVIDIA driver, or take the toolkit's stubs directory \
             off LD_LIBRARY_PATH, {CPU}"
        );
    }
    if has("CUDA_ERROR_NO_DEVICE") || has("no CUDA-capable device is detected") {
        return format!(
            "no CUDA device found: the NVIDIA driver sees no GPU (check nvidia-smi and \
             CUDA_VISIBLE_DEVICES), {CPU}"
        );
    }
    if has("CUDA_ERROR_INVALID_DEVICE") || has("invalid device ordinal") {
        return match device_count {
            Some(0) => format!("no CUDA device {index}: this machine has none; use --device cpu"),
            Some(1) => {
                format!("no CUDA device {index}: this machine has 1 (cuda:0); use cuda:0, {CPU}")
            }
            Some(count) => format!(
                "no CUDA device {index}: this machine has {count} (cuda:0 to cuda:{}); use one \
                 of those, {CPU}",
                count - 1
            ),
            None => format!("no CUDA device {index} on this machine: use a smaller ordinal, {CPU}"),
        };
    }
    let too_old = [
        "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
        "CUDA_ERROR_UNSUPPORTED_PTX_VERSION",
        "CUDA_ERROR_INSUFFICIENT_DRIVER",
        "driver version is insufficient",
    ]
    .into_iter()
    .find(|needle| has(needle))
    .map(str::to_string)
    // cudarc asks the driver for every entry point of the CUDA version it was built for;
    // an older driver lacks the newer ones.
    .or_else(|| {
        let symbol = panics.split("Missing symbol ").nth(1)?;
        let symbol = symbol.split([':', ' ']).next().unwrap_or(symbol);
        Some(format!("it lacks {symbol}"))
    });
    if let Some(detail) = too_old {
        return format!(
            "the NVIDIA driver is too old for the CUDA version this build needs ({detail}): \
             update the driver, {CPU}"
        );
    }
    if has("load the \"nvrtc\" shared library") {
        return format!(
            "the CUDA runtime compiler could not be loaded (libnvrtc.so not found): install \
             the CUDA toolkit or put its lib64 directory on LD_LIBRARY_PATH, {CPU}"
        );
    }
    if has("CUDA installation not found") {
        return format!(
            "the CUDA toolkit was not found (its headers are needed to compile kernels): \
             install it or set CUDA_PATH, {CPU}"
        );
    }
    format!("the CUDA runtime failed to initialise (use --device cpu to run without it): {panics}")
}

/// Runs `work`, turning a panic into a message without printing anything.
///
/// CubeCL initialises a device on a thread of its own, and a panic there reaches the caller
/// only as ``called `Result::unwrap()` on an `Err` value: RecvError``. So while `work` runs,
/// the panic hook records the first line of every panic, on any thread, and the message is
/// those lines in order (the cause first), joined by ` / `. The hook is process-wide, so calls
/// take turns (and `work` must not call `silently` itself: it would wait for its own turn).
#[cfg(any(feature = "cuda", feature = "wgpu", test))]
pub(crate) fn silently<R>(work: impl FnOnce() -> R) -> Result<R, String> {
    use std::panic::{self, AssertUnwindSafe};
    use std::sync::{Arc, Mutex, PoisonError};

    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(PoisonError::into_inner);
    let seen = Arc::new(Mutex::new(Vec::<String>::new()));
    let record = Arc::clone(&seen);
    let previous = panic::take_hook();
    panic::set_hook(Box::new(move |info| {
        record
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(panic_message(info.payload()));
    }));
    let outcome = panic::catch_unwind(AssertUnwindSafe(work));
    panic::set_hook(previous);
    outcome.map_err(|payload| {
        let mut messages =
            std::mem::take(&mut *seen.lock().unwrap_or_else(PoisonError::into_inner));
        let caught = panic_message(payload.as_ref());
        if !messages.contains(&caught) {
            messages.push(caught);
        }
        messages.dedup();
        messages.join(" / ")
    })
}

#[cfg(any(feature = "cuda", feature = "wgpu", test))]
fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    let text = crate::error::panic_text(payload).unwrap_or("the GPU runtime failed to initialise");
    text.lines()
        .find(|line| !line.trim().is_empty())
        .unwrap_or("the GPU runtime failed to initialise")
        .trim()
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_is_always_selectable() {
        let selection = select(DeviceSpec::Cpu).unwrap();
        assert_eq!(selection.device, SelectedDevice::Cpu);
        assert!(selection.fallback.is_none());
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
        let err = select(DeviceSpec::Cuda(Some(1))).unwrap_err();
        assert!(matches!(
            err,
            DeviceError::Backend(BackendError::CudaNotCompiled { .. })
        ));
        assert!(err.to_string().contains("--features cuda"), "{err}");
        assert!(err.to_string().contains("cuda:1"), "{err}");
    }

    #[test]
    fn silently_turns_panics_into_their_first_line() {
        let err = silently(|| -> u8 { panic!("no driver\nbacktrace follows") }).unwrap_err();
        assert_eq!(err, "no driver");
        assert_eq!(silently(|| 3).unwrap(), 3);
    }

    #[test]
    fn silently_reports_the_panic_of_a_helper_thread_first() {
        // As CubeCL's device thread fails and its caller then finds the reply channel closed.
        let err = silently(|| {
            let helper = std::thread::spawn(|| -> u8 { panic!("cause: no driver") });
            helper.join().map_err(|_| "RecvError").unwrap()
        })
        .unwrap_err();
        assert_eq!(
            err,
            "cause: no driver / called `Result::unwrap()` on an `Err` value: \"RecvError\""
        );
    }

    /// What the caller of CubeCL's device initialisation panics with after its device thread did.
    const RECV: &str = "called `Result::unwrap()` on an `Err` value: RecvError";

    fn reason(cause: &str, index: usize, count: Option<usize>) -> String {
        cuda_failure_reason(&format!("{cause} / {RECV}"), index, count)
    }

    #[test]
    fn a_missing_driver_library_is_named_with_the_fix() {
        // cudarc's panic when no candidate libcuda loads.
        let cause = "Unable to dynamically load the \"cuda\" shared library - searched for \
            library names: [\"libcuda.so\", \"libcuda64.so\", \"libcuda64_12.so\"]. Ensure that \
            `LD_LIBRARY_PATH` has the correct path to the installed library. If the shared \
            library is present on the system under a different name than one of those listed \
            above, please open a GitHub issue.";
        assert_eq!(
            reason(cause, 0, None),
            "no NVIDIA driver found (libcuda.so could not be loaded): install the NVIDIA \
             driver, or use --device cpu"
        );
        let stub = "called `Result::unwrap()` on an `Err` value: \
            DriverError(CUDA_ERROR_STUB_LIBRARY, \"CUDA driver is a stub library\")";
        assert!(reason(stub, 0, None).starts_with("no NVIDIA driver found (the libcuda.so"));
    }

    #[test]
    fn a_missing_device_or_ordinal_is_named_with_the_count() {
        let none = "called `Result::unwrap()` on an `Err` value: \
            DriverError(CUDA_ERROR_NO_DEVICE, \"no CUDA-capable device is detected\")";
        assert_eq!(
            reason(none, 0, Some(0)),
            "no CUDA device found: the NVIDIA driver sees no GPU (check nvidia-smi and \
             CUDA_VISIBLE_DEVICES), or use --device cpu"
        );
        let ordinal = "called `Result::unwrap()` on an `Err` value: \
            DriverError(CUDA_ERROR_INVALID_DEVICE, \"invalid device ordinal\")";
        assert_eq!(
            reason(ordinal, 3, Some(2)),
            "no CUDA device 3: this machine has 2 (cuda:0 to cuda:1); use one of those, or \
             use --device cpu"
        );
        assert_eq!(
            reason(ordinal, 1, Some(1)),
            "no CUDA device 1: this machine has 1 (cuda:0); use cuda:0, or use --device cpu"
        );
        assert_eq!(
            reason(ordinal, 5, None),
            "no CUDA device 5 on this machine: use a smaller ordinal, or use --device cpu"
        );
    }

    #[test]
    fn an_old_driver_is_named_with_the_fix() {
        let ptx = "called `Result::unwrap()` on an `Err` value: Generic { reason: \"Unable to \
            load the PTX: DriverError(CUDA_ERROR_UNSUPPORTED_PTX_VERSION, \"the provided PTX was \
            compiled with an unsupported toolchain.\")\" }";
        assert_eq!(
            reason(ptx, 0, Some(1)),
            "the NVIDIA driver is too old for the CUDA version this build needs \
             (CUDA_ERROR_UNSUPPORTED_PTX_VERSION): update the driver, or use --device cpu"
        );
        let symbol = "Missing symbol cuCtxCreate_v4: /lib/x86_64-linux-gnu/libcuda.so.1: \
            undefined symbol: cuCtxCreate_v4";
        assert_eq!(
            reason(symbol, 0, None),
            "the NVIDIA driver is too old for the CUDA version this build needs (it lacks \
             cuCtxCreate_v4): update the driver, or use --device cpu"
        );
        let mismatch = "called `Result::unwrap()` on an `Err` value: \
            DriverError(CUDA_ERROR_SYSTEM_DRIVER_MISMATCH, \"system has unsupported display \
            driver / cuda driver combination\")";
        assert!(reason(mismatch, 0, None).starts_with("the NVIDIA driver is too old"));
    }

    #[test]
    fn a_missing_toolkit_and_anything_else_keep_their_text() {
        let nvrtc = "Unable to dynamically load the \"nvrtc\" shared library - searched for \
            library names: [\"libnvrtc.so\"].";
        assert!(
            reason(nvrtc, 0, Some(1)).starts_with("the CUDA runtime compiler could not be loaded")
        );
        assert!(
            reason("CUDA installation not found.", 0, Some(1))
                .starts_with("the CUDA toolkit was not found")
        );
        let oom = "called `Result::unwrap()` on an `Err` value: \
            DriverError(CUDA_ERROR_OUT_OF_MEMORY, \"out of memory\")";
        assert_eq!(
            reason(oom, 0, Some(1)),
            format!(
                "the CUDA runtime failed to initialise (use --device cpu to run without it): \
                 {oom} / {RECV}"
            )
        );
    }
}
