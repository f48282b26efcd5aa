//! Range checks of training settings, shared by the configurations that validate themselves:
//! each refuses the first setting out of range with its name, the value given and what it
//! must be. A configuration that passed its checks is a [`Valid`] one: training functions take
//! that, so a configuration is checked once, where it is made.

use std::ops::Deref;

// A real setting's refused value is shown short (`1e300`, not 300 digits).
use quench_support::numbers::short;

/// A setting refused by a check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The setting, e.g. `batch_size`.
    pub name: &'static str,
    /// The value given.
    pub value: String,
    /// What it must be.
    pub reason: &'static str,
}

impl Refusal {
    /// A refusal of `name` = `value` because of `reason`.
    pub fn new(name: &'static str, value: impl ToString, reason: &'static str) -> Self {
        Self {
            name,
            value: value.to_string(),
            reason,
        }
    }
}

/// The first setting for which `ok` fails, refused with `reason`, its value as `show`
/// writes it.
fn first<T: Copy>(
    settings: &[(&'static str, T)],
    ok: impl Fn(T) -> bool,
    show: impl Fn(T) -> String,
    reason: &'static str,
) -> Result<(), Refusal> {
    match settings.iter().find(|(_, value)| !ok(*value)) {
        Some(&(name, value)) => Err(Refusal::new(name, show(value), reason)),
        None => Ok(()),
    }
}

/// One member per seed: at least one seed, and none twice (two members of one seed train
/// alike: the same run twice, counted as two).
pub fn seeds(seeds: &[u64]) -> Result<(), Refusal> {
    if seeds.is_empty() {
        return Err(Refusal::new("seeds", "[]", "needs at least one seed"));
    }
    let mut seen = std::collections::HashSet::with_capacity(seeds.len());
    if let Some(twice) = seeds.iter().find(|&&seed| !seen.insert(seed)) {
        return Err(Refusal::new(
            "seeds",
            format!("{twice} (given twice)"),
            "each seed is one member: a seed given twice trains the same member twice",
        ));
    }
    Ok(())
}

/// Counts that must be at least 1.
pub fn at_least_one(settings: &[(&'static str, usize)]) -> Result<(), Refusal> {
    first(
        settings,
        |v| v >= 1,
        |v| v.to_string(),
        "must be at least 1",
    )
}

/// Refuses Adam's constants no run can use, naming the first as `adam.<name>`: each beta in
/// [0, 1) (a decay of 1 or more never forgets, or grows), `eps` positive (the update divides
/// by the root of the second moment plus it), `weight_decay` non-negative; all finite.
pub fn adam(config: &quench_kernels::ops::adam::AdamConfig) -> Result<(), Refusal> {
    rate(&[("adam.beta1", config.beta1), ("adam.beta2", config.beta2)])?;
    positive(&[("adam.eps", config.eps)])?;
    non_negative(&[("adam.weight_decay", config.weight_decay)])
}

/// Values that must be positive numbers the devices' f32 holds as they are (step sizes, rates,
/// scales: `quench_support::numbers::positive_in_f32`), so that none becomes 0 or infinite
/// once on the device.
pub fn positive(settings: &[(&'static str, f64)]) -> Result<(), Refusal> {
    first(
        settings,
        quench_support::numbers::positive_in_f32,
        short,
        quench_support::numbers::POSITIVE_IN_F32,
    )
}

/// Values that must be non-negative and finite.
pub fn non_negative(settings: &[(&'static str, f64)]) -> Result<(), Refusal> {
    first(
        settings,
        |v| v.is_finite() && v >= 0.0,
        short,
        "must be non-negative and finite",
    )
}

/// Rates that must lie in `[0, 1)` (dropout, label smoothing).
pub fn rate(settings: &[(&'static str, f64)]) -> Result<(), Refusal> {
    first(
        settings,
        |v| (0.0..1.0).contains(&v),
        short,
        "must be in [0, 1)",
    )
}

/// A lower bound of one training epoch, seconds, for the work budget ([`epochs`]): an epoch
/// takes at least one training step and one validation pass of its network and reads the
/// validation metric back for early stopping; on a GPU that is hundreds of kernel launches of
/// at least 5 us each (the device-agreement suite counts 700 to 1,250 per batch or epoch for
/// the hybrid and temporal models) and a 40 us round trip, on the CPU more.
pub const EPOCH_SECONDS: f64 = 1e-3;

/// Refuses a limit of `epochs` epochs (the setting `name`) whose lower bound of work exceeds
/// [`quench_support::budget::max_hours`]: early stopping may end a run sooner, but a run
/// whose stopping never fires must end too.
pub fn epochs(name: &'static str, epochs: usize) -> Result<(), quench_support::budget::TooLong> {
    quench_support::budget::check_work(
        || format!("{name} = {epochs}"),
        epochs as f64,
        EPOCH_SECONDS,
    )
}

/// A configuration that checks its own settings.
pub trait Validate {
    /// The error that names the first setting refused.
    type Error;

    /// Refuses settings no run can use, naming the first.
    fn validate(&self) -> Result<(), Self::Error>;
}

/// A configuration with one member per seed.
pub trait Seeded {
    /// Its seeds, one per member.
    fn seeds(&self) -> &[u64];

    /// Its seeds, to replace.
    fn seeds_mut(&mut self) -> &mut Vec<u64>;
}

/// A configuration its [`Validate::validate`] accepted. [`Valid::new`] is the only way to make
/// one, so a function that takes one does not check it again.
#[derive(Debug, Clone, PartialEq)]
pub struct Valid<C>(C);

impl<C: Validate> Valid<C> {
    /// `config`, checked.
    pub fn new(config: C) -> Result<Self, C::Error> {
        config.validate()?;
        Ok(Self(config))
    }
}

impl<C: Seeded + Clone> Valid<C> {
    /// The same configuration with only the members at `picked` (indices into its seeds, in
    /// that order: a rank's share, say), still valid without a second check: every check of a
    /// member count holds for fewer members. `None` where `picked` is empty or names a member
    /// it does not have.
    pub fn with_members(&self, picked: &[usize]) -> Option<Self> {
        let seeds = self.0.seeds();
        let kept = picked
            .iter()
            .map(|&i| seeds.get(i).copied())
            .collect::<Option<Vec<u64>>>()?;
        if kept.is_empty() {
            return None;
        }
        let mut config = self.0.clone();
        *config.seeds_mut() = kept;
        Some(Self(config))
    }
}

impl<C> Valid<C> {
    /// The configuration itself.
    pub fn into_inner(self) -> C {
        self.0
    }
}

impl<C> Deref for Valid<C> {
    type Target = C;

    fn deref(&self) -> &C {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adams_constants_out_of_range_are_named() {
        use quench_kernels::ops::adam::AdamConfig;
        assert!(adam(&AdamConfig::default()).is_ok());
        for (config, name) in [
            (
                AdamConfig {
                    beta1: 1.0,
                    ..AdamConfig::default()
                },
                "adam.beta1",
            ),
            (
                AdamConfig {
                    beta2: -0.1,
                    ..AdamConfig::default()
                },
                "adam.beta2",
            ),
            (
                AdamConfig {
                    eps: 0.0,
                    ..AdamConfig::default()
                },
                "adam.eps",
            ),
            (
                AdamConfig {
                    weight_decay: f64::NAN,
                    ..AdamConfig::default()
                },
                "adam.weight_decay",
            ),
        ] {
            assert_eq!(adam(&config).map_err(|r| r.name), Err(name));
        }
    }

    #[test]
    fn the_first_setting_out_of_range_is_named() {
        assert_eq!(
            at_least_one(&[("epochs", 3), ("batch_size", 0), ("patience", 0)]),
            Err(Refusal::new("batch_size", 0, "must be at least 1"))
        );
        let refused = positive(&[("learning_rate", f64::NAN)]).unwrap_err();
        assert_eq!(
            (refused.name, refused.value.as_str()),
            ("learning_rate", "NaN")
        );
        assert!(positive(&[("clip_norm", 0.0)]).is_err());
        // Positive in f64, 0 or infinite once a device holds it in f32.
        assert_eq!(positive(&[("lr", 1e-50)]).unwrap_err().value, "1e-50");
        assert_eq!(positive(&[("lr", 1e300)]).unwrap_err().value, "1e300");
        assert!(positive(&[("adam.eps", 1e-8)]).is_ok());
        assert!(non_negative(&[("weight_decay", 0.0)]).is_ok());
        assert!(non_negative(&[("weight_decay", f64::INFINITY)]).is_err());
        assert_eq!(rate(&[("dropout", 1e300)]).unwrap_err().value, "1e300");
        assert!(rate(&[("dropout", 0.0)]).is_ok());
        assert!(rate(&[("dropout", 1.0)]).is_err());
        assert_eq!(seeds(&[]).unwrap_err().value, "[]");
        assert!(seeds(&[3, 1, 2]).is_ok());
        assert_eq!(seeds(&[1, 2, 1]).unwrap_err().value, "1 (given twice)");
    }

    #[test]
    fn an_epoch_limit_that_would_not_end_is_refused_naming_the_setting() {
        // 1e9 epochs of at least 1 ms: 11.6 days, beyond the default 24 hours.
        let err = epochs("max_epochs", 1_000_000_000).unwrap_err().to_string();
        assert!(err.contains("max_epochs = 1000000000"), "{err}");
        assert!(err.contains("would take at least"), "{err}");
        assert!(epochs("epochs", 10_000).is_ok());
    }

    #[derive(Debug, Clone, PartialEq)]
    struct Members {
        seeds: Vec<u64>,
        batch_size: usize,
    }

    impl Validate for Members {
        type Error = Refusal;
        fn validate(&self) -> Result<(), Refusal> {
            seeds(&self.seeds)?;
            at_least_one(&[("batch_size", self.batch_size)])
        }
    }

    impl Seeded for Members {
        fn seeds(&self) -> &[u64] {
            &self.seeds
        }
        fn seeds_mut(&mut self) -> &mut Vec<u64> {
            &mut self.seeds
        }
    }

    #[test]
    fn only_a_checked_configuration_is_valid_and_a_share_of_its_members_stays_so() {
        let refused = Valid::new(Members {
            seeds: vec![1],
            batch_size: 0,
        });
        assert_eq!(refused.unwrap_err().name, "batch_size");
        let valid = Valid::new(Members {
            seeds: vec![5, 6, 7],
            batch_size: 8,
        })
        .unwrap();
        assert_eq!(valid.with_members(&[2, 0]).unwrap().seeds, vec![7, 5]);
        assert_eq!(valid.with_members(&[]), None);
        assert_eq!(valid.with_members(&[3]), None);
        assert_eq!(valid.into_inner().batch_size, 8);
    }
}
