//! The host's memory bandwidth as the CPU kernels use it: streams over buffers well beyond
//! the last-level cache, read only and read-then-written in place (the traffic of an
//! optimizer's update: parameters and moments read and written back), split over lanes as
//! the host kernels split their work. `benchmark doctor` prints both beside the host GEMM,
//! the two roofs a host kernel is read against.

use crate::lanes::in_lanes;
use crate::math::lane_sum;

/// Which traffic a [`time_streams`] run makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Traffic {
    /// Every value of the three buffers read once (their sum).
    Read,
    /// Every value read and written back (`x = x c + 1`), as an Adam update moves its
    /// parameters and moments.
    Update,
}

crate::simd_dispatch! {
    /// The sum of `values` ([`lane_sum`]'s partial sums: read traffic only).
    fn read_sum(values: &[f32]) -> f32 => lane_sum
}

crate::simd_dispatch! {
    /// `x = x c + 1` for every value (each read and written once).
    fn update(values: &mut [f32], c: f32) => update_portable
}

#[inline(always)]
fn update_portable(values: &mut [f32], c: f32) {
    for v in values {
        *v = *v * c + 1.0;
    }
}

/// Runs `traffic` over three buffers of `bytes` bytes each, cut into `lanes` parts over the
/// host's threads, `repeats` times after one untimed run (which also maps the pages); returns
/// each run's bytes moved per second (a value read and written counts twice).
pub fn time_streams(traffic: Traffic, bytes: usize, lanes: usize, repeats: usize) -> Vec<f64> {
    let lanes = lanes.max(1);
    let len = (bytes / 4).max(lanes);
    let mut buffers: Vec<Vec<f32>> = (0..3).map(|_| vec![0.5f32; len]).collect();
    let part = len.div_ceil(lanes);
    let moved = match traffic {
        Traffic::Read => 3.0 * 4.0 * len as f64,
        Traffic::Update => 2.0 * 3.0 * 4.0 * len as f64,
    };
    let mut once = || {
        let jobs: Vec<&mut [f32]> = buffers
            .iter_mut()
            .flat_map(|b| b.chunks_mut(part))
            .collect();
        // Each lane takes a part of every buffer: jobs are buffer-major, so deal them out.
        let mut dealt: Vec<Vec<&mut [f32]>> = (0..lanes).map(|_| Vec::new()).collect();
        for (k, job) in jobs.into_iter().enumerate() {
            dealt[k % lanes].push(job);
        }
        let sums = in_lanes(dealt, lanes, |group| {
            let mut sum = 0.0f32;
            for parts in group {
                for part in parts {
                    match traffic {
                        Traffic::Read => sum += read_sum(part),
                        // Below one, so that the values stay bounded however many runs.
                        Traffic::Update => update(part, 0.5),
                    }
                }
            }
            sum
        });
        std::hint::black_box(sums);
    };
    once();
    (0..repeats.max(1))
        .map(|_| {
            let start = std::time::Instant::now();
            once();
            moved / start.elapsed().as_secs_f64().max(1e-9)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kernels_touch_every_value_and_the_rates_are_positive() {
        // Lengths around the 16-value chunks.
        for n in [0usize, 1, 15, 16, 17, 100] {
            let values: Vec<f32> = (0..n).map(|i| i as f32).collect();
            assert_eq!(
                read_sum(&values),
                (n * n.saturating_sub(1) / 2) as f32,
                "{n}"
            );
            let mut x = vec![2.0f32; n];
            update(&mut x, 0.5);
            assert!(x.iter().all(|&v| v == 2.0), "{n}: 2 x 0.5 + 1");
        }
        for traffic in [Traffic::Read, Traffic::Update] {
            for lanes in [1, 2, 3] {
                let rates = time_streams(traffic, 1 << 16, lanes, 2);
                assert_eq!(rates.len(), 2);
                assert!(
                    rates.iter().all(|r| r.is_finite() && *r > 0.0),
                    "{traffic:?}"
                );
            }
        }
    }
}
