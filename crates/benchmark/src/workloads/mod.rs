//! The registered workloads, in the order suites run them.

mod device;
mod hybrid;
mod lindblad;
mod loader;
mod qrng;
mod sgld;
mod temporal;

use crate::workload::Workload;

/// Every workload the benchmark knows.
pub fn registry() -> Vec<Box<dyn Workload>> {
    vec![
        Box::new(device::DeviceFigures),
        Box::new(loader::LoaderWorkload),
        Box::new(qrng::QrngDistinguish),
        Box::new(qrng::QrngGan),
        Box::new(qrng::QrngClassifier),
        Box::new(lindblad::LindbladMeta),
        Box::new(sgld::SgldGrid),
        Box::new(hybrid::Hybrid),
        Box::new(temporal::Temporal::<0>),
        Box::new(temporal::Temporal::<1>),
        Box::new(temporal::Temporal::<2>),
    ]
}
