//! Memory budgets: a size-driven allocation (layer widths, a market, its windows) is estimated
//! before any work and refused when the host cannot hold it, so that a run ends with one clear
//! line naming the setting and the numbers instead of an abort (an allocation that fails in
//! Rust aborts the process, and a panic cannot catch it).
//!
//! The limit is the smaller of the memory the kernel says is available now (`MemAvailable` in
//! `/proc/meminfo`) and what is left of the process's address-space limit (`ulimit -v`, less
//! the process's `VmSize`). Where neither can be read (outside Linux) nothing is refused here.
//!
//! Work budgets: a count-driven run (operations, inner steps, substeps) is estimated before it
//! starts as its count times a documented lower bound of one unit's cost, and refused above
//! [`max_hours`] ([`check_work`]), so that a setting that would never end is refused with the
//! estimate rather than run until someone kills it. The limit is a process-wide setting
//! ([`set_max_hours`]; `benchmark --max-hours`), 24 hours unless raised.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

/// The most bytes a new allocation of this process can take, and what set the limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostLimit {
    /// Bytes.
    pub bytes: u64,
    /// What the figure is: the available memory or the rest of the address-space limit.
    pub source: LimitSource,
}

/// What set a [`HostLimit`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimitSource {
    /// The kernel's estimate of memory available without swapping (`MemAvailable`).
    Available,
    /// The address-space limit (`ulimit -v`) less what the process has mapped already.
    AddressSpace,
}

impl fmt::Display for LimitSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Available => "available memory",
            Self::AddressSpace => "what is left of the address-space limit (ulimit -v)",
        })
    }
}

/// An estimate that does not fit in the [`HostLimit`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what} needs about {} in host memory, more than the {} of {}", bytes(*.estimate), bytes(.limit.bytes), .limit.source)]
pub struct TooLarge {
    /// What was estimated, with the settings that drive it.
    pub what: String,
    /// The estimate, in bytes.
    pub estimate: u64,
    /// The limit it exceeds.
    pub limit: HostLimit,
}

/// The host's limit now; `None` where neither figure can be read.
pub fn host_limit() -> Option<HostLimit> {
    let available = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|text| kib_field(&text, "MemAvailable:"))
        .map(|bytes| HostLimit {
            bytes,
            source: LimitSource::Available,
        });
    let address_space = address_space_left().map(|bytes| HostLimit {
        bytes,
        source: LimitSource::AddressSpace,
    });
    match (available, address_space) {
        (Some(a), Some(b)) => Some(if b.bytes < a.bytes { b } else { a }),
        (a, b) => a.or(b),
    }
}

/// Refuses `estimate` bytes for `what` when they exceed [`host_limit`]; accepts them where the
/// limit cannot be read. The estimate is a `u128` so that callers multiply sizes with
/// `saturating_mul` and pass the product as it is; beyond `u64` it is reported as `u64::MAX`.
pub fn check_fits(what: impl FnOnce() -> String, estimate: u128) -> Result<(), TooLarge> {
    match host_limit() {
        Some(limit) if estimate > u128::from(limit.bytes) => Err(TooLarge {
            what: what(),
            estimate: u64::try_from(estimate).unwrap_or(u64::MAX),
            limit,
        }),
        _ => Ok(()),
    }
}

/// The default of [`max_hours`]: a day, beyond any shipped setting (the full suite takes
/// hours on a 2-core CPU) and far below a setting that would not end.
pub const DEFAULT_MAX_HOURS: f64 = 24.0;

/// [`max_hours`]'s bits, 0 until [`set_max_hours`] (then the default).
static MAX_HOURS_BITS: AtomicU64 = AtomicU64::new(0);

/// The longest run a single setting may ask for, in hours ([`check_work`]).
pub fn max_hours() -> f64 {
    match MAX_HOURS_BITS.load(Ordering::Relaxed) {
        0 => DEFAULT_MAX_HOURS,
        bits => f64::from_bits(bits),
    }
}

/// Sets [`max_hours`] for this process (a caller that means a long run, `benchmark
/// --max-hours`). Refused: a value that is not finite and positive.
pub fn set_max_hours(hours: f64) -> Result<(), String> {
    if !(hours.is_finite() && hours > 0.0) {
        return Err(format!("must be a positive number of hours, found {hours}"));
    }
    MAX_HOURS_BITS.store(hours.to_bits(), Ordering::Relaxed);
    Ok(())
}

/// An estimate of work beyond [`max_hours`].
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error(
    "{what} would take at least {} ({units:.3e} x {}, a lower bound of each), more than the \
     limit of {} hours: lower it, or raise the limit (`--max-hours`; in Python \
     `quench.set_max_hours`) if the run is meant",
    duration(*.seconds), duration(*.unit_seconds), .limit_hours
)]
pub struct TooLong {
    /// What was estimated, with the settings that drive it.
    pub what: String,
    /// How many units of work.
    pub units: f64,
    /// The documented lower bound of one unit's cost, seconds.
    pub unit_seconds: f64,
    /// The estimate, seconds.
    pub seconds: f64,
    /// The limit it exceeds, hours.
    pub limit_hours: f64,
}

/// Refuses `units` units of work for `what`, each of at least `unit_seconds`, when together
/// they exceed [`max_hours`]. `units` is an `f64` so that callers multiply counts without
/// overflow (a `u64::MAX` count stays a finite, huge estimate).
pub fn check_work(
    what: impl FnOnce() -> String,
    units: f64,
    unit_seconds: f64,
) -> Result<(), TooLong> {
    let seconds = units * unit_seconds;
    let limit_hours = max_hours();
    if seconds > limit_hours * 3600.0 {
        return Err(TooLong {
            what: what(),
            units,
            unit_seconds,
            seconds,
            limit_hours,
        });
    }
    Ok(())
}

/// `seconds` in the largest unit that keeps a number of at least 1 (ns to years), three
/// significant digits.
pub fn duration(seconds: f64) -> String {
    const UNITS: [(f64, &str); 7] = [
        (365.25 * 86_400.0, "years"),
        (86_400.0, "days"),
        (3_600.0, "hours"),
        (60.0, "min"),
        (1.0, "s"),
        (1e-3, "ms"),
        (1e-6, "us"),
    ];
    for (size, unit) in UNITS {
        if seconds >= size {
            return format!("{:.3} {unit}", seconds / size);
        }
    }
    format!("{:.3} ns", seconds * 1e9)
}

/// `n` bytes in the largest binary unit that keeps a number of at least 1, one decimal.
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 6] = ["bytes", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut value = n as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} bytes")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

/// The soft address-space limit less the process's mapped size, when there is a limit.
fn address_space_left() -> Option<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one `rlimit` through a valid pointer and reads nothing else.
    let status = unsafe { libc::getrlimit(libc::RLIMIT_AS, &mut limit) };
    if status != 0 || limit.rlim_cur == libc::RLIM_INFINITY {
        return None;
    }
    let mapped = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|text| kib_field(&text, "VmSize:"))
        .unwrap_or(0);
    Some(limit.rlim_cur.saturating_sub(mapped))
}

/// The value of a `Name:   123 kB` line, in bytes.
fn kib_field(text: &str, name: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with(name))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 53, item 5: counts that would never end are refused with the estimate. No test
    /// here sets the limit (it is process-wide), so it is the default.
    #[test]
    fn work_beyond_the_limit_is_refused_with_the_estimate() {
        assert_eq!(max_hours(), DEFAULT_MAX_HOURS);
        // A day of work at the limit passes; u64::MAX units of 10 ns each do not.
        assert!(check_work(|| "a".into(), 24.0 * 3600.0, 1.0).is_ok());
        let err =
            check_work(|| "max_substeps = u64::MAX".into(), u64::MAX as f64, 1e-8).unwrap_err();
        assert!((err.seconds - u64::MAX as f64 * 1e-8).abs() < 1e3);
        let text = err.to_string();
        assert!(
            text.starts_with("max_substeps = u64::MAX would take at least 5845.420 years")
                && text.contains("limit of 24 hours")
                && text.contains("--max-hours"),
            "{text}"
        );
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            assert!(set_max_hours(bad).is_err());
        }
        assert_eq!(duration(90.0), "1.500 min");
        assert_eq!(duration(2.5e-8), "25.000 ns");
    }

    #[test]
    fn sizes_read_in_binary_units() {
        assert_eq!(bytes(512), "512 bytes");
        assert_eq!(bytes(1536), "1.5 KiB");
        assert_eq!(bytes(3 << 30), "3.0 GiB");
        assert_eq!(bytes(u64::MAX), "16384.0 PiB");
    }

    #[test]
    fn kernel_fields_are_read_in_kib() {
        let text = "MemTotal:       24683620 kB\nMemAvailable:   20000000 kB\n";
        assert_eq!(kib_field(text, "MemAvailable:"), Some(20_000_000 * 1024));
        assert_eq!(kib_field(text, "VmSize:"), None);
    }

    #[test]
    fn an_estimate_beyond_any_host_is_refused_with_its_numbers() {
        if host_limit().is_none() {
            return; // no figure to compare with on this platform
        }
        let err = check_fits(|| "widths.mlp = [1000000, 1000000]".into(), u128::MAX).unwrap_err();
        let text = err.to_string();
        assert!(
            text.starts_with("widths.mlp = [1000000, 1000000] needs about 16384.0 PiB"),
            "{text}"
        );
        assert!(check_fits(|| unreachable!("fits"), 1).is_ok());
    }
}
