//! The bounded cross-entropy of the workload, its `[0, 1]` rescaling, and the 0-1 error, for
//! one logit per sample (binary classification).

use burn::tensor::Tensor;
use quench_kernels::QuenchOps;
use quench_kernels::ops::sgld::true_class_probability;
use serde::{Deserialize, Serialize};

/// The loss the chains are trained on: the Gibbs posterior `exp(-beta L)` is of this `L`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LossScale {
    /// The bounded loss mapped onto `[0, 1]` ([`BoundedLoss::to_unit`]), the loss of the
    /// PAC-Bayes bound, so that the sampled posterior and the bound agree.
    #[default]
    Unit,
    /// The bounded loss in nats, as the original trained: `L` is about 4x the unit loss at
    /// `l_max = 4`, so each `beta` acts as about 4x its nominal value on the bound's loss.
    Raw,
}

/// Cross-entropy made bounded by mixing the predicted probability of the true class `p` with
/// a floor: `psi(p) = e^-l + (1 - 2 e^-l) p`, loss `clamp(-ln psi, 0, l)` with `l = l_max`.
///
/// The loss lies in `[-ln(1 - e^-l), l]` (`p = 1` and `p = 0`); PAC-Bayes bounds need a loss in
/// `[0, 1]`, which [`to_unit`](Self::to_unit) maps that interval onto.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BoundedLoss {
    /// The upper bound `l`, nats.
    pub l_max: f64,
}

impl BoundedLoss {
    /// Per-sample loss: logits `[members, n, 1]` and labels 0/1 of the same shape (or with
    /// member axis 1, shared by all members) to `[members, n, 1]`, nats.
    pub fn per_sample<B: QuenchOps>(
        &self,
        logits: Tensor<B, 3>,
        labels: Tensor<B, 3>,
    ) -> Tensor<B, 3> {
        let [_, _, psi] = true_class_probability(logits, labels, self.floor());
        psi.log().neg().clamp(0.0, self.l_max)
    }

    /// The smallest value the loss takes, `-ln(1 - e^-l)` (a certain, correct prediction).
    pub fn min(&self) -> f64 {
        -(-(-self.l_max).exp()).ln_1p()
    }

    /// The factor from nats to the training loss `scale`: `1 / (l_max - min)` for the unit
    /// loss (its offset moves no gradient), 1 for the raw one.
    pub fn training_factor(&self, scale: LossScale) -> f64 {
        match scale {
            LossScale::Unit => (self.l_max - self.min()).recip(),
            LossScale::Raw => 1.0,
        }
    }

    /// The floor `e^-l` mixed into the probability of the true class; the loss's derivative
    /// with respect to the logit is `quench_kernels::ops::sgld::logit_gradient` at this floor
    /// (the clamp never binds away from `p = 0`, where that derivative vanishes too).
    pub fn floor(&self) -> f64 {
        (-self.l_max).exp()
    }

    /// Maps a loss (or a mean of losses) from `[min, l_max]` affinely onto `[0, 1]`.
    pub fn to_unit(&self, loss: f64) -> f64 {
        (loss - self.min()) / (self.l_max - self.min())
    }
}

/// Per-sample 0-1 error of the prediction `sigmoid(z) > 1/2`, i.e. `z > 0`: logits
/// `[members, n, 1]` and labels 0/1 (member axis `members` or 1) to `[members, n, 1]` of 0/1.
pub fn zero_one_error<B: QuenchOps>(logits: Tensor<B, 3>, labels: Tensor<B, 3>) -> Tensor<B, 3> {
    (logits.greater_elem(0.0).float() - labels).abs()
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::NdArray;
    use burn::tensor::TensorData;
    use quench_kernels::readback::to_host_f32;
    use quench_kernels::reductions::Reduce;

    type Cpu = NdArray<f32>;

    fn column(values: &[f32]) -> Tensor<Cpu, 3> {
        Tensor::from_data(
            TensorData::new(values.to_vec(), [1, values.len(), 1]),
            &Default::default(),
        )
    }

    #[test]
    fn matches_the_formula_and_stays_within_its_bounds() {
        let loss = BoundedLoss { l_max: 4.0 };
        let logits = [-30.0f32, -2.0, 0.0, 1.5, 30.0];
        for label in [0.0f32, 1.0] {
            let got = to_host_f32(loss.per_sample(column(&logits), column(&[label; 5])));
            for (z, g) in logits.iter().zip(got) {
                let p1 = 1.0 / (1.0 + (-f64::from(*z)).exp());
                let p = if label == 1.0 { p1 } else { 1.0 - p1 };
                let floor = (-4.0f64).exp();
                let want = -(floor + (1.0 - 2.0 * floor) * p).ln();
                assert!(
                    (f64::from(g) - want).abs() < 1e-5,
                    "z {z} y {label}: {g} vs {want}"
                );
                assert!(f64::from(g) >= loss.min() - 1e-6 && f64::from(g) <= 4.0);
            }
        }
        // A confident wrong answer costs l_max, a confident right one the minimum.
        let ends = to_host_f32(loss.per_sample(column(&[-30.0, 30.0]), column(&[1.0, 1.0])));
        assert!((ends[0] - 4.0).abs() < 1e-4 && (f64::from(ends[1]) - loss.min()).abs() < 1e-5);
    }

    #[test]
    fn the_logit_gradient_is_autodiffs() {
        use burn::backend::Autodiff;
        let loss = BoundedLoss { l_max: 4.0 };
        let logits = [-9.0f32, -2.0, -0.1, 0.0, 0.7, 3.0, 12.0];
        for label in [0.0f32, 1.0] {
            let z = Tensor::<Autodiff<Cpu>, 3>::from_inner(column(&logits)).require_grad();
            let y = Tensor::from_inner(column(&[label; 7]));
            let grads = loss.per_sample(z.clone(), y).sum_all().backward();
            let want = to_host_f32(z.grad(&grads).unwrap());
            let got = to_host_f32(quench_kernels::ops::sgld::logit_gradient(
                column(&logits),
                column(&[label; 7]),
                loss.floor(),
            ));
            for (g, w) in got.iter().zip(&want) {
                assert!((g - w).abs() < 1e-6, "y {label}: {got:?} vs {want:?}");
            }
        }
        assert!((loss.training_factor(LossScale::Unit) * (4.0 - loss.min()) - 1.0).abs() < 1e-12);
        assert_eq!(loss.training_factor(LossScale::Raw), 1.0);
    }

    #[test]
    fn rescaling_maps_the_loss_range_onto_the_unit_interval() {
        let loss = BoundedLoss { l_max: 4.0 };
        assert!((loss.min() - 0.018_485_45).abs() < 1e-7, "{}", loss.min());
        assert!(loss.to_unit(loss.min()).abs() < 1e-12);
        assert!((loss.to_unit(4.0) - 1.0).abs() < 1e-12);
        // ln 2, an uninformed prediction, lands in the middle third.
        let half = loss.to_unit(std::f64::consts::LN_2);
        assert!(half > 0.1 && half < 0.2, "{half}");
    }

    #[test]
    fn zero_one_error_counts_wrong_signs_with_shared_labels() {
        let logits = Tensor::<Cpu, 3>::from_data(
            TensorData::new(vec![0.3f32, -0.2, -1.0, 2.0], [2, 2, 1]),
            &Default::default(),
        );
        let labels = column(&[1.0, 1.0]);
        assert_eq!(
            to_host_f32(zero_one_error(logits, labels)),
            vec![0.0, 1.0, 1.0, 0.0]
        );
    }
}
