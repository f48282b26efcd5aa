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

/// Runs every check on `device` with the run's `precision`.
pub fn verify(device: SelectedDevice, precision: &CheckedPrecision) -> anyhow::Result<Vec<Check>> {
    run_on(device, Checks { precision })?
}

struct Checks<'a> {
    precision: &'a CheckedPrecision,
}

impl OnDevice for Checks<'_> {
    type Output = anyhow::Result<Vec<Check>>;

    fn run<B: QuenchBackend>(self, device: &B::Device) -> Self::Output {
        let mut checks = vec![seam::matmul_precision::<B>(device)];
        checks.extend(lindblad::solver_accuracy::<B>(device)?);
        checks.push(meta::meta_step::<B>(device)?);
        checks.push(sgld::sgld_chains::<B>(device)?);
        checks.push(sgld::sgld_fused::<B>(device)?);
        checks.push(seam::counter_noise::<B>(device));
        checks.push(qrng::classifier_seeds::<B>(device)?);
        checks.push(data::loader_determinism::<B>(device)?);
        checks.extend(circuit::circuit_checks::<B>(device)?);
        checks.push(temporal::fused_lstm::<B>(device));
        checks.push(precision::loss_scaler::<B>(device));
        checks.push(precision::low_precision_forward::<B>(
            self.precision,
            device,
        ));
        Ok(checks)
    }
}
#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::RunPrecision;

    #[test]
    fn every_check_passes_on_the_cpu_and_mixed_precision_is_skipped_there() {
        let auto = RunPrecision::Auto.check_on(SelectedDevice::Cpu).unwrap();
        let checks = verify(SelectedDevice::Cpu, &auto).unwrap();
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
