//! quench-data's integration tests: the loader's guarantees and the readers on real files.
//!
//! One binary for the crate's integration tests (each file a module): the generic code is
//! compiled and linked once for all of them rather than once per file.

mod fashion_mnist;
mod loader;
