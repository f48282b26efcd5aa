//! Independent host work split over the cores: the one place that starts the parallel work
//! of the CPU backend's host kernels and per-lane tensor work.

use std::sync::OnceLock;

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

/// The lanes for `work` multiply-adds: one below [`SPLIT_FROM`], else every core.
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
