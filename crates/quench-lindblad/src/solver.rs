//! Batched solvers: all tasks and segments at once, differentiable with respect to the
//! amplitudes and the rates.
//!
//! Every method first forms the generators of all tasks and segments with one matrix product
//! of their coefficients `[1, u, gamma]` against the cached generator stack, then:
//! - `Euler { dt }` and `Rk4 { dt }` build each segment's step matrix (`I + hM`, or the
//!   degree-4 Taylor polynomial of `hM`, which is what the classical RK4 stages compute for a
//!   linear, constant right-hand side) and apply it `substeps` times per segment, one batched
//!   product per substep, with the guide's `substeps = max(1, floor(t_seg / dt))` and
//!   `h = t_seg / substeps`; a call that would take more than [`Solver::max_substeps`]
//!   substeps in all (segments x substeps) is refused before any work;
//! - `Exact` exponentiates every segment's generator, a Taylor polynomial of `M t / 2^s`
//!   and `s` squarings with the degree and `s` chosen on the host from the bounds (so nothing
//!   is read back). When only the states are asked for, the seam's
//!   [`QuenchOps::exact_states`] takes them: on the CPU backend without autodiff (evaluation,
//!   pulse documents, forward sweeps) a host kernel carries each task's state through its
//!   segments with no propagator formed (`quench_kernels::ops::expmv`: 17x faster at 4,096
//!   tasks on two cores); elsewhere, and under autodiff, the seam's propagation
//!   (`quench_kernels::ops::propagate`) forms each segment's propagator and carries the state
//!   through them in one differentiable operation (four launches, forward and back, on a
//!   CubeCL device). When the propagators are asked for too, the segments' propagators are
//!   multiplied in a balanced product tree of batched products.

use burn::tensor::{Int, Tensor, TensorData};
use quench_kernels::ops::expmv::{ExactStates, exact_states, unit_roundoff};
use quench_kernels::ops::propagate::propagate;
use quench_kernels::readback::to_host_f32;
use quench_kernels::reductions::Reduce;
use quench_kernels::views::ReshapeTo;
use quench_kernels::{QuenchOps, precise_matmul};
use serde::{Deserialize, Serialize};

use crate::batched::{ProductTree, apply, identity, matmul, polynomial};
use crate::exponential::TaylorPlan;
use crate::generators::GeneratorNorms;
use crate::{Generators, LindbladError};

/// The integration method.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Method {
    /// Forward Euler with step at most `dt` (time units of the pulse).
    Euler {
        /// Requested step; each segment takes `max(1, floor(t_seg / dt))` equal steps.
        dt: f64,
    },
    /// Classical fourth-order Runge-Kutta with step at most `dt`.
    Rk4 {
        /// Requested step; each segment takes `max(1, floor(t_seg / dt))` equal steps.
        dt: f64,
    },
    /// The exact propagator of each piecewise-constant segment (to rounding).
    Exact,
}

impl Method {
    /// What to change when a run with this method ends in a state that is not physical.
    pub(crate) fn unphysical_hint(self) -> &'static str {
        match self {
            Self::Exact => "the numbers overflowed: amplitudes, rates or t_total are too large",
            Self::Euler { .. } | Self::Rk4 { .. } => {
                "the step is too large for these amplitudes and rates (try a smaller dt), or so \
                 small that f32 rounding builds up over its many substeps (try a larger dt), or \
                 the numbers overflowed; the exact method has none of the three"
            }
        }
    }

    /// The method called `name` (`exact`, `rk4` or `euler`), the steppers with the step `dt`
    /// (in the time units of the pulse; ignored by `exact`): the one reading of a method's name
    /// for the pulse documents and the Python package.
    ///
    /// # Errors
    /// [`LindbladError::Input`] naming `method` for another name, and `dt` when a stepper has
    /// none.
    pub fn named(name: &str, dt: Option<f64>) -> Result<Self, LindbladError> {
        // The step's value is checked with the other settings ([`Solver::validate`]).
        let step = || {
            dt.ok_or_else(|| {
                LindbladError::input(
                    "dt",
                    format!(
                        "missing: method \"{name}\" needs a step (in the time units of t_total)"
                    ),
                )
            })
        };
        match name {
            // The exact method takes no step; one given anyway is still a number the caller
            // meant, and NaN or a negative step is a mistake worth saying.
            "exact" => match dt {
                Some(dt) if !(dt.is_finite() && dt > 0.0) => Err(LindbladError::invalid(
                    "dt",
                    dt,
                    "must be positive and finite (method \"exact\" takes no step; a given one \
                     is still checked)",
                )),
                _ => Ok(Self::Exact),
            },
            "rk4" => Ok(Self::Rk4 { dt: step()? }),
            "euler" => Ok(Self::Euler { dt: step()? }),
            _ => Err(LindbladError::input(
                "method",
                format!("expected \"exact\", \"rk4\" or \"euler\", found \"{name}\""),
            )),
        }
    }
}

/// A lower bound of one substep's cost, seconds, for the work budget
/// (`quench_support::budget::check_work`): an RK4 or Euler substep of a batch is a few
/// products and sums, each at least one tensor operation, and the cheapest operation measured
/// on any device (the 2-core VM's CPU backend) takes about 60 ns.
pub const SUBSTEP_SECONDS: f64 = 1e-7;

/// Default of [`Solver::max_substeps`]: a thousand times the most that a shipped setting
/// takes (RK4 with `dt` 0.001 over 20 segments of a pulse of length 1: 1,000 substeps), and
/// a few seconds of CPU for a batch of one-qubit tasks, whereas a mistyped `dt` of `1e-9`
/// asks for 10^9 substeps (and, under autodiff, memory for every one of them).
pub const DEFAULT_MAX_SUBSTEPS: u64 = 1_000_000;

/// Default of [`Solver::max_graph_bytes`]: 4 GiB, a laptop's share. The shipped settings keep
/// at most a few megabytes (RK4 dt 0.001: 1,000 substeps).
pub const DEFAULT_MAX_GRAPH_BYTES: u64 = 4 << 30;

/// Bytes an autodiff backend keeps for one stepper substep besides the state it saves: the
/// product's graph node, its backward step and the handles of its operands. Measured with
/// `meta_train` at RK4 dt 1e-5 (100,000 substeps): 3.0 kB a substep with 16 one-qubit tasks
/// and 3.9 kB with 64, of which the states are `4 x d^2 x tasks` bytes.
const GRAPH_BYTES_PER_SUBSTEP: f64 = 2_800.0;

/// Solver settings. The bounds are clamps applied to the inputs on the device, and the exact
/// solver sizes its exponential for them in advance.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Solver {
    /// Integration method (default `Exact`).
    pub method: Method,
    /// Amplitudes are clamped to `[-control_bound, control_bound]` (default 10, the guide's).
    pub control_bound: f64,
    /// Rates are clamped to `[0, rate_bound]`, in units of `1 / T` (default 1; the guide's
    /// rates stay below 0.15).
    pub rate_bound: f64,
    /// Divide the final states by their trace, as the guide's simulator does after every
    /// substep (default false). In the real basis every step maps the trace coordinate to
    /// itself exactly, so dividing once at the end gives the same states.
    pub renormalize: bool,
    /// Most substeps that one [`Solver::evolve`] call of `euler` or `rk4` may take in all,
    /// `segments x max(1, floor(t_seg / dt))`; each substep is one batched product over all
    /// tasks, so this bounds the run time and, under autodiff, the memory of the graph. More
    /// is refused with [`LindbladError::TooManySubsteps`] before any work (default
    /// [`DEFAULT_MAX_SUBSTEPS`] = 1,000,000; `exact` takes no substeps and is not limited).
    pub max_substeps: u64,
    /// Most bytes that one differentiated [`Solver::evolve`] call of `euler` or `rk4` may keep
    /// in the autodiff graph until the backward pass: about 2.8 kB per substep plus the saved
    /// states (`4 x d^2` bytes per task and substep, `4 x d^4` with propagators). A fine `dt`
    /// within [`Self::max_substeps`] can still outgrow the machine's memory (RK4 dt 1e-6 with
    /// 200 tasks: about 6 GB); more is refused with [`LindbladError::GraphTooLarge`] before
    /// any work (default [`DEFAULT_MAX_GRAPH_BYTES`] = 4 GiB). Calls without gradients are not
    /// limited.
    pub max_graph_bytes: u64,
}

impl Default for Solver {
    fn default() -> Self {
        Self {
            method: Method::Exact,
            control_bound: 10.0,
            rate_bound: 1.0,
            renormalize: false,
            max_substeps: DEFAULT_MAX_SUBSTEPS,
            max_graph_bytes: DEFAULT_MAX_GRAPH_BYTES,
        }
    }
}

/// One batch of tasks to evolve.
#[derive(Clone, Debug)]
pub struct Batch<B: QuenchOps> {
    /// Total pulse time `T`; the segments are `T / segments` long.
    pub t_total: f64,
    /// Piecewise-constant control amplitudes `[tasks, segments, controls]`.
    pub amplitudes: Tensor<B, 3>,
    /// Rates of the unit-rate jump operators `[tasks, jumps]`, in units of `1 / T`.
    pub rates: Tensor<B, 2>,
    /// Initial states as real vectors in the Gell-Mann basis `[tasks, d^2]`
    /// (see [`Basis::coordinates`](crate::Basis::coordinates)).
    pub initial: Tensor<B, 2>,
}

/// What to return besides the final states.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Output {
    /// Final states only.
    States,
    /// Final states and the whole propagators (superoperators in the real basis).
    StatesAndPropagators,
}

/// The result of [`Solver::evolve`].
#[derive(Clone, Debug)]
pub struct Evolution<B: QuenchOps> {
    /// Final states as real vectors `[tasks, d^2]`.
    pub states: Tensor<B, 2>,
    /// The propagators `[tasks, d^2, d^2]` (`state = propagator . initial`), when requested.
    pub propagators: Option<Tensor<B, 3>>,
}

/// Unit roundoff of the float type, which the exact solver's truncation error must meet.
fn check_shape(
    name: &'static str,
    found: &[usize],
    expected: &[Option<usize>],
    pattern: String,
) -> Result<(), LindbladError> {
    let fits = found.len() == expected.len()
        && found.iter().zip(expected).all(|(&f, e)| match e {
            Some(e) => f == *e,
            None => f > 0,
        });
    if fits {
        Ok(())
    } else {
        Err(LindbladError::Shape {
            name,
            expected: pattern,
            found: found.to_vec(),
        })
    }
}

impl Solver {
    /// The stepper's name and `dt`; `None` for the exact method.
    fn stepper(&self) -> Option<(&'static str, f64)> {
        match self.method {
            Method::Euler { dt } => Some(("euler", dt)),
            Method::Rk4 { dt } => Some(("rk4", dt)),
            Method::Exact => None,
        }
    }

    /// The substeps per segment for `segments` segments of a pulse of length `t_total` (the
    /// guide's `max(1, floor(t_seg / dt))`, 1 for `Exact`), refusing a run of more than [`Self::max_substeps`] substeps in all (`tasks` only
    /// enters the message). [`Self::evolve`] calls it before any work; callers that know the
    /// shape earlier can call it to fail sooner.
    pub fn check_substeps(
        &self,
        t_total: f64,
        segments: usize,
        tasks: usize,
    ) -> Result<usize, LindbladError> {
        let Some((name, dt)) = self.stepper() else {
            return Ok(1);
        };
        if segments == 0 {
            return Ok(1);
        }
        let t_segment = t_total / segments as f64;
        // Counted in f64 so that a tiny dt cannot overflow (or saturate) an integer first.
        let per_segment = (t_segment / dt).floor().max(1.0);
        let total = per_segment * segments as f64;
        if total <= self.max_substeps as f64 {
            // `max_substeps` is the caller's to raise (to u64::MAX, even): the work budget
            // still refuses a run that would not end.
            quench_support::budget::check_work(
                || {
                    format!(
                        "{name} with dt = {dt} over {segments} segment(s) of {t_segment} \
                         ({total:.3e} substeps of every task)"
                    )
                },
                total,
                SUBSTEP_SECONDS,
            )?;
            Ok(per_segment as usize)
        } else {
            Err(LindbladError::TooManySubsteps {
                method: name,
                dt,
                t_segment,
                per_segment,
                segments,
                total,
                tasks,
                limit: self.max_substeps,
            })
        }
    }

    /// The bytes a differentiated `euler` or `rk4` call of `substeps` substeps in all keeps
    /// in its graph for `tasks` tasks of `n = d^2` coordinates (with propagators when
    /// `propagators`), refused above [`Self::max_graph_bytes`]; `exact` keeps a few products
    /// per segment and is not limited.
    pub fn check_graph(
        &self,
        substeps: usize,
        tasks: usize,
        n: usize,
        propagators: bool,
    ) -> Result<f64, LindbladError> {
        let Some((name, dt)) = self.stepper() else {
            return Ok(0.0);
        };
        let saved = if propagators { n * n } else { n };
        let per_substep = GRAPH_BYTES_PER_SUBSTEP + 4.0 * (saved * tasks) as f64;
        let bytes = per_substep * substeps as f64;
        if bytes <= self.max_graph_bytes as f64 {
            Ok(bytes)
        } else {
            Err(LindbladError::GraphTooLarge {
                method: name,
                dt,
                substeps,
                tasks,
                bytes,
                limit: self.max_graph_bytes,
            })
        }
    }

    /// About the most bytes an evolution of `tasks` tasks of `segments` segments holds at once
    /// on its device, in floats of `float_bytes` bytes, `n = d^2`: the generators of every
    /// task and segment (`[tasks, segments, n, n]`) and up to five more tensors of that shape
    /// (the exact method's Taylor terms, squarings and product tree, or a stepper's step
    /// matrix and its polynomial), and per task its states (initial, current, final). A
    /// caller that allocates from sizes it was given checks this against the host
    /// ([`quench_support::budget::check_fits`]) first; it saturates rather than overflowing.
    pub fn memory_estimate(tasks: usize, segments: usize, n: usize, float_bytes: usize) -> u128 {
        let n = n as u128;
        let per_task = (segments as u128)
            .saturating_mul(n.saturating_mul(n).saturating_mul(6))
            .saturating_add(n.saturating_mul(3));
        (tasks as u128)
            .saturating_mul(per_task)
            .saturating_mul(float_bytes as u128)
    }

    /// Refuses an exact evolution whose segments the method cannot exponentiate to any
    /// accuracy: `||M t_segment||_1 <= segment_bound` (from the pulse's length, the segments
    /// and the clamps' bounds) infinite, or so large that the Taylor plan's squarings (each at
    /// most doubling the polynomial's rounding error) leave `2^s u >= 1` of the unit roundoff
    /// `u`, or that no plan within 64 squarings meets the truncation bound. Within the host
    /// kernel's reach (about 1e4 in f32) the plan takes 14 squarings, far inside.
    fn check_exponentiable(
        &self,
        plan: TaylorPlan,
        u: f64,
        segment_bound: f64,
        norms: GeneratorNorms,
        t_total: f64,
        segments: usize,
    ) -> Result<(), LindbladError> {
        let amplified = 2f64.powi(plan.squarings as i32) * u;
        if segment_bound.is_finite() && plan.squarings < 64 && amplified < 1.0 {
            return Ok(());
        }
        // Named by the factor of `||M|| t_segment` that is the larger, in the pulse's time unit
        // (a heuristic: which is named depends on the unit): the segment's length (a pulse of
        // 1e300), or the generator's norm per unit time and then its largest part (a drift of
        // 1e15 is the system's, not the pulse's).
        let (part, share) = norms.largest_part(self.control_bound, self.rate_bound);
        let t_segment = t_total / segments as f64;
        let (field, advice) = if t_segment > segment_bound / t_segment {
            ("t_total", "shorten the pulse or add segments".to_string())
        } else {
            let what = match part {
                "amplitudes" => format!("amplitudes (or control_bound = {})", self.control_bound),
                "rates" => format!("rates (or rate_bound = {})", self.rate_bound),
                _ => part.to_string(),
            };
            (
                part,
                format!("lower the {what}, shorten the pulse or add segments"),
            )
        };
        Err(LindbladError::input(
            field,
            format!(
                "a pulse of {t_total:e} over {segments} segments, with amplitudes clamped to \
                 +-{} and rates to [0, {}], bounds ||M t_segment||_1 by {segment_bound:e}, \
                 {share:e} per unit time of it from the {part}: the exact method would square \
                 its Taylor polynomial {} times, which leaves no accurate digit; {advice}",
                self.control_bound, self.rate_bound, plan.squarings
            ),
        ))
    }

    /// Refuses a non-positive step, a negative or non-finite bound, a zero substep or graph
    /// limit.
    pub fn validate(&self) -> Result<(), LindbladError> {
        for (name, limit) in [
            ("max_substeps", self.max_substeps),
            ("max_graph_bytes", self.max_graph_bytes),
        ] {
            if limit == 0 {
                return Err(LindbladError::invalid(name, 0.0, "must be at least 1"));
            }
        }
        if let Method::Euler { dt } | Method::Rk4 { dt } = self.method
            && !(dt.is_finite() && dt > 0.0)
        {
            return Err(LindbladError::invalid(
                "dt",
                dt,
                "must be positive and finite",
            ));
        }
        for (name, value) in [
            ("control_bound", self.control_bound),
            ("rate_bound", self.rate_bound),
        ] {
            if !(value.is_finite() && value >= 0.0) {
                return Err(LindbladError::invalid(
                    name,
                    value,
                    "must be finite and non-negative",
                ));
            }
        }
        Ok(())
    }

    /// Evolves every task of `batch` under the system of `generators`, refusing inputs or
    /// final states that are not finite.
    ///
    /// Shapes: amplitudes `[tasks, segments, C]`, rates `[tasks, K]`, initial `[tasks, d^2]`;
    /// the result holds states `[tasks, d^2]` and, for
    /// [`Output::StatesAndPropagators`], propagators `[tasks, d^2, d^2]`. The two finiteness
    /// checks read back 3 numbers before the work and one per task after it; a training loop
    /// that watches its loss instead calls [`Self::evolve_without_finite_checks`].
    ///
    /// # Errors
    /// Every error of [`Self::evolve_without_finite_checks`];
    /// [`LindbladError::NotFinite`] naming `amplitudes`, `rates` or `initial` when one holds a
    /// NaN or an infinity; [`LindbladError::Unphysical`] naming the first task whose final
    /// state is not finite (a step too large for a stepper, or overflow).
    pub fn evolve<B: QuenchOps>(
        &self,
        generators: &Generators<B>,
        batch: Batch<B>,
        output: Output,
    ) -> Result<Evolution<B>, LindbladError> {
        // A count of the entries that are not finite. Burn's own test, not arithmetic such as
        // `x - x`: a Vulkan driver need not keep NaN and infinity through arithmetic.
        let not_finite = |x: Tensor<B, 1>| x.is_finite().bool_not().float().sum_all();
        let counts = Tensor::cat(
            vec![
                not_finite(batch.amplitudes.clone().detach().flatten(0, 2)),
                not_finite(batch.rates.clone().detach().flatten(0, 1)),
                not_finite(batch.initial.clone().detach().flatten(0, 1)),
            ],
            0,
        );
        let inputs = ["amplitudes", "rates", "initial"];
        if let Some(name) = inputs
            .iter()
            .zip(to_host_f32(counts))
            .find_map(|(&name, count)| (count > 0.0).then_some(name))
        {
            return Err(LindbladError::NotFinite { name });
        }
        let evolution = self.evolve_without_finite_checks(generators, batch, output)?;
        let per_task = evolution
            .states
            .clone()
            .detach()
            .is_finite()
            .bool_not()
            .float()
            .sum_along(1);
        if let Some(task) = to_host_f32(per_task).iter().position(|&count| count > 0.0) {
            return Err(LindbladError::Unphysical {
                task,
                reason: crate::error::NOT_FINITE_STATE.into(),
                hint: self.method.unphysical_hint(),
            });
        }
        Ok(evolution)
    }

    /// [`Self::evolve`] without its finiteness checks, so without a read-back: for a training
    /// loop, which must not stall a GPU's queue twice per call and which fails its run on a
    /// loss that is not finite.
    ///
    /// # Errors
    /// [`LindbladError`] for wrong shapes, invalid settings, a `t_total` that is not positive
    /// and finite, an exponential the exact method cannot make accurately, more substeps or
    /// graph bytes than the solver's limits allow.
    pub fn evolve_without_finite_checks<B: QuenchOps>(
        &self,
        generators: &Generators<B>,
        batch: Batch<B>,
        output: Output,
    ) -> Result<Evolution<B>, LindbladError> {
        self.validate()?;
        let (controls, jumps, n) = (generators.controls(), generators.jumps(), generators.size());
        let [tasks, segments, _] = batch.amplitudes.dims();
        check_shape(
            "amplitudes",
            &batch.amplitudes.dims(),
            &[None, None, Some(controls)],
            format!("[tasks, segments, {controls}]"),
        )?;
        check_shape(
            "rates",
            &batch.rates.dims(),
            &[Some(tasks), Some(jumps)],
            format!("[{tasks}, {jumps}]"),
        )?;
        check_shape(
            "initial",
            &batch.initial.dims(),
            &[Some(tasks), Some(n)],
            format!("[{tasks}, {n}]"),
        )?;
        if !(batch.t_total.is_finite() && batch.t_total > 0.0) {
            return Err(LindbladError::invalid(
                "t_total",
                batch.t_total,
                "must be positive and finite",
            ));
        }
        let t_segment = batch.t_total / segments as f64;
        // ||M t_seg||_1 for the largest amplitudes and rates the clamps let through.
        let norms = generators.norms();
        let segment_bound = norms.bound(self.control_bound, self.rate_bound) * t_segment;
        // The exact method's plan, made once: its check here, its products in `propagate`.
        let u = unit_roundoff(batch.amplitudes.dtype());
        let plan = TaylorPlan::new(segment_bound, u);
        if self.method == Method::Exact {
            self.check_exponentiable(plan, u, segment_bound, norms, batch.t_total, segments)?;
        }
        let substeps = self.check_substeps(batch.t_total, segments, tasks)?;
        let want_propagators = output == Output::StatesAndPropagators;
        let differentiated = [
            batch.amplitudes.is_require_grad(),
            batch.rates.is_require_grad(),
            batch.initial.is_require_grad(),
        ];
        if differentiated.contains(&true) {
            self.check_graph(substeps * segments, tasks, n, want_propagators)?;
        }
        if self.method == Method::Exact && !want_propagators {
            let input = ExactStates {
                generators: generators.host().parts(),
                amplitudes: batch.amplitudes,
                rates: batch.rates,
                initial: batch.initial,
                t_segment,
                control_bound: self.control_bound,
                rate_bound: self.rate_bound,
                segment_bound,
            };
            let states = exact_states(input, |input| {
                let batch = Batch {
                    t_total: batch.t_total,
                    amplitudes: input.amplitudes,
                    rates: input.rates,
                    initial: input.initial,
                };
                self.propagated(generators, batch, plan)
            });
            return Ok(Evolution {
                states: self.renormalized(states, generators),
                propagators: None,
            });
        }
        let evolution = self.propagate(generators, batch, output, plan, substeps);
        Ok(Evolution {
            states: self.renormalized(evolution.states, generators),
            propagators: evolution.propagators,
        })
    }

    /// [`Self::evolve`] in tensor ops, checked, before any renormalisation: the exact method's Taylor polynomial,
    /// squarings and product tree, or the steppers' `substeps` per segment.
    fn propagate<B: QuenchOps>(
        &self,
        generators: &Generators<B>,
        batch: Batch<B>,
        output: Output,
        plan: TaylorPlan,
        substeps: usize,
    ) -> Evolution<B> {
        let n = generators.size();
        let [tasks, segments, _] = batch.amplitudes.dims();
        let t_segment = batch.t_total / segments as f64;
        let want_propagators = output == Output::StatesAndPropagators;
        let step = t_segment / substeps as f64;
        // Each method's per-segment (or per-substep) matrix is a polynomial of the scaled
        // generator, evaluated with the given Paterson-Stockmeyer chunk size.
        let (scale, coefficients, chunk) = match self.method {
            Method::Euler { .. } => (step, vec![1.0, 1.0], 1),
            Method::Rk4 { .. } => (step, vec![1.0, 1.0, 1.0 / 2.0, 1.0 / 6.0, 1.0 / 24.0], 2),
            Method::Exact => (
                t_segment / 2f64.powi(plan.squarings as i32),
                plan.coefficients(),
                plan.chunk,
            ),
        };
        // The exact solver stores segments in its product tree's order; the steppers walk
        // them in time order.
        let tree = ProductTree::new(segments);
        let order: Vec<usize> = match self.method {
            Method::Exact => tree.order().to_vec(),
            Method::Euler { .. } | Method::Rk4 { .. } => (0..segments).collect(),
        };
        let scaled = self.generators(generators, &batch, &order, scale);
        let initial = batch.initial.transpose().reshape_to([n, 1, tasks]);
        let (states, propagators) = match self.method {
            // Under autodiff the tree (log2(segments) levels of products) measured as fast as
            // applying the factors to the state segment by segment at every task count, and it
            // takes fewer dependent launches on a device.
            Method::Exact => {
                let mut factors = polynomial(scaled, &coefficients, chunk);
                for _ in 0..plan.squarings {
                    factors = matmul(factors.clone(), factors);
                }
                let total = tree.multiply(factors, tasks);
                (
                    matmul(total.clone(), initial),
                    want_propagators.then_some(total),
                )
            }
            Method::Euler { .. } | Method::Rk4 { .. } => {
                let steps = polynomial(scaled, &coefficients, chunk);
                let mut carried = if want_propagators {
                    identity(n, tasks, &initial)
                } else {
                    initial.clone()
                };
                for segment in 0..segments {
                    let segment_step = steps.clone().narrow(2, segment * tasks, tasks);
                    for _ in 0..substeps {
                        carried = if want_propagators {
                            matmul(segment_step.clone(), carried)
                        } else {
                            apply(segment_step.clone(), carried)
                        };
                    }
                }
                if want_propagators {
                    (matmul(carried.clone(), initial), Some(carried))
                } else {
                    (carried, None)
                }
            }
        };
        Evolution {
            states: states.reshape_to([n, tasks]).transpose(),
            propagators: propagators.map(|p| p.permute([2, 0, 1])),
        }
    }

    /// The exact method's final states `[tasks, d^2]`, before any renormalisation, by the
    /// seam's propagation ([`propagate`]): every segment's Taylor polynomial and squarings
    /// and the carry through the segments in one operation, differentiable in one node, where
    /// [`Self::propagate`]'s product tree is a graph of batched products.
    fn propagated<B: QuenchOps>(
        &self,
        generators: &Generators<B>,
        batch: Batch<B>,
        plan: TaylorPlan,
    ) -> Tensor<B, 2> {
        let n = generators.size();
        let [tasks, segments, _] = batch.amplitudes.dims();
        let t_segment = batch.t_total / segments as f64;
        let in_time: Vec<usize> = (0..segments).collect();
        let scale = t_segment / 2f64.powi(plan.squarings as i32);
        let scaled = self.generators(generators, &batch, &in_time, scale);
        propagate(
            scaled.reshape_to([n, n, segments, tasks]),
            batch.initial,
            &plan.polynomial(),
        )
    }

    /// `states` `[tasks, d^2]` divided by their traces when [`Self::renormalize`] asks for it.
    fn renormalized<B: QuenchOps>(
        &self,
        states: Tensor<B, 2>,
        generators: &Generators<B>,
    ) -> Tensor<B, 2> {
        if !self.renormalize {
            return states;
        }
        let trace = states
            .clone()
            .narrow(1, 0, 1)
            .mul_scalar((generators.dim() as f64).sqrt());
        states / trace
    }

    /// The generators of every segment and task times `scale`, `[d^2, d^2, segments * tasks]`
    /// with segment `order[p]` of task `t` at batch index `p * tasks + t`, from one product of
    /// the clamped coefficients `[1, u, gamma]` with the generator stack.
    fn generators<B: QuenchOps>(
        &self,
        generators: &Generators<B>,
        batch: &Batch<B>,
        order: &[usize],
        scale: f64,
    ) -> Tensor<B, 3> {
        let [tasks, segments, controls] = batch.amplitudes.dims();
        let (jumps, n) = (generators.jumps(), generators.size());
        let columns = segments * tasks;
        let dtype = batch.amplitudes.dtype();
        let device = batch.amplitudes.device();
        let mut rows = vec![Tensor::<B, 2>::ones([1, columns], (&device, dtype))];
        if controls > 0 {
            let amplitudes = batch
                .amplitudes
                .clone()
                .clamp(-self.control_bound, self.control_bound);
            let in_order = if order.iter().enumerate().all(|(p, &s)| p == s) {
                amplitudes
            } else {
                let indices: Vec<i64> = order.iter().map(|&s| s as i64).collect();
                let indices =
                    Tensor::<B, 1, Int>::from_data(TensorData::new(indices, [segments]), &device);
                amplitudes.select(1, indices)
            };
            rows.push(in_order.permute([2, 1, 0]).reshape_to([controls, columns]));
        }
        if jumps > 0 {
            let rates = batch.rates.clone().clamp(0.0, self.rate_bound);
            rows.push(
                rates
                    .transpose()
                    .reshape_to([jumps, 1, tasks])
                    .expand([jumps, segments, tasks])
                    .reshape_to([jumps, columns]),
            );
        }
        let coefficients = Tensor::cat(rows, 0).mul_scalar(scale);
        let stack = generators.stack();
        let stack = if stack.dtype() == dtype {
            stack
        } else {
            stack.cast(dtype)
        };
        precise_matmul(stack, coefficients).reshape_to([n, n, columns])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Basis, OperatorCache, operators, presets};
    use burn::backend::NdArray;
    use quench_support::stats::max_abs_difference;

    type B = NdArray<f32>;

    #[test]
    fn methods_are_named_and_a_step_given_to_the_exact_one_is_still_checked() {
        assert!(matches!(Method::named("exact", None), Ok(Method::Exact)));
        assert!(matches!(
            Method::named("exact", Some(0.01)),
            Ok(Method::Exact)
        ));
        for dt in [f64::NAN, -5.0, 0.0] {
            let err = Method::named("exact", Some(dt)).unwrap_err();
            assert!(err.to_string().starts_with("dt = "), "{err}");
        }
        assert!(Method::named("rk4", None).is_err());
        assert!(Method::named("rk45", Some(0.1)).is_err());
    }

    #[test]
    fn the_memory_estimate_counts_every_segments_matrices_and_saturates() {
        // A qubit (n = 4): six 4 x 4 matrices per segment and three states per task, f32.
        assert_eq!(
            Solver::memory_estimate(10, 20, 4, 4),
            10 * (20 * 6 * 16 + 3 * 4) * 4
        );
        // The issue's 600,000 tasks of 20 segments in f64: about 7.4 GB, refused on a host
        // with less; absurd sizes saturate instead of wrapping to a small estimate.
        assert!(Solver::memory_estimate(600_000, 20, 4, 8) > 7_000_000_000);
        assert_eq!(
            Solver::memory_estimate(usize::MAX, usize::MAX, usize::MAX, 8),
            u128::MAX
        );
    }

    fn stepper(method: Method) -> Solver {
        Solver {
            method,
            ..Solver::default()
        }
    }

    /// A one-qubit batch of `tasks` tasks and `segments` segments over `t_total`.
    fn batch(tasks: usize, segments: usize, t_total: f64) -> (Generators<B>, Batch<B>) {
        let device = Default::default();
        let generators = OperatorCache::<B>::new().generators(&presets::one_qubit(), &device);
        let start = Basis::gell_mann(2)
            .coordinates(&operators::basis_state(2, 0))
            .unwrap();
        let batch = Batch {
            t_total,
            amplitudes: Tensor::zeros([tasks, segments, 2], &device),
            rates: Tensor::zeros([tasks, 3], &device),
            initial: Tensor::from_data(
                TensorData::new(start.repeat(tasks), [tasks, 4]).convert::<f32>(),
                &device,
            ),
        };
        (generators, batch)
    }

    /// Final states of `system` for `tasks` tasks of `segments` varied amplitudes (some beyond
    /// the clamp, one NaN when `with_nan`) and rates, on backend `E`.
    fn varied_states<E: QuenchOps>(
        system: &crate::System,
        solver: &Solver,
        tasks: usize,
        segments: usize,
        with_nan: bool,
    ) -> Vec<f64> {
        let device = Default::default();
        let generators = Generators::<E>::upload(system, &device);
        let (controls, jumps, n) = (generators.controls(), generators.jumps(), generators.size());
        let mut amplitudes: Vec<f64> = (0..tasks * segments * controls)
            .map(|i| 3.0 * ((i as f64) * 0.618_034).sin() + if i % 37 == 5 { 14.0 } else { 0.0 })
            .collect();
        if with_nan {
            amplitudes[segments * controls + 1] = f64::NAN;
        }
        let rates = (0..tasks * jumps).map(|i| 0.02 * (i % 7) as f64).collect();
        // Mixed initial states: |0><0| shrunk toward the maximally mixed state by task.
        let start = Basis::gell_mann(system.dim())
            .coordinates(&operators::basis_state(system.dim(), 0))
            .unwrap();
        let initial: Vec<f64> = (0..tasks)
            .flat_map(|t| {
                let shrink = 1.0 - 0.1 * (t % 5) as f64;
                start
                    .iter()
                    .enumerate()
                    .map(move |(i, &x)| if i == 0 { x } else { shrink * x })
            })
            .collect();
        let float = |values: Vec<f64>, shape: [usize; 3]| {
            quench_kernels::readback::float_tensor::<E, f64, 3>(values, shape, &device)
        };
        let batch = Batch {
            t_total: 1.3,
            amplitudes: float(amplitudes, [tasks, segments, controls]),
            rates: float(rates, [tasks, jumps, 1]).reshape_to([tasks, jumps]),
            initial: float(initial, [tasks, n, 1]).reshape_to([tasks, n]),
        };
        let states = solver
            .evolve_without_finite_checks(&generators, batch, Output::States)
            .unwrap()
            .states;
        quench_kernels::readback::to_host_f64(states)
    }

    #[test]
    fn the_host_kernel_gives_the_tensor_form_s_states() {
        use burn::backend::Autodiff;
        let one_qubit = presets::one_qubit();
        let two_qubit = presets::two_qubit();
        for (system, tasks, segments) in
            [(&one_qubit, 37, 20), (&two_qubit, 5, 7), (&one_qubit, 1, 1)]
        {
            for renormalize in [false, true] {
                let solver = Solver {
                    renormalize,
                    ..Solver::default()
                };
                // f64: the host kernel against the tensor form, which autodiff keeps.
                let host = varied_states::<NdArray<f64>>(system, &solver, tasks, segments, false);
                let tensor = varied_states::<Autodiff<NdArray<f64>>>(
                    system, &solver, tasks, segments, false,
                );
                let worst = max_abs_difference(&host, &tensor);
                assert!(worst < 1e-12, "{tasks} tasks x {segments}: {worst}");
                // f32 to its roundoff; the host computes in f64.
                let narrow = varied_states::<B>(system, &solver, tasks, segments, false);
                let worst = max_abs_difference(&narrow, &tensor);
                assert!(worst < 2e-6, "f32, {tasks} tasks x {segments}: {worst}");
            }
        }
        // A NaN amplitude spoils its own task's state and no other, as in the tensor form.
        let host = varied_states::<B>(&one_qubit, &Solver::default(), 3, 4, true);
        let spoiled: Vec<bool> = host
            .chunks(4)
            .map(|s| s.iter().any(|x| x.is_nan()))
            .collect();
        assert_eq!(spoiled, [false, true, false]);
    }

    #[test]
    fn a_graph_that_would_outgrow_its_limit_is_refused_before_any_work() {
        use burn::backend::Autodiff;
        // The original's 200 tasks at RK4 dt 1e-6: a million substeps, within max_substeps,
        // but about 6 GB of graph.
        let fine = stepper(Method::Rk4 { dt: 1e-6 });
        let substeps = fine.check_substeps(1.0, 20, 200).unwrap() * 20;
        assert_eq!(substeps, 1_000_000);
        let err = fine.check_graph(substeps, 200, 4, false).unwrap_err();
        let message = err.to_string();
        assert!(
            matches!(err, LindbladError::GraphTooLarge { bytes, .. } if (bytes - 6.0e9).abs() < 1e6),
            "{message}"
        );
        assert!(
            message.contains("6.000 GB") && message.contains("max_graph_bytes = 4294967296"),
            "{message}"
        );
        // The shipped settings are far inside it; the exact method is not limited.
        assert!(
            stepper(Method::Rk4 { dt: 1e-3 })
                .check_graph(1_000, 200, 4, false)
                .unwrap()
                < 1e7
        );
        assert_eq!(
            stepper(Method::Exact)
                .check_graph(1 << 40, 200, 4, true)
                .unwrap(),
            0.0
        );

        // Through `evolve`: refused when the amplitudes carry gradients, not otherwise.
        let tight = Solver {
            max_graph_bytes: 100_000,
            ..stepper(Method::Euler { dt: 1e-3 })
        };
        let (generators, plain) = batch(3, 20, 1.0);
        assert!(tight.evolve(&generators, plain, Output::States).is_ok());
        let device = Default::default();
        let tracked_generators =
            OperatorCache::<Autodiff<B>>::new().generators(&presets::one_qubit(), &device);
        let (_, plain) = batch(3, 20, 1.0);
        let tracked = Batch {
            t_total: plain.t_total,
            amplitudes: Tensor::from_inner(plain.amplitudes).require_grad(),
            rates: Tensor::from_inner(plain.rates),
            initial: Tensor::from_inner(plain.initial),
        };
        let err = tight
            .evolve(&tracked_generators, tracked, Output::States)
            .unwrap_err();
        assert!(
            matches!(
                err,
                LindbladError::GraphTooLarge {
                    substeps: 1000,
                    tasks: 3,
                    ..
                }
            ),
            "{err}"
        );
    }

    #[test]
    fn a_tiny_step_is_refused_before_any_work() {
        // Without the limit these would run 5e7 (and usize::MAX) products per segment.
        for dt in [1e-9, 5e-324] {
            let (generators, batch) = batch(3, 20, 1.0);
            let err = stepper(Method::Rk4 { dt })
                .evolve(&generators, batch, Output::States)
                .unwrap_err();
            assert!(
                matches!(
                    err,
                    LindbladError::TooManySubsteps {
                        method: "rk4",
                        segments: 20,
                        tasks: 3,
                        limit: DEFAULT_MAX_SUBSTEPS,
                        ..
                    }
                ),
                "{err}"
            );
        }
        let err = stepper(Method::Euler { dt: 1e-9 })
            .check_substeps(1.0, 20, 3)
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "dt = 1e-9: euler would take floor(t_seg / dt) = 50000000 substeps per segment \
             (t_seg = t_total / segments = 0.05) x 20 segments = 1000000000 substeps \
             (x 3 tasks = 3000000000 task-substeps), more than max_substeps = 1000000; \
             use a larger dt or the exact method, or raise max_substeps"
        );
    }

    #[test]
    fn the_limit_counts_all_segments_and_leaves_the_shipped_settings_alone() {
        // The finest shipped setting, RK4 at dt 0.001 over 20 segments of T = 1, of 200 tasks.
        assert_eq!(
            stepper(Method::Rk4 { dt: 0.001 }).check_substeps(1.0, 20, 200),
            Ok(50)
        );
        // A step longer than a segment is one step per segment, as the guide has it.
        assert_eq!(
            stepper(Method::Euler { dt: 7.0 }).check_substeps(1.0, 20, 1),
            Ok(1)
        );
        let (generators, batch) = batch(2, 5, 1.0);
        let coarse = stepper(Method::Euler { dt: 7.0 });
        assert!(coarse.evolve(&generators, batch, Output::States).is_ok());
        // The limit is on segments x substeps: exactly at it passes, one segment more does not.
        let limited = Solver {
            max_substeps: 100,
            ..stepper(Method::Euler { dt: 0.5 })
        };
        assert_eq!(limited.check_substeps(50.0, 50, 1), Ok(2));
        assert!(limited.check_substeps(51.0, 51, 1).is_err());
        assert!(
            Solver {
                max_substeps: 1,
                ..Solver::default()
            }
            .check_substeps(1.0, 1000, 1)
                == Ok(1),
            "exact takes no substeps"
        );
        let zero = Solver {
            max_substeps: 0,
            ..Solver::default()
        };
        assert_eq!(
            zero.validate().unwrap_err().to_string(),
            "max_substeps = 0: must be at least 1"
        );
    }

    #[test]
    fn the_limit_is_a_setting_of_configuration_files() {
        let solver: Solver = serde_json::from_str(
            r#"{ "method": { "rk4": { "dt": 1e-9 } }, "max_substeps": 2000000000 }"#,
        )
        .unwrap();
        assert_eq!(solver.max_substeps, 2_000_000_000);
        assert!(solver.check_substeps(1.0, 1, 1).is_ok());
        let default: Solver = serde_json::from_str("{}").unwrap();
        assert_eq!(default.max_substeps, DEFAULT_MAX_SUBSTEPS);
    }

    /// An exact evolution that no accuracy survives is refused naming what makes it so, not
    /// returned as NaN: a pulse of 1e300, and clamps of 1e30 (the defaults' segment bound is
    /// inside).
    #[test]
    fn an_exact_evolution_beyond_any_accuracy_is_refused() {
        let (generators, b) = batch(2, 4, 1e300);
        let err = Solver::default()
            .evolve(&generators, b, Output::States)
            .map(|_| ())
            .expect_err("refused");
        assert!(err.to_string().contains("t_total"), "{err}");
        // Named by the input whose bound makes the generator's: the amplitudes with a wide
        // control bound, the rates with a wide rate bound.
        for (wide, input, bound) in [
            (
                Solver {
                    control_bound: 1e30,
                    ..Solver::default()
                },
                "amplitudes: ",
                "control_bound",
            ),
            (
                Solver {
                    rate_bound: 1e30,
                    ..Solver::default()
                },
                "rates: ",
                "rate_bound",
            ),
        ] {
            let (generators, b) = batch(2, 4, 1.0);
            let err = wide
                .evolve(&generators, b, Output::States)
                .map(|_| ())
                .expect_err("refused")
                .to_string();
            assert!(err.starts_with(input) && err.contains(bound), "{err}");
        }
        let (generators, b) = batch(2, 4, 1.0);
        assert!(
            Solver::default()
                .evolve(&generators, b, Output::States)
                .is_ok()
        );
    }

    #[test]
    fn inputs_or_final_states_that_are_not_finite_are_refused() {
        let device = Default::default();
        let with = |b: &Batch<B>, which: &str, value: f32| {
            let spoil = |d: TensorData| {
                let shape = d.shape.clone();
                let mut values = d.convert::<f32>().to_vec::<f32>().unwrap();
                let middle = values.len() / 2;
                values[middle] = value;
                TensorData::new(values, shape)
            };
            let mut b = b.clone();
            match which {
                "amplitudes" => {
                    b.amplitudes = Tensor::from_data(spoil(b.amplitudes.to_data()), &device);
                }
                "rates" => b.rates = Tensor::from_data(spoil(b.rates.to_data()), &device),
                _ => b.initial = Tensor::from_data(spoil(b.initial.to_data()), &device),
            }
            b
        };
        let (generators, clean) = batch(3, 4, 1.0);
        // An infinite rate is clamped to `rate_bound` unchecked, a NaN is not.
        for (which, value, spoils) in [
            ("amplitudes", f32::NAN, true),
            ("rates", f32::INFINITY, false),
            ("initial", f32::NEG_INFINITY, true),
        ] {
            let spoiled = with(&clean, which, value);
            match Solver::default().evolve(&generators, spoiled.clone(), Output::States) {
                Err(LindbladError::NotFinite { name }) => assert_eq!(name, which),
                other => panic!("{which} = {value}: {:?}", other.map(|_| ())),
            }
            // Unchecked, a bad value the clamps let through spoils a state: why the check is.
            let states = Solver::default()
                .evolve_without_finite_checks(&generators, spoiled, Output::States)
                .unwrap()
                .states;
            let states = quench_kernels::readback::to_host_f32(states);
            assert_eq!(states.iter().any(|x| !x.is_finite()), spoils, "{which}");
        }
        // Finite inputs whose Euler steps overflow: task 1's amplitudes of 1e30 (within a
        // bound raised to 1e30) grow its state by about 1e30 / 12 per step, past f64's range
        // (and f32's) in 12 steps; tasks 0 and 2 stay physical.
        let (generators, clean) = batch(3, 12, 1.0);
        let mut amplitudes = vec![0.0f32; 3 * 12 * 2];
        amplitudes[24..48].fill(1e30);
        let loud = Batch {
            amplitudes: Tensor::from_data(TensorData::new(amplitudes, [3, 12, 2]), &device),
            ..clean.clone()
        };
        let euler = Solver {
            control_bound: 1e30,
            ..stepper(Method::Euler { dt: 1.0 })
        };
        match euler.evolve(&generators, loud, Output::States) {
            Err(LindbladError::Unphysical { task, .. }) => assert_eq!(task, 1),
            other => panic!("overflow: {:?}", other.map(|_| ())),
        }
        assert!(euler.evolve(&generators, clean, Output::States).is_ok());
    }
}
