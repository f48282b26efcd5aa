//! The registered workloads, in the order suites run them.

mod device;

use crate::workload::Workload;

/// Every workload the benchmark knows.
pub fn registry() -> Vec<Box<dyn Workload>> {
    vec![Box::new(device::DeviceFigures)]
}
