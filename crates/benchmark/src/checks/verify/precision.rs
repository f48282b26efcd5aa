//! quench-train's mixed precision: the f16 loss scaler's decisions and a forward pass in the run's
//! low precision.

use super::Check;
use super::Verdict;
use crate::workload::CheckedPrecision;
use burn::tensor::{DType, Tensor};
use quench_device::Precision;
use quench_kernels::QuenchBackend;
use quench_kernels::readback::to_host_f32;
use quench_kernels::reductions::Reduce;
use quench_support::stats::max_or_nan;
use quench_train::amp::MixedPrecision;
use quench_train::ensemble::{Activation, EnsembleMlp};
use quench_train::init::Init;
use quench_train::params::require_grad;

pub(super) fn loss_scaler<B: QuenchBackend>(device: &B::Device) -> Check {
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
pub(super) fn low_precision_forward<B: QuenchBackend>(
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
