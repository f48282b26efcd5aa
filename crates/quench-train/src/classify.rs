//! Pieces every multi-class classifier of the workloads shares, over a leading member axis:
//! the loss, dropout, and per-member values and masks for the optimiser.

use burn::tensor::activation::log_softmax;
use burn::tensor::backend::Backend;
use burn::tensor::{Bool, Distribution, Int, Tensor, TensorData};
use quench_device::Precision;

/// Mean cross-entropy of each member's batch: logits `[members, batch, classes]`, labels
/// `[members, batch]`, result `[members]`.
pub fn cross_entropy<B: Backend>(logits: Tensor<B, 3>, labels: Tensor<B, 2, Int>) -> Tensor<B, 1> {
    let [members, batch, _] = logits.dims();
    log_softmax(logits, 2)
        .gather(2, labels.reshape([members, batch, 1]))
        .mean_dim(1)
        .reshape([members])
        .neg()
}

/// Inverted dropout with a fresh mask per member, sample and unit, drawn on the device from
/// the backend's generator (hold a [`quench_device::SeededGenerator`] for reproducible masks).
pub fn dropout<B: Backend>(h: Tensor<B, 3>, rate: f64, precision: Precision) -> Tensor<B, 3> {
    if rate == 0.0 {
        return h;
    }
    let keep = 1.0 - rate;
    let mask = Tensor::<B, 3>::random(h.shape(), Distribution::Bernoulli(keep), &h.device())
        .div_scalar(keep);
    h * precision.to_compute(mask)
}

/// `[members, 1, 1]` from one value per member.
pub fn member_tensor<B: Backend>(
    values: impl Iterator<Item = f32>,
    device: &B::Device,
) -> Tensor<B, 3> {
    let values: Vec<f32> = values.collect();
    let members = values.len();
    Tensor::from_data(TensorData::new(values, [members, 1, 1]), device)
}

/// `[members, 1, 1]` boolean mask from one flag per member.
pub fn member_mask<B: Backend>(
    flags: impl Iterator<Item = bool>,
    device: &B::Device,
) -> Tensor<B, 3, Bool> {
    let flags: Vec<bool> = flags.collect();
    let members = flags.len();
    Tensor::from_data(TensorData::new(flags, [members, 1, 1]), device)
}
