//! quench-qrng's end-to-end tests: the three analyses and the shipped configurations,
//! through the public items.

mod classifier;
mod configs;
mod distinguish;
mod gan;
