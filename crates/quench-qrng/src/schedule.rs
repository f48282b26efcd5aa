//! The classifier's per-member learning rate on a metric where higher is better (validation
//! accuracy): PyTorch's `ReduceLROnPlateau(mode="max")`.
//!
//! This runs on the host over the one `[members]` metric vector read back per epoch; its
//! decisions go back to the device as an `[members, 1, 1]` learning rate and masks.

use quench_train::epochs::{RateSchedule, Rates};
use serde::{Deserialize, Serialize};

/// Reduce-on-plateau settings; the defaults are the classifier's.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PlateauConfig {
    /// Multiplier of the learning rate at a plateau.
    pub factor: f64,
    /// Epochs without improvement tolerated; the rate drops on the next one.
    pub patience: usize,
    /// Relative margin by which the metric must beat its best to count as an improvement.
    pub threshold: f64,
}

impl Default for PlateauConfig {
    fn default() -> Self {
        Self {
            factor: 0.5,
            patience: 50,
            threshold: 1e-4,
        }
    }
}

/// PyTorch's `ReduceLROnPlateau(mode="max")` for every member: each member's rate, cut by
/// `factor` once more than `patience` epochs in a row fail to beat its best metric times
/// `1 + threshold`. The epoch loop's early stopping is separate
/// ([`quench_train::stopping::EarlyStopping`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Plateaus {
    config: PlateauConfig,
    /// Each member's current rate.
    lr: Vec<f64>,
    /// Each member's best metric as the rule sees it.
    best: Vec<f64>,
    /// Each member's epochs since the rule's last improvement.
    bad: Vec<usize>,
}

impl Plateaus {
    /// `members` members starting at rate `lr`.
    pub fn new(members: usize, lr: f64, config: PlateauConfig) -> Self {
        Self {
            config,
            lr: vec![lr; members],
            best: vec![f64::NEG_INFINITY; members],
            bad: vec![0; members],
        }
    }
}

impl RateSchedule for Plateaus {
    fn rates(&self, _epoch: usize) -> Rates {
        Rates::PerMember(self.lr.clone())
    }

    fn observe(&mut self, m: usize, _epoch: usize, metric: f64) {
        if metric > self.best[m] * (1.0 + self.config.threshold) {
            self.best[m] = metric;
            self.bad[m] = 0;
        } else {
            self.bad[m] += 1;
        }
        if self.bad[m] > self.config.patience {
            let reduced = self.lr[m] * self.config.factor;
            // PyTorch ignores reductions smaller than its eps of 1e-8.
            if self.lr[m] - reduced > 1e-8 {
                self.lr[m] = reduced;
            }
            self.bad[m] = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plateau(patience: usize) -> PlateauConfig {
        PlateauConfig {
            patience,
            ..PlateauConfig::default()
        }
    }

    /// Member 0's rate after observing `metrics` in turn.
    fn rates_after(plateaus: &mut Plateaus, metrics: &[f64]) -> Vec<f64> {
        metrics
            .iter()
            .enumerate()
            .map(|(epoch, &metric)| {
                plateaus.observe(0, epoch, metric);
                plateaus.rates(epoch + 1).of(0)
            })
            .collect()
    }

    #[test]
    fn rate_halves_after_patience_plus_one_flat_epochs_and_again_later() {
        let mut s = Plateaus::new(1, 1e-3, plateau(2));
        let rates = rates_after(&mut s, &[0.5; 7]);
        assert_eq!(
            rates,
            vec![1e-3, 1e-3, 1e-3, 5e-4, 5e-4, 5e-4, 2.5e-4],
            "reduced on the third flat epoch after the first, and again three later"
        );
    }

    #[test]
    fn tiny_gains_within_the_threshold_do_not_reset_the_plateau() {
        let mut s = Plateaus::new(1, 1.0, plateau(1));
        let rates = rates_after(&mut s, &[0.5, 0.500_01, 0.500_02]);
        assert_eq!(rates, vec![1.0, 1.0, 0.5]);
    }

    #[test]
    fn members_have_their_own_rates() {
        let mut s = Plateaus::new(2, 1.0, plateau(0));
        s.observe(0, 0, 0.5);
        s.observe(1, 0, 0.5);
        s.observe(1, 1, 0.4);
        assert_eq!(s.rates(2), Rates::PerMember(vec![1.0, 0.5]));
    }
}
