//! Burn tensor helpers every Quench crate uses, with no operation of the seam in them:
//! reshapes and reductions that every backend computes right ([`views`], [`reductions`]: Burn
//! 0.21's CubeCL backends get some of its own wrong), the one place where device values are
//! read back, counted ([`readback`]), Burn's seeded generator held by one caller at a time
//! ([`generator`]), and what tests of tensor code share ([`checks`]). `quench_kernels` forwards
//! each module under the same name; their checks on a device are quench-device's (`agreement`)
//! and quench-kernels' (`ops::view`).

pub mod checks;
pub mod generator;
pub mod readback;
pub mod reductions;
pub mod views;

pub use generator::SeededGenerator;
