//! Precision policy: f32 master weights, low precision in the forward pass, loss scaling.

use std::fmt;
use std::str::FromStr;

use burn::tensor::backend::{Backend, DTypeUsage};
use burn::tensor::{DType, FloatDType, Tensor};
use serde::{Deserialize, Serialize};

use crate::error::DeviceError;
use quench_kernels::reductions::Reduce;

/// The arithmetic of the forward pass. Weights and optimiser state always stay f32.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    /// Plain f32 everywhere.
    #[default]
    F32,
    /// f32 storage with tensor-core (tf32) matrix products; Burn calls this `Flex32`.
    Tf32,
    /// bfloat16 forward pass; same exponent range as f32, so no loss scaling.
    Bf16,
    /// float16 forward pass with dynamic loss scaling against gradient underflow.
    F16,
}

impl Precision {
    /// Every policy, in the order reports list them.
    pub const ALL: [Precision; 4] = [Self::F32, Self::Tf32, Self::Bf16, Self::F16];

    /// The dtype the forward pass casts to; `None` for plain f32.
    pub fn compute_dtype(self) -> Option<FloatDType> {
        match self {
            Self::F32 => None,
            Self::Tf32 => Some(FloatDType::Flex32),
            Self::Bf16 => Some(FloatDType::BF16),
            Self::F16 => Some(FloatDType::F16),
        }
    }

    /// Whether this policy needs a [`LossScaler`] (only f16 underflows in practice).
    pub fn needs_loss_scaling(self) -> bool {
        self == Self::F16
    }

    /// Refuses a policy that backend `B` cannot run on `device`, rather than silently
    /// running it in f32.
    pub fn check<B: Backend>(self, device: &B::Device) -> Result<(), DeviceError> {
        let refuse = |reason: &str| DeviceError::UnsupportedPrecision {
            precision: self.to_string(),
            backend: B::name(device),
            reason: reason.to_string(),
        };
        match self {
            Self::F32 => Ok(()),
            Self::Tf32 => {
                if B::dtype_usage(device, DType::Flex32).contains(DTypeUsage::Accelerated) {
                    Ok(())
                } else {
                    Err(refuse("the device has no tensor-core path for tf32"))
                }
            }
            Self::Bf16 | Self::F16 => {
                let dtype = if self == Self::Bf16 {
                    DType::BF16
                } else {
                    DType::F16
                };
                if B::supports_dtype(device, dtype) {
                    Ok(())
                } else {
                    Err(refuse("the backend has no arithmetic in this dtype"))
                }
            }
        }
    }

    /// Casts a tensor into the forward-pass precision (a no-op for f32).
    pub fn to_compute<B: Backend, const D: usize>(self, tensor: Tensor<B, D>) -> Tensor<B, D> {
        match self.compute_dtype() {
            Some(dtype) => tensor.cast(dtype),
            None => tensor,
        }
    }

    /// Casts every tensor of a parameter list into the forward-pass precision, keeping the
    /// list (the master weights) as it is.
    pub fn to_compute_all<B: Backend, const D: usize>(
        self,
        tensors: &[Tensor<B, D>],
    ) -> Vec<Tensor<B, D>> {
        tensors.iter().map(|t| self.to_compute(t.clone())).collect()
    }

    /// Casts a forward-pass result back to f32 (a no-op for f32).
    pub fn to_master<B: Backend, const D: usize>(self, tensor: Tensor<B, D>) -> Tensor<B, D> {
        match self.compute_dtype() {
            Some(_) => tensor.cast(FloatDType::F32),
            None => tensor,
        }
    }
}

impl FromStr for Precision {
    type Err = DeviceError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text.trim().to_ascii_lowercase().as_str() {
            "f32" | "fp32" => Ok(Self::F32),
            "tf32" => Ok(Self::Tf32),
            "bf16" => Ok(Self::Bf16),
            "f16" | "fp16" => Ok(Self::F16),
            _ => Err(DeviceError::BadPrecision {
                given: text.to_string(),
                expected: "f32, tf32, bf16 or f16",
            }),
        }
    }
}

impl fmt::Display for Precision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::F32 => "f32",
            Self::Tf32 => "tf32",
            Self::Bf16 => "bf16",
            Self::F16 => "f16",
        })
    }
}

/// Settings of the dynamic loss scaler; the defaults are the usual ones for f16 training.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LossScalerConfig {
    /// The first scale the loss is multiplied by.
    pub initial_scale: f32,
    /// Multiplier applied after `growth_interval` good steps in a row.
    pub growth_factor: f32,
    /// Multiplier applied after a step with non-finite gradients.
    pub backoff_factor: f32,
    /// Good steps in a row before the scale grows.
    pub growth_interval: u32,
    /// The scale never falls below this.
    pub min_scale: f32,
    /// The scale never grows above this (f16's largest finite value is 65,504).
    pub max_scale: f32,
}

impl Default for LossScalerConfig {
    fn default() -> Self {
        Self {
            initial_scale: 65_536.0,
            growth_factor: 2.0,
            backoff_factor: 0.5,
            growth_interval: 2_000,
            min_scale: 1.0,
            max_scale: 16_777_216.0,
        }
    }
}

/// What the optimiser should do with the gradients of one step.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum StepDecision {
    /// Gradients are finite: multiply them by `unscale` (= 1 / scale) and apply the step.
    Apply {
        /// The factor that undoes the loss scale.
        unscale: f32,
    },
    /// Gradients overflowed: skip the step; the scale has already backed off.
    Skip,
}

/// Dynamic loss scaling: scale the loss, skip steps whose gradients are not finite and back
/// off, grow after a run of good steps, and count what was skipped.
#[derive(Debug, Clone, PartialEq)]
pub struct LossScaler {
    config: LossScalerConfig,
    scale: f32,
    good_in_a_row: u32,
    skipped: u64,
    applied: u64,
}

impl LossScaler {
    /// A scaler starting at `config.initial_scale`.
    pub fn new(config: LossScalerConfig) -> Self {
        Self {
            scale: config
                .initial_scale
                .clamp(config.min_scale, config.max_scale),
            config,
            good_in_a_row: 0,
            skipped: 0,
            applied: 0,
        }
    }

    /// A scaler that keeps scale 1 and never grows: for policies that need no scaling it still
    /// skips non-finite steps, so training code has one path.
    pub fn fixed() -> Self {
        Self::new(LossScalerConfig {
            initial_scale: 1.0,
            growth_interval: u32::MAX,
            min_scale: 1.0,
            max_scale: 1.0,
            ..LossScalerConfig::default()
        })
    }

    /// The scaler a precision policy calls for.
    pub fn for_precision(precision: Precision, config: LossScalerConfig) -> Self {
        if precision.needs_loss_scaling() {
            Self::new(config)
        } else {
            Self::fixed()
        }
    }

    /// The factor to multiply the loss by before the backward pass.
    pub fn scale(&self) -> f32 {
        self.scale
    }

    /// Steps skipped so far because of non-finite gradients.
    pub fn skipped_steps(&self) -> u64 {
        self.skipped
    }

    /// Steps applied so far.
    pub fn applied_steps(&self) -> u64 {
        self.applied
    }

    /// Records whether this step's (scaled) gradients were all finite and says what to do.
    pub fn update(&mut self, gradients_finite: bool) -> StepDecision {
        if !gradients_finite {
            self.skipped += 1;
            self.good_in_a_row = 0;
            self.scale = (self.scale * self.config.backoff_factor).max(self.config.min_scale);
            return StepDecision::Skip;
        }
        let unscale = 1.0 / self.scale;
        self.applied += 1;
        self.good_in_a_row += 1;
        if self.good_in_a_row >= self.config.growth_interval {
            self.good_in_a_row = 0;
            self.scale = (self.scale * self.config.growth_factor).min(self.config.max_scale);
        }
        StepDecision::Apply { unscale }
    }
}

/// Whether every element of `tensor` is finite; reads one number back from the device.
///
/// Counts the non-finite elements with [`Reduce::sum_all`] rather than Burn's `all`, which
/// skips elements of long tensors on its CubeCL backends (see [`crate::reductions`]).
pub fn all_finite<B: Backend, const D: usize>(tensor: Tensor<B, D>) -> bool {
    let non_finite = tensor.is_finite().bool_not().float().sum_all();
    quench_kernels::readback::to_host_f32(non_finite)[0] == 0.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::NdArray;

    type Cpu = NdArray<f32>;

    #[test]
    fn parses_and_prints_every_policy() {
        for p in Precision::ALL {
            assert_eq!(p.to_string().parse::<Precision>().unwrap(), p);
        }
        let err = "f8".parse::<Precision>().unwrap_err();
        assert!(err.to_string().contains("`f8`"), "{err}");
    }

    #[test]
    fn cpu_backend_refuses_low_precision_and_accepts_f32() {
        let device = Default::default();
        assert!(Precision::F32.check::<Cpu>(&device).is_ok());
        for p in [Precision::F16, Precision::Bf16, Precision::Tf32] {
            let err = p.check::<Cpu>(&device).unwrap_err();
            assert!(matches!(err, DeviceError::UnsupportedPrecision { .. }));
            let text = err.to_string();
            assert!(text.contains(&p.to_string()), "{text}");
            assert!(text.contains("ndarray"), "{text}");
        }
    }

    #[test]
    fn f32_casts_are_identities() {
        let device = Default::default();
        let x = Tensor::<Cpu, 1>::from_floats([1.5, -2.0], &device);
        let y = Precision::F32.to_master(Precision::F32.to_compute(x.clone()));
        assert_eq!(x.into_data(), y.into_data());
    }

    fn small_interval() -> LossScalerConfig {
        LossScalerConfig {
            initial_scale: 1024.0,
            growth_interval: 3,
            ..LossScalerConfig::default()
        }
    }

    #[test]
    fn overflow_skips_the_step_and_backs_off() {
        let mut scaler = LossScaler::new(small_interval());
        assert_eq!(scaler.update(false), StepDecision::Skip);
        assert_eq!(scaler.scale(), 512.0);
        assert_eq!(scaler.update(false), StepDecision::Skip);
        assert_eq!(scaler.scale(), 256.0);
        assert_eq!(scaler.skipped_steps(), 2);
        assert_eq!(scaler.applied_steps(), 0);
    }

    #[test]
    fn grows_after_an_unbroken_run_of_good_steps() {
        let mut scaler = LossScaler::new(small_interval());
        assert_eq!(
            scaler.update(true),
            StepDecision::Apply {
                unscale: 1.0 / 1024.0
            }
        );
        scaler.update(true);
        assert_eq!(scaler.scale(), 1024.0);
        scaler.update(true);
        assert_eq!(scaler.scale(), 2048.0);
        scaler.update(true);
        scaler.update(true);
        scaler.update(false);
        assert_eq!(
            scaler.scale(),
            1024.0,
            "an overflow resets the run and backs off"
        );
        scaler.update(true);
        scaler.update(true);
        assert_eq!(scaler.scale(), 1024.0);
        assert_eq!((scaler.applied_steps(), scaler.skipped_steps()), (7, 1));
    }

    #[test]
    fn scale_stays_within_its_bounds() {
        let mut scaler = LossScaler::new(LossScalerConfig {
            initial_scale: 2.0,
            growth_interval: 1,
            min_scale: 1.0,
            max_scale: 8.0,
            ..LossScalerConfig::default()
        });
        for _ in 0..10 {
            scaler.update(false);
        }
        assert_eq!(scaler.scale(), 1.0);
        for _ in 0..10 {
            scaler.update(true);
        }
        assert_eq!(scaler.scale(), 8.0);
    }

    #[test]
    fn fixed_scaler_never_moves_but_still_skips() {
        let mut scaler = LossScaler::for_precision(Precision::Bf16, small_interval());
        for _ in 0..5 {
            assert_eq!(scaler.update(true), StepDecision::Apply { unscale: 1.0 });
        }
        assert_eq!(scaler.update(false), StepDecision::Skip);
        assert_eq!(scaler.scale(), 1.0);
        let dynamic = LossScaler::for_precision(Precision::F16, small_interval());
        assert_eq!(dynamic.scale(), 1024.0);
    }

    #[test]
    fn finiteness_check_sees_nan_and_inf() {
        let device = Default::default();
        assert!(all_finite(Tensor::<Cpu, 1>::from_floats(
            [1.0, 2.0],
            &device
        )));
        assert!(!all_finite(Tensor::<Cpu, 1>::from_floats(
            [1.0, f32::NAN],
            &device
        )));
        assert!(!all_finite(Tensor::<Cpu, 1>::from_floats(
            [f32::INFINITY],
            &device
        )));
    }
}
