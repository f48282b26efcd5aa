//! quench-data's end-to-end tests: the loader's guarantees and the readers on real files.

mod fashion_mnist;
mod loader;
