//! quench-sgld's integration tests: the grid end to end and the sampler against known
//! posteriors, as one binary (the generic code is compiled and linked once for both).

mod grid;
mod sampler;
