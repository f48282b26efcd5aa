//! Host kernel of [`crate::ops::expmv`]: the final states without forming any propagator,
//! each task's state carried through its segments, `exp(A) v` as a truncated Taylor series of
//! matrix-vector products taken in `p` substeps of degree `m`, both chosen from the segment's
//! own 1-norm (the idea of Al-Mohy and Higham's `expmv`). A quiet segment costs a few
//! products of `n x n` by `n`, where the tensor form pays for the Taylor polynomial and
//! squarings of whole matrices sized for the largest amplitudes allowed, then a product tree.
//! Computed in f64 whatever the backend's float type, to that type's unit roundoff.

use std::sync::OnceLock;

use burn::tensor::Tensor;

use super::{ExactStates, GeneratorParts, real_norm_one, remainder_bound, unit_roundoff};
use crate::ops::QuenchOps;
use crate::readback::{float_tensor, to_host_f64};
use quench_host::lanes::in_lanes;

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
struct DegreeTable {
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
    fn for_roundoff(unit_roundoff: f64) -> &'static Self {
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
    fn reach(&self) -> f64 {
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
struct HostBatch {
    /// Amplitudes `[tasks, segments, controls]`.
    amplitudes: Vec<f64>,
    /// Rates `[tasks, jumps]`.
    rates: Vec<f64>,
    /// Initial states `[tasks, d^2]`.
    initial: Vec<f64>,
    /// The number of tasks.
    tasks: usize,
    /// The number of segments of every task.
    segments: usize,
}

/// The exact propagation of states on the host.
struct Propagation<'a> {
    /// The system's generators.
    generators: &'a GeneratorParts,
    /// Length of every segment (time units of the pulse).
    t_segment: f64,
    /// Amplitudes are clamped to `+-control_bound`, as the tensor form does.
    control_bound: f64,
    /// Rates are clamped to `[0, rate_bound]`, as the tensor form does.
    rate_bound: f64,
    /// Degrees for the backend's unit roundoff.
    table: &'static DegreeTable,
}

impl Propagation<'_> {
    /// The final states `[tasks, d^2]` of every task of `batch`, the tasks split over up to
    /// `lanes` threads.
    fn final_states(&self, batch: &HostBatch, lanes: usize) -> Vec<f64> {
        let n = self.generators.n;
        let jumps = self.generators.jumps.len();
        let per_task = batch.segments * self.generators.controls.len();
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
        let n = self.generators.n;
        let controls = self.generators.controls.len();
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

/// Fewest task-segments worth splitting over threads (each takes about 0.1 us).
const PER_THREAD: usize = 2048;

/// The final states `[tasks, n]` of `input` on the host, to the unit roundoff of the
/// backend's float type; `input` back when a segment's bound is beyond what the host plan
/// reaches.
pub(crate) fn exact_states<B: QuenchOps>(
    input: ExactStates<'_, B>,
) -> Result<Tensor<B, 2>, ExactStates<'_, B>> {
    let table = DegreeTable::for_roundoff(unit_roundoff(input.amplitudes.dtype()));
    if input.segment_bound > table.reach() {
        return Err(input);
    }
    let [tasks, segments, _] = input.amplitudes.dims();
    let device = input.amplitudes.device();
    let n = input.generators.n;
    let batch = HostBatch {
        amplitudes: to_host_f64(input.amplitudes),
        rates: to_host_f64(input.rates),
        initial: to_host_f64(input.initial),
        tasks,
        segments,
    };
    let propagation = Propagation {
        generators: input.generators,
        t_segment: input.t_segment,
        control_bound: input.control_bound,
        rate_bound: input.rate_bound,
        table,
    };
    let lanes = B::host_lanes().min((tasks * segments).div_ceil(PER_THREAD));
    let states = propagation.final_states(&batch, lanes);
    Ok(float_tensor::<B, f64, 2>(states, [tasks, n], &device))
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

    /// A rotation `dv/dt = M v` with `M = [[0, -1], [1, 0]]` (u = 1) turns `(1, 0)` by the
    /// angle `t`: the kernel's states within f64's roundoff (degree chosen for it, a handful of
    /// products), and a batch whose bound is beyond the table's reach comes back untouched.
    #[test]
    fn the_kernel_rotates_and_hands_back_what_it_cannot_reach() {
        use burn::backend::NdArray;
        let parts = GeneratorParts {
            n: 2,
            drift: vec![0.0; 4],
            controls: vec![vec![0.0, -1.0, 1.0, 0.0]],
            jumps: vec![],
        };
        let device = Default::default();
        let input = |segment_bound: f64| ExactStates::<NdArray<f64>> {
            generators: &parts,
            amplitudes: float_tensor(vec![1.0, 1.0, 0.5, 0.5], [2, 2, 1], &device),
            rates: Tensor::zeros([2, 0], &device),
            initial: float_tensor(vec![1.0, 0.0, 1.0, 0.0], [2, 2], &device),
            t_segment: 0.3,
            control_bound: 10.0,
            rate_bound: 0.0,
            segment_bound,
        };
        let states = to_host_f64(exact_states(input(3.0)).expect("within reach"));
        for (task, angle) in [(0, 0.6f64), (1, 0.3)] {
            let want = [angle.cos(), angle.sin()];
            for (got, want) in states[2 * task..2 * task + 2].iter().zip(want) {
                assert!(
                    (got - want).abs() < 1e-14,
                    "task {task}: {got} against {want}"
                );
            }
        }
        assert!(exact_states(input(f64::INFINITY)).is_err());
    }
}
