//! The wgpu adapters of this machine (Vulkan, Metal or DX12 devices), as `doctor` lists them
//! and `--device wgpu:N` names them.
//!
//! The list is what wgpu enumerates for the graphics API Burn's wgpu backend uses on this
//! platform (Vulkan on Linux and Windows, Metal on macOS), in wgpu's order; `wgpu:N` is the
//! N-th entry. Enumeration needs the cargo feature `wgpu`; without it the list is empty.

use std::fmt;

use serde::{Deserialize, Serialize};

/// What kind of hardware an adapter is, as its driver reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AdapterKind {
    /// A GPU with its own memory.
    Discrete,
    /// A GPU sharing the CPU's memory.
    Integrated,
    /// A GPU of a virtual machine or a hosted one.
    Virtual,
    /// A software rasteriser on the CPU (lavapipe, SwiftShader, WARP).
    Cpu,
    /// The driver did not say.
    Other,
}

impl fmt::Display for AdapterKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Discrete => "discrete GPU",
            Self::Integrated => "integrated GPU",
            Self::Virtual => "virtual GPU",
            Self::Cpu => "CPU",
            Self::Other => "unknown type",
        })
    }
}

/// One adapter as the driver describes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AdapterInfo {
    /// Its position in [`adapters`]: what `wgpu:N` names.
    pub index: usize,
    /// The adapter's name (`AMD Radeon RX 7900 XTX`, `llvmpipe (LLVM 15.0.6, 256 bits)`).
    pub name: String,
    /// The graphics API it is reached through: `Vulkan`, `Metal`, `DX12` or `GL`.
    pub api: String,
    /// The driver's name and version, as the driver reports them (may be empty).
    pub driver: String,
    /// What kind of hardware it is.
    pub kind: AdapterKind,
}

impl AdapterInfo {
    /// Whether this adapter runs on the CPU in software (lavapipe/llvmpipe, SwiftShader,
    /// Microsoft's WARP): correct, but no GPU's speed, so `auto` never takes it.
    pub fn is_software(&self) -> bool {
        const SOFTWARE: [&str; 5] = [
            "llvmpipe",
            "lavapipe",
            "swiftshader",
            "microsoft basic render driver",
            "warp",
        ];
        let name = self.name.to_ascii_lowercase();
        self.kind == AdapterKind::Cpu || SOFTWARE.iter().any(|s| name.contains(s))
    }

    /// The order `auto` and a bare `wgpu` prefer adapters in (lower first): discrete, then
    /// integrated, then virtual or unknown hardware, software last.
    fn preference(&self) -> u8 {
        if self.is_software() {
            return 3;
        }
        match self.kind {
            AdapterKind::Discrete => 0,
            AdapterKind::Integrated => 1,
            AdapterKind::Virtual | AdapterKind::Other | AdapterKind::Cpu => 2,
        }
    }

    /// The adapter's position among the adapters of its kind in `all`: how Burn's wgpu
    /// backend names it (`WgpuDevice::DiscreteGpu(n)` is the n-th discrete GPU).
    pub fn nth_of_kind(&self, all: &[AdapterInfo]) -> usize {
        all.iter()
            .take_while(|a| a.index != self.index)
            .filter(|a| a.kind == self.kind)
            .count()
    }
}

impl AdapterInfo {
    /// Its name, API, kind and driver, and "software" where it is one:
    /// `llvmpipe (LLVM 15) (Vulkan, CPU, driver llvmpipe Mesa 22.3.6, software)`.
    pub fn description(&self) -> String {
        let mut text = format!("{} ({}, {}", self.name, self.api, self.kind);
        if !self.driver.is_empty() {
            text.push_str(&format!(", driver {}", self.driver));
        }
        if self.is_software() {
            text.push_str(", software");
        }
        text.push(')');
        text
    }
}

impl fmt::Display for AdapterInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "wgpu:{} {}", self.index, self.description())
    }
}

/// The adapter `auto` may take: the most preferred hardware adapter, never a software one.
pub fn best_hardware(all: &[AdapterInfo]) -> Option<&AdapterInfo> {
    all.iter()
        .filter(|a| {
            !a.is_software() && matches!(a.kind, AdapterKind::Discrete | AdapterKind::Integrated)
        })
        .min_by_key(|a| (a.preference(), a.index))
}

/// The adapter a bare `--device wgpu` takes: the most preferred of all, a software adapter
/// only where there is nothing else.
pub fn best_any(all: &[AdapterInfo]) -> Option<&AdapterInfo> {
    all.iter().min_by_key(|a| (a.preference(), a.index))
}

/// The adapters as one line each, for messages that list them.
pub fn listing(all: &[AdapterInfo]) -> String {
    all.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// This machine's adapters for Burn's wgpu backend, enumerated once per process. Empty in a
/// build without the `wgpu` feature, and where no Vulkan loader or driver is installed.
pub fn adapters() -> &'static [AdapterInfo] {
    static ADAPTERS: std::sync::OnceLock<Vec<AdapterInfo>> = std::sync::OnceLock::new();
    ADAPTERS.get_or_init(enumerate)
}

#[cfg(feature = "wgpu")]
fn enumerate() -> Vec<AdapterInfo> {
    use burn::backend::wgpu::graphics::{AutoGraphicsApi, GraphicsApi};

    let backend = AutoGraphicsApi::backend();
    // Without a loader wgpu skips the API (and may log why); nothing panics.
    let instance = wgpu::Instance::new(wgpu::InstanceDescriptor {
        backends: backend.into(),
        ..wgpu::InstanceDescriptor::new_without_display_handle()
    });
    let found = block_on(instance.enumerate_adapters(backend.into()));
    found
        .iter()
        .enumerate()
        .map(|(index, adapter)| {
            let info = adapter.get_info();
            let driver = [info.driver.trim(), info.driver_info.trim()]
                .into_iter()
                .filter(|s| !s.is_empty())
                .collect::<Vec<_>>()
                .join(" ");
            AdapterInfo {
                index,
                name: info.name.clone(),
                api: api_name(info.backend).to_string(),
                driver,
                kind: match info.device_type {
                    wgpu::DeviceType::DiscreteGpu => AdapterKind::Discrete,
                    wgpu::DeviceType::IntegratedGpu => AdapterKind::Integrated,
                    wgpu::DeviceType::VirtualGpu => AdapterKind::Virtual,
                    wgpu::DeviceType::Cpu => AdapterKind::Cpu,
                    wgpu::DeviceType::Other => AdapterKind::Other,
                },
            }
        })
        .collect()
}

#[cfg(not(feature = "wgpu"))]
fn enumerate() -> Vec<AdapterInfo> {
    Vec::new()
}

#[cfg(feature = "wgpu")]
fn api_name(backend: wgpu::Backend) -> &'static str {
    match backend {
        wgpu::Backend::Vulkan => "Vulkan",
        wgpu::Backend::Metal => "Metal",
        wgpu::Backend::Dx12 => "DX12",
        wgpu::Backend::Gl => "GL",
        wgpu::Backend::BrowserWebGpu => "WebGPU",
        wgpu::Backend::Noop => "none",
    }
}

/// Waits for a future on this thread. wgpu's native enumeration is ready at once; a pending
/// one is polled again after a yield.
#[cfg(feature = "wgpu")]
fn block_on<F: std::future::Future>(future: F) -> F::Output {
    use std::task::{Context, Poll, Waker};
    let mut future = std::pin::pin!(future);
    let mut context = Context::from_waker(Waker::noop());
    loop {
        if let Poll::Ready(value) = future.as_mut().poll(&mut context) {
            return value;
        }
        std::thread::yield_now();
    }
}

/// Why no adapter was found, with what to install: the Vulkan loader missing, or the loader
/// present with no driver behind it (Linux and Windows; Metal is always there on macOS).
pub fn none_found_reason() -> String {
    if cfg!(target_os = "macos") {
        return "wgpu found no Metal device".into();
    }
    if !vulkan_loader_present() {
        return "no Vulkan loader found (libvulkan.so.1): install it (Debian/Ubuntu: apt install \
                libvulkan1) and a Vulkan driver (your GPU's, or mesa-vulkan-drivers)"
            .into();
    }
    "the Vulkan loader is installed but no Vulkan driver answered: install your GPU's Vulkan \
     driver (Debian/Ubuntu: mesa-vulkan-drivers for AMD and Intel GPUs and the software \
     device lavapipe; NVIDIA's driver for NVIDIA GPUs)"
        .into()
}

/// Whether the system's Vulkan loader library can be loaded.
fn vulkan_loader_present() -> bool {
    #[cfg(unix)]
    {
        let names: &[&std::ffi::CStr] = &[c"libvulkan.so.1", c"libvulkan.so"];
        names.iter().any(|name| {
            // SAFETY: dlopen with a valid C string; the handle is closed at once.
            unsafe {
                let handle = libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL);
                if handle.is_null() {
                    false
                } else {
                    libc::dlclose(handle);
                    true
                }
            }
        })
    }
    #[cfg(not(unix))]
    {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn adapter(index: usize, name: &str, kind: AdapterKind) -> AdapterInfo {
        AdapterInfo {
            index,
            name: name.into(),
            api: "Vulkan".into(),
            driver: String::new(),
            kind,
        }
    }

    #[test]
    fn software_adapters_are_known_by_type_or_name() {
        assert!(adapter(0, "llvmpipe (LLVM 15.0.6, 256 bits)", AdapterKind::Cpu).is_software());
        assert!(adapter(0, "SwiftShader Device (LLVM 10.0.0)", AdapterKind::Other).is_software());
        assert!(!adapter(0, "AMD Radeon RX 7900 XTX", AdapterKind::Discrete).is_software());
    }

    #[test]
    fn auto_prefers_discrete_then_integrated_and_never_software() {
        let all = vec![
            adapter(0, "llvmpipe", AdapterKind::Cpu),
            adapter(1, "Intel(R) UHD Graphics 770", AdapterKind::Integrated),
            adapter(2, "AMD Radeon RX 7900 XTX", AdapterKind::Discrete),
        ];
        assert_eq!(best_hardware(&all).map(|a| a.index), Some(2));
        assert_eq!(best_hardware(&all[..2]).map(|a| a.index), Some(1));
        assert_eq!(best_hardware(&all[..1]), None, "software is never auto's");
        assert_eq!(best_any(&all[..1]).map(|a| a.index), Some(0));
        assert_eq!(best_any(&all).map(|a| a.index), Some(2));
    }

    #[test]
    fn an_adapter_is_counted_among_its_kind() {
        let all = vec![
            adapter(0, "a", AdapterKind::Discrete),
            adapter(1, "b", AdapterKind::Integrated),
            adapter(2, "c", AdapterKind::Discrete),
        ];
        assert_eq!(all[0].nth_of_kind(&all), 0);
        assert_eq!(all[1].nth_of_kind(&all), 0);
        assert_eq!(all[2].nth_of_kind(&all), 1);
    }

    #[test]
    fn the_listing_names_index_api_kind_and_software() {
        let mut lavapipe = adapter(0, "llvmpipe (LLVM 15)", AdapterKind::Cpu);
        lavapipe.driver = "llvmpipe Mesa 22.3.6".into();
        assert_eq!(
            lavapipe.to_string(),
            "wgpu:0 llvmpipe (LLVM 15) (Vulkan, CPU, driver llvmpipe Mesa 22.3.6, software)"
        );
    }
}
