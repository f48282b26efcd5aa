//! Pulse documents: the JSON input of the `evolve` example, read with field-by-field
//! validation, and its JSON output (the format is in the crate documentation).

use quench_kernels::QuenchOps;
use quench_support::stats::max_or_nan;
use std::fmt;

use burn::tensor::{Element, Tensor, TensorData};
use num_complex::Complex64;
use serde::Serialize;
use serde_json::{Map, Value};

use crate::states;
use crate::system::check_dim;
use crate::{Basis, Batch, CMatrix, Generators, LindbladError, Method, Output, Solver, System};
use quench_support::numbers::short;

/// Fields of the document, in the order of the documentation.
const FIELDS: [&str; 12] = [
    "dim",
    "t_total",
    "h0",
    "controls",
    "jumps",
    "rho0",
    "target",
    "method",
    "dt",
    "control_bound",
    "max_substeps",
    "tasks",
];

/// One task of a document: the rates of its jumps and its piecewise-constant amplitudes.
#[derive(Clone, Debug, PartialEq)]
pub struct JobTask {
    /// One rate per jump operator, in units of `1 / T`.
    pub rates: Vec<f64>,
    /// One row of amplitudes (one per control) per segment.
    pub amplitudes: Vec<Vec<f64>>,
}

/// A validated pulse document.
#[derive(Clone, Debug, PartialEq)]
pub struct Job {
    /// The system of `h0`, `controls` and `jumps`.
    pub system: System,
    /// Total pulse time `T`.
    pub t_total: f64,
    /// The initial density matrix.
    pub rho0: CMatrix,
    /// The pure target state, if any.
    pub target: Option<CMatrix>,
    /// Method and bounds; the rate bound is the largest rate of the document, so that no
    /// rate is clamped.
    pub solver: Solver,
    /// The tasks, all with the same number of segments.
    pub tasks: Vec<JobTask>,
}

/// An amplitude of a document beyond `control_bound`, which the solver clamps to the bound
/// on the device (see [`Job::clamped_amplitudes`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ClampedAmplitude {
    /// The task, from 0.
    pub task: usize,
    /// The segment, from 0.
    pub segment: usize,
    /// The control, from 0.
    pub control: usize,
    /// The amplitude in the document.
    pub value: f64,
    /// The `control_bound` it exceeds.
    pub bound: f64,
}

impl fmt::Display for ClampedAmplitude {
    /// One line naming task, segment, value and bound, e.g. `task 0, segment 3: amplitude
    /// 1e300 of control 1 is beyond control_bound = 10 and is clamped to 10
    /// (tasks[0].amplitudes[3][1])`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Self {
            task,
            segment,
            control,
            value,
            bound,
        } = *self;
        write!(
            f,
            "task {task}, segment {segment}: amplitude {} of control {control} is beyond \
             control_bound = {} and is clamped to {} (tasks[{task}].amplitudes[{segment}][{control}])",
            short(value),
            short(bound),
            short(bound.copysign(value)),
        )
    }
}

/// The output for one task.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TaskReport {
    /// The final density matrix, rows of `[re, im]` pairs.
    pub rho: Vec<Vec<[f64; 2]>>,
    /// `Tr(rho target)`, when the document has a target.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fidelity: Option<f64>,
}

/// The output document: one report per task, in input order.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct JobReport {
    /// The tasks' results.
    pub tasks: Vec<TaskReport>,
}

fn child(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

fn required<'a>(
    object: &'a Map<String, Value>,
    path: &str,
    key: &str,
) -> Result<&'a Value, LindbladError> {
    object
        .get(key)
        .ok_or_else(|| LindbladError::input(child(path, key), "missing"))
}

fn number(value: &Value, path: &str) -> Result<f64, LindbladError> {
    match value.as_f64() {
        Some(x) if x.is_finite() => Ok(x),
        _ => Err(LindbladError::input(
            path,
            format!("expected a finite number, found {}", kind(value)),
        )),
    }
}

/// The error for a document that serde_json refuses. A number beyond the range of `f64`
/// (`1e400`: serde_json refuses it rather than reading infinity) and the non-JSON `NaN` and
/// `Infinity` are named by their field, where the rest of the document parses.
fn json_error(text: &str, error: &serde_json::Error) -> LindbladError {
    if let Some((field, token)) = non_finite_field(text, error) {
        let digits = token.trim_start_matches(['+', '-']);
        let why = if digits.starts_with(|c: char| c.is_ascii_digit() || c == '.') {
            "is beyond the range of a 64-bit float (magnitude above 1.8e308)"
        } else {
            "is not a JSON number"
        };
        return LindbladError::input(field, format!("{token} {why}; expected a finite number"));
    }
    let mut message = error.to_string();
    if message.starts_with("number out of range") {
        message.push_str(" (beyond the range of a 64-bit float, magnitude above 1.8e308)");
    }
    LindbladError::Json {
        line: error.line(),
        column: error.column(),
        message,
    }
}

/// Where `error` points at a number token that reads as non-finite (`1e400`, `-Infinity`,
/// `NaN`), the path of its field and the token: the token is replaced by a marker string (any
/// later such token by `null`) and the marker looked up in the parsed document.
fn non_finite_field(text: &str, error: &serde_json::Error) -> Option<(String, String)> {
    /// More such tokens than this and the document is not worth parsing again and again.
    const MAX_REPLACED: usize = 64;
    let marker = (0..)
        .map(|n| format!("quench-non-finite-{n}"))
        .find(|m| !text.contains(m.as_str()))?;
    let mut patched = text.to_string();
    let (mut line, mut column) = (error.line(), error.column());
    let mut first = None;
    for _ in 0..MAX_REPLACED {
        let (start, end) = token_at(&patched, line, column)?;
        let token = &patched[start..end];
        if !token.parse::<f64>().is_ok_and(|x| !x.is_finite()) {
            return None;
        }
        let replacement = if first.is_none() {
            first = Some(token.to_string());
            format!("\"{marker}\"")
        } else {
            "null".to_string()
        };
        patched.replace_range(start..end, &replacement);
        match serde_json::from_str::<Value>(&patched) {
            Ok(document) => {
                let path = path_of(&document, &marker, "")?;
                let path = if path.is_empty() {
                    "(document)".to_string()
                } else {
                    path
                };
                return Some((path, first?));
            }
            Err(next) => (line, column) = (next.line(), next.column()),
        }
    }
    None
}

/// The byte range of the number-like token (letters, digits, `+ - .`) at serde_json's
/// 1-based `line` and `column` (a byte count) of `text`.
fn token_at(text: &str, line: usize, column: usize) -> Option<(usize, usize)> {
    let part = |b: &u8| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.');
    let line_start = if line <= 1 {
        0
    } else {
        text.match_indices('\n').nth(line - 2)?.0 + 1
    };
    let at = line_start + column.checked_sub(1)?;
    let bytes = text.as_bytes();
    if !bytes.get(at).is_some_and(part) {
        return None;
    }
    let start = bytes[..at]
        .iter()
        .rposition(|b| !part(b))
        .map_or(0, |p| p + 1);
    let end = bytes[at..]
        .iter()
        .position(|b| !part(b))
        .map_or(bytes.len(), |p| at + p);
    Some((start, end))
}

/// The path (as the errors write it, `tasks[0].amplitudes[1][0]`) of the string `marker`.
fn path_of(value: &Value, marker: &str, path: &str) -> Option<String> {
    match value {
        Value::String(s) if s == marker => Some(path.to_string()),
        Value::Array(items) => items
            .iter()
            .enumerate()
            .find_map(|(i, item)| path_of(item, marker, &format!("{path}[{i}]"))),
        Value::Object(fields) => fields
            .iter()
            .find_map(|(key, item)| path_of(item, marker, &child(path, key))),
        _ => None,
    }
}

fn list<'a>(value: &'a Value, path: &str) -> Result<&'a Vec<Value>, LindbladError> {
    value.as_array().ok_or_else(|| {
        LindbladError::input(path, format!("expected a list, found {}", kind(value)))
    })
}

fn sized_list<'a>(
    value: &'a Value,
    path: &str,
    len: usize,
    what: &str,
) -> Result<&'a Vec<Value>, LindbladError> {
    let items = list(value, path)?;
    if items.len() == len {
        Ok(items)
    } else {
        Err(LindbladError::input(
            path,
            format!("expected {len} {what}, found {}", items.len()),
        ))
    }
}

fn numbers(value: &Value, path: &str, len: usize, what: &str) -> Result<Vec<f64>, LindbladError> {
    sized_list(value, path, len, what)?
        .iter()
        .enumerate()
        .map(|(i, x)| number(x, &format!("{path}[{i}]")))
        .collect()
}

fn matrix(value: &Value, path: &str, dim: usize) -> Result<CMatrix, LindbladError> {
    let rows = sized_list(value, path, dim, "rows")?;
    let mut entries = Vec::with_capacity(dim * dim);
    for (r, row) in rows.iter().enumerate() {
        let row_path = format!("{path}[{r}]");
        for (c, entry) in sized_list(row, &row_path, dim, "entries")?
            .iter()
            .enumerate()
        {
            let pair = numbers(entry, &format!("{row_path}[{c}]"), 2, "numbers [re, im]")?;
            entries.push(Complex64::new(pair[0], pair[1]));
        }
    }
    Ok(CMatrix::from_fn(dim, |r, c| entries[r * dim + c]))
}

fn hermitian(value: &Value, path: &str, dim: usize) -> Result<CMatrix, LindbladError> {
    let m = matrix(value, path, dim)?;
    states::check_hermitian(&m, path)?;
    Ok(m)
}

fn density_matrix(value: &Value, path: &str, dim: usize) -> Result<CMatrix, LindbladError> {
    let rho = matrix(value, path, dim)?;
    states::check_density_matrix(&rho, path)?;
    Ok(rho)
}

fn method(object: &Map<String, Value>) -> Result<Method, LindbladError> {
    let name = required(object, "", "method")?;
    let name = name.as_str().ok_or_else(|| {
        LindbladError::input(
            "method",
            format!("expected \"exact\", \"rk4\" or \"euler\", found {name}"),
        )
    })?;
    let dt = object.get("dt").map(|dt| number(dt, "dt")).transpose()?;
    Method::named(name, dt)
}

fn tasks(value: &Value, controls: usize, jumps: usize) -> Result<Vec<JobTask>, LindbladError> {
    let items = list(value, "tasks")?;
    if items.is_empty() {
        return Err(LindbladError::input("tasks", "expected at least one task"));
    }
    let mut segments = None;
    items
        .iter()
        .enumerate()
        .map(|(t, item)| {
            let path = format!("tasks[{t}]");
            let object = item.as_object().ok_or_else(|| {
                LindbladError::input(&path, format!("expected an object, found {}", kind(item)))
            })?;
            if let Some(key) = object.keys().find(|k| *k != "rates" && *k != "amplitudes") {
                return Err(LindbladError::input(child(&path, key), "unknown field"));
            }
            let rates_path = child(&path, "rates");
            let rates = numbers(
                required(object, &path, "rates")?,
                &rates_path,
                jumps,
                "rates (one per jump)",
            )?;
            if let Some((k, &rate)) = rates.iter().enumerate().find(|(_, r)| **r < 0.0) {
                return Err(LindbladError::input(
                    format!("{rates_path}[{k}]"),
                    format!("negative rate {rate}"),
                ));
            }
            let amplitudes_path = child(&path, "amplitudes");
            let rows = list(required(object, &path, "amplitudes")?, &amplitudes_path)?;
            if rows.is_empty() {
                return Err(LindbladError::input(
                    amplitudes_path,
                    "no segments: a task needs at least one row of amplitudes (one per segment)",
                ));
            }
            let expected = *segments.get_or_insert(rows.len());
            if rows.len() != expected {
                return Err(LindbladError::input(
                    amplitudes_path,
                    format!(
                        "expected {expected} segments (as tasks[0]), found {}",
                        rows.len()
                    ),
                ));
            }
            let amplitudes = rows
                .iter()
                .enumerate()
                .map(|(s, row)| {
                    numbers(
                        row,
                        &format!("{amplitudes_path}[{s}]"),
                        controls,
                        "numbers (one per control)",
                    )
                })
                .collect::<Result<_, _>>()?;
            Ok(JobTask { rates, amplitudes })
        })
        .collect()
}

impl Job {
    /// Reads and validates a document; the error names the offending field.
    pub fn from_json(text: &str) -> Result<Self, LindbladError> {
        // A key given twice (`"dim": 2, "dim": 3`) is refused: serde_json's `Value` keeps the
        // last one without a word.
        let document =
            quench_support::json::parse_strict(text).map_err(|e| json_error(text, &e))?;
        let object = document.as_object().ok_or_else(|| {
            LindbladError::input(
                "(document)",
                format!("expected an object, found {}", kind(&document)),
            )
        })?;
        if let Some(key) = object.keys().find(|k| !FIELDS.contains(&k.as_str())) {
            return Err(LindbladError::input(key.as_str(), "unknown field"));
        }
        let dim = match required(object, "", "dim")?.as_u64() {
            Some(d) if d >= 1 => d as usize,
            _ => return Err(LindbladError::input("dim", "expected an integer >= 1")),
        };
        // Before any matrix is read: a huge `dim` is refused without reading d^2 entries.
        check_dim(dim, "dim")?;
        let t_total = number(required(object, "", "t_total")?, "t_total")?;
        if t_total <= 0.0 {
            return Err(LindbladError::input(
                "t_total",
                format!("must be positive, found {t_total}"),
            ));
        }
        let drift = hermitian(required(object, "", "h0")?, "h0", dim)?;
        let controls = list(required(object, "", "controls")?, "controls")?
            .iter()
            .enumerate()
            .map(|(c, m)| hermitian(m, &format!("controls[{c}]"), dim))
            .collect::<Result<Vec<_>, _>>()?;
        let jumps = list(required(object, "", "jumps")?, "jumps")?
            .iter()
            .enumerate()
            .map(|(k, m)| matrix(m, &format!("jumps[{k}]"), dim))
            .collect::<Result<Vec<_>, _>>()?;
        let rho0 = density_matrix(required(object, "", "rho0")?, "rho0", dim)?;
        let target = match object.get("target") {
            None | Some(Value::Null) => None,
            Some(value) => {
                let target = matrix(value, "target", dim)?;
                states::check_pure_state(&target, "target")?;
                Some(target)
            }
        };
        let control_bound = match object.get("control_bound") {
            None | Some(Value::Null) => Solver::default().control_bound,
            Some(value) => {
                let bound = number(value, "control_bound")?;
                if bound < 0.0 {
                    return Err(LindbladError::input(
                        "control_bound",
                        format!("must be non-negative, found {bound}"),
                    ));
                }
                bound
            }
        };
        let max_substeps = match object.get("max_substeps") {
            None | Some(Value::Null) => Solver::default().max_substeps,
            Some(value) => match value.as_u64() {
                Some(limit) if limit >= 1 => limit,
                _ => {
                    return Err(LindbladError::input(
                        "max_substeps",
                        format!("expected an integer >= 1, found {value}"),
                    ));
                }
            },
        };
        let method = method(object)?;
        let tasks = tasks(required(object, "", "tasks")?, controls.len(), jumps.len())?;
        // NaN-aware, though the rates were checked finite, so that none can slip past.
        let rate_bound = max_or_nan(tasks.iter().flat_map(|t| t.rates.iter().copied()));
        let system = System::new(drift, controls, jumps)
            .map_err(|e| LindbladError::input("h0", e.to_string()))?;
        let solver = Solver {
            method,
            control_bound,
            rate_bound,
            renormalize: false,
            max_substeps,
            ..Solver::default()
        };
        // Refused here, before anything is uploaded, rather than at the start of `run`.
        solver.validate()?;
        let segments = tasks[0].amplitudes.len();
        solver.check_substeps(t_total, segments, tasks.len())?;
        // Before anything is allocated from the sizes (a failed allocation aborts): the
        // solver's tensors in f64 (the widest a caller runs) and the host's flat copies of
        // the amplitudes, rates and states.
        let n = system.dim() * system.dim();
        let per_task = segments * system.controls().len() + system.jumps().len() + 2 * n;
        quench_support::budget::check_fits(
            || format!("{} tasks of {segments} segments", tasks.len()),
            Solver::memory_estimate(tasks.len(), segments, n, 8)
                .saturating_add((tasks.len() as u128).saturating_mul(per_task as u128 * 8)),
        )?;
        Ok(Self {
            system,
            t_total,
            rho0,
            target,
            solver,
            tasks,
        })
    }

    /// The amplitudes beyond `control_bound`, in task, segment, control order. The solver
    /// clamps them on the device without a word (nothing is read back in its loop), so this is
    /// where a caller learns of it: the `evolve` example prints one warning line for each.
    pub fn clamped_amplitudes(&self) -> Vec<ClampedAmplitude> {
        let bound = self.solver.control_bound;
        let mut clamped = Vec::new();
        for (task, t) in self.tasks.iter().enumerate() {
            for (segment, row) in t.amplitudes.iter().enumerate() {
                for (control, &value) in row.iter().enumerate() {
                    // Non-finite values are not clamped but refused, by `run`.
                    if value.is_finite() && value.abs() > bound {
                        clamped.push(ClampedAmplitude {
                            task,
                            segment,
                            control,
                            value,
                            bound,
                        });
                    }
                }
            }
        }
        clamped
    }

    /// Refuses a non-finite amplitude or rate, naming the task and segment: a document never
    /// holds one ([`Self::from_json`] refuses them), but the fields are public, and the
    /// device clamp would pass a NaN through to every state.
    fn check_finite(&self) -> Result<(), LindbladError> {
        for (t, task) in self.tasks.iter().enumerate() {
            for (s, row) in task.amplitudes.iter().enumerate() {
                if let Some((c, x)) = row.iter().enumerate().find(|(_, x)| !x.is_finite()) {
                    return Err(LindbladError::input(
                        format!("tasks[{t}].amplitudes[{s}][{c}]"),
                        format!("task {t}, segment {s}: amplitude {x} is not finite"),
                    ));
                }
            }
            if let Some((k, x)) = task.rates.iter().enumerate().find(|(_, x)| !x.is_finite()) {
                return Err(LindbladError::input(
                    format!("tasks[{t}].rates[{k}]"),
                    format!("task {t}: rate {x} is not finite"),
                ));
            }
        }
        Ok(())
    }

    /// Evolves every task on `device` and reads the results back. Amplitudes beyond
    /// `control_bound` are clamped (see [`Self::clamped_amplitudes`]); non-finite amplitudes
    /// or rates are refused.
    pub fn run<B: QuenchOps>(&self, device: &B::Device) -> Result<JobReport, LindbladError> {
        self.check_finite()?;
        let generators = Generators::<B>::upload(&self.system, device);
        let basis = Basis::gell_mann(self.system.dim());
        let tasks = self.tasks.len();
        let segments = self.tasks[0].amplitudes.len();
        let (controls, jumps, n) = (generators.controls(), generators.jumps(), basis.size());
        let amplitudes: Vec<f64> = self
            .tasks
            .iter()
            .flat_map(|t| t.amplitudes.iter().flatten().copied())
            .collect();
        let rates: Vec<f64> = self
            .tasks
            .iter()
            .flat_map(|t| t.rates.iter().copied())
            .collect();
        let initial = basis.coordinates(&self.rho0)?.repeat(tasks);
        let float = (device, <B::FloatElem as Element>::dtype());
        let batch = Batch {
            t_total: self.t_total,
            amplitudes: Tensor::from_data(
                TensorData::new(amplitudes, [tasks, segments, controls]),
                float,
            ),
            rates: Tensor::from_data(TensorData::new(rates, [tasks, jumps]), float),
            initial: Tensor::from_data(TensorData::new(initial, [tasks, n]), float),
        };
        // Each final state is checked on the host below, where it is read anyway.
        let evolution =
            self.solver
                .evolve_without_finite_checks(&generators, batch, Output::States)?;
        let states = evolution
            .states
            .into_data()
            .convert::<f64>()
            .to_vec::<f64>()
            .map_err(|e| LindbladError::ReadBack {
                what: "states",
                message: format!("{e:?}"),
            })?;
        let reports = states
            .chunks(n)
            .enumerate()
            .map(|(task, coordinates)| {
                let rho = basis.operator(coordinates)?;
                states::check_result(&rho, task, self.solver.method)?;
                Ok(TaskReport {
                    rho: rho
                        .rows()
                        .iter()
                        .map(|row| row.iter().map(|z| [z.re, z.im]).collect())
                        .collect(),
                    fidelity: self.target.as_ref().map(|t| rho.trace_product(t).re),
                })
            })
            .collect::<Result<_, LindbladError>>()?;
        Ok(JobReport { tasks: reports })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::NdArray;

    const VALID: &str = r#"{
        "dim": 2, "t_total": 1.0,
        "h0": [[[0, 0], [0, 0]], [[0, 0], [0, 0]]],
        "controls": [[[[0, 0], [1, 0]], [[1, 0], [0, 0]]]],
        "jumps": [[[[0, 0], [0, 0]], [[1, 0], [0, 0]]]],
        "rho0": [[[1, 0], [0, 0]], [[0, 0], [0, 0]]],
        "target": [[[0, 0], [0, 0]], [[0, 0], [1, 0]]],
        "method": "exact",
        "tasks": [
            { "rates": [0.0], "amplitudes": [[1.5707963267948966], [1.5707963267948966]] },
            { "rates": [0.5], "amplitudes": [[0.0], [0.0]] }
        ]
    }"#;

    fn with(key: &str, value: &str) -> String {
        let mut document: Value = serde_json::from_str(VALID).unwrap();
        document[key] = serde_json::from_str(value).unwrap();
        document.to_string()
    }

    fn error_of(text: &str) -> String {
        Job::from_json(text).unwrap_err().to_string()
    }

    #[test]
    fn a_method_s_name_and_step_are_read_once() {
        let err = error_of(&with("method", "\"rk5\""));
        assert!(err.starts_with("method: expected \"exact\""), "{err}");
        let err = error_of(&with("method", "7"));
        assert!(err.starts_with("method: expected \"exact\""), "{err}");
        let mut euler: Value = serde_json::from_str(&with("method", "\"euler\"")).unwrap();
        euler["dt"] = serde_json::json!(-0.5);
        let err = error_of(&euler.to_string());
        assert!(err.starts_with("dt = -0.5: must be positive"), "{err}");
    }

    #[test]
    fn unphysical_input_and_results_are_refused() {
        // Trace 1 but an eigenvalue of -1.
        let err = error_of(&with("rho0", "[[[2, 0], [0, 0]], [[0, 0], [-1, 0]]]"));
        assert!(err.starts_with("rho0: not positive semidefinite"), "{err}");
        let err = error_of(&with("dim", "64"));
        assert!(err.starts_with("dim: 64 is more than 32"), "{err}");
        let run = |text: String| {
            Job::from_json(&text)
                .unwrap()
                .run::<NdArray<f64>>(&Default::default())
                .map(|_| ())
                .unwrap_err()
                .to_string()
        };
        // A pulse no exact propagator survives is refused before any work, naming it.
        let err = run(with("t_total", "1e300"));
        assert!(err.starts_with("t_total: a pulse of 1e300"), "{err}");
        assert!(err.contains("no accurate digit"), "{err}");
        // One Euler step of the whole pulse leaves the state space.
        let mut euler: Value = serde_json::from_str(&with("method", "\"euler\"")).unwrap();
        euler["dt"] = serde_json::json!(1e300);
        euler["tasks"][0]["amplitudes"] = serde_json::json!([[3.0], [3.0]]);
        let err = run(euler.to_string());
        assert!(
            err.contains("negative eigenvalue") && err.contains("smaller dt"),
            "{err}"
        );
    }

    #[test]
    fn a_key_given_twice_and_a_task_without_segments_are_named() {
        let twice = VALID.replacen(r#""dim": 2,"#, r#""dim": 2, "dim": 3,"#, 1);
        let err = error_of(&twice);
        assert!(err.contains(r#"key "dim" given twice"#), "{err}");
        let mut empty: Value = serde_json::from_str(VALID).unwrap();
        empty["tasks"][0]["amplitudes"] = serde_json::json!([]);
        let err = error_of(&empty.to_string());
        assert!(
            err.starts_with("tasks[0].amplitudes: no segments: a task needs at least one row"),
            "{err}"
        );
        let mut uneven: Value = serde_json::from_str(VALID).unwrap();
        uneven["tasks"][1]["amplitudes"] = serde_json::json!([[0.0]]);
        let err = error_of(&uneven.to_string());
        assert!(
            err.starts_with("tasks[1].amplitudes: expected 2 segments (as tasks[0]), found 1"),
            "{err}"
        );
    }

    #[test]
    fn positive_semidefinite_matrices_pass_the_check() {
        let pure = CMatrix::from_real(2, &[1.0, 0.0, 0.0, 0.0]);
        assert!(pure.check_positive_semidefinite(1e-12).is_ok());
        let mixed = CMatrix::from_real(2, &[0.5, 0.5, 0.5, 0.5]);
        assert!(mixed.check_positive_semidefinite(1e-12).is_ok());
        let bad = CMatrix::from_real(2, &[0.5, 0.6, 0.6, 0.5]);
        let (row, pivot) = bad.check_positive_semidefinite(1e-12).unwrap_err();
        assert_eq!(row, 1);
        assert!(pivot < 0.0, "{pivot}");
    }

    #[test]
    fn valid_document_evolves_both_tasks() {
        let report = Job::from_json(VALID)
            .unwrap()
            .run::<NdArray<f64>>(&Default::default())
            .unwrap();
        // Task 0: H = u X with u T = pi/2 rotates the Bloch vector by pi about X: |0> -> |1>.
        assert!((report.tasks[0].fidelity.unwrap() - 1.0).abs() < 1e-12);
        // Task 1: no drive, s- at rate 0.5 moves population exp(-0.5) of |0> to |1>.
        let expected = 1.0 - (-0.5f64).exp();
        assert!((report.tasks[1].fidelity.unwrap() - expected).abs() < 1e-12);
        assert!((report.tasks[1].rho[1][1][0] - expected).abs() < 1e-12);
    }

    #[test]
    fn malformed_fields_are_named() {
        assert!(error_of("{ \"dim\": 2,").starts_with("invalid JSON at line 1"));
        assert!(
            error_of(&with("h0", "[[[0, 0], [0, 1]], [[0, 1], [0, 0]]]"))
                .starts_with("h0: not Hermitian")
        );
        assert!(error_of(&with("dim", "3")).starts_with("h0: expected 3 rows"));
        assert!(error_of(&with("method", "\"rk4\"")).starts_with("dt: missing"));
        assert!(error_of(&with("method", "\"leapfrog\"")).starts_with("method: expected"));
        assert!(
            error_of(&with("target", "[[[0.5, 0], [0, 0]], [[0, 0], [0.5, 0]]]"))
                .starts_with("target: not a pure state")
        );
        assert!(
            error_of(&with("rho0", "[[[1, 0], [0, 0]], [[0, 0], [1, 0]]]"))
                .starts_with("rho0: trace is 2")
        );
        assert!(error_of(&with("speed", "1")).starts_with("speed: unknown field"));
        let negative = with("tasks", r#"[{ "rates": [-0.1], "amplitudes": [[0.0]] }]"#);
        assert!(error_of(&negative).starts_with("tasks[0].rates[0]: negative rate"));
        let ragged = with(
            "tasks",
            r#"[{ "rates": [0.1], "amplitudes": [[0.0]] }, { "rates": [0.1], "amplitudes": [[0.0], [1.0]] }]"#,
        );
        assert!(error_of(&ragged).starts_with("tasks[1].amplitudes: expected 1 segments"));
        let wide = with(
            "tasks",
            r#"[{ "rates": [0.1], "amplitudes": [[0.0, 1.0]] }]"#,
        );
        assert!(error_of(&wide).starts_with("tasks[0].amplitudes[0]: expected 1 numbers"));
        let pair = with("controls", "[[[[0, 0], [1]], [[1, 0], [0, 0]]]]");
        assert!(error_of(&pair).starts_with("controls[0][0][1]: expected 2 numbers [re, im]"));
        assert!(
            error_of(&with("max_substeps", "0"))
                .starts_with("max_substeps: expected an integer >= 1, found 0")
        );
    }

    /// `VALID` with the second task's amplitudes written as `first` and `second`.
    fn amplitudes(first: &str, second: &str) -> String {
        let text = VALID.replace(
            r#""amplitudes": [[0.0], [0.0]]"#,
            &format!(r#""amplitudes": [[{first}], [{second}]]"#),
        );
        assert_ne!(text, VALID);
        text
    }

    #[test]
    fn a_step_too_small_for_the_substep_limit_is_refused() {
        let tiny = with("method", "\"rk4\"").replace("\"method\"", "\"dt\": 1e-9, \"method\"");
        assert_eq!(
            error_of(&tiny),
            // 0.5 / 1e-9 is 499999999.99999994 in floating point.
            "dt = 1e-9: rk4 would take floor(t_seg / dt) = 499999999 substeps per segment \
             (t_seg = t_total / segments = 0.5) x 2 segments = 999999998 substeps \
             (x 2 tasks = 1999999996 task-substeps), more than max_substeps = 1000000; \
             use a larger dt or the exact method, or raise max_substeps"
        );
        let denormal = tiny.replace("1e-9", "5e-324");
        assert!(
            error_of(&denormal).starts_with("dt = 5e-324: rk4 would take floor(t_seg / dt) = inf"),
            "{}",
            error_of(&denormal)
        );
        // The limit is the document's to raise.
        let raised = tiny.replace("\"dt\"", "\"max_substeps\": 1000000000, \"dt\"");
        assert_eq!(
            Job::from_json(&raised).unwrap().solver.max_substeps,
            1_000_000_000
        );
        // Euler with a step longer than a segment takes one step per segment, as before; one
        // Euler step of task 0's half turn leaves the state space, and is refused for it.
        let coarse = with("method", "\"euler\"").replace("\"method\"", "\"dt\": 7.0, \"method\"");
        let err = Job::from_json(&coarse)
            .unwrap()
            .run::<NdArray<f64>>(&Default::default())
            .unwrap_err();
        assert!(
            matches!(err, LindbladError::Unphysical { task: 0, .. }),
            "{err}"
        );
    }

    #[test]
    fn amplitudes_beyond_the_bound_are_reported_and_clamped() {
        let job = Job::from_json(&amplitudes("-1e300", "0.5")).unwrap();
        let clamped = job.clamped_amplitudes();
        assert_eq!(
            clamped,
            vec![ClampedAmplitude {
                task: 1,
                segment: 0,
                control: 0,
                value: -1e300,
                bound: 10.0
            }]
        );
        assert_eq!(
            clamped[0].to_string(),
            "task 1, segment 0: amplitude -1e300 of control 0 is beyond control_bound = 10 \
             and is clamped to -10 (tasks[1].amplitudes[0][0])"
        );
        // The clamped amplitude runs as -10 would.
        let report = job.run::<NdArray<f64>>(&Default::default()).unwrap();
        let bounded = Job::from_json(&amplitudes("-10", "0.5"))
            .unwrap()
            .run::<NdArray<f64>>(&Default::default())
            .unwrap();
        assert_eq!(report, bounded);
        assert!(bounded.tasks[1].fidelity.unwrap().is_finite());
        // Exactly at the bound is not clamped.
        assert!(
            Job::from_json(&amplitudes("10", "-10"))
                .unwrap()
                .clamped_amplitudes()
                .is_empty()
        );
    }

    #[test]
    fn non_finite_numbers_are_refused_by_field() {
        for (token, why) in [
            (
                "1e400",
                "is beyond the range of a 64-bit float (magnitude above 1.8e308)",
            ),
            (
                "-1e400",
                "is beyond the range of a 64-bit float (magnitude above 1.8e308)",
            ),
            ("NaN", "is not a JSON number"),
            ("Infinity", "is not a JSON number"),
            ("-Infinity", "is not a JSON number"),
            ("nan", "is not a JSON number"),
        ] {
            assert_eq!(
                error_of(&amplitudes("0.0", token)),
                format!("tasks[1].amplitudes[1][0]: {token} {why}; expected a finite number")
            );
        }
        // The first of several is named, wherever the others are.
        let two = amplitudes("1e999", "NaN").replace("\"t_total\": 1.0", "\"t_total\": 1e400");
        assert!(
            error_of(&two).starts_with("t_total: 1e400 is beyond"),
            "{}",
            error_of(&two)
        );
        // A document that fails elsewhere too still explains the number.
        let broken = amplitudes("1e400", "0");
        let broken = broken.trim_end().strip_suffix('}').unwrap();
        let err = error_of(broken);
        assert!(err.starts_with("invalid JSON at line"), "{err}");
        assert!(err.contains("beyond the range of a 64-bit float"), "{err}");
        // A job built in code can hold what JSON cannot; running it names task and segment.
        let mut job = Job::from_json(VALID).unwrap();
        job.tasks[1].amplitudes[1][0] = f64::NAN;
        assert_eq!(
            job.run::<NdArray<f64>>(&Default::default())
                .unwrap_err()
                .to_string(),
            "tasks[1].amplitudes[1][0]: task 1, segment 1: amplitude NaN is not finite"
        );
        job.tasks[1].amplitudes[1][0] = f64::INFINITY;
        assert!(job.clamped_amplitudes().is_empty());
        assert!(job.run::<NdArray<f64>>(&Default::default()).is_err());
    }
}
