//! Per-member model selection on a metric where higher is better (validation accuracy):
//! PyTorch's `ReduceLROnPlateau(mode="max")` and patience-based early stopping with the best
//! epoch remembered.
//!
//! This runs on the host over the one `[members]` metric vector read back per epoch; its
//! decisions go back to the device as an `[members, 1, 1]` learning rate and masks.

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

/// What one epoch's metric did to a member.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Step {
    /// The metric beat the best so far: these weights become the member's best.
    pub improved: bool,
    /// The learning rate was just reduced.
    pub lr_reduced: bool,
    /// The member has now gone `stop_patience` epochs without improvement and stops.
    pub stopped: bool,
}

/// One member's schedule state.
#[derive(Debug, Clone, PartialEq)]
pub struct MemberSchedule {
    /// Current learning rate.
    pub lr: f64,
    /// Best metric so far (0 before the first epoch, as the original starts).
    pub best: f64,
    /// Epoch (from 0) of the best metric, `None` before any improvement.
    pub best_epoch: Option<usize>,
    /// Epochs since the best metric.
    since_best: usize,
    /// Best metric as the plateau rule sees it (with its threshold).
    plateau_best: f64,
    /// Epochs since the plateau rule's last improvement.
    plateau_bad: usize,
    /// Whether the member has stopped.
    pub stopped: bool,
}

impl MemberSchedule {
    /// A member starting at learning rate `lr`.
    pub fn new(lr: f64) -> Self {
        Self {
            lr,
            best: 0.0,
            best_epoch: None,
            since_best: 0,
            plateau_best: f64::NEG_INFINITY,
            plateau_bad: 0,
            stopped: false,
        }
    }

    /// Records epoch `epoch`'s metric. The plateau rule runs first (rate times `factor` once
    /// more than `patience` epochs in a row fail to beat `best (1 + threshold)`), then early
    /// stopping (a strict improvement resets the count; `stop_patience` misses stop).
    pub fn observe(
        &mut self,
        epoch: usize,
        metric: f64,
        plateau: &PlateauConfig,
        stop_patience: usize,
    ) -> Step {
        if metric > self.plateau_best * (1.0 + plateau.threshold) {
            self.plateau_best = metric;
            self.plateau_bad = 0;
        } else {
            self.plateau_bad += 1;
        }
        let mut lr_reduced = false;
        if self.plateau_bad > plateau.patience {
            let reduced = self.lr * plateau.factor;
            // PyTorch ignores reductions smaller than its eps of 1e-8.
            if self.lr - reduced > 1e-8 {
                self.lr = reduced;
                lr_reduced = true;
            }
            self.plateau_bad = 0;
        }
        let improved = metric > self.best;
        if improved {
            self.best = metric;
            self.best_epoch = Some(epoch);
            self.since_best = 0;
        } else {
            self.since_best += 1;
        }
        self.stopped = self.since_best >= stop_patience;
        Step {
            improved,
            lr_reduced,
            stopped: self.stopped,
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

    #[test]
    fn rate_halves_after_patience_plus_one_flat_epochs_and_again_later() {
        let mut s = MemberSchedule::new(1e-3);
        let config = plateau(2);
        assert!(s.observe(0, 0.5, &config, 100).improved);
        let steps: Vec<bool> = (1..=6)
            .map(|e| s.observe(e, 0.5, &config, 100).lr_reduced)
            .collect();
        assert_eq!(steps, vec![false, false, true, false, false, true]);
        assert!((s.lr - 2.5e-4).abs() < 1e-15);
    }

    #[test]
    fn tiny_gains_within_the_threshold_do_not_reset_the_plateau() {
        let mut s = MemberSchedule::new(1.0);
        let config = plateau(1);
        s.observe(0, 0.5, &config, 100);
        assert!(
            s.observe(1, 0.500_01, &config, 100).improved,
            "a strict gain for early stopping"
        );
        assert!(
            s.observe(2, 0.500_02, &config, 100).lr_reduced,
            "but no gain for the plateau"
        );
    }

    #[test]
    fn stops_after_patience_misses_and_remembers_the_best_epoch() {
        let mut s = MemberSchedule::new(1e-3);
        let config = plateau(50);
        s.observe(0, 0.4, &config, 3);
        s.observe(1, 0.6, &config, 3);
        assert!(
            !s.observe(2, 0.6, &config, 3).stopped,
            "equal is not better"
        );
        assert!(!s.observe(3, 0.5, &config, 3).stopped);
        let last = s.observe(4, 0.55, &config, 3);
        assert!(last.stopped && !last.improved);
        assert_eq!((s.best, s.best_epoch), (0.6, Some(1)));
    }
}
