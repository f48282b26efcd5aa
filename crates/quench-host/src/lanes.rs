//! Independent host work split over the cores: the one place that starts the parallel work
//! of the CPU backend's host kernels and per-lane tensor work.

use std::sync::{Mutex, OnceLock, PoisonError};

use rayon::prelude::*;

/// The cores available to the process, asked once: the standard library reads the cgroup
/// quota files on every call, which cost a tenth of a small MLP's epoch when each layer asked.
pub fn host_cores() -> usize {
    static CORES: OnceLock<usize> = OnceLock::new();
    *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// Multiply-adds below which a host kernel runs on one thread: a thread's start costs about
/// as much as a million of them.
const SPLIT_FROM: usize = 1 << 21;

/// The lanes for `work` multiply-adds: one below `SPLIT_FROM` (2^21), else every core.
pub fn lanes_for(work: usize) -> usize {
    if work < SPLIT_FROM { 1 } else { host_cores() }
}

/// Runs `work` on `jobs` cut into at most `lanes` consecutive groups of nearly equal count,
/// the groups in parallel on rayon's pool (the CPU backend's threads, started once; a thread
/// per call cost as much as a small layer's product), on the calling thread when there is a
/// single group, and returns the groups' results in job order. A panic in a group is resumed
/// on the caller with its own payload.
pub fn in_lanes<J: Send, T: Send>(
    jobs: Vec<J>,
    lanes: usize,
    work: impl Fn(Vec<J>) -> T + Sync,
) -> Vec<T> {
    let lanes = lanes.clamp(1, jobs.len().max(1));
    if lanes == 1 {
        return vec![work(jobs)];
    }
    let per_lane = jobs.len().div_ceil(lanes);
    let mut jobs = jobs.into_iter().peekable();
    let mut groups = Vec::with_capacity(lanes);
    while jobs.peek().is_some() {
        groups.push(jobs.by_ref().take(per_lane).collect::<Vec<J>>());
    }
    // One rayon job per group, so that each group runs whole on one thread.
    let work = &work;
    groups.into_par_iter().with_max_len(1).map(work).collect()
}

/// Runs `work` on a thread of the pool that whole runs go to, and returns its result, the
/// caller waiting. A run on the CPU backend goes through here (`quench_kernels::run_on`):
/// from inside a pool each parallel piece of work is split as a join (the thread that asks
/// takes a share itself; only the pool's other threads are woken, and those still spinning
/// from the last piece need no waking), where a caller outside hands every piece over, sleeps
/// and is woken when it is done, two switches of threads per host kernel.
///
/// The runs' pool is not rayon's global one, and one run is in it at a time (a second caller
/// waits; a call from inside a run runs in place): a worker waiting for a piece of work runs
/// other queued jobs meanwhile, so a whole run queued beside the pieces of another could be
/// started on top of a piece that the other run's thread waits for, and block there on a lock
/// that thread holds (Burn's autodiff graph). The pieces themselves take no locks. Where the
/// pool cannot be started the work runs on the caller. The work's values do not depend on the
/// thread it runs on; a panic in it is resumed on the caller.
pub fn on_host_threads<R: Send>(work: impl FnOnce() -> R + Send) -> R {
    static ONE_RUN: Mutex<()> = Mutex::new(());
    match runs_pool() {
        Some(pool) if pool.current_thread_index().is_none() => {
            let _one = ONE_RUN.lock().unwrap_or_else(PoisonError::into_inner);
            pool.install(work)
        }
        _ => work(),
    }
}

/// Whether this thread works for a run ([`on_host_threads`]): a run started here goes on in
/// place.
pub fn in_a_run() -> bool {
    runs_pool().is_some_and(|pool| pool.current_thread_index().is_some())
}

/// The pool whole runs go to, started on first use; `None` where it cannot be started.
fn runs_pool() -> Option<&'static rayon::ThreadPool> {
    /// Callers' threads have the platform's main-thread stack (8 MiB); rayon's default is 2.
    const STACK: usize = 8 << 20;
    static POOL: OnceLock<Option<rayon::ThreadPool>> = OnceLock::new();
    POOL.get_or_init(|| {
        rayon::ThreadPoolBuilder::new()
            .thread_name(|i| format!("quench-run-{i}"))
            .stack_size(STACK)
            .build()
            .ok()
    })
    .as_ref()
}

/// `buffer` cut into `count` pieces of `len` values, one per job (`len` may be zero: `count`
/// empty pieces, where `chunks_exact_mut` would panic).
pub fn pieces<T>(buffer: &mut [T], count: usize, len: usize) -> Vec<&mut [T]> {
    if len == 0 {
        return (0..count).map(|_| <&mut [T]>::default()).collect();
    }
    buffer.chunks_exact_mut(len).take(count).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn work_runs_in_the_runs_pool_one_run_at_a_time_and_splits_from_there() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        assert_eq!(rayon::current_thread_index(), None, "tests run outside");
        let running = AtomicUsize::new(0);
        let run = || {
            on_host_threads(|| {
                assert_eq!(
                    running.fetch_add(1, Ordering::SeqCst),
                    0,
                    "one run at a time"
                );
                let inside = rayon::current_thread_index().is_some();
                let name = std::thread::current().name().map(str::to_owned);
                // A run inside a run goes on in place (waiting for the first would never end).
                let nested = on_host_threads(|| std::thread::current().id());
                let sums = in_lanes((1..=8).collect(), 2, |group: Vec<u32>| {
                    group.iter().sum::<u32>()
                });
                std::thread::sleep(std::time::Duration::from_millis(20));
                running.fetch_sub(1, Ordering::SeqCst);
                (inside, name, nested == std::thread::current().id(), sums)
            })
        };
        let (a, b) = std::thread::scope(|s| {
            let a = s.spawn(run);
            let b = s.spawn(run);
            (a.join(), b.join())
        });
        for result in [a, b] {
            let (inside, name, nested_in_place, sums) = result.expect("a run panicked");
            assert!(inside, "the work ran on a pool's thread");
            assert!(
                name.is_some_and(|n| n.starts_with("quench-run-")),
                "the runs' own pool, not rayon's global one"
            );
            assert!(nested_in_place);
            assert_eq!(
                sums,
                [10, 26],
                "lanes from inside the pool keep their order"
            );
        }
    }

    #[test]
    fn groups_cover_every_job_once_in_order() {
        for (jobs, lanes) in [(0usize, 2usize), (1, 4), (5, 2), (7, 3), (8, 8), (3, 0)] {
            let groups = in_lanes((0..jobs).collect(), lanes, |group| group);
            assert!(groups.len() <= lanes.max(1), "{jobs} jobs, {lanes} lanes");
            let flat: Vec<usize> = groups.concat();
            assert_eq!(flat, (0..jobs).collect::<Vec<_>>());
        }
        // Groups run at once where rayon's pool has two threads: each waits for the other
        // to start.
        if rayon::current_num_threads() >= 2 {
            let started = std::sync::atomic::AtomicUsize::new(0);
            let waited = in_lanes(vec![(); 2], 2, |_| {
                started.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let begin = std::time::Instant::now();
                while started.load(std::sync::atomic::Ordering::SeqCst) < 2 {
                    if begin.elapsed() > std::time::Duration::from_secs(10) {
                        return false;
                    }
                    std::hint::spin_loop();
                }
                true
            });
            assert_eq!(waited, vec![true, true], "two groups in parallel");
        }
        assert_eq!(host_cores(), host_cores());
    }

    #[test]
    #[should_panic(expected = "job 3")]
    fn a_panic_in_a_lane_reaches_the_caller() {
        in_lanes((0..4).collect(), 2, |group: Vec<i32>| {
            if group.contains(&3) {
                panic!("job 3");
            }
        });
    }
}
