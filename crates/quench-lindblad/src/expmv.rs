//! The exact solver's final states on the host, without forming any propagator: each task's
//! state is carried through its segments, `exp(A) v` as a truncated Taylor series of
//! matrix-vector products taken in `p` substeps of degree `m`, both chosen from the segment's
//! own 1-norm (the idea of Al-Mohy and Higham's `expmv`). A quiet segment costs a few
//! products of `d^2 x d^2` by `d^2`, where the tensor form pays for the Taylor polynomial and
//! squarings of whole matrices sized for the largest amplitudes allowed, then a product tree.
//! Computed in f64 whatever the backend's float type, to that type's unit roundoff.

use std::sync::OnceLock;

use quench_kernels::host::lanes::in_lanes;

use crate::exponential::remainder_bound;
use crate::generators::{HostGenerators, real_norm_one};

/// Highest Taylor degree considered. The most efficient degree (largest reach per product)
/// is about 10 for f32's roundoff and 20 for f64's, well inside it.
const MAX_DEGREE: usize = 40;

/// Most substeps one segment may take; [`DegreeTable::reach`] is the largest norm that they
/// cover, and the solver only calls this kernel for segments whose norm bound is within it.
const MAX_SUBSTEPS: usize = 1 << 12;

/// For every degree `m`, the largest norm `theta_m` of `A` for which the Taylor series of
/// `exp(A)` cut after degree `m` is within the unit roundoff (the bound of
/// [`remainder_bound`], relative to `||v||`).
#[derive(Debug)]
pub(crate) struct DegreeTable {
    /// `theta[m - 1]` for `m = 1 ..= MAX_DEGREE`, increasing.
    theta: Vec<f64>,
    /// The degree of largest `theta_m / m`, used for every substep of a large norm.
    efficient: usize,
}

impl DegreeTable {
    fn new(unit_roundoff: f64) -> Self {
        let theta: Vec<f64> = (1..=MAX_DEGREE)
            .map(|m| {
                // The bound grows with the norm: bracket the crossing, then bisect.
                let mut high = 1.0;
                while remainder_bound(high, m) <= unit_roundoff {
                    high *= 2.0;
                }
                let mut low = 0.0;
                for _ in 0..64 {
                    let middle = 0.5 * (low + high);
                    if remainder_bound(middle, m) <= unit_roundoff {
                        low = middle;
                    } else {
                        high = middle;
                    }
                }
                low
            })
            .collect();
        let efficient = (1..=MAX_DEGREE)
            .max_by(|&a, &b| (theta[a - 1] / a as f64).total_cmp(&(theta[b - 1] / b as f64)))
            .unwrap_or(MAX_DEGREE);
        Self { theta, efficient }
    }

    /// The table for `unit_roundoff`, built once per process for f32's and f64's.
    pub(crate) fn for_roundoff(unit_roundoff: f64) -> &'static Self {
        static SINGLE: OnceLock<DegreeTable> = OnceLock::new();
        static DOUBLE: OnceLock<DegreeTable> = OnceLock::new();
        let cell = if unit_roundoff < 1e-10 {
            &DOUBLE
        } else {
            &SINGLE
        };
        cell.get_or_init(|| Self::new(unit_roundoff))
    }

    /// The largest 1-norm whose exponential's action [`Self::plan`] covers to the roundoff.
    pub(crate) fn reach(&self) -> f64 {
        self.theta[self.efficient - 1] * MAX_SUBSTEPS as f64
    }

    /// Substeps `p` and degree `m` for a matrix of 1-norm `norm`: a single substep of the
    /// lowest sufficient degree up to the efficient degree's reach, beyond it as many
    /// substeps of that reach as needed, each of the lowest degree covering `norm / p`.
    /// A NaN norm gets one product, so that the NaN reaches the state.
    fn plan(&self, norm: f64) -> (usize, usize) {
        if norm == 0.0 {
            return (1, 0);
        }
        if norm.is_nan() {
            return (1, 1);
        }
        let covering = |part: f64| (self.theta.partition_point(|&t| t < part) + 1).min(MAX_DEGREE);
        let reach = self.theta[self.efficient - 1];
        if norm <= reach {
            (1, covering(norm))
        } else {
            let substeps = ((norm / reach).ceil() as usize).min(MAX_SUBSTEPS);
            (substeps, covering(norm / substeps as f64))
        }
    }
}

/// One batch in host memory, row-major, in f64.
pub(crate) struct HostBatch {
    /// Amplitudes `[tasks, segments, controls]`.
    pub(crate) amplitudes: Vec<f64>,
    /// Rates `[tasks, jumps]`.
    pub(crate) rates: Vec<f64>,
    /// Initial states `[tasks, d^2]`.
    pub(crate) initial: Vec<f64>,
    /// The number of tasks.
    pub(crate) tasks: usize,
    /// The number of segments of every task.
    pub(crate) segments: usize,
}

/// The exact propagation of states on the host.
pub(crate) struct Propagation<'a> {
    /// The system's generators.
    pub(crate) generators: &'a HostGenerators,
    /// Length of every segment (time units of the pulse).
    pub(crate) t_segment: f64,
    /// Amplitudes are clamped to `+-control_bound`, as the tensor form does.
    pub(crate) control_bound: f64,
    /// Rates are clamped to `[0, rate_bound]`, as the tensor form does.
    pub(crate) rate_bound: f64,
    /// Degrees for the backend's unit roundoff.
    pub(crate) table: &'static DegreeTable,
}

impl Propagation<'_> {
    /// The final states `[tasks, d^2]` of every task of `batch`, the tasks split over up to
    /// `lanes` threads.
    pub(crate) fn final_states(&self, batch: &HostBatch, lanes: usize) -> Vec<f64> {
        let n = self.generators.size();
        let jumps = self.generators.jumps();
        let per_task = batch.segments * self.generators.controls();
        in_lanes((0..batch.tasks).collect(), lanes, |tasks| {
            let mut states = Vec::with_capacity(tasks.len() * n);
            for task in tasks {
                states.extend(self.task_state(
                    &batch.amplitudes[task * per_task..(task + 1) * per_task],
                    &batch.rates[task * jumps..(task + 1) * jumps],
                    &batch.initial[task * n..(task + 1) * n],
                    batch.segments,
                ));
            }
            states
        })
        .concat()
    }

    /// The final state of one task: `amplitudes` `[segments, controls]`, `rates` `[jumps]`,
    /// `initial` `[d^2]`.
    fn task_state(
        &self,
        amplitudes: &[f64],
        rates: &[f64],
        initial: &[f64],
        segments: usize,
    ) -> Vec<f64> {
        let n = self.generators.size();
        let controls = self.generators.controls();
        let rates: Vec<f64> = rates
            .iter()
            .map(|r| r.clamp(0.0, self.rate_bound))
            .collect();
        let mut fixed = vec![0.0; n * n];
        self.generators.fixed_part_into(&rates, &mut fixed);
        let mut generator = vec![0.0; n * n];
        let mut clamped = vec![0.0; controls];
        let mut state = initial.to_vec();
        let (mut term, mut next) = (vec![0.0; n], vec![0.0; n]);
        for segment in 0..segments {
            let row = &amplitudes[segment * controls..(segment + 1) * controls];
            clamped.iter_mut().zip(row).for_each(|(c, &u)| {
                *c = u.clamp(-self.control_bound, self.control_bound);
            });
            self.generators
                .with_controls_into(&fixed, &clamped, &mut generator);
            let (substeps, degree) = self
                .table
                .plan(real_norm_one(&generator, n) * self.t_segment);
            let step = self.t_segment / substeps as f64;
            for _ in 0..substeps {
                // state <- sum_{k <= degree} (A^k / k!) state, with A = M step.
                term.copy_from_slice(&state);
                for k in 1..=degree {
                    let factor = step / k as f64;
                    for (out, row) in next.iter_mut().zip(generator.chunks_exact(n)) {
                        *out = factor * row.iter().zip(&term).map(|(a, b)| a * b).sum::<f64>();
                    }
                    std::mem::swap(&mut term, &mut next);
                    state.iter_mut().zip(&term).for_each(|(s, t)| *s += t);
                }
            }
        }
        state
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn degrees_grow_with_the_norm_and_meet_the_roundoff() {
        for roundoff in [2f64.powi(-24), 2f64.powi(-53)] {
            let table = DegreeTable::new(roundoff);
            assert!(table.theta.windows(2).all(|w| w[0] < w[1]), "{table:?}");
            let mut last = (1, 0);
            for norm in [1e-6, 0.01, 0.3, 1.0, 2.5, 10.0, 100.0, 1e4] {
                let (substeps, degree) = table.plan(norm);
                let cost = substeps * degree;
                assert!(cost >= last.0 * last.1, "{norm}: {cost} after {last:?}");
                assert!(
                    remainder_bound(norm / substeps as f64, degree) <= roundoff,
                    "{norm}: ({substeps}, {degree})"
                );
                last = (substeps, degree);
            }
            assert!(table.reach() > 1e4);
        }
        let single = DegreeTable::for_roundoff(2f64.powi(-24));
        assert_eq!(single.plan(0.0), (1, 0));
        assert_eq!(single.plan(f64::NAN), (1, 1), "a NaN must reach the state");
        // A quiet one-qubit segment (|u| ~ 0.3, t_seg 0.05) takes a handful of products.
        assert!(single.plan(0.05).1 <= 5, "{:?}", single.plan(0.05));
    }
}
