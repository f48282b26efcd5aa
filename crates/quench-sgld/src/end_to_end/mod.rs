//! quench-sgld's end-to-end tests: the grid end to end and the sampler against known
//! posteriors, through the public items.

mod grid;
mod sampler;
