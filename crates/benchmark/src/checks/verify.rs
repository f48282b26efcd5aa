//! `benchmark verify`: the numerical checks a user runs on their own hardware, on the chosen
//! backend. Each check prints its error against its tolerance; any failure makes the command
//! exit 1.
//!
//! The equivalence checks (batched equals one at a time, loader determinism) and the solver
//! accuracies run in f32, the product's reference arithmetic; the mixed-precision checks run in
//! the run's `--precision` where the device has a low precision, and are skipped, with the
//! reason, where it has none.

use quench_kernels::reductions::Reduce;
use quench_kernels::views::ReshapeTo;
use std::fmt;
use std::sync::Arc;

use burn::tensor::{DType, Tensor, TensorData};
use quench_data::{Dataset, Loader, LoaderConfig, Mode};
use quench_device::Precision;
use quench_kernels::ops::random::{normals_host, normals_tensor};
use quench_kernels::readback::to_host_f32;
use quench_kernels::threefry::StreamKey;
use quench_kernels::{OnDevice, QuenchBackend, SelectedDevice, precise_matmul, run_on};
use quench_lindblad::conformance::{Pulses, state_error};
use quench_lindblad::{Method, OperatorCache, Solver, presets};
use quench_meta::{Algorithm, InnerLoop, MetaConfig, MetaRun, Target};
use quench_qrng::classifier::{ClassifierConfig, Execution as ClassifierExecution};
use quench_qrng::{Batching, synthetic_recording};
use quench_sgld::{Execution as SgldExecution, GridConfig, GridData, NoiseSource};
use quench_support::stats::max_or_nan;
use quench_temporal::step::fused_lstm_gap;
use quench_train::amp::MixedPrecision;
use quench_train::ensemble::{Activation, EnsembleMlp};
use quench_train::init::Init;
use quench_train::params::{max_abs_difference, max_relative_difference, require_grad};
use quench_train::settings::Valid;

use crate::workload::CheckedPrecision;

/// What one check found.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// Measured: the largest error and the bound it must stay under.
    Measured {
        /// The largest error found.
        error: f64,
        /// The bound.
        tolerance: f64,
    },
    /// Not applicable on this device or precision, and why.
    Skipped(String),
}

/// One named check and its verdict.
#[derive(Debug, Clone, PartialEq)]
pub struct Check {
    /// What is checked.
    pub name: String,
    /// What it found.
    pub verdict: Verdict,
}

impl Check {
    fn measured(name: &str, error: f64, tolerance: f64) -> Self {
        Self {
            name: name.into(),
            verdict: Verdict::Measured { error, tolerance },
        }
    }

    /// Whether it failed: an error above the bound, or one that is not a finite number.
    pub fn failed(&self) -> bool {
        matches!(self.verdict, Verdict::Measured { error, tolerance } if error.is_nan() || error > tolerance)
    }
}

impl fmt::Display for Check {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.verdict {
            Verdict::Measured { error, tolerance } => write!(
                f,
                "{} {}: error {error:.3e} (tolerance {tolerance:.1e})",
                if self.failed() { "FAIL" } else { "pass" },
                self.name
            ),
            Verdict::Skipped(why) => write!(f, "skip {}: {why}", self.name),
        }
    }
}

/// Runs every check on `device` with the run's `precision`.
pub fn verify(device: SelectedDevice, precision: &CheckedPrecision) -> anyhow::Result<Vec<Check>> {
    run_on(device, Checks { precision })?
}

struct Checks<'a> {
    precision: &'a CheckedPrecision,
}

impl OnDevice for Checks<'_> {
    type Output = anyhow::Result<Vec<Check>>;

    fn run<B: QuenchBackend>(self, device: &B::Device) -> Self::Output {
        let mut checks = vec![matmul_precision::<B>(device)];
        checks.extend(solver_accuracy::<B>(device)?);
        checks.push(meta_step::<B>(device)?);
        checks.push(sgld_chains::<B>(device)?);
        checks.push(sgld_fused::<B>(device)?);
        checks.push(counter_noise::<B>(device));
        checks.push(classifier_seeds::<B>(device)?);
        checks.push(loader_determinism::<B>(device)?);
        checks.extend(circuit_checks::<B>(device)?);
        checks.push(fused_lstm::<B>(device));
        checks.push(loss_scaler::<B>(device));
        checks.push(low_precision_forward::<B>(self.precision, device));
        Ok(checks)
    }
}

/// The seam's `precise_matmul` against an f64 product on the host, `[8, 64, 64] @ [8, 64, 64]`
/// of standard normals: each entry's error relative to `sum_k |a_ik b_kj|`, whose bound in f32
/// is `k 2^-24`. The backend's own matmul is measured beside it and named, where a GPU staging
/// f32 operands as tf32 shows near 1e-3.
fn matmul_precision<B: QuenchBackend>(device: &B::Device) -> Check {
    const BATCH: usize = 8;
    const N: usize = 64;
    let a = normals_host(&[StreamKey::from_seed(1)], 0, BATCH * N * N);
    let b = normals_host(&[StreamKey::from_seed(2)], 0, BATCH * N * N);
    let tensor = |values: &[f32]| {
        Tensor::<B::InnerBackend, 3>::from_data(
            TensorData::new(values.to_vec(), [BATCH, N, N]),
            device,
        )
    };
    let precise = to_host_f32(precise_matmul(tensor(&a), tensor(&b)));
    let plain = to_host_f32(tensor(&a).matmul(tensor(&b)));
    // Each entry's f64 value and the sum of its terms' magnitudes, once for both products.
    let reference: Vec<(f64, f64)> = (0..BATCH * N * N)
        .map(|entry| {
            let (t, row, col) = (entry / (N * N), entry / N % N, entry % N);
            (0..N)
                .map(|k| f64::from(a[(t * N + row) * N + k]) * f64::from(b[(t * N + k) * N + col]))
                .fold((0.0, 0.0), |(s, m), x| (s + x, m + x.abs()))
        })
        .collect();
    let error = |got: &[f32]| {
        max_or_nan(
            got.iter()
                .zip(&reference)
                .map(|(&g, &(sum, scale))| (f64::from(g) - sum).abs() / scale),
        )
    };
    Check::measured(
        &format!(
            "matmul: precise_matmul in f32 vs f64 (the backend's own matmul: {:.1e})",
            error(&plain)
        ),
        error(&precise),
        N as f64 * 2f64.powi(-24),
    )
}

/// The three solvers against the f64 reference on 32 random one-qubit tasks (20 segments,
/// |u| <= 1.5, rates <= 0.2), with the f32 accuracy targets of the solver's tests.
fn solver_accuracy<B: QuenchBackend>(device: &B::Device) -> anyhow::Result<Vec<Check>> {
    let system = presets::one_qubit();
    let pulses = Pulses::random(&system, 32, 20, 1.5, 0.2, 1);
    [
        ("lindblad exact vs f64 reference", Method::Exact, 2e-5),
        (
            "lindblad rk4 dt 0.01 vs f64 reference",
            Method::Rk4 { dt: 0.01 },
            1e-4,
        ),
        // First order at the guide's fast step: visibly off, but bounded.
        (
            "lindblad euler dt 0.02 vs f64 reference",
            Method::Euler { dt: 0.02 },
            1e-1,
        ),
    ]
    .into_iter()
    .map(|(name, method, tolerance)| {
        let solver = Solver {
            method,
            ..Solver::default()
        };
        let error = state_error::<B::InnerBackend>(&system, solver, &pulses, 1.0, device)?;
        Ok(Check::measured(name, error, tolerance))
    })
    .collect()
}

/// One FOMAML meta-step with 4 tasks batched against the same step one task at a time: the
/// per-task meta-gradients, relative to their size.
fn meta_step<B: QuenchBackend>(device: &B::Device) -> anyhow::Result<Check> {
    // Towards H the losses start near 0.5 with gradients of a readable size (towards X they
    // start at 1 to f32 precision, with gradients of about 1e-9).
    let config = Valid::new(MetaConfig {
        algorithm: Algorithm::Fomaml,
        tasks_per_batch: 4,
        inner_steps: 2,
        val_tasks: 2,
        target: Target::H,
        seed: 11,
        ..MetaConfig::default()
    })?;
    let mut run = MetaRun::<B>::new(&config, &mut OperatorCache::new(), device)?;
    let batch = run.next_batch()?;
    let shape = run.config.policy.clone();
    // The product's step (hand-derived policy gradients on the CPU) against the original's
    // way, autodiff throughout. Compared before Adam, whose first step is about the learning
    // rate times each entry's sign.
    let original = InnerLoop {
        steps: 2,
        lr: 0.05,
        fused: false,
    };
    let product = InnerLoop {
        fused: true,
        ..original
    };
    let learner = &run.learner;
    let batched = learner.meta_gradients(&run.problem, &shape, &batch, product)?;
    let alone =
        learner.meta_gradients_one_task_at_a_time(&run.problem, &shape, &batch, original)?;
    // Equal gradients prove nothing if they are all zero.
    let zero: Vec<_> = alone.per_task.iter().map(|g| g.zeros_like()).collect();
    let error = if max_abs_difference(&alone.per_task, &zero) > 0.0 {
        max_relative_difference(&batched.per_task, &alone.per_task)
    } else {
        f64::INFINITY
    };
    Ok(Check::measured(
        "meta step: batched, hand-derived policy gradients = one task at a time, autodiff (relative)",
        error,
        1e-4,
    ))
}

/// A small SGLD grid (chains of 1, 3 and 12 epochs, host noise) batched with finished chains
/// dropped, against one chain at a time: every chain's final losses and errors.
fn sgld_chains<B: QuenchBackend>(device: &B::Device) -> anyhow::Result<Check> {
    let config = Valid::new(GridConfig::mixed_lengths())?;
    let data = GridData::load(&config)?;
    let run =
        |execution: SgldExecution| quench_sgld::run_grid::<B>(&config, &data, &execution, device);
    let alone = run(SgldExecution::ORIGINAL)?;
    let batched = run(SgldExecution {
        noise: NoiseSource::Host,
        ..SgldExecution::BATCHED
    })?;
    let error = batched.max_chain_difference(&alone);
    Ok(Check::measured(
        "sgld: batched chains = one chain at a time",
        error,
        1e-5,
    ))
}

/// The same grid with counter-based noise: the fused step of all chains batched (the host
/// kernel on the CPU, hand-derived tensor ops elsewhere) against the autodiff step of each
/// chain alone.
fn sgld_fused<B: QuenchBackend>(device: &B::Device) -> anyhow::Result<Check> {
    let config = Valid::new(GridConfig::mixed_lengths())?;
    let data = GridData::load(&config)?;
    let run =
        |execution: SgldExecution| quench_sgld::run_grid::<B>(&config, &data, &execution, device);
    let alone = run(SgldExecution {
        noise: NoiseSource::Device,
        ..SgldExecution::ORIGINAL
    })?;
    let fused = run(SgldExecution::BATCHED)?;
    Ok(Check::measured(
        "sgld: fused batched step = autodiff step of each chain alone (counter noise)",
        fused.max_chain_difference(&alone),
        1e-5,
    ))
}

/// Counter-based normals as the device's integer tensor ops against the host kernel: the same
/// Threefry words, so the same noise to the float transform's rounding (4 streams x 10,001
/// values, two draws).
fn counter_noise<B: QuenchBackend>(device: &B::Device) -> Check {
    let keys: Vec<StreamKey> = [0u64, 7, u64::MAX, 0x5EED]
        .iter()
        .map(|&s| StreamKey::from_seed(s))
        .collect();
    let error = max_or_nan([0u64, (1 << 32) + 5].iter().map(|&draw| {
        let host = normals_host(&keys, draw, 10_001);
        let tensor = to_host_f32(normals_tensor::<B::InnerBackend>(
            &keys, draw, 10_001, device,
        ));
        max_or_nan(
            host.iter()
                .zip(&tensor)
                .map(|(h, t)| f64::from((h - t).abs())),
        )
    }));
    Check::measured(
        "noise: counter-based normals as device tensor ops = host kernel",
        error,
        1e-4,
    )
}

/// Three classifier seeds batched with the product's step (hand-derived on the CPU, autodiff
/// on other devices) against each alone the original's way (autodiff, streamed), without
/// dropout (whose masks come from different generators), for three epochs: every epoch's
/// training loss.
fn classifier_seeds<B: QuenchBackend>(device: &B::Device) -> anyhow::Result<Check> {
    let data = synthetic_recording(200, 5)?.to_dataset();
    let config = Valid::new(ClassifierConfig {
        seeds: vec![89, 90, 91],
        dropout: 0.0,
        max_epochs: 3,
        batch_size: 16,
        ..ClassifierConfig::default()
    })?;
    let run = |batching, loader, fused| {
        let execution = ClassifierExecution {
            batching,
            loader,
            precision: Precision::F32,
            fused,
        };
        quench_qrng::classifier::train_classifier::<B>(&data, &config, &execution, device)
    };
    // The product's path (the hand-derived step on the CPU) against the original's.
    let batched = run(Batching::Members, Mode::Resident, true)?;
    let alone = run(Batching::OneAtATime, Mode::ON_CALLER, false)?;
    // Every epoch's training loss of every seed, relative to its size: continuous, unlike the
    // accuracies, which flip a sample near the decision boundary on rounding alone. The loss
    // must have moved, or equal runs would prove nothing.
    let moved = batched
        .seeds
        .iter()
        .all(|s| s.history.first().map(|h| h.train_loss) != s.history.last().map(|h| h.train_loss));
    let error = if moved {
        batched.max_train_loss_difference(&alone)
    } else {
        f64::INFINITY
    };
    // Batched and lone reductions round differently (1e-7), and Adam turns a rounding-sized
    // difference in a near-zero gradient component into a learning-rate-sized step: 2e-4
    // relative after three epochs on the CPU. A member given another's data or schedule
    // differs by order 1.
    Ok(Check::measured(
        "classifier: batched seeds, product's step = each seed alone, original's (training losses)",
        error,
        1e-3,
    ))
}

/// One epoch's batches from the loader on the caller's thread, with two workers and a staging
/// thread, and resident on the device: the same features and labels in the same order.
fn loader_determinism<B: QuenchBackend>(device: &B::Device) -> anyhow::Result<Check> {
    let data: Arc<Dataset> = Arc::new(synthetic_recording(100, 7)?.to_dataset());
    let epoch = |mode| -> anyhow::Result<Vec<f32>> {
        let config = LoaderConfig {
            batch_size: 32,
            shuffle: true,
            drop_last: false,
            mode,
        };
        let mut loader = Loader::<B::InnerBackend>::new(vec![data.clone()], &[3], &config, device)?;
        Ok(loader
            .epoch(1)
            .flat_map(|batch| {
                let mut values = to_host_f32(batch.features);
                values.extend(to_host_f32(batch.labels.float().unsqueeze_to::<3>(2)));
                values
            })
            .collect())
    };
    let reference = epoch(Mode::ON_CALLER)?;
    let mut errors = Vec::new();
    for mode in [
        Mode::Streaming {
            num_workers: 2,
            prefetch: 2,
            staging: true,
        },
        Mode::Resident,
    ] {
        let other = epoch(mode)?;
        errors.push(if other.len() == reference.len() {
            max_or_nan(
                reference
                    .iter()
                    .zip(&other)
                    .map(|(a, b)| f64::from((a - b).abs())),
            )
        } else {
            f64::INFINITY
        });
    }
    let error = max_or_nan(errors);
    Ok(Check::measured(
        "loader: same batches with workers, staging, resident",
        error,
        0.0,
    ))
}

/// The batched circuit simulation against the f64 host reference, on guide 003's circuit
/// (batch 256, weights shared) and on a complex circuit of every gate kind, gate by gate and
/// fused: the largest error of `<Z_i>`; and the autodiff gradient of `sum <Z_i>` with respect
/// to every input and weight against the parameter-shift rule.
fn circuit_checks<B: QuenchBackend>(device: &B::Device) -> anyhow::Result<Vec<Check>> {
    use quench_circuit::{Angle, Circuit, Gate, GateKind, Mode, Simulator, reference};
    let rotation = |kind, wire, angle| Gate::rotation(kind, wire, angle);
    let complex = Circuit::new(
        3,
        vec![
            Gate::new(GateKind::H, &[0]),
            rotation(GateKind::Rx, 1, Angle::Input(0)),
            rotation(GateKind::Rz, 2, Angle::Input(1)),
            Gate::new(GateKind::Cz, &[0, 1]),
            rotation(GateKind::Phase, 0, Angle::Weight(0)),
            Gate::new(GateKind::Y, &[2]),
            Gate::new(GateKind::Swap, &[1, 2]),
            rotation(GateKind::Ry, 1, Angle::Weight(1)),
            Gate::new(GateKind::Cnot, &[2, 0]),
            rotation(GateKind::Rx, 2, Angle::Weight(2)),
        ],
    )?;
    let batch = 256;
    let mut state_error = 0.0f64;
    let mut gradient_error = 0.0f64;
    for circuit in [Circuit::angle_encoded_ring(4, 3)?, complex] {
        let (n_in, n_w, qubits) = (circuit.inputs(), circuit.weights(), circuit.qubits());
        let inputs: Vec<f32> = (0..batch * n_in)
            .map(|i| ((i as f32) * 0.618).sin() * 3.0)
            .collect();
        let weights: Vec<f32> = (0..n_w).map(|i| ((i as f32) * 1.3).cos()).collect();
        let wide = |v: &[f32]| v.iter().map(|&x| f64::from(x)).collect::<Vec<_>>();
        for mode in [Mode::GateByGate, Mode::Fused] {
            let simulator = Simulator::<B>::new(circuit.clone(), mode, device);
            let x = Tensor::<B, 2>::from_data(
                burn::tensor::TensorData::new(inputs.clone(), [batch, n_in]),
                device,
            )
            .require_grad();
            let w = Tensor::<B, 2>::from_data(
                burn::tensor::TensorData::new(weights.clone(), [1, n_w]),
                device,
            )
            .require_grad();
            let state = simulator.run(batch, Some(x.clone()), Some(w.clone()))?;
            let z = simulator.z_expectations(&state);
            let grads = z.clone().sum_all().backward();
            let z = to_host_f32(z.inner());
            let gx = x.grad(&grads).map(to_host_f32).unwrap_or_default();
            let gw = w.grad(&grads).map(to_host_f32).unwrap_or_default();
            let mut gw_shift = vec![0.0f64; n_w];
            for row in 0..batch {
                let xs = wide(&inputs[row * n_in..(row + 1) * n_in]);
                let shift = reference::parameter_shift(&circuit, &xs, &wide(&weights))?;
                for (i, value) in shift.values.iter().enumerate() {
                    let found = z.get(row * qubits + i).map_or(f64::NAN, |&v| f64::from(v));
                    state_error = max_or_nan([state_error, (found - value).abs()]);
                }
                for (j, d) in shift.inputs.iter().enumerate() {
                    let found = gx.get(row * n_in + j).map_or(f64::NAN, |&v| f64::from(v));
                    gradient_error =
                        max_or_nan([gradient_error, (found - d.iter().sum::<f64>()).abs()]);
                }
                for (j, d) in shift.weights.iter().enumerate() {
                    gw_shift[j] += d.iter().sum::<f64>();
                }
            }
            for (j, expected) in gw_shift.iter().enumerate() {
                let found = gw.get(j).map_or(f64::NAN, |&v| f64::from(v));
                // A weight's gradient sums 256 samples: compare relative to that scale.
                let error = (found - expected).abs() / expected.abs().max(1.0);
                gradient_error = max_or_nan([gradient_error, error]);
            }
        }
    }
    Ok(vec![
        Check::measured(
            "circuit: batched <Z_i> against the f64 reference",
            state_error,
            1e-5,
        ),
        Check::measured(
            "circuit: autodiff gradients against parameter shift",
            gradient_error,
            1e-4,
        ),
    ])
}

/// The f16 loss scaler on this backend: a step whose scaled gradient overflows is skipped and
/// the scale halves; the next finite step is applied, unscaled. (The arithmetic stays f32: this
/// checks the policy's decisions, which every device must take the same way.)
/// The fused LSTM's training step (recurrence differentiated by hand) against autodiff
/// through `burn::nn::Lstm`: gradients of a 3-layer, 2-seed network, relative to each
/// parameter's largest (the loss agrees to 1e-5 on the CPU).
fn fused_lstm<B: QuenchBackend>(device: &B::Device) -> Check {
    let (loss, gradients) = fused_lstm_gap::<B>(device);
    Check::measured(
        "fused LSTM step vs burn::nn::Lstm (gradients, relative)",
        loss.max(gradients),
        1e-4,
    )
}

fn loss_scaler<B: QuenchBackend>(device: &B::Device) -> Check {
    let step = |amp: &mut MixedPrecision, factor: f32| {
        let w = require_grad::<B>(vec![Tensor::ones([1, 1, 1], device)]);
        amp.gradients((w[0].clone() * factor).sum_all(), &w)
            .map(|g| f64::from(to_host_f32(g[0].clone())[0]))
    };
    let mut amp = MixedPrecision::new(Precision::F16);
    let scale = amp.scale();
    let overflow = step(&mut amp, 1e34);
    let backed_off = amp.scale() == scale / 2.0 && amp.skipped_steps() == 1;
    let applied = step(&mut amp, 3.0);
    let error = match (overflow, backed_off, applied) {
        (None, true, Some(g)) => (g - 3.0).abs(),
        _ => f64::INFINITY,
    };
    Check::measured("loss scaler: skip, back off, unscale", error, 1e-6)
}

/// An MLP's forward pass in the run's low precision from f32 master weights against f32: the
/// largest error relative to the output's scale, and the master weights still f32 after a step.
fn low_precision_forward<B: QuenchBackend>(
    precision: &CheckedPrecision,
    device: &B::Device,
) -> Check {
    let name = "mixed precision: forward within tolerance of f32, masters f32";
    let low = match precision.low() {
        Ok(low) => low,
        Err(why) => {
            return Check {
                name: name.into(),
                verdict: Verdict::Skipped(why.to_string()),
            };
        }
    };
    let tolerance = match low {
        Precision::Bf16 => 3e-2,
        Precision::F16 | Precision::Tf32 => 5e-3,
        Precision::F32 => 1e-6,
    };
    let mlp = EnsembleMlp::<B::InnerBackend>::new(
        Init::TorchDefault,
        Activation::Tanh,
        4,
        &[32, 64, 8],
        2,
        device,
    );
    let x = {
        let _generator = quench_kernels::SeededGenerator::acquire::<B::InnerBackend>(device, 9);
        Tensor::<B::InnerBackend, 3>::random(
            [4, 16, 32],
            burn::tensor::Distribution::Normal(0.0, 1.0),
            device,
        )
    };
    let exact = to_host_f32(mlp.forward(x.clone()));
    let compute = mlp.with_params(
        mlp.params()
            .into_iter()
            .map(|p| low.to_compute(p))
            .collect(),
    );
    let low_output = compute.forward(low.to_compute(x.clone()));
    // The forward pass must really have run in the low dtype, or agreement proves nothing.
    let in_low_precision = low
        .compute_dtype()
        .is_some_and(|dtype| low_output.dtype() == DType::from(dtype));
    let approx = to_host_f32(low.to_master(low_output));
    let scale = exact.iter().fold(0.0f32, |m, v| m.max(v.abs())).max(1e-6);
    let error = max_or_nan(
        exact
            .iter()
            .zip(&approx)
            .map(|(a, b)| f64::from((a - b).abs() / scale)),
    );
    // One training step through the policy: the updated master weights must still be f32.
    let mut amp = MixedPrecision::new(low);
    let leaves = require_grad::<B>(mlp.params());
    let network = EnsembleMlp::from_params(low.to_compute_all(&leaves), mlp.activation);
    let out = low.to_master(network.forward(low.to_compute(Tensor::<B, 3>::from_inner(x))));
    let masters_f32 = amp
        .gradients(out.powi_scalar(2).mean_all(), &leaves)
        .is_some_and(|grads| {
            mlp.params()
                .into_iter()
                .zip(grads)
                .all(|(p, g)| (p - g * 0.01).dtype() == DType::F32)
        });
    let error = if masters_f32 && in_low_precision {
        error
    } else {
        f64::INFINITY
    };
    Check::measured(&format!("{name} ({low})"), error, tolerance)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::RunPrecision;

    #[test]
    fn every_check_passes_on_the_cpu_and_mixed_precision_is_skipped_there() {
        let auto = RunPrecision::Auto.check_on(SelectedDevice::Cpu).unwrap();
        let checks = verify(SelectedDevice::Cpu, &auto).unwrap();
        assert_eq!(checks.len(), 15);
        assert_eq!(
            checks
                .iter()
                .filter(|c| c.name.starts_with("circuit: "))
                .count(),
            2
        );
        for check in &checks {
            assert!(!check.failed(), "{check}");
        }
        let last = checks.last().unwrap();
        assert!(
            matches!(&last.verdict, Verdict::Skipped(why) if why.contains("bf16")),
            "{last}"
        );
    }

    #[test]
    fn a_check_fails_above_its_tolerance_or_when_not_finite() {
        assert!(Check::measured("x", 2e-5, 1e-5).failed());
        assert!(Check::measured("x", f64::NAN, 1e-5).failed());
        assert!(!Check::measured("x", 0.0, 0.0).failed());
        assert!(
            Check::measured("x", 1.0, 0.5)
                .to_string()
                .starts_with("FAIL x: error 1.000e0")
        );
    }
}
