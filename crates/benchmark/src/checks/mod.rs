//! The checks of a machine and a build, apart from the timed suites: `doctor` (what the
//! device can do: launch latency, copy rates, matmul throughput) and `verify` (every
//! workload's numbers against references on the chosen device).

pub mod doctor;
pub mod verify;
