//! `quench.lindblad`: systems, batched evolutions and fidelity gradients.
//!
//! The arrays arrive contiguous in the right dtype (the Python side converts them); here their
//! shapes are checked against the system, the states checked as the pulse documents check
//! theirs, and one [`Solver::evolve`] runs the whole batch on the chosen device, in the
//! device's f32, with Burn's autodiff for the gradients.

use burn::tensor::Tensor;
use num_complex::Complex64;
use numpy::ndarray::{Array1, Array3};
use numpy::{IntoPyArray, PyArray1, PyArray3, PyReadonlyArrayDyn, PyUntypedArrayMethods};
use pyo3::prelude::*;
use quench_kernels::readback::{float_tensor, to_host_f64};
use quench_kernels::reductions::Reduce;
use quench_kernels::{OnDevice, QuenchBackend, QuenchOps, run_on};
use quench_lindblad::{
    Basis, Batch, CMatrix, Generators, LindbladError, Method, Output, Solver, System, fidelity,
    states,
};

use crate::device;
use crate::errors::{Failure, guarded};

/// An open quantum system (drift, control Hamiltonians, unit-rate jump operators), checked by
/// [`System::new`]: square matrices of one dimension, finite entries, Hermitian drift and
/// controls within `1e-10` of their 1-norm. The Python class `quench.lindblad.System` wraps it.
#[pyclass(module = "quench._native", name = "System", frozen)]
pub struct NativeSystem {
    system: System,
}

#[pymethods]
impl NativeSystem {
    /// A system from complex `[d, d]` arrays: `drift`, a list of `controls` and a list of
    /// `jumps`. Raises `ValueError` naming the operator that is not square, of another
    /// dimension, not finite, or (drift and controls) not Hermitian.
    #[new]
    fn new<'py>(
        py: Python<'py>,
        drift: PyReadonlyArrayDyn<'py, Complex64>,
        controls: Vec<PyReadonlyArrayDyn<'py, Complex64>>,
        jumps: Vec<PyReadonlyArrayDyn<'py, Complex64>>,
    ) -> PyResult<Self> {
        let drift = matrix("drift", &drift)?;
        let controls = named_matrices("controls", &controls)?;
        let jumps = named_matrices("jumps", &jumps)?;
        let system = guarded(py, move || Ok(System::new(drift, controls, jumps)?))?;
        Ok(Self { system })
    }

    /// The Hilbert-space dimension `d`.
    #[getter]
    fn dim(&self) -> usize {
        self.system.dim()
    }

    /// The number of control Hamiltonians.
    #[getter]
    fn controls(&self) -> usize {
        self.system.controls().len()
    }

    /// The number of jump operators.
    #[getter]
    fn jumps(&self) -> usize {
        self.system.jumps().len()
    }
}

/// The entries of a square array named `name`, as a [`CMatrix`]; any other shape is bad
/// input naming it.
fn matrix(name: &str, array: &PyReadonlyArrayDyn<'_, Complex64>) -> Result<CMatrix, Failure> {
    let shape = array.shape();
    let [rows, cols] = shape else {
        return Err(Failure::input(
            name,
            format!("expected a square [d, d] matrix, found shape {shape:?}"),
        ));
    };
    if rows != cols || *rows == 0 {
        return Err(Failure::input(
            name,
            format!("expected a square [d, d] matrix with d >= 1, found shape {shape:?}"),
        ));
    }
    Ok(from_row_major(*rows, crate::arrays::values(array)))
}

/// A `dim x dim` matrix of row-major `entries`.
fn from_row_major(dim: usize, entries: Vec<Complex64>) -> CMatrix {
    CMatrix::from_fn(dim, |r, c| entries[r * dim + c])
}

/// Each array of a list argument as a matrix, named `list[i]`.
fn named_matrices(
    list: &str,
    arrays: &[PyReadonlyArrayDyn<'_, Complex64>],
) -> Result<Vec<CMatrix>, Failure> {
    arrays
        .iter()
        .enumerate()
        .map(|(i, array)| matrix(&format!("{list}[{i}]"), array))
        .collect()
}

/// Checks `rho` as a density matrix (finite, Hermitian, unit trace, positive semidefinite) and
/// `target`, if any, as a pure state, with the pulse documents' own checks and tolerance
/// ([`quench_lindblad::states`]), naming `rho` as `name`.
fn check_states(name: &str, rho: &CMatrix, target: Option<&CMatrix>) -> Result<(), Failure> {
    states::check_density_matrix(rho, name)?;
    if let Some(target) = target {
        states::check_pure_state(target, "target")?;
    }
    Ok(())
}

/// One batched evolution (and, with a target, the fidelities and their gradients) on one
/// backend.
struct Evolve {
    system: System,
    solver: Solver,
    /// Total pulse time.
    t_total: f64,
    /// `[tasks, segments, controls]`.
    shape: [usize; 3],
    /// Row-major `shape`.
    amplitudes: Vec<f64>,
    /// Row-major `[tasks, jumps]`.
    rates: Vec<f64>,
    /// Initial states' Gell-Mann coordinates, row-major `[tasks, d^2]`.
    initial: Vec<f64>,
    /// The pure target's coordinates `[d^2]`, when fidelities and gradients are wanted.
    target: Option<Vec<f64>>,
}

/// What [`Evolve`] reads back.
struct Evolved {
    /// Final states' coordinates, row-major `[tasks, d^2]`.
    states: Vec<f64>,
    /// Fidelities `[tasks]` and their gradients `[tasks, segments, controls]` with respect to
    /// the amplitudes, when a target was given.
    scored: Option<(Vec<f64>, Vec<f64>)>,
}

impl OnDevice for Evolve {
    type Output = Result<Evolved, LindbladError>;

    fn run<B: QuenchBackend>(self, device: &B::Device) -> Self::Output {
        let Some(target) = self.target.clone() else {
            // Without a gradient the backend without autodiff, whose exact method runs the
            // fused host kernel on the CPU: the autodiff backend's way took about 10x as long
            // at 1,024 one-qubit tasks (32 ms against 3 ms), all of it the Python call's.
            let (states, _) = self.states::<B::InnerBackend>(device)?;
            return Ok(Evolved {
                states: to_host_f64(states),
                scored: None,
            });
        };
        let (states, amplitudes) = self.states::<B>(device)?;
        let target = float_tensor(target, [1, states.dims()[1]], device);
        let fidelities = fidelity::state_fidelity(states.clone(), target)?;
        // Each task's fidelity depends on its own amplitudes only, so the gradient of the sum
        // holds every task's gradient.
        let grads = fidelities.clone().sum_all().backward();
        let gradient = amplitudes
            .grad(&grads)
            .map(to_host_f64)
            // No gradient reaches the amplitudes when the pulse cannot move the state (no
            // controls): zero, as the finite differences would say.
            .unwrap_or_else(|| vec![0.0; self.shape.iter().product()]);
        Ok(Evolved {
            states: to_host_f64(states),
            scored: Some((to_host_f64(fidelities), gradient)),
        })
    }
}

impl Evolve {
    /// The final states `[tasks, d^2]` on backend `E`, and the amplitudes they came from
    /// (tracked for their gradient when there is a target).
    fn states<E: QuenchOps>(
        &self,
        device: &E::Device,
    ) -> Result<(Tensor<E, 2>, Tensor<E, 3>), LindbladError> {
        let generators = Generators::<E>::upload(&self.system, device);
        let [tasks, _, _] = self.shape;
        let amplitudes: Tensor<E, 3> = float_tensor(self.amplitudes.clone(), self.shape, device);
        let amplitudes = if self.target.is_some() {
            amplitudes.require_grad()
        } else {
            amplitudes
        };
        let batch = Batch {
            t_total: self.t_total,
            amplitudes: amplitudes.clone(),
            rates: float_tensor(self.rates.clone(), [tasks, generators.jumps()], device),
            initial: float_tensor(self.initial.clone(), [tasks, generators.size()], device),
        };
        // The inputs were checked on the host ([`Request::run`]) and every final state is
        // checked there once read back: the solver's device-side checks would repeat both.
        let states = self
            .solver
            .evolve_without_finite_checks(&generators, batch, Output::States)?
            .states;
        Ok((states, amplitudes))
    }
}

/// The arrays [`lindblad_run`] returns: final states and, with a target, the fidelities and
/// their gradients.
type RunResult<'py> = (
    Bound<'py, PyArray3<Complex64>>,
    Option<Bound<'py, PyArray1<f64>>>,
    Option<Bound<'py, PyArray3<f64>>>,
);

/// Evolves a batch: `rho0` complex `[d, d]` (every task) or `[tasks, d, d]`, `amplitudes`
/// `[tasks, segments, controls]`, `rates` `[tasks, jumps]`, over `t_total` with `method`
/// (`dt` for `rk4` and `euler`) on `device`. Returns the final states `[tasks, d, d]`
/// complex128 and, when `target` (a pure `[d, d]` density matrix) is given, the fidelities
/// `Tr(rho target)` `[tasks]` and their gradients `[tasks, segments, controls]`.
#[pyfunction]
#[pyo3(signature = (system, rho0, amplitudes, rates, t_total, method, dt, device, target))]
#[allow(clippy::too_many_arguments)] // Python's keyword arguments, passed through.
pub fn lindblad_run<'py>(
    py: Python<'py>,
    system: PyRef<'py, NativeSystem>,
    rho0: PyReadonlyArrayDyn<'py, Complex64>,
    amplitudes: PyReadonlyArrayDyn<'py, f64>,
    rates: PyReadonlyArrayDyn<'py, f64>,
    t_total: f64,
    method: &str,
    dt: Option<f64>,
    device: &str,
    target: Option<PyReadonlyArrayDyn<'py, Complex64>>,
) -> PyResult<RunResult<'py>> {
    let (request, spec) = request(
        &system,
        &rho0,
        &amplitudes,
        &rates,
        t_total,
        method,
        dt,
        device,
        target.as_ref(),
    )?;
    let [tasks, segments, controls] = request.shape;
    let dim = request.system.dim();
    let (states, scored) = guarded(py, move || request.run(spec))?;
    // Shapes are the ones checked above; a mismatch would be a bug, reported as such.
    let ragged = |error: numpy::ndarray::ShapeError| {
        Failure::Runtime(format!(
            "the solver returned a result of the wrong size: {error}"
        ))
    };
    let states = Array3::from_shape_vec((tasks, dim, dim), states)
        .map_err(ragged)?
        .into_pyarray(py);
    let Some((fidelities, gradients)) = scored else {
        return Ok((states, None, None));
    };
    let gradients = Array3::from_shape_vec((tasks, segments, controls), gradients)
        .map_err(ragged)?
        .into_pyarray(py);
    Ok((
        states,
        Some(Array1::from_vec(fidelities).into_pyarray(py)),
        Some(gradients),
    ))
}

/// The seconds the Rust half of [`lindblad_run`] takes for the same arguments, `repeats` times
/// in a row: the request's checks, the evolution on the device and the conversion of the
/// states back into matrices, without the copies in and out of numpy. A benchmark hook, not
/// part of the API: `bench/lindblad_overhead.py` times `quench.lindblad.evolve` beside it in
/// the same process to measure what the Python call adds.
#[pyfunction]
#[pyo3(signature = (system, rho0, amplitudes, rates, t_total, method, dt, device, target, repeats))]
#[allow(clippy::too_many_arguments)] // `lindblad_run`'s arguments and the count.
pub fn lindblad_native_seconds<'py>(
    py: Python<'py>,
    system: PyRef<'py, NativeSystem>,
    rho0: PyReadonlyArrayDyn<'py, Complex64>,
    amplitudes: PyReadonlyArrayDyn<'py, f64>,
    rates: PyReadonlyArrayDyn<'py, f64>,
    t_total: f64,
    method: &str,
    dt: Option<f64>,
    device: &str,
    target: Option<PyReadonlyArrayDyn<'py, Complex64>>,
    repeats: usize,
) -> PyResult<Vec<f64>> {
    let (request, spec) = request(
        &system,
        &rho0,
        &amplitudes,
        &rates,
        t_total,
        method,
        dt,
        device,
        target.as_ref(),
    )?;
    guarded(py, move || {
        (0..repeats)
            .map(|_| {
                let call = request.clone();
                let start = std::time::Instant::now();
                call.run(spec)?;
                Ok(start.elapsed().as_secs_f64())
            })
            .collect()
    })
}

/// The arguments of [`lindblad_run`] copied out of Python into a [`Request`], shapes checked,
/// and the device parsed.
#[allow(clippy::too_many_arguments)] // Python's keyword arguments, passed through.
fn request(
    system: &NativeSystem,
    rho0: &PyReadonlyArrayDyn<'_, Complex64>,
    amplitudes: &PyReadonlyArrayDyn<'_, f64>,
    rates: &PyReadonlyArrayDyn<'_, f64>,
    t_total: f64,
    method: &str,
    dt: Option<f64>,
    device: &str,
    target: Option<&PyReadonlyArrayDyn<'_, Complex64>>,
) -> PyResult<(Request, quench_platform::DeviceSpec)> {
    let system = system.system.clone();
    let spec = device::parse(device)?;
    let (dim, controls, jumps) = (system.dim(), system.controls().len(), system.jumps().len());
    let shape = match amplitudes.shape() {
        &[tasks, segments, c] if c == controls && tasks >= 1 && segments >= 1 => {
            [tasks, segments, c]
        }
        found => {
            return Err(Failure::input(
                "amplitudes",
                format!(
                    "expected shape [tasks, segments, {controls}] (one column per control, \
                     tasks and segments >= 1), found {found:?}"
                ),
            )
            .into());
        }
    };
    let [tasks, _, _] = shape;
    if rates.shape() != [tasks, jumps] {
        return Err(Failure::input(
            "rates",
            format!(
                "expected shape [{tasks}, {jumps}] ([tasks, jumps], tasks as in amplitudes), \
                 found {:?}",
                rates.shape()
            ),
        )
        .into());
    }
    let amplitudes: Vec<f64> = crate::arrays::values(amplitudes);
    let rates: Vec<f64> = crate::arrays::values(rates);
    let per_task = match rho0.shape() {
        [r, c] if *r == dim && *c == dim => false,
        [t, r, c] if *t == tasks && *r == dim && *c == dim => true,
        found => {
            return Err(Failure::input(
                "rho0",
                format!(
                    "expected shape [{dim}, {dim}] or [{tasks}, {dim}, {dim}] ([d, d] or \
                     [tasks, d, d]), found {found:?}"
                ),
            )
            .into());
        }
    };
    let request = Request {
        system,
        shape,
        amplitudes,
        rates,
        rho0: crate::arrays::values(rho0),
        per_task,
        target: target.map(|t| target_state(dim, t)).transpose()?,
        t_total,
        method: method.to_string(),
        dt,
    };
    Ok((request, spec))
}

/// A call of [`lindblad_run`] with its arrays copied out of Python, shapes checked.
#[derive(Clone)]
struct Request {
    system: System,
    /// `[tasks, segments, controls]`.
    shape: [usize; 3],
    /// Row-major `shape`.
    amplitudes: Vec<f64>,
    /// Row-major `[tasks, jumps]`.
    rates: Vec<f64>,
    /// Row-major `[d, d]`, or `[tasks, d, d]` when `per_task`.
    rho0: Vec<Complex64>,
    per_task: bool,
    target: Option<CMatrix>,
    t_total: f64,
    method: String,
    dt: Option<f64>,
}

/// Final states row-major `[tasks, d, d]` and, with a target, fidelities `[tasks]` and
/// gradients `[tasks, segments, controls]`.
type Outcome = (Vec<Complex64>, Option<(Vec<f64>, Vec<f64>)>);

impl Request {
    /// Checks the values, evolves on the device `spec` names and turns the coordinates back
    /// into matrices. Runs inside [`guarded`]: without the GIL, panics caught.
    fn run(self, spec: quench_platform::DeviceSpec) -> Result<Outcome, Failure> {
        let [tasks, segments, controls] = self.shape;
        let (dim, jumps) = (self.system.dim(), self.system.jumps().len());
        // Sizes before any allocation (a failed one aborts the interpreter, which no panic
        // guard can catch): the solver's tensors (f32; twice, for the autodiff record of a
        // gradient) and per task on the host the initial and final coordinates (f64), the
        // complex output and the amplitudes' copies; per system the generator stack, `(1 +
        // controls + jumps)` real `d^2 x d^2` matrices, on the host and the device. Arrays
        // with a zero-sized axis cost nothing in numpy, so `tasks` is not bounded by what the
        // caller could allocate.
        let n = (dim * dim) as u128;
        let per_task = n * (2 * 8 + 16) + (segments * controls) as u128 * 16;
        let generators = (1 + controls + jumps) as u128 * n * n * (8 + 4);
        let solver = quench_lindblad::Solver::memory_estimate(tasks, segments, dim * dim, 4);
        quench_support::budget::check_fits(
            || format!("{tasks} tasks of dimension {dim} with {segments} segments"),
            (tasks as u128)
                .saturating_mul(per_task)
                .saturating_add(generators)
                .saturating_add(solver.saturating_mul(2)),
        )
        .map_err(|too_large| Failure::input("amplitudes", too_large))?;
        // Checked here, in f64 and against f32's range (the device's), so that the solver's
        // own checks on the device (a reduction and a read-back each) are not paid again.
        let fits_f32 = quench_support::numbers::fits_f32;
        if let Some(at) = self.amplitudes.iter().position(|&x| !fits_f32(x)) {
            let (t, s, c) = (
                at / (segments * controls),
                at / controls % segments,
                at % controls,
            );
            let x = self.amplitudes[at];
            return Err(Failure::input(
                &format!("amplitudes[{t}, {s}, {c}]"),
                format!(
                    "{} is not finite in f32, the device's precision",
                    quench_support::numbers::short(x)
                ),
            ));
        }
        if let Some(at) = self.rates.iter().position(|&x| !(fits_f32(x) && x >= 0.0)) {
            let (t, k) = (at / jumps, at % jumps);
            let x = self.rates[at];
            return Err(Failure::input(
                &format!("rates[{t}, {k}]"),
                format!(
                    "rate {} must be finite in f32 and non-negative",
                    quench_support::numbers::short(x)
                ),
            ));
        }
        let initial: Vec<CMatrix> = self
            .rho0
            .chunks(dim * dim)
            .map(|m| from_row_major(dim, m.to_vec()))
            .collect();
        for (t, rho) in initial.iter().enumerate() {
            let name = if self.per_task {
                format!("rho0[{t}]")
            } else {
                "rho0".to_string()
            };
            // The target is checked once, with the first state.
            let target = if t == 0 { self.target.as_ref() } else { None };
            check_states(&name, rho, target)?;
        }
        let method = Method::named(&self.method, self.dt)?;
        let basis = Basis::gell_mann(dim);
        let coordinates = initial
            .iter()
            .map(|rho| basis.coordinates(rho))
            .collect::<Result<Vec<_>, _>>()?;
        let initial: Vec<f64> = if self.per_task {
            coordinates.concat()
        } else {
            coordinates.concat().repeat(tasks)
        };
        let target = self.target.map(|t| basis.coordinates(&t)).transpose()?;
        let solver = Solver {
            method,
            // The clamps are bounds the exact method sizes its exponential for, not limits the
            // caller asked for: they are set so that nothing is clamped. The largest amplitude
            // is kept strictly inside (twice it), so that the clamp does not cut its gradient;
            // the rates are not differentiated, and their bound is their largest, as the pulse
            // documents set it. Neither goes below the library's defaults.
            // Capped at the largest finite number: twice an amplitude near f64's limit is
            // infinite, and the solver's own check then names the pulse, not a bound the
            // caller never set.
            control_bound: self
                .amplitudes
                .iter()
                .fold(0.0_f64, |m, x| m.max(2.0 * x.abs()))
                .clamp(Solver::default().control_bound, f64::MAX),
            rate_bound: self
                .rates
                .iter()
                .fold(0.0_f64, |m, x| m.max(*x))
                .max(Solver::default().rate_bound),
            ..Solver::default()
        };
        let work = Evolve {
            system: self.system,
            solver,
            t_total: self.t_total,
            shape: self.shape,
            amplitudes: self.amplitudes,
            rates: self.rates,
            initial,
            target,
        };
        let method = work.solver.method;
        let evolved = run_on(device::open(spec)?, work)
            .map_err(|error| Failure::Runtime(error.to_string()))??;
        let mut states = Vec::with_capacity(tasks * dim * dim);
        for (task, coordinates) in evolved.states.chunks(basis.size()).enumerate() {
            // A state the solver made unphysical (a step too large, an overflow) is refused
            // as the pulse documents refuse it, not handed back.
            let rho = basis.operator(coordinates)?;
            states::check_result(&rho, task, method)?;
            states.extend_from_slice(rho.as_slice());
        }
        Ok((states, evolved.scored))
    }
}

/// The pure target state `target`: a state vector `[d]` (as the density matrix
/// `|psi><psi|`) or a density matrix `[d, d]`; checked with the initial states.
fn target_state(
    dim: usize,
    target: &PyReadonlyArrayDyn<'_, Complex64>,
) -> Result<CMatrix, Failure> {
    match target.shape() {
        [d] if *d == dim => {
            let psi: Vec<Complex64> = crate::arrays::values(target);
            Ok(CMatrix::from_fn(dim, |r, c| psi[r] * psi[c].conj()))
        }
        [r, c] if *r == dim && *c == dim => matrix("target", target),
        found => Err(Failure::input(
            "target",
            format!(
                "expected a state vector [{dim}] or a density matrix [{dim}, {dim}], found \
                 shape {found:?}"
            ),
        )),
    }
}
