//! Independent host work split over the cores: the one place that spawns the scoped threads
//! of the CPU backend's host kernels and per-lane tensor work.

/// Runs `work` on `jobs` cut into at most `lanes` consecutive groups of nearly equal count,
/// each group on its own scoped thread (on the calling thread when there is a single group),
/// and returns the groups' results in job order. A panic in a group is resumed on the caller
/// with its own payload.
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
    std::thread::scope(|scope| {
        let work = &work;
        let handles: Vec<_> = groups
            .into_iter()
            .map(|group| scope.spawn(move || work(group)))
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
            })
            .collect()
    })
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
        let threads = in_lanes(vec![(); 2], 2, |_| std::thread::current().id());
        assert_ne!(threads[0], threads[1], "two groups, two threads");
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
