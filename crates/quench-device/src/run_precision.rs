//! A run's `--precision` (`auto` or a fixed precision), checked once on the run's device, and
//! how each computation of a run follows it.

use std::fmt;
use std::str::FromStr;

use burn::tensor::backend::AutodiffBackend;
use serde::{Deserialize, Serialize};

use quench_kernels::{OnDevice, SelectedDevice, run_on};

use crate::{DeviceError, Precision};

/// How a variant's arithmetic follows the run's `--precision`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PrecisionRole {
    /// f32 whatever the run asks: the original's way, or an optimisation that is not about
    /// precision.
    F32,
    /// The guide's mixed-precision variant: the forward pass in the run's low precision, f32
    /// master weights (and loss scaling for f16). Not run where the run has no low precision.
    Mixed,
    /// A combination that includes mixed precision: the run's low precision where it has one,
    /// f32 otherwise.
    MixedWhereAvailable,
}

impl PrecisionRole {
    /// Whether variants of this role follow `--precision`.
    pub fn follows_run(self) -> bool {
        self != Self::F32
    }
}

/// The `--precision` of a run: the arithmetic of every variant that follows it. Written in
/// reports as on the command line (`"auto"`, `"bf16"`, ...).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub enum RunPrecision {
    /// bf16 where the device has it; no mixed precision where it has not.
    #[default]
    Auto,
    /// This precision, refused before anything runs where the device cannot run it; `f32`
    /// turns mixed precision off.
    Fixed(Precision),
}

impl RunPrecision {
    /// Checks this `--precision` on `device`, once per run: an explicit precision the device
    /// cannot run is refused before any work starts; `auto` settles on bf16 where the device
    /// has it, else on no mixed precision (with the reason).
    pub fn check_on(self, device: SelectedDevice) -> Result<CheckedPrecision, DeviceError> {
        struct Check(RunPrecision);
        impl OnDevice for Check {
            type Output = Result<CheckedPrecision, DeviceError>;
            fn run<B: AutodiffBackend>(self, device: &B::Device) -> Self::Output {
                let low = match self.0 {
                    RunPrecision::Auto => Precision::Bf16
                        .check::<B>(device)
                        .map(|()| Precision::Bf16)
                        .map_err(|refusal| {
                            format!("{refusal}; --precision auto runs no mixed precision here")
                        }),
                    RunPrecision::Fixed(Precision::F32) => {
                        Err("--precision f32 runs no mixed precision".into())
                    }
                    RunPrecision::Fixed(precision) => {
                        precision.check::<B>(device)?;
                        Ok(precision)
                    }
                };
                Ok(CheckedPrecision { asked: self.0, low })
            }
        }
        run_on(device, Check(self))?
    }
}

/// A run's `--precision` checked on its device ([`RunPrecision::check_on`], the only way to
/// make one): what was asked, and the low precision the variants that follow it compute in,
/// or why there is none.
#[derive(Debug, Clone, PartialEq)]
pub struct CheckedPrecision {
    asked: RunPrecision,
    low: Result<Precision, String>,
}

impl CheckedPrecision {
    /// `asked` as a device that runs it would check it: for tests of what comes after the
    /// check (a run makes its value with [`RunPrecision::check_on`]).
    pub fn as_if_checked(asked: RunPrecision) -> Self {
        let low = match asked {
            RunPrecision::Auto => Ok(Precision::Bf16),
            RunPrecision::Fixed(Precision::F32) => Err("--precision f32".into()),
            RunPrecision::Fixed(precision) => Ok(precision),
        };
        Self { asked, low }
    }

    /// The `--precision` as given.
    pub fn asked(&self) -> RunPrecision {
        self.asked
    }

    /// The low precision of the variants that follow the run; `Err` says why there is none.
    pub fn low(&self) -> Result<Precision, &str> {
        self.low.as_ref().copied().map_err(String::as_str)
    }

    /// The precision a variant of `role` runs in, with a note where a combination fell back to
    /// f32; `Err` is why a mixed-precision variant cannot run.
    pub fn resolve(&self, role: PrecisionRole) -> Result<(Precision, Option<String>), String> {
        match (role, self.low()) {
            (PrecisionRole::F32, _) => Ok((Precision::F32, None)),
            (_, Ok(low)) => Ok((low, None)),
            (PrecisionRole::Mixed, Err(why)) => Err(why.to_string()),
            (PrecisionRole::MixedWhereAvailable, Err(why)) => {
                Ok((Precision::F32, Some(format!("ran in f32: {why}"))))
            }
        }
    }
}

impl FromStr for RunPrecision {
    type Err = DeviceError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        if text.trim().eq_ignore_ascii_case("auto") {
            return Ok(Self::Auto);
        }
        text.parse()
            .map(Self::Fixed)
            .map_err(|_| DeviceError::BadPrecision {
                given: text.to_string(),
                expected: "auto, f32, tf32, bf16 or f16",
            })
    }
}

impl From<RunPrecision> for String {
    fn from(precision: RunPrecision) -> Self {
        precision.to_string()
    }
}

impl TryFrom<String> for RunPrecision {
    type Error = DeviceError;

    fn try_from(text: String) -> Result<Self, Self::Error> {
        text.parse()
    }
}

impl fmt::Display for RunPrecision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Auto => f.write_str("auto"),
            Self::Fixed(precision) => precision.fmt(f),
        }
    }
}
