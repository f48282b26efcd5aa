//! `benchmark verify`: the numerical checks a user runs on their own hardware, on the chosen
//! backend. Each check prints its error against its tolerance; any failure makes the command
//! exit 1.
//!
//! The equivalence checks (batched equals one at a time, loader determinism) and the solver
//! accuracies run in f32, the product's reference arithmetic; the mixed-precision checks run in
//! the run's `--precision` where the device has a low precision, and are skipped, with the
//! reason, where it has none.

mod circuit;
mod data;
mod lindblad;
mod meta;
mod precision;
mod qrng;
mod seam;
mod sgld;
mod temporal;

use crate::workload::CheckedPrecision;
use quench_kernels::{OnDevice, QuenchBackend, SelectedDevice, run_on};
use std::fmt;

/// What one check found.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// Measured: the largest error and the bound it must stay under.
    Measured {
        /// The largest error found.
        error: f64,
        /// The bound.
        tolerance: f64,
    },
    /// Not applicable on this device or precision, and why.
    Skipped(String),
}

/// One named check and its verdict.
#[derive(Debug, Clone, PartialEq)]
pub struct Check {
    /// What is checked.
    pub name: String,
    /// What it found.
    pub verdict: Verdict,
}

impl Check {
    fn measured(name: &str, error: f64, tolerance: f64) -> Self {
        Self {
            name: name.into(),
            verdict: Verdict::Measured { error, tolerance },
        }
    }

    /// Whether it failed: an error above the bound, or one that is not a finite number.
    pub fn failed(&self) -> bool {
        matches!(self.verdict, Verdict::Measured { error, tolerance } if error.is_nan() || error > tolerance)
    }
}

impl fmt::Display for Check {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.verdict {
            Verdict::Measured { error, tolerance } => write!(
                f,
                "{} {}: error {error:.3e} (tolerance {tolerance:.1e})",
                if self.failed() { "FAIL" } else { "pass" },
                self.name
            ),
            Verdict::Skipped(why) => write!(f, "skip {}: {why}", self.name),
        }
    }
}

/// Runs every check on `device` with the run's `precision`, handing each to `on_check` as it
/// ends: a cold GPU process spends minutes compiling kernels, and a run stopped at a time limit
/// still shows which checks finished and when.
pub fn verify(
    device: SelectedDevice,
    precision: &CheckedPrecision,
    on_check: &mut (dyn FnMut(&Check) + Send),
) -> anyhow::Result<Vec<Check>> {
    run_on(
        device,
        Checks {
            precision,
            found: Found {
                checks: Vec::new(),
                on_check,
            },
        },
    )?
}

struct Checks<'a> {
    precision: &'a CheckedPrecision,
    found: Found<'a>,
}

/// The checks so far, each shown to `on_check` when it is added.
struct Found<'a> {
    checks: Vec<Check>,
    on_check: &'a mut (dyn FnMut(&Check) + Send),
}

impl Found<'_> {
    fn add(&mut self, check: Check) {
        (self.on_check)(&check);
        self.checks.push(check);
    }

    fn extend(&mut self, checks: Vec<Check>) {
        checks.into_iter().for_each(|check| self.add(check));
    }
}

impl OnDevice for Checks<'_> {
    type Output = anyhow::Result<Vec<Check>>;

    fn run<B: QuenchBackend>(self, device: &B::Device) -> Self::Output {
        let mut found = self.found;
        let matmul = seam::matmul_precision::<B>(device);
        found.add(matmul.check);
        found.extend(lindblad::solver_accuracy::<B>(device)?);
        found.add(meta::meta_step::<B>(device, matmul.backend_error)?);
        found.add(sgld::sgld_chains::<B>(device)?);
        found.add(sgld::sgld_fused::<B>(device)?);
        found.add(seam::counter_noise::<B>(device));
        found.add(qrng::classifier_seeds::<B>(device)?);
        found.add(data::loader_determinism::<B>(device)?);
        found.extend(circuit::circuit_checks::<B>(device)?);
        found.add(temporal::fused_lstm::<B>(device));
        found.add(precision::loss_scaler::<B>(device));
        found.add(precision::low_precision_forward::<B>(
            self.precision,
            device,
        ));
        Ok(found.checks)
    }
}
#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::RunPrecision;

    #[test]
    fn every_check_passes_on_the_cpu_and_mixed_precision_is_skipped_there() {
        let auto = RunPrecision::Auto.check_on(SelectedDevice::Cpu).unwrap();
        let mut shown = Vec::new();
        let checks = verify(SelectedDevice::Cpu, &auto, &mut |c| shown.push(c.clone())).unwrap();
        assert_eq!(
            shown, checks,
            "each check is shown once, in order, as it ends"
        );
        assert_eq!(checks.len(), 15);
        assert_eq!(
            checks
                .iter()
                .filter(|c| c.name.starts_with("circuit: "))
                .count(),
            2
        );
        for check in &checks {
            assert!(!check.failed(), "{check}");
        }
        let last = checks.last().unwrap();
        assert!(
            matches!(&last.verdict, Verdict::Skipped(why) if why.contains("bf16")),
            "{last}"
        );
    }

    #[test]
    fn a_check_fails_above_its_tolerance_or_when_not_finite() {
        assert!(Check::measured("x", 2e-5, 1e-5).failed());
        assert!(Check::measured("x", f64::NAN, 1e-5).failed());
        assert!(!Check::measured("x", 0.0, 0.0).failed());
        assert!(
            Check::measured("x", 1.0, 0.5)
                .to_string()
                .starts_with("FAIL x: error 1.000e0")
        );
    }
}
