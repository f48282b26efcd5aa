//! The timing harness every benchmark uses: synchronise, warm up, repeat, summarise.

use std::time::Instant;

use burn::tensor::backend::Backend;
use serde::{Deserialize, Serialize};

use crate::counters::{CallCounts, Counts};
use crate::error::DeviceError;
use quench_support::stats::Stats;

/// How many untimed warm-up runs precede how many timed repeats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TimingConfig {
    /// Untimed runs first, so that kernel compilation, autotuning and allocation stay out.
    pub warmup: usize,
    /// Timed runs; at least one.
    pub repeats: usize,
}

impl Default for TimingConfig {
    fn default() -> Self {
        Self {
            warmup: 1,
            repeats: 5,
        }
    }
}

/// The most warm-up runs, and the most timed repeats, of one measurement: far above any useful
/// count (the quick suite times 5), and low enough that the samples' buffer stays small (8 MB).
pub const MAX_RUNS: usize = 1_000_000;

impl TimingConfig {
    /// Refuses no timed repeat, and warm-up runs or repeats above [`MAX_RUNS`], naming where
    /// each value came from: `repeats_from` and `warmup_from` (`--repeats`, `[timing] repeats`).
    ///
    /// # Errors
    /// [`DeviceError::NoRepeats`] or [`DeviceError::TooManyRuns`].
    pub fn check(&self, repeats_from: &str, warmup_from: &str) -> Result<(), DeviceError> {
        if self.repeats == 0 {
            return Err(DeviceError::NoRepeats {
                setting: repeats_from.to_string(),
            });
        }
        for (value, setting) in [(self.repeats, repeats_from), (self.warmup, warmup_from)] {
            if value > MAX_RUNS {
                return Err(DeviceError::TooManyRuns {
                    setting: setting.to_string(),
                    value,
                    max: MAX_RUNS,
                });
            }
        }
        Ok(())
    }
}

/// Wall-clock statistics of the timed repeats, in seconds, and the last run's output.
#[derive(Debug, Clone)]
pub struct Measurement<T> {
    /// Seconds per call of the measured closure.
    pub seconds: Stats,
    /// What the last timed call returned (its quality metric, say).
    pub output: T,
    /// Kernel launches and host read-backs per timed call.
    pub counts: CallCounts,
}

/// Times `work`, calling `sync` before every clock read so that asynchronous devices have
/// finished what the previous call queued and what this one queued.
pub fn measure<T>(
    config: TimingConfig,
    mut sync: impl FnMut() -> Result<(), DeviceError>,
    mut work: impl FnMut() -> T,
) -> Result<Measurement<T>, DeviceError> {
    config.check("repeats", "warmup")?;
    for _ in 0..config.warmup {
        work();
    }
    sync()?;
    let before = Counts::now();
    let mut samples = Vec::with_capacity(config.repeats);
    let mut output = None;
    for _ in 0..config.repeats {
        let start = Instant::now();
        let out = work();
        sync()?;
        samples.push(start.elapsed().as_secs_f64());
        output = Some(out);
    }
    let counts = Counts::now().per_call_since(&before, config.repeats as f64);
    // Not reached: `check` refused no repeat above.
    let none = || DeviceError::NoRepeats {
        setting: "repeats".into(),
    };
    let seconds = Stats::from_samples(&samples).ok_or_else(none)?;
    let output = output.ok_or_else(none)?;
    Ok(Measurement {
        seconds,
        output,
        counts,
    })
}

/// [`measure`] with Burn's device synchronisation of backend `B`.
pub fn measure_on<B: Backend, T>(
    device: &B::Device,
    config: TimingConfig,
    work: impl FnMut() -> T,
) -> Result<Measurement<T>, DeviceError> {
    measure(config, || sync::<B>(device), work)
}

/// Waits until `device` has finished all queued work.
pub fn sync<B: Backend>(device: &B::Device) -> Result<(), DeviceError> {
    B::sync(device).map_err(|err| DeviceError::Sync(err.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    #[test]
    fn warms_up_then_syncs_around_every_timed_repeat() {
        let log = RefCell::new(Vec::new());
        let config = TimingConfig {
            warmup: 2,
            repeats: 3,
        };
        let mut calls = 0;
        let m = measure(
            config,
            || {
                log.borrow_mut().push('s');
                Ok(())
            },
            || {
                log.borrow_mut().push('w');
                calls += 1;
                calls
            },
        )
        .unwrap();
        assert_eq!(log.into_inner().iter().collect::<String>(), "wwswswsws");
        assert_eq!(m.output, 5);
        assert_eq!(m.seconds.count, 3);
        assert!(m.seconds.min <= m.seconds.median && m.seconds.median <= m.seconds.max);
    }

    #[test]
    fn refuses_zero_repeats_and_propagates_sync_failures() {
        let none = TimingConfig {
            warmup: 0,
            repeats: 0,
        };
        assert!(matches!(
            measure(none, || Ok(()), || ()),
            Err(DeviceError::NoRepeats { .. })
        ));
        let failing = measure(
            TimingConfig::default(),
            || Err(DeviceError::Sync("lost".into())),
            || (),
        );
        assert!(matches!(failing, Err(DeviceError::Sync(_))));
    }

    #[test]
    fn refuses_counts_that_would_not_fit_naming_where_they_came_from() {
        let many = TimingConfig {
            warmup: 0,
            repeats: 4_294_967_296,
        };
        let err = many.check("--repeats", "[timing] warmup").unwrap_err();
        assert!(matches!(err, DeviceError::TooManyRuns { .. }));
        assert_eq!(
            err.to_string(),
            "--repeats = 4294967296: at most 1000000 runs of one measurement"
        );
        // measure refuses before it allocates the samples' buffer or runs anything.
        let mut ran = false;
        assert!(measure(many, || Ok(()), || ran = true).is_err());
        assert!(!ran);
        let warm = TimingConfig {
            warmup: MAX_RUNS + 1,
            repeats: 1,
        };
        let err = warm
            .check("--repeats", "suite.toml: [timing] warmup")
            .unwrap_err();
        assert!(
            err.to_string()
                .starts_with("suite.toml: [timing] warmup = 1000001"),
            "{err}"
        );
        let most = TimingConfig {
            warmup: MAX_RUNS,
            repeats: MAX_RUNS,
        };
        assert!(most.check("r", "w").is_ok());
    }

    #[test]
    fn slower_work_measures_slower() {
        let config = TimingConfig {
            warmup: 0,
            repeats: 3,
        };
        let fast = measure(config, || Ok(()), || ()).unwrap();
        let slow = measure(
            config,
            || Ok(()),
            || std::thread::sleep(std::time::Duration::from_millis(5)),
        )
        .unwrap();
        assert!(slow.seconds.min >= 0.005);
        assert!(slow.seconds.median > fast.seconds.median);
    }
}
