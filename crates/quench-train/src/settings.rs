//! Range checks of training settings, shared by the configurations that validate themselves:
//! each refuses the first setting out of range with its name, the value given and what it
//! must be.

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

/// The first setting for which `ok` fails, refused with `reason`.
fn first<T: Copy + ToString>(
    settings: &[(&'static str, T)],
    ok: impl Fn(T) -> bool,
    reason: &'static str,
) -> Result<(), Refusal> {
    match settings.iter().find(|(_, value)| !ok(*value)) {
        Some(&(name, value)) => Err(Refusal::new(name, value, reason)),
        None => Ok(()),
    }
}

/// One member per seed: at least one seed.
pub fn seeds(seeds: &[u64]) -> Result<(), Refusal> {
    if seeds.is_empty() {
        return Err(Refusal::new("seeds", "[]", "needs at least one seed"));
    }
    Ok(())
}

/// Counts that must be at least 1.
pub fn at_least_one(settings: &[(&'static str, usize)]) -> Result<(), Refusal> {
    first(settings, |v| v >= 1, "must be at least 1")
}

/// Values that must be positive and finite.
pub fn positive(settings: &[(&'static str, f64)]) -> Result<(), Refusal> {
    first(
        settings,
        |v| v.is_finite() && v > 0.0,
        "must be positive and finite",
    )
}

/// Values that must be non-negative and finite.
pub fn non_negative(settings: &[(&'static str, f64)]) -> Result<(), Refusal> {
    first(
        settings,
        |v| v.is_finite() && v >= 0.0,
        "must be non-negative and finite",
    )
}

/// Rates that must lie in `[0, 1)` (dropout, label smoothing).
pub fn rate(settings: &[(&'static str, f64)]) -> Result<(), Refusal> {
    first(settings, |v| (0.0..1.0).contains(&v), "must be in [0, 1)")
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert!(non_negative(&[("weight_decay", 0.0)]).is_ok());
        assert!(non_negative(&[("weight_decay", f64::INFINITY)]).is_err());
        assert!(rate(&[("dropout", 0.0)]).is_ok());
        assert!(rate(&[("dropout", 1.0)]).is_err());
        assert_eq!(seeds(&[]).unwrap_err().value, "[]");
    }
}
