//! Pieces every multi-class classifier of the workloads shares, over a leading member axis:
//! the loss, dropout, and per-member values and masks for the optimiser.

use burn::tensor::activation::log_softmax;
use burn::tensor::{Bool, Int, Tensor, TensorData};
use quench_kernels::QuenchOps;
use quench_kernels::reductions::Reduce;
use quench_kernels::views::ReshapeTo;

/// Mean cross-entropy of each member's batch: logits `[members, batch, classes]`, labels
/// `[members, batch]`, result `[members]`.
pub fn cross_entropy<B: QuenchOps>(
    logits: Tensor<B, 3>,
    labels: Tensor<B, 2, Int>,
) -> Tensor<B, 1> {
    let [members, batch, _] = logits.dims();
    log_softmax(logits, 2)
        .gather(2, labels.reshape_to([members, batch, 1]))
        .mean_along(1)
        .reshape_to([members])
        .neg()
}

/// PyTorch's `CrossEntropyLoss(weight, label_smoothing)` per member: logits `[members, batch,
/// classes]`, labels `[members, batch]`, `class_weights` `[classes]` (`None`: all 1), result
/// `[members]`. With smoothing `e` the target is `(1 - e)` on the label plus `e / classes`
/// everywhere; each sample's terms are weighted by the class weights and the mean divides by
/// the summed weights of the samples' labels, as PyTorch does.
pub fn smoothed_cross_entropy<B: QuenchOps>(
    logits: Tensor<B, 3>,
    labels: Tensor<B, 2, Int>,
    smoothing: f64,
    class_weights: Option<&[f32]>,
) -> Tensor<B, 1> {
    let [members, batch, classes] = logits.dims();
    let device = logits.device();
    let log_p = log_softmax(logits, 2);
    let labels = labels.reshape_to([members, batch, 1]);
    let weights = Tensor::<B, 1>::from_data(
        TensorData::new(
            class_weights.map_or_else(|| vec![1.0; classes], <[f32]>::to_vec),
            [classes],
        ),
        &device,
    );
    let per_class = weights.clone().reshape_to([1, 1, classes]);
    let sample_weight = weights
        .reshape_to([1, 1, classes])
        .repeat_dim(0, members)
        .repeat_dim(1, batch)
        .gather(2, labels.clone());
    let on_label = log_p.clone().gather(2, labels) * sample_weight.clone();
    let spread = (log_p * per_class).sum_along(2) / classes as f64;
    let per_sample = on_label * (1.0 - smoothing) + spread * smoothing;
    (per_sample.sum_along(1) / sample_weight.sum_along(1))
        .reshape_to([members])
        .neg()
}

/// The mask of inverted dropout at `rate`: `1 / (1 - rate)` where a unit is kept, 0 elsewhere.
pub fn dropout_mask<B: QuenchOps, const D: usize>(
    shape: burn::tensor::Shape,
    rate: f64,
    device: &B::Device,
) -> Tensor<B, D> {
    B::dropout_mask(shape, rate, device)
}

/// `[members, 1, 1]` from one value per member.
pub fn member_tensor<B: QuenchOps>(
    values: impl Iterator<Item = f32>,
    device: &B::Device,
) -> Tensor<B, 3> {
    let values: Vec<f32> = values.collect();
    let members = values.len();
    Tensor::from_data(TensorData::new(values, [members, 1, 1]), device)
}

/// `[members, 1, 1]` boolean mask from one flag per member.
pub fn member_mask<B: QuenchOps>(
    flags: impl Iterator<Item = bool>,
    device: &B::Device,
) -> Tensor<B, 3, Bool> {
    let flags: Vec<bool> = flags.collect();
    let members = flags.len();
    Tensor::from_data(TensorData::new(flags, [members, 1, 1]), device)
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::NdArray;
    use quench_kernels::readback::to_host_f32;

    type Cpu = NdArray<f32>;

    /// PyTorch's weighted, smoothed cross-entropy of one member written out longhand.
    fn reference(logits: &[[f64; 3]], labels: &[usize], e: f64, w: [f64; 3]) -> f64 {
        let (mut total, mut weight) = (0.0, 0.0);
        for (z, &y) in logits.iter().zip(labels) {
            let lse = z.iter().map(|v| v.exp()).sum::<f64>().ln();
            let logp: Vec<f64> = z.iter().map(|v| v - lse).collect();
            let smooth: f64 = (0..3).map(|k| w[k] * logp[k]).sum::<f64>() / 3.0;
            total -= (1.0 - e) * w[y] * logp[y] + e * smooth;
            weight += w[y];
        }
        total / weight
    }

    #[test]
    fn smoothed_weighted_cross_entropy_is_pytorchs_per_member() {
        let device = Default::default();
        let a = [[0.5, -1.0, 2.0], [1.5, 0.2, -0.3], [0.0, 0.0, 1.0]];
        let b = [[-2.0, 1.0, 0.1], [0.3, 0.3, 0.3], [2.5, -0.5, 0.0]];
        let (la, lb) = ([2usize, 0, 1], [1usize, 2, 0]);
        let flat: Vec<f32> = a.iter().chain(&b).flatten().map(|&v| v as f32).collect();
        let logits = Tensor::<Cpu, 3>::from_data(TensorData::new(flat, [2, 3, 3]), &device);
        let labels = Tensor::<Cpu, 2, Int>::from_data(
            TensorData::new(
                la.iter().chain(&lb).map(|&l| l as i64).collect::<Vec<_>>(),
                [2, 3],
            ),
            &device,
        );
        let w = [0.5f32, 2.0, 1.0];
        for (e, weights) in [(0.0, None), (0.1, None), (0.1, Some(w)), (0.3, Some(w))] {
            let got = to_host_f32(smoothed_cross_entropy(
                logits.clone(),
                labels.clone(),
                e,
                weights.as_ref().map(|w| &w[..]),
            ));
            let wf = weights.map_or([1.0; 3], |w| w.map(f64::from));
            for (m, (z, l)) in [(&a, &la), (&b, &lb)].into_iter().enumerate() {
                let want = reference(z, l, e, wf);
                assert!(
                    (f64::from(got[m]) - want).abs() < 1e-5,
                    "e {e}, member {m}: {} vs {want}",
                    got[m]
                );
            }
        }
        // Without smoothing or weights it is the plain cross-entropy.
        let plain = to_host_f32(cross_entropy(logits.clone(), labels.clone()));
        let smooth0 = to_host_f32(smoothed_cross_entropy(logits, labels, 0.0, None));
        assert!(
            plain
                .iter()
                .zip(&smooth0)
                .all(|(p, s)| (p - s).abs() < 1e-6)
        );
    }
}
