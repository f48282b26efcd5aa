//! What the examples' command lines share before their own arguments: `--help` and
//! `--max-hours`, so that an example's refusal that says "raise the limit (`--max-hours`)"
//! can be followed, and `--help` is never taken for a file name.

use std::process::ExitCode;

/// The shared flags of a command line and the other arguments, in order.
#[derive(Debug, Clone, PartialEq)]
pub struct SharedFlags {
    /// `--help` or `-h` was given.
    pub help: bool,
    /// `--max-hours H` or `--max-hours=H`, checked as [`crate::budget::set_max_hours`] checks.
    pub max_hours: Option<f64>,
    /// The other arguments; after `--` every argument is one of these (a file named `--help`).
    pub rest: Vec<String>,
}

/// Reads the shared flags out of `args` (the arguments after the program's name); the error
/// says what is wrong with a flag.
pub fn shared_flags(args: Vec<String>) -> Result<SharedFlags, String> {
    let mut flags = SharedFlags {
        help: false,
        max_hours: None,
        rest: Vec::with_capacity(args.len()),
    };
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        let hours = match arg.as_str() {
            "--" => {
                flags.rest.extend(args.by_ref());
                break;
            }
            "--help" | "-h" => {
                flags.help = true;
                continue;
            }
            "--max-hours" => args.next().ok_or("--max-hours needs a number of hours")?,
            _ => match arg.strip_prefix("--max-hours=") {
                Some(value) => value.to_string(),
                None => {
                    flags.rest.push(arg);
                    continue;
                }
            },
        };
        match hours.parse::<f64>() {
            Ok(h) if h.is_finite() && h > 0.0 => flags.max_hours = Some(h),
            _ => {
                return Err(format!(
                    "--max-hours must be a positive number of hours, found `{hours}`"
                ));
            }
        }
    }
    Ok(flags)
}

/// [`shared_flags`] for an example: `--help` prints `usage` on stdout and ends with exit
/// status 0, a bad flag prints the error and `usage` on stderr and ends with 2, a limit is set
/// for the process ([`crate::budget::set_max_hours`]). Returns the other arguments, or the
/// exit status to end with.
pub fn example_flags(args: Vec<String>, usage: &str) -> Result<Vec<String>, ExitCode> {
    let flags = shared_flags(args).map_err(|message| {
        eprintln!("error: {message}\n{usage}");
        ExitCode::from(2)
    })?;
    if flags.help {
        println!("{usage}");
        return Err(ExitCode::SUCCESS);
    }
    if let Some(hours) = flags.max_hours {
        crate::budget::set_max_hours(hours).map_err(|message| {
            eprintln!("error: --max-hours {message}\n{usage}");
            ExitCode::from(2)
        })?;
    }
    Ok(flags.rest)
}

/// The usage error of a command line whose other arguments (`found`) are not what `usage`
/// asks for: each is named (an unknown flag among them), then the usage.
pub fn unexpected_arguments(found: &[String], usage: &str) -> String {
    if found.is_empty() {
        return format!("error: missing arguments\n{usage}");
    }
    let named: Vec<String> = found
        .iter()
        .map(|arg| format!("`{}`", crate::excerpt::excerpt(arg)))
        .collect();
    format!(
        "error: the arguments {} do not fit the usage (an unknown flag?)\n{usage}",
        named.join(" ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn unexpected_arguments_are_named() {
        let message = unexpected_arguments(&args(&["a.toml", "--frobnicate"]), "usage: x");
        assert_eq!(
            message,
            "error: the arguments `a.toml` `--frobnicate` do not fit the usage (an unknown flag?)\nusage: x"
        );
        assert_eq!(
            unexpected_arguments(&[], "usage: x"),
            "error: missing arguments\nusage: x"
        );
    }

    #[test]
    fn shared_flags_are_taken_and_the_rest_kept_in_order() {
        let flags = shared_flags(args(&["a.toml", "--max-hours", "48", "--original", "out"]));
        assert_eq!(
            flags.unwrap(),
            SharedFlags {
                help: false,
                max_hours: Some(48.0),
                rest: args(&["a.toml", "--original", "out"]),
            }
        );
        assert!(shared_flags(args(&["a.toml", "--help"])).unwrap().help);
        assert!(shared_flags(args(&["-h"])).unwrap().help);
        assert_eq!(
            shared_flags(args(&["--max-hours=0.5"])).unwrap().max_hours,
            Some(0.5)
        );
        let literal = shared_flags(args(&["--", "--help", "--max-hours"])).unwrap();
        assert!(!literal.help);
        assert_eq!(literal.rest, args(&["--help", "--max-hours"]));
        for bad in [
            &["--max-hours"][..],
            &["--max-hours", "0"],
            &["--max-hours=x"],
            &["--max-hours", "inf"],
        ] {
            let err = shared_flags(args(bad)).unwrap_err();
            assert!(err.contains("--max-hours"), "{bad:?}: {err}");
        }
    }
}
