//! The device a user asks for: `auto`, `cpu`, `cuda` or `cuda:N`.

use std::fmt;
use std::process::ExitCode;
use std::str::FromStr;

use crate::error::DeviceError;

/// A device request as written on the command line or in a configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DeviceSpec {
    /// The first usable CUDA device, else the CPU.
    #[default]
    Auto,
    /// The CPU backend (`burn_ndarray`).
    Cpu,
    /// The CUDA device with this ordinal (`cuda` means `cuda:0`).
    Cuda(usize),
}

/// Takes `--device SPEC` out of command-line arguments: the spec (`auto` when the flag is
/// absent, empty when it has no value, which then fails to parse with a message) and the other
/// arguments in order. For the examples, whose other flags take no value.
pub fn take_device_flag(args: Vec<String>) -> (String, Vec<String>) {
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
    (spec.unwrap_or_else(|| "auto".into()), rest)
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
    type Err = DeviceError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let bad = |reason: &str| DeviceError::BadSpec {
            spec: text.to_string(),
            reason: reason.to_string(),
        };
        let lowered = text.trim().to_ascii_lowercase();
        match lowered.as_str() {
            "auto" => Ok(Self::Auto),
            "cpu" => Ok(Self::Cpu),
            "cuda" | "gpu" => Ok(Self::Cuda(0)),
            "" => Err(bad("empty")),
            other => {
                let index = other
                    .strip_prefix("cuda:")
                    .ok_or_else(|| bad("unknown device kind"))?;
                if index.is_empty() {
                    return Err(bad("missing device index after `cuda:`"));
                }
                index
                    .parse::<usize>()
                    .map(Self::Cuda)
                    .map_err(|_| bad("the index after `cuda:` must be a non-negative integer"))
            }
        }
    }
}

impl fmt::Display for DeviceSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Auto => write!(f, "auto"),
            Self::Cpu => write!(f, "cpu"),
            Self::Cuda(index) => write!(f, "cuda:{index}"),
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
        assert_eq!("cuda".parse::<DeviceSpec>().unwrap(), DeviceSpec::Cuda(0));
        assert_eq!("cuda:3".parse::<DeviceSpec>().unwrap(), DeviceSpec::Cuda(3));
    }

    #[test]
    fn refuses_bad_specs_with_the_text_in_the_message() {
        for bad in ["", "tpu", "cuda:", "cuda:-1", "cuda:x", "cuda:1:2", "cpu0"] {
            let err = bad.parse::<DeviceSpec>().unwrap_err();
            assert!(matches!(err, DeviceError::BadSpec { .. }), "{bad}");
            assert!(err.to_string().contains(&format!("`{bad}`")), "{err}");
        }
    }

    proptest! {
        #[test]
        fn display_round_trips(index in 0usize..1_000) {
            for spec in [DeviceSpec::Auto, DeviceSpec::Cpu, DeviceSpec::Cuda(index)] {
                prop_assert_eq!(spec.to_string().parse::<DeviceSpec>().unwrap(), spec);
            }
        }
    }

    #[test]
    fn the_device_flag_is_taken_out_of_the_arguments() {
        let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            take_device_flag(args(&["a.toml", "--device", "cpu", "--original"])),
            ("cpu".into(), args(&["a.toml", "--original"]))
        );
        assert_eq!(
            take_device_flag(args(&["a.toml"])),
            ("auto".into(), args(&["a.toml"]))
        );
        assert_eq!(
            take_device_flag(args(&["--device"])),
            (String::new(), vec![])
        );
    }
}
