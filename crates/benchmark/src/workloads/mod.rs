//! The registered workloads, in the order suites run them.

mod device;
mod loader;

use crate::workload::Workload;

/// Every workload the benchmark knows.
pub fn registry() -> Vec<Box<dyn Workload>> {
    vec![
        Box::new(device::DeviceFigures),
        Box::new(loader::LoaderWorkload),
    ]
}
