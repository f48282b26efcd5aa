//! The device a user asks for: `auto`, `cpu`, `cuda`, `cuda:N`, `wgpu` or `wgpu:N`.

use std::fmt;
use std::process::ExitCode;
use std::str::FromStr;

use crate::error::BackendError;

/// A device request as written on the command line or in a configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DeviceSpec {
    /// The first usable CUDA device, else the best hardware wgpu adapter, else the CPU.
    #[default]
    Auto,
    /// The CPU backend (`burn_ndarray`).
    Cpu,
    /// The CUDA device with this ordinal; a bare `cuda` (`None`) is device 0, or on a rank of
    /// a launch the rank's local GPU ([`DeviceSpec::for_local_rank`]).
    Cuda(Option<usize>),
    /// A wgpu adapter (Vulkan, Metal, DX12): the N-th as `doctor` lists them, or for a bare
    /// `wgpu` the most preferred one (hardware first, a software adapter where it is alone).
    Wgpu(Option<usize>),
}

impl DeviceSpec {
    /// The device a rank of a launch runs on, given its rank among the processes of its node
    /// (`quench_scale::local_rank`): a bare `cuda` becomes `cuda:{local rank}`, so the ranks of
    /// a node with several GPUs take one each; every other spec, and every spec outside a
    /// launch, is kept.
    pub fn for_local_rank(self, local_rank: Option<usize>) -> Self {
        match (self, local_rank) {
            (Self::Cuda(None), Some(local)) => Self::Cuda(Some(local)),
            (spec, _) => spec,
        }
    }
}

/// Takes `--device SPEC` out of command-line arguments: the spec (`auto` when the flag is
/// absent) and the other arguments in order; a spec that does not parse, or a flag without
/// one, is the error. For the examples, whose other flags take no value.
pub fn take_device_flag(args: Vec<String>) -> Result<(DeviceSpec, Vec<String>), BackendError> {
    let mut spec = None;
    let mut rest = Vec::with_capacity(args.len());
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        if arg == "--device" {
            spec = Some(args.next().unwrap_or_default());
        } else {
            rest.push(arg);
        }
    }
    let spec = match spec {
        Some(text) => text.parse()?,
        None => DeviceSpec::Auto,
    };
    Ok((spec, rest))
}

/// Runs an example's `body`: success exits 0; an error is printed as `error: MESSAGE` on
/// stderr and exits 1.
pub fn run_example(body: impl FnOnce() -> Result<(), Box<dyn std::error::Error>>) -> ExitCode {
    match body() {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err}");
            ExitCode::FAILURE
        }
    }
}

impl FromStr for DeviceSpec {
    type Err = BackendError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let bad = |reason: &str| BackendError::BadSpec {
            spec: text.to_string(),
            reason: reason.to_string(),
        };
        let lowered = text.trim().to_ascii_lowercase();
        let index = |kind: &str, index: &str| {
            if index.is_empty() {
                return Err(bad(&format!("missing device index after `{kind}:`")));
            }
            index.parse::<usize>().map_err(|_| {
                bad(&format!(
                    "the index after `{kind}:` must be a non-negative integer"
                ))
            })
        };
        match lowered.as_str() {
            "auto" => Ok(Self::Auto),
            "cpu" => Ok(Self::Cpu),
            "cuda" | "gpu" => Ok(Self::Cuda(None)),
            "wgpu" => Ok(Self::Wgpu(None)),
            "" => Err(bad("empty")),
            other => {
                if let Some(rest) = other.strip_prefix("cuda:") {
                    index("cuda", rest).map(|n| Self::Cuda(Some(n)))
                } else if let Some(rest) = other.strip_prefix("wgpu:") {
                    index("wgpu", rest).map(|n| Self::Wgpu(Some(n)))
                } else {
                    Err(bad("unknown device kind"))
                }
            }
        }
    }
}

impl fmt::Display for DeviceSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Auto => write!(f, "auto"),
            Self::Cpu => write!(f, "cpu"),
            Self::Cuda(None) => write!(f, "cuda"),
            Self::Cuda(Some(index)) => write!(f, "cuda:{index}"),
            Self::Wgpu(None) => write!(f, "wgpu"),
            Self::Wgpu(Some(index)) => write!(f, "wgpu:{index}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parses_every_documented_form() {
        assert_eq!("auto".parse::<DeviceSpec>().unwrap(), DeviceSpec::Auto);
        assert_eq!("cpu".parse::<DeviceSpec>().unwrap(), DeviceSpec::Cpu);
        assert_eq!(" CPU ".parse::<DeviceSpec>().unwrap(), DeviceSpec::Cpu);
        assert_eq!(
            "cuda".parse::<DeviceSpec>().unwrap(),
            DeviceSpec::Cuda(None)
        );
        assert_eq!(
            "cuda:3".parse::<DeviceSpec>().unwrap(),
            DeviceSpec::Cuda(Some(3))
        );
        assert_eq!(
            "wgpu".parse::<DeviceSpec>().unwrap(),
            DeviceSpec::Wgpu(None)
        );
        assert_eq!(
            "WGPU:2".parse::<DeviceSpec>().unwrap(),
            DeviceSpec::Wgpu(Some(2))
        );
    }

    #[test]
    fn refuses_bad_specs_with_the_text_in_the_message() {
        for bad in [
            "", "tpu", "cuda:", "cuda:-1", "cuda:x", "cuda:1:2", "cpu0", "wgpu:", "wgpu:-1",
            "vulkan",
        ] {
            let err = bad.parse::<DeviceSpec>().unwrap_err();
            assert!(matches!(err, BackendError::BadSpec { .. }), "{bad}");
            assert!(err.to_string().contains(&format!("`{bad}`")), "{err}");
        }
    }

    #[test]
    fn a_bare_cuda_takes_the_local_gpu_of_a_rank_and_nothing_else_changes() {
        assert_eq!(
            DeviceSpec::Cuda(None).for_local_rank(Some(3)),
            DeviceSpec::Cuda(Some(3))
        );
        assert_eq!(
            DeviceSpec::Cuda(None).for_local_rank(None),
            DeviceSpec::Cuda(None)
        );
        for kept in [
            DeviceSpec::Cuda(Some(0)),
            DeviceSpec::Auto,
            DeviceSpec::Cpu,
            DeviceSpec::Wgpu(None),
        ] {
            assert_eq!(kept.for_local_rank(Some(2)), kept);
        }
    }

    #[test]
    fn the_device_flag_is_taken_out_and_parsed() {
        let args = |list: &[&str]| list.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let (spec, rest) =
            take_device_flag(args(&["a.toml", "--device", "cuda:1", "--original"])).unwrap();
        assert_eq!(spec, DeviceSpec::Cuda(Some(1)));
        assert_eq!(rest, args(&["a.toml", "--original"]));
        assert_eq!(
            take_device_flag(args(&["a.toml"])).unwrap().0,
            DeviceSpec::Auto
        );
        let err = take_device_flag(args(&["a.toml", "--device"])).unwrap_err();
        assert!(err.to_string().contains("empty"), "{err}");
        assert!(take_device_flag(args(&["--device", "tpu"])).is_err());
    }

    proptest! {
        #[test]
        fn display_round_trips(index in 0usize..1_000) {
            for spec in [
                DeviceSpec::Auto,
                DeviceSpec::Cpu,
                DeviceSpec::Cuda(None),
                DeviceSpec::Cuda(Some(index)),
                DeviceSpec::Wgpu(None),
                DeviceSpec::Wgpu(Some(index)),
            ] {
                prop_assert_eq!(spec.to_string().parse::<DeviceSpec>().unwrap(), spec);
            }
        }
    }
}
