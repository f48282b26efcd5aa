//! The epoch loop every seed-batched trainer shares (the hybrid classifier, the temporal
//! models, the qRNG source classifier): epochs until each member has stopped early or the
//! limit is reached, each epoch one pass over the members' batches and one read-back of every
//! member's validation metric and summed training loss, per-member early stopping on that
//! metric with the best weights kept, and each member's history.
//!
//! The members (their weights, optimiser, data and step) are the workload's: it implements
//! [`SeedMembers`]. The learning rate follows a [`RateSchedule`]: one rate for every member
//! per epoch (a closure of the epoch), or a rate per member that also sees the metric (the
//! classifier's reduce-on-plateau).

use burn::tensor::{Bool, Tensor};
use quench_kernels::QuenchOps;
use quench_kernels::readback::to_host_f32;

use crate::classify::{member_mask, member_tensor};
use crate::params::replace_members;
use crate::stopping::EarlyStopping;

/// What one epoch of every member gave, read back from the device in one transfer.
#[derive(Debug, Clone, PartialEq)]
pub struct EpochValues {
    /// Each member's validation metric after the epoch (`[members]`).
    pub validation: Vec<f32>,
    /// Each member's training losses summed over the epoch's batches (`[members]`).
    pub loss_sum: Vec<f32>,
}

impl EpochValues {
    /// Every member's validation metric and summed training loss (both `[members]`, on the
    /// device), read back in one transfer.
    pub fn read<B: QuenchOps>(validation: Tensor<B, 1>, loss_sum: Tensor<B, 1>) -> Self {
        let members = validation.dims()[0];
        let mut values = to_host_f32(Tensor::cat(vec![validation, loss_sum], 0));
        let loss_sum = values.split_off(members);
        Self {
            validation: values,
            loss_sum,
        }
    }
}

/// The learning rates of one epoch.
#[derive(Debug, Clone, PartialEq)]
pub enum Rates {
    /// One rate for every member.
    Shared(f64),
    /// A rate per member (`[members]`).
    PerMember(Vec<f64>),
}

impl Rates {
    /// Member `m`'s rate.
    pub fn of(&self, m: usize) -> f64 {
        match self {
            Self::Shared(rate) => *rate,
            Self::PerMember(rates) => rates[m],
        }
    }

    /// The rates as an optimiser takes them: `[1, 1, 1]` when shared, `[members, 1, 1]` per
    /// member, in f32.
    pub fn tensor<B: QuenchOps>(&self, device: &B::Device) -> Tensor<B, 3> {
        match self {
            Self::Shared(rate) => Tensor::full([1, 1, 1], *rate, device),
            Self::PerMember(rates) => member_tensor(rates.iter().map(|&r| r as f32), device),
        }
    }
}

/// The `[members, 1, 1]` mask of the members an epoch steps; `None` while every member does
/// (no masking needed).
pub fn active_mask<B: QuenchOps>(
    active: Option<&[bool]>,
    device: &B::Device,
) -> Option<Tensor<B, 3, Bool>> {
    active.map(|flags| member_mask(flags.iter().copied(), device))
}

/// `best` with the members flagged in `improved` replaced by their `current` weights.
pub fn keep_improved<B: QuenchOps>(
    best: Vec<Tensor<B, 3>>,
    current: &[Tensor<B, 3>],
    improved: &[bool],
    device: &B::Device,
) -> Vec<Tensor<B, 3>> {
    replace_members(best, current, member_mask(improved.iter().copied(), device))
}

/// How the learning rate moves from epoch to epoch.
pub trait RateSchedule {
    /// The rates epoch `epoch` (from 0) trains with.
    fn rates(&self, epoch: usize) -> Rates;

    /// Member `member`'s validation metric after epoch `epoch` (members that have stopped are
    /// not shown); nothing by default.
    fn observe(&mut self, _member: usize, _epoch: usize, _metric: f64) {}
}

/// A rate shared by every member and given by the epoch alone (step decay, warm-up and
/// cosine).
impl<F: Fn(usize) -> f64> RateSchedule for F {
    fn rates(&self, epoch: usize) -> Rates {
        Rates::Shared(self(epoch))
    }
}

/// The members a loop trains, as a workload holds them.
pub trait SeedMembers {
    /// Why an epoch could not be trained.
    type Error;

    /// Trains one epoch: every batch, stepping member `m` at `rates.of(m)` where `active` is
    /// `None` (every member trains) or flags it; returns the validation metric and summed
    /// training loss of every member, read back once.
    fn epoch(
        &mut self,
        epoch: usize,
        rates: &Rates,
        active: Option<&[bool]>,
    ) -> Result<EpochValues, Self::Error>;

    /// Keeps each member's current weights as its best where `improved`.
    fn keep_best(&mut self, improved: &[bool]);

    /// Training batches per epoch (a member's mean loss is its sum over this).
    fn batches(&self) -> usize;
}

/// One epoch of one member.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EpochRecord {
    /// The validation metric after the epoch.
    pub validation: f64,
    /// The mean training loss over the epoch's batches.
    pub train_loss: f64,
    /// The learning rate the epoch trained with.
    pub lr: f64,
}

/// What a loop left: the epochs it ran, every member's history (its epochs until it
/// stopped) and the early-stopping state (each member's best value and epoch).
#[derive(Debug, Clone, PartialEq)]
pub struct Trained {
    /// Epochs the program ran: until every member stopped, or the limit.
    pub epochs: usize,
    /// Every member's epochs, in order.
    pub histories: Vec<Vec<EpochRecord>>,
    /// Each member's best validation value and its epoch.
    pub stopping: EarlyStopping,
}

/// Trains `members` (as many as `stopping` tracks) for at most `max_epochs` epochs, until
/// every member has stopped, with rates from `schedule`; or, after at least one epoch, until
/// the caller asks to stop ([`quench_support::interrupt::requested`], the Python package's
/// Ctrl-C): every member then keeps its best weights so far, as if stopped early.
pub fn train_epochs<M: SeedMembers>(
    members: &mut M,
    max_epochs: usize,
    mut stopping: EarlyStopping,
    schedule: &mut impl RateSchedule,
) -> Result<Trained, M::Error> {
    let count = stopping.members();
    let mut histories: Vec<Vec<EpochRecord>> = vec![Vec::new(); count];
    let mut epoch = 0;
    while epoch < max_epochs
        && stopping.running()
        && !(epoch > 0 && quench_support::interrupt::requested())
    {
        let rates = schedule.rates(epoch);
        let active = stopping.active();
        let values = members.epoch(epoch, &rates, active.as_deref())?;
        let batches = members.batches() as f64;
        for m in (0..count).filter(|&m| !stopping.stopped(m)) {
            let validation = f64::from(values.validation[m]);
            histories[m].push(EpochRecord {
                validation,
                train_loss: f64::from(values.loss_sum[m]) / batches,
                lr: rates.of(m),
            });
            schedule.observe(m, epoch, validation);
        }
        let metric: Vec<f64> = values.validation.iter().map(|&v| f64::from(v)).collect();
        let improved = stopping.observe(epoch, &metric);
        if improved.iter().any(|&i| i) {
            members.keep_best(&improved);
        }
        epoch += 1;
    }
    Ok(Trained {
        epochs: epoch,
        histories,
        stopping,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stopping::Better;

    /// Two members whose validation accuracy follows a script; the weights are the epoch
    /// number, so the best kept is the epoch of the best value.
    struct Scripted {
        script: Vec<[f32; 2]>,
        weights: [usize; 2],
        best: [usize; 2],
        seen: Vec<(Rates, Option<Vec<bool>>)>,
    }

    impl SeedMembers for Scripted {
        type Error = String;

        fn epoch(
            &mut self,
            epoch: usize,
            rates: &Rates,
            active: Option<&[bool]>,
        ) -> Result<EpochValues, String> {
            self.seen
                .push((rates.clone(), active.map(<[bool]>::to_vec)));
            let values = self.script.get(epoch).ok_or("past the script")?;
            for m in 0..2 {
                if active.is_none_or(|a| a[m]) {
                    self.weights[m] = epoch;
                }
            }
            Ok(EpochValues {
                validation: values.to_vec(),
                loss_sum: vec![2.0 * epoch as f32, 4.0],
            })
        }

        fn keep_best(&mut self, improved: &[bool]) {
            for ((best, weights), &kept) in self.best.iter_mut().zip(self.weights).zip(improved) {
                if kept {
                    *best = weights;
                }
            }
        }

        fn batches(&self) -> usize {
            2
        }
    }

    fn scripted(script: Vec<[f32; 2]>) -> Scripted {
        Scripted {
            script,
            weights: [0; 2],
            best: [0; 2],
            seen: Vec::new(),
        }
    }

    #[test]
    fn members_stop_on_their_own_and_keep_their_best_weights() {
        let mut members = scripted(vec![
            [0.5, 0.5],
            [0.6, 0.4],
            [0.6, 0.7],
            [0.7, 0.7],
            [0.8, 0.7],
        ]);
        let stopping = EarlyStopping::new(2, 2, Better::Higher);
        let mut schedule = |epoch: usize| 0.1 / (epoch + 1) as f64;
        let trained = train_epochs(&mut members, 5, stopping, &mut schedule).unwrap();
        // Member 1 improves at epoch 2, then misses twice and stops after epoch 4; member 0
        // improves at epoch 4 and would go on: the limit of 5 ends the loop.
        assert_eq!(trained.epochs, 5, "{:?}", trained.histories);
        assert_eq!(members.best, [4, 2]);
        assert_eq!(trained.histories[1].len(), 5);
        assert!(trained.stopping.stopped(1) && !trained.stopping.stopped(0));
        let first = trained.histories[0][1];
        assert_eq!(
            (first.validation, first.train_loss, first.lr),
            (f64::from(0.6f32), 1.0, 0.05)
        );
        assert_eq!(members.seen[0], (Rates::Shared(0.1), None));
    }

    #[test]
    fn stopped_members_are_masked_out_and_an_error_ends_the_loop() {
        let mut members = scripted(vec![[0.5, 0.5], [0.6, 0.4], [0.7, 0.3], [0.8, 0.2]]);
        let stopping = EarlyStopping::new(2, 1, Better::Higher);
        let err = train_epochs(&mut members, 10, stopping, &mut |_| 1.0).unwrap_err();
        assert_eq!(err, "past the script");
        // Member 1 stopped after epoch 1: masked from epoch 2 on, its weights kept.
        assert_eq!(members.seen[2].1, Some(vec![true, false]));
        assert_eq!(members.weights, [3, 1]);
    }

    /// A per-member schedule that halves a member's rate whenever its metric falls.
    struct Halving {
        rates: Vec<f64>,
        last: Vec<f64>,
    }

    impl RateSchedule for Halving {
        fn rates(&self, _epoch: usize) -> Rates {
            Rates::PerMember(self.rates.clone())
        }

        fn observe(&mut self, member: usize, _epoch: usize, metric: f64) {
            if metric < self.last[member] {
                self.rates[member] /= 2.0;
            }
            self.last[member] = metric;
        }
    }

    #[test]
    fn a_per_member_schedule_sees_each_metric_and_sets_each_rate() {
        let mut members = scripted(vec![[0.5, 0.5], [0.6, 0.4], [0.7, 0.45]]);
        let mut schedule = Halving {
            rates: vec![1.0, 1.0],
            last: vec![0.0, 0.0],
        };
        let stopping = EarlyStopping::new(2, 5, Better::Higher);
        let trained = train_epochs(&mut members, 3, stopping, &mut schedule).unwrap();
        assert_eq!(trained.epochs, 3);
        assert_eq!(members.seen[2].0, Rates::PerMember(vec![1.0, 0.5]));
        assert_eq!(trained.histories[1][2].lr, 0.5);
    }
}
