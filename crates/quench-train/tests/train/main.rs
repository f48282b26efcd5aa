//! quench-train's integration tests: the workloads end to end.
//!
//! One binary for the crate's integration tests (each file a module): the generic code is
//! compiled and linked once for all of them rather than once per file.

mod hybrid;
mod meta;
mod qrng_classifier;
mod qrng_configs;
mod qrng_distinguish;
mod qrng_gan;
mod sgld_grid;
mod sgld_sampler;
mod temporal;
