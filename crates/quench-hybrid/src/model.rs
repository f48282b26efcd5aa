//! The hybrid network over a member axis: encoder `512 -> 128 -> 32 -> 4` (ReLU, dropout,
//! tanh), the variational circuit (or the identity, for the ablation), head `4 -> 16 -> 10`.

use burn::tensor::Tensor;
use quench_circuit::{Circuit, CircuitError, Mode, Simulator, reference};
use quench_device::Precision;
use quench_kernels::QuenchOps;
use quench_kernels::readback::{float_tensor, to_host_f32};
use quench_kernels::views::ReshapeTo;
use serde::{Deserialize, Serialize};

use quench_kernels::ops::dropout::dropout;
use quench_train::ensemble::{Activation, EnsembleMlp};

/// Widths of the encoder: backbone features to circuit angles.
pub const ENCODER: [usize; 4] = [512, 128, 32, 4];
/// Widths of the head: circuit read-out to class logits.
pub const HEAD: [usize; 3] = [4, 16, 10];

/// How the circuit between encoder and head is computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CircuitMode {
    /// The original's way, reproduced as the baseline: the angles go to the host, each sample's
    /// circuit runs alone in f64 (as PennyLane's `default.qubit`), and its gradients come from
    /// the parameter-shift rule (2 runs per parametrised gate and sample); the results come
    /// back to the device.
    Host,
    /// The whole batch on the device, gate by gate, gradients by autodiff.
    GateByGate,
    /// The whole batch on the device as one fused read-out of the seam: one kernel forward and
    /// one backward on a GPU (the adjoint method), each sample's state in f64 on the CPU.
    Fused,
    /// No circuit: the encoder's 4 outputs go straight to the head (the ablation).
    Identity,
}

/// The network's structure; its parameters live in a list (see [`HybridModel::split`]).
#[derive(Debug, Clone)]
pub struct HybridModel<B: QuenchOps> {
    /// How the circuit runs.
    pub mode: CircuitMode,
    /// The circuit (guide 003's: angle encoding, layers of RY and a CNOT ring).
    pub circuit: Circuit,
    /// The compiled circuit on the device (none for `Host` and `Identity`).
    simulator: Option<Simulator<B>>,
}

impl<B: QuenchOps> HybridModel<B> {
    /// The model with `circuit` run in `mode` on `device`.
    ///
    /// # Errors
    /// The simulator's refusal of a circuit too large for the host ([`Simulator::new`]).
    pub fn new(
        circuit: Circuit,
        mode: CircuitMode,
        device: &B::Device,
    ) -> Result<Self, CircuitError> {
        let simulator = match mode {
            CircuitMode::GateByGate => Some(Mode::GateByGate),
            CircuitMode::Fused => Some(Mode::Fused),
            CircuitMode::Host | CircuitMode::Identity => None,
        }
        .map(|m| Simulator::new(circuit.clone(), m, device))
        .transpose()?;
        Ok(Self {
            mode,
            circuit,
            simulator,
        })
    }

    /// Whether the parameter list holds circuit weights (every mode but `Identity`).
    pub fn has_circuit(&self) -> bool {
        self.mode != CircuitMode::Identity
    }

    /// The parameter list split into encoder (6), circuit weights `[members, 1, weights]`
    /// (absent for `Identity`) and head (4).
    pub fn split<'a, T>(&self, params: &'a [T]) -> (&'a [T], Option<&'a T>, &'a [T]) {
        let (encoder, rest) = params.split_at(2 * (ENCODER.len() - 1));
        if self.has_circuit() {
            (encoder, rest.first(), &rest[1..])
        } else {
            (encoder, None, rest)
        }
    }

    /// Logits `[members, batch, 10]` of `features` `[members, batch, 512]` under `params`;
    /// dropout at `dropout_rate` after every hidden ReLU when it is positive (training). The
    /// classical layers run in `precision`, the circuit in f32.
    pub fn forward(
        &self,
        params: &[Tensor<B, 3>],
        features: Tensor<B, 3>,
        dropout_rate: f64,
        precision: Precision,
    ) -> Tensor<B, 3> {
        let (encoder, weights, head) = self.split(params);
        let compute = |p: &[Tensor<B, 3>]| precision.to_compute_all(p);
        let hidden = |h| dropout(h, dropout_rate);
        let angles = precision.to_master(
            EnsembleMlp::from_params(compute(encoder), Activation::Relu)
                .forward_with(precision.to_compute(features), hidden)
                .tanh(),
        );
        let readout = match weights {
            Some(w) => self.circuit(angles, w.clone()),
            None => angles,
        };
        precision.to_master(
            EnsembleMlp::from_params(compute(head), Activation::Relu)
                .forward_with(precision.to_compute(readout), hidden),
        )
    }

    /// `<Z_i>` `[members, batch, qubits]` of the circuit with encoding `angles`
    /// `[members, batch, qubits]` and `weights` `[members, 1, weights]`.
    fn circuit(&self, angles: Tensor<B, 3>, weights: Tensor<B, 3>) -> Tensor<B, 3> {
        let [members, batch, qubits] = angles.dims();
        let rows = members * batch;
        let x = angles.reshape_to([rows, qubits]);
        let w: Tensor<B, 2> = weights.reshape_to([members, self.circuit.weights()]);
        let z = match &self.simulator {
            Some(simulator) => simulator
                .expectations(rows, Some(x), Some(w))
                .unwrap_or_else(|e| unreachable!("shapes fixed by the model: {e}")),
            None => host_circuit(&self.circuit, x, w),
        };
        z.reshape_to([members, batch, qubits])
    }
}

/// The original's circuit: every sample alone on the host in f64, values and parameter-shift
/// Jacobians, joined to the device graph as `z + J_x (x - x0) + J_w (w - w0)` at `x = x0`,
/// `w = w0`, whose value is `z` and whose gradients are the parameter-shift ones.
/// `x` is `[rows, qubits]` (member-major), `w` `[members, weights]`; returns `[rows, qubits]`.
fn host_circuit<B: QuenchOps>(circuit: &Circuit, x: Tensor<B, 2>, w: Tensor<B, 2>) -> Tensor<B, 2> {
    let [rows, qubits] = x.dims();
    let [members, n_weights] = w.dims();
    let device = x.device();
    let xs: Vec<f64> = to_host_f32(x.clone().detach())
        .into_iter()
        .map(f64::from)
        .collect();
    let ws: Vec<f64> = to_host_f32(w.clone().detach())
        .into_iter()
        .map(f64::from)
        .collect();
    let per_member = rows / members;
    let (mut values, mut jx, mut jw) = (
        Vec::with_capacity(rows * qubits),
        Vec::with_capacity(rows * qubits * qubits),
        Vec::with_capacity(rows * n_weights * qubits),
    );
    for row in 0..rows {
        let m = row / per_member;
        let shift = reference::parameter_shift(
            circuit,
            &xs[row * qubits..(row + 1) * qubits],
            &ws[m * n_weights..(m + 1) * n_weights],
        )
        .unwrap_or_else(|e| unreachable!("lengths fixed by the model: {e}"));
        values.extend(shift.values.iter().map(|&v| v as f32));
        // Row-major [in, out] per sample, so that `delta [1, in] @ J [in, out]`.
        jx.extend(shift.inputs.iter().flatten().map(|&v| v as f32));
        jw.extend(shift.weights.iter().flatten().map(|&v| v as f32));
    }
    let z: Tensor<B, 3> = float_tensor(values, [rows, 1, qubits], &device);
    let jx: Tensor<B, 3> = float_tensor(jx, [rows, qubits, qubits], &device);
    let jw: Tensor<B, 3> = float_tensor(jw, [rows, n_weights, qubits], &device);
    let dx = (x.clone() - x.detach()).reshape_to([rows, 1, qubits]);
    let dw = (w.clone() - w.detach())
        .reshape_to([members, 1, n_weights])
        .repeat_dim(1, per_member)
        .reshape_to([rows, 1, n_weights]);
    (z + dx.matmul(jx) + dw.matmul(jw)).reshape_to([rows, qubits])
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::{Autodiff, NdArray};
    use burn::tensor::Distribution;
    use quench_kernels::reductions::Reduce;

    type Train = Autodiff<NdArray<f32>>;

    /// Logits and the gradients of their sum for every parameter, in `mode`.
    fn logits_and_gradients(mode: CircuitMode) -> (Vec<f32>, Vec<Vec<f32>>) {
        let device = Default::default();
        let circuit = Circuit::angle_encoded_ring(4, 3).unwrap();
        let model =
            HybridModel::<Train>::new(circuit, mode, &device).expect("a 4-qubit circuit fits");
        let members = 2;
        let widths: Vec<[usize; 2]> = vec![[512, 128], [128, 32], [32, 4]];
        let mut params = Vec::new();
        let draw = |shape: [usize; 3], std: f64, seed: u64| {
            let _generator = quench_kernels::SeededGenerator::acquire::<Train>(&device, seed);
            Tensor::<Train, 3>::random(shape, Distribution::Normal(0.0, std), &device)
        };
        for (i, [a, b]) in widths.iter().enumerate() {
            params.push(draw([members, *a, *b], 0.1, i as u64));
            params.push(draw([members, 1, *b], 0.1, 10 + i as u64));
        }
        params.push(draw([members, 1, 12], 0.5, 20));
        params.push(draw([members, 4, 16], 0.3, 21));
        params.push(draw([members, 1, 16], 0.1, 22));
        params.push(draw([members, 16, 10], 0.3, 23));
        params.push(draw([members, 1, 10], 0.1, 24));
        if mode == CircuitMode::Identity {
            params.remove(6);
        }
        let params: Vec<_> = params.into_iter().map(|p| p.require_grad()).collect();
        let features = draw([members, 5, 512], 1.0, 30);
        let logits = model.forward(&params, features, 0.0, Precision::F32);
        let grads = logits.clone().sum_all().backward();
        let gradients = params
            .iter()
            .map(|p| to_host_f32(p.grad(&grads).unwrap()))
            .collect();
        (to_host_f32(logits), gradients)
    }

    #[test]
    fn the_host_baseline_and_the_device_circuits_compute_the_same_model() {
        let (host_logits, host_grads) = logits_and_gradients(CircuitMode::Host);
        for mode in [CircuitMode::GateByGate, CircuitMode::Fused] {
            let (logits, grads) = logits_and_gradients(mode);
            let worst = quench_support::stats::max_abs_difference(&host_logits, &logits);
            assert!(worst < 1e-5, "{mode:?}: logits differ by {worst}");
            for (k, (h, d)) in host_grads.iter().zip(&grads).enumerate() {
                let scale = h.iter().map(|v| v.abs()).fold(0.0f32, f32::max).max(1e-3);
                let worst = quench_support::stats::max_abs_difference(h, d);
                assert!(
                    worst < 1e-4 * f64::from(scale.max(1.0)),
                    "{mode:?}: gradient of parameter {k} differs by {worst} (scale {scale})"
                );
            }
        }
        // The circuit takes part: without it the logits change.
        let (identity, grads) = logits_and_gradients(CircuitMode::Identity);
        assert_eq!(grads.len(), host_grads.len() - 1);
        assert!(
            identity
                .iter()
                .zip(&host_logits)
                .any(|(a, b)| (a - b).abs() > 1e-3)
        );
    }
}
