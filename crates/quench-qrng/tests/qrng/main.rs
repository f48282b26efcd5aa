//! quench-qrng's integration tests: the three analyses and the shipped configurations, as one
//! binary (the generic code is compiled and linked once for all of them).

mod classifier;
mod configs;
mod distinguish;
mod gan;
