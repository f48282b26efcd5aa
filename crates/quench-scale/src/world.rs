//! The processes of a run: one alone, or MPI's world.

use crate::Shard;

/// Why the processes could not be joined.
#[derive(Debug, thiserror::Error)]
pub enum ScaleError {
    /// An MPI launcher started this process but MPI would not initialise.
    #[error("started by an MPI launcher ({variable} is set) but MPI did not initialise")]
    Init {
        /// The launcher's variable that was found.
        variable: &'static str,
    },
    /// The MPI library does not allow calls from threads other than the one that initialised
    /// it.
    #[error(
        "the MPI library provides thread level {provided}; Quench needs Serialized (calls \
         from any thread, one at a time): use an MPI built with thread support"
    )]
    Threading {
        /// The level MPI provided.
        provided: String,
    },
    /// The program was started by an MPI launcher but built without MPI.
    #[error(
        "started by an MPI launcher ({variable} is set) but built without the `mpi` feature: \
         every rank would run the whole job; rebuild with `--features mpi`"
    )]
    NotBuilt {
        /// The launcher's variable that was found.
        variable: &'static str,
    },
    /// A rank's part is larger than MPI can count.
    #[error("rank {rank}: {len} bytes to gather, more than MPI counts ({max})")]
    TooLarge {
        /// The rank.
        rank: usize,
        /// Its byte count.
        len: usize,
        /// MPI's limit (`i32::MAX`).
        max: i32,
    },
}

/// Variables set by the launchers Quench knows (Open MPI's mpirun, Hydra and Slurm's PMI,
/// PMIx), which say that this process is one rank of several.
const LAUNCHER_VARIABLES: [&str; 3] = ["OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"];

/// Variables that give the rank among the processes of one node, for picking that node's
/// GPU `cuda:{local rank}`.
const LOCAL_RANK_VARIABLES: [&str; 3] = [
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "MPI_LOCALRANKID",
    "SLURM_LOCALID",
];

/// This process's rank among the processes of its node, where the launcher says it.
pub fn local_rank() -> Option<usize> {
    LOCAL_RANK_VARIABLES
        .iter()
        .find_map(|v| std::env::var(v).ok()?.parse().ok())
}

/// The launcher variable that is set, if any.
fn launcher() -> Option<&'static str> {
    LAUNCHER_VARIABLES
        .into_iter()
        .find(|v| std::env::var_os(v).is_some())
}

/// The processes of a run and their collectives. Every rank must make the same calls in the
/// same order, as in MPI.
pub struct World {
    inner: Inner,
}

impl std::fmt::Debug for World {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let shard = self.shard();
        write!(f, "World(rank {} of {})", shard.rank, shard.ranks)
    }
}

enum Inner {
    Alone,
    #[cfg(feature = "mpi")]
    Mpi(Mpi),
}

/// MPI's world communicator, for calls from any thread one at a time.
#[cfg(feature = "mpi")]
struct Mpi {
    // Finalises MPI when dropped; kept for the communicator's lifetime.
    _universe: mpi::environment::Universe,
    world: mpi::topology::SimpleCommunicator,
    /// This rank and the world's size, asked once.
    shard: Shard,
    /// Held around every call into MPI: the thread level asked for (`Serialized`) allows
    /// calls from any thread but not at the same time.
    calls: std::sync::Mutex<()>,
}

// SAFETY: `World::init` initialises MPI at thread level `Serialized` or above (it fails
// otherwise), under which any thread may call MPI as long as no two calls overlap, and every
// call through a shared `Mpi` holds `calls`. `Mpi` is not `Send`: MPI is finalised where the
// world is dropped, the thread that initialised it.
#[cfg(feature = "mpi")]
unsafe impl Sync for Mpi {}

#[cfg(feature = "mpi")]
impl Mpi {
    /// The communicator, MPI held for this thread until the guard is dropped.
    fn world(
        &self,
    ) -> (
        &mpi::topology::SimpleCommunicator,
        std::sync::MutexGuard<'_, ()>,
    ) {
        let guard = self
            .calls
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        (&self.world, guard)
    }
}

impl World {
    /// One process.
    pub fn alone() -> Self {
        Self {
            inner: Inner::Alone,
        }
    }

    /// MPI's world when an MPI launcher started this process (and the `mpi` feature is
    /// built), else one process. A launcher without the feature is an error, not a silent
    /// N-fold repetition of the job.
    pub fn init() -> Result<Self, ScaleError> {
        let Some(variable) = launcher() else {
            return Ok(Self::alone());
        };
        #[cfg(feature = "mpi")]
        {
            use mpi::topology::Communicator as _;
            // A CPU run goes on one of the host kernels' threads (`quench_kernels::run_on`),
            // not the thread that initialised MPI: MPI must allow calls from any thread, one
            // at a time.
            let (universe, provided) = mpi::initialize_with_threading(mpi::Threading::Serialized)
                .ok_or(ScaleError::Init { variable })?;
            if !matches!(
                provided,
                mpi::Threading::Serialized | mpi::Threading::Multiple
            ) {
                return Err(ScaleError::Threading {
                    provided: format!("{provided:?}"),
                });
            }
            let world = universe.world();
            if world.size() == 1 {
                return Ok(Self::alone());
            }
            let shard = Shard {
                rank: world.rank() as usize,
                ranks: world.size() as usize,
            };
            Ok(Self {
                inner: Inner::Mpi(Mpi {
                    _universe: universe,
                    world,
                    shard,
                    calls: std::sync::Mutex::new(()),
                }),
            })
        }
        #[cfg(not(feature = "mpi"))]
        {
            // `mpirun -n 1` is one process: nothing to join.
            if ["OMPI_COMM_WORLD_SIZE", "PMI_SIZE"]
                .iter()
                .any(|v| std::env::var(v).is_ok_and(|n| n == "1"))
            {
                return Ok(Self::alone());
            }
            Err(ScaleError::NotBuilt { variable })
        }
    }

    /// This process's rank and the number of ranks.
    pub fn shard(&self) -> Shard {
        match &self.inner {
            Inner::Alone => Shard::ALONE,
            #[cfg(feature = "mpi")]
            Inner::Mpi(mpi) => mpi.shard,
        }
    }

    /// Replaces `values` on every rank by their sum over the ranks (an all-reduce).
    pub fn sum(&self, values: &mut [f64]) {
        self.sum_of(values);
    }

    /// [`sum`](Self::sum) in single precision: half the bytes, for sums whose terms are f32
    /// already (gradients).
    pub fn sum_f32(&self, values: &mut [f32]) {
        self.sum_of(values);
    }

    #[cfg(feature = "mpi")]
    fn sum_of<T: mpi::datatype::Equivalence + Copy>(&self, values: &mut [T]) {
        match &self.inner {
            Inner::Alone => {}
            Inner::Mpi(mpi) => {
                use mpi::collective::{CommunicatorCollectives as _, SystemOperation};
                let (world, _calls) = mpi.world();
                let mine = values.to_vec();
                world.all_reduce_into(&mine[..], values, SystemOperation::sum());
            }
        }
    }

    #[cfg(not(feature = "mpi"))]
    fn sum_of<T>(&self, _values: &mut [T]) {}

    /// Returns once every rank has called it (a barrier): what separates waiting for the
    /// slowest rank from the cost of a collective in timings.
    pub fn wait_for_all(&self) {
        match &self.inner {
            Inner::Alone => {}
            #[cfg(feature = "mpi")]
            Inner::Mpi(mpi) => {
                use mpi::collective::CommunicatorCollectives as _;
                let (world, _calls) = mpi.world();
                world.barrier();
            }
        }
    }

    /// Every rank's `bytes`, in rank order, on rank 0 (`None` on the other ranks).
    pub fn gather(&self, bytes: &[u8]) -> Result<Option<Vec<Vec<u8>>>, ScaleError> {
        match &self.inner {
            Inner::Alone => Ok(Some(vec![bytes.to_vec()])),
            #[cfg(feature = "mpi")]
            Inner::Mpi(mpi) => {
                use mpi::collective::Root as _;
                use mpi::datatype::PartitionMut;
                use mpi::topology::Communicator as _;
                let shard = mpi.shard;
                let (world, _calls) = mpi.world();
                let len = i32::try_from(bytes.len()).map_err(|_| ScaleError::TooLarge {
                    rank: shard.rank,
                    len: bytes.len(),
                    max: i32::MAX,
                })?;
                let root = world.process_at_rank(0);
                if !shard.is_root() {
                    root.gather_into(&len);
                    root.gather_varcount_into(bytes);
                    return Ok(None);
                }
                let mut counts = vec![0_i32; shard.ranks];
                root.gather_into_root(&len, &mut counts[..]);
                let displs: Vec<i32> = counts
                    .iter()
                    .scan(0_i32, |at, &n| {
                        let start = *at;
                        *at = at.saturating_add(n);
                        Some(start)
                    })
                    .collect();
                let total: usize = counts.iter().map(|&n| n as usize).sum();
                let mut all = vec![0_u8; total];
                let mut partition = PartitionMut::new(&mut all[..], &counts[..], &displs[..]);
                root.gather_varcount_into_root(bytes, &mut partition);
                Ok(Some(
                    counts
                        .iter()
                        .zip(&displs)
                        .map(|(&n, &at)| all[at as usize..(at + n) as usize].to_vec())
                        .collect(),
                ))
            }
        }
    }

    /// Stops every rank of the run after saying, on this rank's standard error, which rank
    /// failed and why; a lone process exits with status 1. Used when one rank fails so that
    /// the others do not wait for it forever.
    pub fn stop_all(&self, why: &str) -> ! {
        let shard = self.shard();
        // One write of the whole line, so that other ranks' output cannot cut into it.
        let line = format!("error: rank {} of {}: {why}\n", shard.rank, shard.ranks);
        let _ = std::io::Write::write_all(&mut std::io::stderr().lock(), line.as_bytes());
        match &self.inner {
            Inner::Alone => std::process::exit(1),
            #[cfg(feature = "mpi")]
            Inner::Mpi(mpi) => {
                use mpi::topology::Communicator as _;
                let (world, _calls) = mpi.world();
                world.abort(1)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alone_sums_and_gathers_its_own_values() {
        let world = World::alone();
        assert_eq!(world.shard(), Shard::ALONE);
        let mut v = [1.0, 2.5];
        world.sum(&mut v);
        assert_eq!(v, [1.0, 2.5]);
        let mut w = [3.0_f32];
        world.sum_f32(&mut w);
        assert_eq!(w, [3.0]);
        assert_eq!(world.gather(b"abc").unwrap(), Some(vec![b"abc".to_vec()]));
    }
}
