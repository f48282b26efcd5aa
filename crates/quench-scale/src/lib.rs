//! Scale-out: the members of a run (SGLD chains, GAN matches, classifier seeds, meta-learning
//! tasks) split over processes, and the two collectives that join them again: a sum over
//! processes (the meta-gradient's all-reduce) and a gather onto rank 0 (the results).
//!
//! [`World::init`] gives one process ([`World::alone`]) unless the program was built with the
//! `mpi` feature and started by an MPI launcher (`mpirun`, `srun`), in which case every
//! process is a rank of MPI's world. Code written against [`World`] runs unchanged either way.

mod shard;
mod world;

pub use shard::Shard;
pub use world::{ScaleError, World, local_rank};
