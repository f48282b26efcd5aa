//! Criterion benchmarks of Quench; the benches live beside this file.
