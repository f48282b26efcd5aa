//! quench-circuit: the batched simulation against the f64 reference and the parameter-shift rule.

use super::Check;
use burn::tensor::Tensor;
use quench_kernels::QuenchBackend;
use quench_kernels::readback::to_host_f32;
use quench_kernels::reductions::Reduce;
use quench_support::stats::max_or_nan;

/// The batched circuit simulation against the f64 host reference, on guide 003's circuit
/// (batch 256, weights shared) and on a complex circuit of every gate kind, gate by gate and
/// fused: the largest error of `<Z_i>`; and the autodiff gradient of `sum <Z_i>` with respect
/// to every input and weight against the parameter-shift rule.
pub(super) fn circuit_checks<B: QuenchBackend>(device: &B::Device) -> anyhow::Result<Vec<Check>> {
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
            let simulator = Simulator::<B>::new(circuit.clone(), mode, device)?;
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
            let z = simulator.z_expectations(&state)?;
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
