//! The device the backend-generic tests run on, chosen at run time by `QUENCH_TEST_DEVICE`.
//!
//! Unset (or `cpu`), tests run on the CPU backend. In a build with the `wgpu` feature,
//! `QUENCH_TEST_DEVICE=wgpu` (or `wgpu:N`) runs them on a wgpu adapter, in CI Mesa's software
//! Vulkan device lavapipe; with `cuda`, `QUENCH_TEST_DEVICE=cuda` on a GPU. One test build
//! serves every device: the variable switches the backend, not a cargo feature, so the binary
//! that `verify` and the suites run is the one the tests ran.
//!
//! A test is written once, generic over the backend, with [`device_test!`](crate::device_test).

use crate::backends::{OnDevice, SelectedDevice, WgpuAdapter, run_on};
use quench_platform::spec::DeviceSpec;

/// The environment variable that names the tests' device.
pub const TEST_DEVICE_VARIABLE: &str = "QUENCH_TEST_DEVICE";

/// The device `QUENCH_TEST_DEVICE` names (the CPU when it is unset), resolved once per
/// process: `wgpu` is the most preferred adapter, as `quench_device::select` takes it (not
/// probed here: a device that fails fails the first test that uses it).
///
/// # Panics
/// When the variable cannot be parsed, names `auto` or an adapter that does not exist: a test
/// asked to run on a device must not quietly run on another.
pub fn test_device() -> SelectedDevice {
    static DEVICE: std::sync::OnceLock<Result<SelectedDevice, String>> = std::sync::OnceLock::new();
    let chosen = DEVICE.get_or_init(|| {
        let text = std::env::var(TEST_DEVICE_VARIABLE).unwrap_or_else(|_| "cpu".into());
        let spec: DeviceSpec = text
            .parse()
            .map_err(|err| format!("{TEST_DEVICE_VARIABLE}={text}: {err}"))?;
        #[cfg(any(feature = "wgpu", feature = "cuda"))]
        if spec != DeviceSpec::Cpu {
            quench_platform::kernel_cache::install(None, false)
                .map_err(|err| format!("{TEST_DEVICE_VARIABLE}={text}: {err}"))?;
        }
        match spec {
            DeviceSpec::Cpu => Ok(SelectedDevice::Cpu),
            DeviceSpec::Cuda(index) => Ok(SelectedDevice::Cuda(index.unwrap_or(0))),
            DeviceSpec::Wgpu(index) => WgpuAdapter::find(index)
                .map(SelectedDevice::Wgpu)
                .ok_or_else(|| format!("{TEST_DEVICE_VARIABLE}={text}: no such wgpu adapter")),
            DeviceSpec::Auto => Err(format!(
                "{TEST_DEVICE_VARIABLE}={text}: name the device (cpu, cuda, wgpu)"
            )),
        }
    });
    match chosen {
        Ok(device) => *device,
        Err(why) => panic!("{why}"),
    }
}

/// Whether the tests run on the CPU backend: tests of host kernels, which only the CPU has,
/// and of f64 arithmetic, which only the CPU backend computes, run only then.
pub fn on_cpu() -> bool {
    test_device() == SelectedDevice::Cpu
}

/// Runs a test body on [`test_device`].
///
/// # Panics
/// When the device cannot run it (a build without the device's feature).
pub fn run_test<T: OnDevice>(body: T) -> T::Output {
    let device = test_device();
    run_on(device, body).unwrap_or_else(|err| panic!("test device {device}: {err}"))
}

/// Defines a `#[test]` whose body is generic over the backend and runs on the tests' device
/// ([`test_device`]). In the body, the name in angle brackets is the autodiff backend (its
/// `InnerBackend` the plain one) and the parameter a reference to its device:
///
/// ```
/// quench_kernels::device_test! {
///     /// Adding one adds one on every device.
///     fn adds_one<B>(device) {
///         use quench_kernels::burn::tensor::Tensor;
///         let x = Tensor::<B::InnerBackend, 1>::from_floats([1.0, 2.0], device) + 1.0;
///         assert_eq!(quench_kernels::readback::to_host_f32(x), vec![2.0, 3.0]);
///     }
/// }
/// ```
#[macro_export]
macro_rules! device_test {
    ($(#[$attr:meta])* fn $name:ident<$B:ident>($device:ident) $body:block $($rest:tt)*) => {
        $(#[$attr])*
        #[test]
        fn $name() {
            struct Body;
            impl $crate::OnDevice for Body {
                type Output = ();
                #[allow(unused_variables)]
                fn run<$B: $crate::QuenchBackend>(
                    self,
                    $device: &$B::Device,
                ) {
                    $body
                }
            }
            $crate::testing::run_test(Body)
        }
        $crate::device_test! { $($rest)* }
    };
    () => {};
}

/// What tests of tensor code share (`quench_tensor::checks`): deterministic inputs, the
/// largest gap between two tensors, the CPU backend's reciprocal bound.
pub use quench_tensor::checks::{RECIP_ESTIMATE_BOUND, largest_gap, spread};

#[cfg(test)]
mod tests {
    use super::*;

    crate::device_test! {
        /// The macro runs its body on the tests' device with that device's backend.
        fn the_body_runs_on_the_test_device<B>(device) {
            use burn::tensor::Tensor;
            let x = Tensor::<B::InnerBackend, 1>::from_floats([1.0, 2.5], device) * 2.0;
            assert_eq!(crate::readback::to_host_f32(x), vec![2.0, 5.0]);
        }

        fn several_tests_fit_in_one_macro<B>(device) {
            use burn::tensor::Tensor;
            use crate::reductions::Reduce;
            let x = Tensor::<B, 1>::from_floats([3.0], device).require_grad();
            let grads = (x.clone() * x.clone()).sum_all().backward();
            let grad = x.grad(&grads).expect("x takes part in the sum");
            assert_eq!(crate::readback::to_host_f32(grad), vec![6.0]);
        }
    }

    #[test]
    fn the_cpu_is_the_default_test_device() {
        if std::env::var_os(TEST_DEVICE_VARIABLE).is_none() {
            assert!(on_cpu());
        }
    }
}
