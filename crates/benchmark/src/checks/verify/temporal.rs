//! quench-temporal: the fused LSTM's training step against autodiff through `burn::nn::Lstm`.

use super::Check;
use quench_kernels::QuenchBackend;
use quench_temporal::step::fused_lstm_gap;

/// The f16 loss scaler on this backend: a step whose scaled gradient overflows is skipped and
/// the scale halves; the next finite step is applied, unscaled. (The arithmetic stays f32: this
/// checks the policy's decisions, which every device must take the same way.)
/// The fused LSTM's training step (recurrence differentiated by hand) against autodiff
/// through `burn::nn::Lstm`: gradients of a 3-layer, 2-seed network, relative to each
/// parameter's largest (the loss agrees to 1e-5 on the CPU).
pub(super) fn fused_lstm<B: QuenchBackend>(device: &B::Device) -> Check {
    let (loss, gradients) = fused_lstm_gap::<B>(device);
    Check::measured(
        "fused LSTM step vs burn::nn::Lstm (gradients, relative)",
        loss.max(gradients),
        1e-4,
    )
}
