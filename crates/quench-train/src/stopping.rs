//! Per-member early stopping on a validation metric, kept on the host over the one metric
//! vector read back per epoch: each member remembers its best value and epoch and stops after
//! `patience` epochs without a strict improvement; the training loop copies an improving
//! member's weights into its best ones and masks stopped members out of the optimiser.

/// Whether a larger or a smaller metric is better.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Better {
    /// Accuracy-like metrics.
    Higher,
    /// Loss-like metrics.
    Lower,
}

/// The early-stopping state of every member.
#[derive(Debug, Clone, PartialEq)]
pub struct EarlyStopping {
    patience: usize,
    better: Better,
    best: Vec<f64>,
    best_epoch: Vec<usize>,
    since_best: Vec<usize>,
    stopped: Vec<bool>,
    ever: Vec<bool>,
}

impl EarlyStopping {
    /// `members` members, none stopped, stopping after `patience` epochs without improvement.
    pub fn new(members: usize, patience: usize, better: Better) -> Self {
        let worst = match better {
            Better::Higher => f64::NEG_INFINITY,
            Better::Lower => f64::INFINITY,
        };
        Self {
            patience,
            better,
            best: vec![worst; members],
            best_epoch: vec![0; members],
            since_best: vec![0; members],
            stopped: vec![false; members],
            ever: vec![false; members],
        }
    }

    /// The same, with every member's best value starting at `best` instead of the worst
    /// possible: a metric must beat it to count as an improvement (the qRNG classifier's
    /// original starts its best accuracy at 0).
    pub fn starting_from(mut self, best: f64) -> Self {
        self.best.fill(best);
        self
    }

    /// Members tracked.
    pub fn members(&self) -> usize {
        self.stopped.len()
    }

    /// Whether member `m` has improved at least once (its best epoch means something).
    pub fn improved_ever(&self, m: usize) -> bool {
        self.ever[m]
    }

    /// Whether any member still trains.
    pub fn running(&self) -> bool {
        self.stopped.iter().any(|s| !s)
    }

    /// Whether member `m` has stopped.
    pub fn stopped(&self, m: usize) -> bool {
        self.stopped[m]
    }

    /// One flag per member, true where it still trains; `None` while every member does (no
    /// mask needed).
    pub fn active(&self) -> Option<Vec<bool>> {
        self.stopped
            .iter()
            .any(|&s| s)
            .then(|| self.stopped.iter().map(|s| !s).collect())
    }

    /// Records epoch `epoch`'s metric of every member (`values[m]`; stopped members are
    /// skipped) and returns, per member, whether it improved: those members' weights become
    /// their best. A NaN never improves.
    pub fn observe(&mut self, epoch: usize, values: &[f64]) -> Vec<bool> {
        let mut improved = vec![false; self.stopped.len()];
        for (m, &value) in values.iter().enumerate().take(self.stopped.len()) {
            if self.stopped[m] {
                continue;
            }
            let better = match self.better {
                Better::Higher => value > self.best[m],
                Better::Lower => value < self.best[m],
            };
            if better {
                (self.best[m], self.best_epoch[m], self.since_best[m]) = (value, epoch, 0);
                (improved[m], self.ever[m]) = (true, true);
            } else {
                self.since_best[m] += 1;
                self.stopped[m] = self.since_best[m] >= self.patience;
            }
        }
        improved
    }

    /// Member `m`'s best value (the starting worst before any epoch).
    pub fn best(&self, m: usize) -> f64 {
        self.best[m]
    }

    /// The epoch (from 0) of member `m`'s best value.
    pub fn best_epoch(&self, m: usize) -> usize {
        self.best_epoch[m]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_stop_on_their_own_after_patience_misses() {
        let mut s = EarlyStopping::new(2, 2, Better::Lower);
        assert_eq!(s.active(), None);
        assert_eq!(s.observe(0, &[1.0, 1.0]), vec![true, true]);
        assert_eq!(s.observe(1, &[0.5, 1.0]), vec![true, false]);
        assert_eq!(s.observe(2, &[0.6, f64::NAN]), vec![false, false]);
        assert!(s.stopped(1) && !s.stopped(0));
        assert_eq!(s.active(), Some(vec![true, false]));
        // A stopped member is not observed again.
        assert_eq!(s.observe(3, &[0.7, 0.0]), vec![false, false]);
        assert!(!s.running());
        assert_eq!((s.best(0), s.best_epoch(0)), (0.5, 1));
        assert_eq!((s.best(1), s.best_epoch(1)), (1.0, 0));
    }

    #[test]
    fn a_starting_best_must_be_beaten() {
        let mut s = EarlyStopping::new(1, 2, Better::Higher).starting_from(0.0);
        assert_eq!(s.observe(0, &[0.0]), vec![false]);
        assert!(!s.improved_ever(0));
        assert_eq!(s.observe(1, &[0.1]), vec![true]);
        assert!(s.improved_ever(0) && s.best_epoch(0) == 1);
    }

    #[test]
    fn higher_is_better_for_accuracies() {
        let mut s = EarlyStopping::new(1, 1, Better::Higher);
        assert_eq!(s.observe(0, &[0.2]), vec![true]);
        assert_eq!(s.observe(1, &[0.2]), vec![false], "a tie is no improvement");
        assert!(!s.running());
    }
}
