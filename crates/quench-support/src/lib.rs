//! What every Quench crate and program shares that has nothing to do with Burn: TOML
//! configuration loading ([`config`]), JSON documents that refuse a key given twice
//! ([`json`]), bounded reads, atomic writes and folder locks ([`files`]), memory and work budgets ([`budget`]), the examples' shared flags ([`cli`]), numbers and long values as messages print them ([`numbers`], [`excerpt`]), sample statistics ([`stats`]) and the aligned
//! allocator each program chooses ([`allocator`], [`aligned_allocator!`]).

pub mod allocator;
pub mod budget;
pub mod cli;
pub mod config;
pub mod excerpt;
pub mod files;
pub mod interrupt;
pub mod json;
pub mod numbers;
pub mod stats;

pub use config::{ConfigError, load_toml};
pub use stats::Stats;

#[cfg(test)]
aligned_allocator!();
