//! The device the backend-generic tests run on, chosen at run time by `QUENCH_TEST_DEVICE`.
//!
//! Unset (or `cpu`), tests run on the CPU backend. In a build with the `wgpu` feature,
//! `QUENCH_TEST_DEVICE=wgpu` (or `wgpu:N`) runs them on a wgpu adapter, in CI Mesa's software
//! Vulkan device lavapipe; with `cuda`, `QUENCH_TEST_DEVICE=cuda` on a GPU. One test build
//! serves every device: the variable switches the backend, not a cargo feature, so the binary
//! that `verify` and the suites run is the one the tests ran.
//!
//! A test is written once, generic over the backend, with [`device_test!`](crate::device_test).

use burn::tensor::Tensor;
use burn::tensor::backend::Backend;

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

/// The largest relative error of burn-ndarray 0.21's f32 `recip` on this processor's
/// architecture. It runs the processor's reciprocal estimate without a refinement step
/// (macerator 0.3), on tensors of 32 values or more: on x86 `rcpps` with SSE or AVX2, within
/// 1.5 x 2^-12 (3.7e-4; the bound Intel's and AMD's manuals give, and the two vendors' values
/// differ within it), and `rcp14ps` with AVX-512, within 2^-14; on aarch64 `frecpe`, an 8-bit
/// estimate, within 2^-8. Every gradient through a division's numerator, a logarithm or a
/// reciprocal on the CPU backend carries it (burn-autodiff takes `recip` there), so a test
/// comparing with such a gradient takes its tolerance from this bound, not from what one
/// machine gave. Elsewhere the division is exact: 0.
pub const RECIP_ESTIMATE_BOUND: f64 = if cfg!(target_arch = "aarch64") {
    1.0 / 256.0
} else if cfg!(any(target_arch = "x86", target_arch = "x86_64")) {
    1.5 / 4096.0
} else {
    0.0
};

/// The largest `|a - b|` between two tensors' values (read back; as many values each), NaN
/// when any value of either is NaN, so that a broken result never passes a `gap < tolerance`
/// check (a plain `fold(0.0, f32::max)` drops NaN).
pub fn largest_gap<B: Backend, const D: usize>(a: Tensor<B, D>, b: Tensor<B, D>) -> f32 {
    let (a, b) = (
        crate::readback::to_host_f32(a),
        crate::readback::to_host_f32(b),
    );
    assert_eq!(a.len(), b.len(), "tensors of different sizes");
    quench_support::stats::max_abs_difference(&a, &b) as f32
}

/// `len` deterministic values spread over `[-scale, scale)` (a multiplicative hash of the index
/// and `salt`): test inputs that differ in every entry without a random generator.
pub fn spread(len: usize, salt: u32, scale: f32) -> Vec<f32> {
    (0..len as u32)
        .map(|i| {
            let bits = i
                .wrapping_mul(2_654_435_761)
                .wrapping_add(salt.wrapping_mul(40_503));
            ((bits >> 8) as f32 / 8_388_608.0 - 1.0) * scale
        })
        .collect()
}

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

    /// Set in the processes that [`a_second_process_autotunes_no_shape_again`] starts.
    const CHILD: &str = "QUENCH_AUTOTUNE_CHILD";

    /// A batched product, read back, so that CubeCL tunes its matmul (one shape: on lavapipe
    /// each takes tens of seconds to tune).
    struct Products;

    impl OnDevice for Products {
        type Output = ();

        fn run<B: crate::QuenchBackend>(self, device: &B::Device) {
            use burn::tensor::Tensor;
            let (m, k, n) = (24, 33, 17);
            let a = Tensor::<B::InnerBackend, 3>::ones([2, m, k], device);
            let b = Tensor::<B::InnerBackend, 3>::ones([2, k, n], device);
            let product = crate::readback::to_host_f32(a.matmul(b));
            assert!(product.iter().all(|&x| x == k as f32), "{m}x{k}x{n}");
        }
    }

    /// The same product in two processes, one after the other, with the default cache folder
    /// under a temporary `XDG_CACHE_HOME` (and no `QUENCH_CACHE_DIR`, no `cubecl.toml`): the
    /// first tunes its shape and keeps the result, the second finds it and tunes nothing
    /// again. On the CPU nothing is tuned.
    #[test]
    fn a_second_process_autotunes_no_shape_again() {
        if std::env::var_os(CHILD).is_some() {
            run_test(Products);
            return;
        }
        if on_cpu() {
            return;
        }
        let home = tempfile::tempdir().unwrap_or_else(|err| panic!("temporary folder: {err}"));
        let test = std::env::current_exe().unwrap_or_else(|err| panic!("this test: {err}"));
        let run = || {
            let status = std::process::Command::new(&test)
                .args([
                    "testing::tests::a_second_process_autotunes_no_shape_again",
                    "--exact",
                    "--test-threads=1",
                ])
                .env(CHILD, "1")
                .env("XDG_CACHE_HOME", home.path())
                .env_remove(quench_platform::kernel_cache::CACHE_DIR_ENV)
                .current_dir(home.path())
                .status()
                .unwrap_or_else(|err| panic!("starting {}: {err}", test.display()));
            assert!(status.success(), "the products failed: {status}");
            quench_platform::kernel_cache::entries(&home.path().join("quench").join("cubecl")).tuned
        };
        let first = run();
        assert!(first > 0, "the first process kept no tuned shape");
        assert_eq!(run(), first, "the second process tuned shapes again");
    }

    #[test]
    fn the_cpu_is_the_default_test_device() {
        if std::env::var_os(TEST_DEVICE_VARIABLE).is_none() {
            assert!(on_cpu());
        }
    }
}
