//! `quench.circuit`: `<Z_i>` of circuits written as the JSON interface's gate dicts, and one
//! circuit run on arrays of per-sample inputs and shared weights, with `<Z_i Z_j>` and the
//! gradients of both.

use burn::tensor::Tensor;
use burn::tensor::backend::Backend;
use numpy::ndarray::{Array1, Array2};
use numpy::{
    IntoPyArray, PyArray1, PyArray2, PyReadonlyArray1, PyReadonlyArray2, PyUntypedArrayMethods,
};
use pyo3::prelude::*;
use quench_circuit::json::{Document, JsonError, Template};
use quench_circuit::{Mode, Simulator, fusion_pays};
use quench_kernels::readback::float_tensor;
use quench_kernels::reductions::Reduce;
use quench_kernels::{OnDevice, QuenchBackend, QuenchOps, SelectedDevice, run_on};

use crate::device;
use crate::errors::{Failure, guarded};

/// The simulation of a parsed document on one backend.
struct Expectations {
    document: Document,
    /// Bytes the simulation may take (`None`: no limit).
    limit: Option<u128>,
}

impl OnDevice for Expectations {
    type Output = Result<Vec<Vec<f64>>, JsonError>;

    fn run<B: QuenchBackend>(self, device: &B::Device) -> Self::Output {
        // Nothing is differentiated: the backend without autodiff's bookkeeping.
        self.document
            .expectations::<B::InnerBackend>(device, self.limit)
    }
}

/// `<Z_i>` `[circuits, qubits]` of `document`, the JSON interface's text
/// `{"qubits": n, "circuits": [[{"gate": .., "wires": [..], "angle"?: ..}, ..], ..]}` (the
/// Python side writes it from the caller's lists), on `device`. Parsed and checked by
/// `quench_circuit::json::Document::parse`, so that the errors are its one-line messages
/// naming circuit and gate.
#[pyfunction]
pub fn circuit_expectations<'py>(
    py: Python<'py>,
    document: &str,
    device: &str,
) -> PyResult<Bound<'py, PyArray2<f64>>> {
    let spec = device::parse(device)?;
    let document = document.to_string();
    let (rows, qubits) = guarded(py, move || {
        let document = Document::parse(&document)?;
        let selected = device::open(spec)?;
        // As the command-line example: the host's memory bounds a CPU run; a GPU's memory is
        // not known here, and its allocator reports what does not fit.
        let limit = match selected {
            SelectedDevice::Cpu => {
                quench_support::budget::host_limit().map(|limit| u128::from(limit.bytes))
            }
            SelectedDevice::Cuda(_) | SelectedDevice::Wgpu(_) => None,
        };
        let qubits = document.qubits;
        let rows = run_on(selected, Expectations { document, limit })
            .map_err(|error| Failure::Runtime(error.to_string()))??;
        Ok((rows, qubits))
    })?;
    let circuits = rows.len();
    let flat: Vec<f64> = rows.into_iter().flatten().collect();
    let array = Array2::from_shape_vec((circuits, qubits), flat).map_err(|error| {
        Failure::Runtime(format!("the simulator returned a ragged result: {error}"))
    })?;
    Ok(array.into_pyarray(py))
}

/// A template's run with its arrays copied out of Python, shapes checked.
struct Run {
    template: Template,
    /// Rows of the batch.
    batch: usize,
    /// Row-major `[batch, inputs]`.
    inputs: Vec<f64>,
    /// `[weights]`.
    weights: Vec<f64>,
    /// The pairs `(i, j)` of `<Z_i Z_j>`.
    pairs: Vec<(usize, usize)>,
    /// Row-major `[batch, qubits]` and `[batch, pairs]`: the cotangents of the outputs whose
    /// vector-Jacobian product is asked for, if any.
    cotangents: Option<(Vec<f64>, Vec<f64>)>,
}

/// `<Z_i>` row-major `[batch, qubits]`, `<Z_i Z_j>` `[batch, pairs]`, and with cotangents
/// the gradients of `sum(z dz) + sum(zz dzz)` with respect to the inputs `[batch, inputs]`
/// and the weights `[weights]`.
type RunOutcome = (Vec<f64>, Vec<f64>, Option<(Vec<f64>, Vec<f64>)>);

/// A tensor's values as f64; a failed read-back is the device's failure.
fn values<E: Backend, const D: usize>(t: Tensor<E, D>) -> Result<Vec<f64>, Failure> {
    t.into_data()
        .convert::<f64>()
        .to_vec()
        .map_err(|e| Failure::Runtime(format!("reading the results back: {e:?}")))
}

/// What a forward pass leaves: `<Z_i>`, `<Z_i Z_j>` (if pairs were asked for), and the input
/// and weight tensors (tracked for gradients on an autodiff backend).
struct Forward<E: Backend> {
    z: Tensor<E, 2>,
    zz: Option<Tensor<E, 2>>,
    inputs: Option<Tensor<E, 2>>,
    weights: Option<Tensor<E, 2>>,
}

impl OnDevice for Run {
    type Output = Result<RunOutcome, Failure>;

    fn run<B: QuenchBackend>(self, device: &B::Device) -> Self::Output {
        if self.cotangents.is_some() {
            return self.with_gradients::<B>(device);
        }
        // Nothing is differentiated: the backend without autodiff's bookkeeping.
        let pass = self.forward::<B::InnerBackend>(device)?;
        let zz = pass.zz.map_or(Ok(Vec::new()), values)?;
        Ok((values(pass.z)?, zz, None))
    }
}

impl Run {
    /// The forward pass on backend `E`, the inputs and weights tracked for gradients where
    /// `E` differentiates.
    fn forward<E: QuenchOps>(&self, device: &E::Device) -> Result<Forward<E>, Failure> {
        let circuit = &self.template.circuit;
        let tracked = |values: &[f64], shape: [usize; 2]| {
            float_tensor::<E, f64, 2>(values.to_vec(), shape, device).require_grad()
        };
        let inputs =
            (circuit.inputs() > 0).then(|| tracked(&self.inputs, [self.batch, circuit.inputs()]));
        let weights =
            (circuit.weights() > 0).then(|| tracked(&self.weights, [1, circuit.weights()]));
        // Without pairs only `<Z_i>` is asked: the fused read-out (for a real circuit the seam's
        // operation, one kernel each way on a GPU; otherwise the states, fused where it pays).
        let mode = if self.pairs.is_empty() || fusion_pays(circuit.qubits(), self.batch) {
            Mode::Fused
        } else {
            Mode::GateByGate
        };
        let simulator = Simulator::<E>::new(circuit.clone(), mode, device).map_err(input)?;
        if self.pairs.is_empty() {
            let z = simulator
                .expectations(self.batch, inputs.clone(), weights.clone())
                .map_err(input)?;
            return Ok(Forward {
                z,
                zz: None,
                inputs,
                weights,
            });
        }
        let state = simulator
            .run(self.batch, inputs.clone(), weights.clone())
            .map_err(input)?;
        let z = simulator.z_expectations(&state).map_err(input)?;
        let zz = Some(
            simulator
                .zz_expectations(&state, &self.pairs)
                .map_err(input)?,
        );
        Ok(Forward {
            z,
            zz,
            inputs,
            weights,
        })
    }

    /// The forward pass on the autodiff backend and the vector-Jacobian product of the
    /// cotangents.
    fn with_gradients<B: QuenchBackend>(&self, device: &B::Device) -> Result<RunOutcome, Failure> {
        let pass = self.forward::<B>(device)?;
        let (dz, dzz) = self.cotangents.clone().unwrap_or_default();
        let qubits = self.template.circuit.qubits();
        let dz = float_tensor::<B, f64, 2>(dz, [self.batch, qubits], device);
        let mut objective = (pass.z.clone() * dz).sum_all();
        if let Some(zz) = &pass.zz {
            let dzz = float_tensor::<B, f64, 2>(dzz, [self.batch, self.pairs.len()], device);
            objective = objective + (zz.clone() * dzz).sum_all();
        }
        let grads = objective.backward();
        let circuit = &self.template.circuit;
        // An input or weight no gate reads has no gradient: zeros, as it is.
        let gradient =
            |t: &Option<Tensor<B, 2>>, len: usize| match t.as_ref().and_then(|t| t.grad(&grads)) {
                Some(g) => values(g),
                None => Ok(vec![0.0; len]),
            };
        let d_inputs = gradient(&pass.inputs, self.batch * circuit.inputs())?;
        let d_weights = gradient(&pass.weights, circuit.weights())?;
        // Each cotangent is finite in f32, but their products and sums with the derivatives
        // can pass f32::MAX: a gradient of inf or NaN is refused, not returned.
        if !d_inputs.iter().chain(&d_weights).all(|g| g.is_finite()) {
            return Err(Failure::input(
                "z_cotangent, zz_cotangent",
                "the gradients overflow f32, the device's precision, with cotangents this \
                 large: scale the cotangents down (and the gradients up) by a common factor",
            ));
        }
        let zz = pass.zz.map_or(Ok(Vec::new()), |t| values(t.inner()))?;
        Ok((values(pass.z.inner())?, zz, Some((d_inputs, d_weights))))
    }
}

/// A circuit's refusal as the caller's input error.
fn input(error: quench_circuit::CircuitError) -> Failure {
    Failure::Input(error.to_string())
}

/// The rows of a 2-D array as a row-major vector after checking its shape against `[rows,
/// columns]` (`None` for either: any).
fn matrix(
    name: &str,
    array: &PyReadonlyArray2<'_, f64>,
    rows: Option<usize>,
    columns: usize,
) -> Result<Vec<f64>, Failure> {
    let shape = array.shape();
    if shape[1] != columns || rows.is_some_and(|r| r != shape[0]) {
        let rows = rows.map_or("batch".to_string(), |r| r.to_string());
        return Err(Failure::input(
            name,
            format!("expected shape [{rows}, {columns}], found {shape:?}"),
        ));
    }
    let values: Vec<f64> = crate::arrays::values(array);
    if let Some(at) = values
        .iter()
        .position(|&x| !quench_support::numbers::fits_f32(x))
    {
        let (r, c) = (at / columns.max(1), at % columns.max(1));
        return Err(Failure::input(
            &format!("{name}[{r}, {c}]"),
            format!(
                "{} is not finite in f32, the device's precision",
                quench_support::numbers::short(values[at])
            ),
        ));
    }
    Ok(values)
}

/// Runs the circuit `template` (the text of `quench_circuit::json::Template`: `{"qubits": n,
/// "gates": [..]}`, angles fixed, `{"input": k}` or `{"weight": k}`) on `device` for a batch of
/// `inputs` rows `[batch, inputs]` (one row when the circuit reads no input) with the shared
/// `weights` `[weights]`. Returns `<Z_i>` `[batch, qubits]`, `<Z_i Z_j>` `[batch, pairs]` for
/// each of `pairs`, and, when `z_cotangent` `[batch, qubits]` (and, with pairs,
/// `zz_cotangent` `[batch, pairs]`) is given, the gradients of `sum(z z_cotangent) + sum(zz
/// zz_cotangent)` with respect to the inputs `[batch, inputs]` and the weights `[weights]`.
#[pyfunction]
#[pyo3(signature = (template, inputs, weights, pairs, z_cotangent, zz_cotangent, device))]
#[allow(clippy::too_many_arguments)] // Python's keyword arguments, passed through.
pub fn circuit_run<'py>(
    py: Python<'py>,
    template: &str,
    inputs: Option<PyReadonlyArray2<'py, f64>>,
    weights: Option<PyReadonlyArray1<'py, f64>>,
    pairs: Vec<(usize, usize)>,
    z_cotangent: Option<PyReadonlyArray2<'py, f64>>,
    zz_cotangent: Option<PyReadonlyArray2<'py, f64>>,
    device: &str,
) -> PyResult<CircuitRun<'py>> {
    let spec = device::parse(device)?;
    let template = Template::parse(template).map_err(Failure::from)?;
    let circuit = &template.circuit;
    let (qubits, n_inputs, n_weights) = (circuit.qubits(), circuit.inputs(), circuit.weights());
    let (batch, inputs) = match &inputs {
        Some(array) => {
            let values = matrix("inputs", array, None, n_inputs)?;
            (array.shape()[0], values)
        }
        None if n_inputs > 0 => {
            return Err(Failure::input(
                "inputs",
                format!("the circuit reads {n_inputs} input column(s): give [batch, {n_inputs}]"),
            )
            .into());
        }
        None => (1, Vec::new()),
    };
    if batch == 0 {
        return Err(Failure::input("inputs", "no rows: the batch is empty").into());
    }
    let weights: Vec<f64> = match &weights {
        Some(array) if array.len() == n_weights => crate::arrays::values(array),
        None if n_weights == 0 => Vec::new(),
        other => {
            let found = other.as_ref().map_or(0, |a| a.len());
            return Err(Failure::input(
                "weights",
                format!("the circuit reads {n_weights} weight(s), found {found}"),
            )
            .into());
        }
    };
    if let Some(at) = weights
        .iter()
        .position(|&x| !quench_support::numbers::fits_f32(x))
    {
        return Err(Failure::input(
            &format!("weights[{at}]"),
            format!(
                "{} is not finite in f32, the device's precision",
                quench_support::numbers::short(weights[at])
            ),
        )
        .into());
    }
    if let Some(&(i, j)) = pairs.iter().find(|&&(i, j)| i >= qubits || j >= qubits) {
        return Err(Failure::input(
            "pairs",
            format!("({i}, {j}) names a wire beyond the circuit's {qubits} qubits"),
        )
        .into());
    }
    let cotangents = match (&z_cotangent, &zz_cotangent) {
        (None, None) => None,
        (Some(dz), dzz) => {
            let dz = matrix("z_cotangent", dz, Some(batch), qubits)?;
            let dzz = match dzz {
                Some(dzz) => matrix("zz_cotangent", dzz, Some(batch), pairs.len())?,
                None => vec![0.0; batch * pairs.len()],
            };
            Some((dz, dzz))
        }
        (None, Some(_)) => {
            return Err(Failure::input(
                "zz_cotangent",
                "given without z_cotangent (pass zeros for an output not in the objective)",
            )
            .into());
        }
    };
    let run = Run {
        template,
        batch,
        inputs,
        weights,
        pairs,
        cotangents,
    };
    let n_pairs = run.pairs.len();
    let (z, zz, grads) = guarded(py, move || {
        run_on(device::open(spec)?, run).map_err(|error| Failure::Runtime(error.to_string()))?
    })?;
    let ragged = |error: numpy::ndarray::ShapeError| {
        Failure::Runtime(format!(
            "the simulator returned a result of the wrong size: {error}"
        ))
    };
    let z = Array2::from_shape_vec((batch, qubits), z)
        .map_err(ragged)?
        .into_pyarray(py);
    let zz = Array2::from_shape_vec((batch, n_pairs), zz)
        .map_err(ragged)?
        .into_pyarray(py);
    let grads = match grads {
        Some((d_inputs, d_weights)) => Some((
            Array2::from_shape_vec((batch, n_inputs), d_inputs)
                .map_err(ragged)?
                .into_pyarray(py),
            Array1::from_vec(d_weights).into_pyarray(py),
        )),
        None => None,
    };
    Ok((z, zz, grads))
}

/// What [`circuit_run`] returns: `<Z_i>`, `<Z_i Z_j>` and, with cotangents, the gradients of
/// the inputs and weights.
type CircuitRun<'py> = (
    Bound<'py, PyArray2<f64>>,
    Bound<'py, PyArray2<f64>>,
    Option<(Bound<'py, PyArray2<f64>>, Bound<'py, PyArray1<f64>>)>,
);
