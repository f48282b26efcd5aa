//! The configuration loader every crate uses: TOML into a typed struct, errors naming the file.

use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use thiserror::Error;

/// A configuration file that could not be used.
#[derive(Debug, Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read configuration {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not valid TOML for the expected structure; the message names the field,
    /// line and column.
    #[error("invalid configuration {path}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// What the parser said, with the offending key and position.
        message: String,
    },
    /// The file names no setting at all: read as every default, it would run something the
    /// user did not write (an empty SGLD grid file meant the full default grid).
    #[error(
        "configuration {path} names no setting (empty, or only comments): write the settings to \
         use, or leave the file out to take the defaults"
    )]
    Empty {
        /// The file.
        path: PathBuf,
    },
}

/// Reads and parses `path` as `T`. Every configuration struct of Quench has defaults for all
/// fields and refuses unknown ones, so a typo is an error here rather than a silent default;
/// for the same reason a file that names no setting is refused ([`ConfigError::Empty`]).
pub fn load_toml<T: DeserializeOwned>(path: &Path) -> Result<T, ConfigError> {
    let text =
        crate::files::read_text_bounded(path, crate::files::CONFIG_LIMIT).map_err(|source| {
            ConfigError::Read {
                path: path.to_path_buf(),
                source,
            }
        })?;
    // A byte-order mark (editors on Windows write one) is not part of the first key.
    let text = text.strip_prefix('\u{feff}').unwrap_or(&text);
    if parse_toml::<toml::Table>(text, path)?.is_empty() {
        return Err(ConfigError::Empty {
            path: path.to_path_buf(),
        });
    }
    parse_toml(text, path)
}

/// Parses TOML `text` as `T`; `origin` names where the text came from in errors.
pub fn parse_toml<T: DeserializeOwned>(text: &str, origin: &Path) -> Result<T, ConfigError> {
    toml::from_str(text).map_err(|err| ConfigError::Parse {
        path: origin.to_path_buf(),
        // The parser quotes the offending line: a long one is cut to its ends.
        message: err
            .to_string()
            .trim()
            .lines()
            .map(crate::excerpt::excerpt)
            .collect::<Vec<_>>()
            .join(" "),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Deserialize, PartialEq, Default)]
    #[serde(deny_unknown_fields, default)]
    struct Example {
        repeats: usize,
        name: String,
    }

    #[test]
    fn parses_known_fields_and_defaults_the_rest() {
        let e: Example = parse_toml("repeats = 3", Path::new("x.toml")).unwrap();
        assert_eq!(
            e,
            Example {
                repeats: 3,
                name: String::new()
            }
        );
    }

    #[test]
    fn a_long_line_is_quoted_by_its_ends() {
        let text = format!("repeats = [{}]\n", "[".repeat(100_000));
        let err = parse_toml::<Example>(&text, Path::new("suite.toml"))
            .unwrap_err()
            .to_string();
        assert!(err.len() < 2_000, "{} bytes", err.len());
        assert!(
            err.contains("suite.toml") && err.contains("characters)"),
            "{err}"
        );
    }

    #[test]
    fn unknown_fields_and_wrong_types_name_the_file_and_field() {
        let err = parse_toml::<Example>("repeets = 3", Path::new("suite.toml")).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("suite.toml") && text.contains("repeets"),
            "{text}"
        );
        let err = parse_toml::<Example>("repeats = \"many\"", Path::new("s.toml")).unwrap_err();
        assert!(err.to_string().contains("repeats"), "{err}");
    }

    /// Issue 53, item 5: an empty SGLD grid file silently meant the full default grid.
    #[test]
    fn a_file_that_names_no_setting_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        for (name, text) in [
            ("empty.toml", ""),
            ("comments.toml", "# betas = [0, 1]\n\n"),
            ("bom.toml", "\u{feff}"),
        ] {
            let path = dir.path().join(name);
            std::fs::write(&path, text).unwrap();
            let err = load_toml::<Example>(&path).unwrap_err();
            assert!(matches!(err, ConfigError::Empty { .. }), "{name}: {err}");
            assert!(err.to_string().contains(name), "{err}");
        }
        let path = dir.path().join("one.toml");
        std::fs::write(&path, "repeats = 2\n").unwrap();
        assert_eq!(load_toml::<Example>(&path).unwrap().repeats, 2);
    }

    #[test]
    fn a_missing_file_is_a_read_error_naming_it() {
        let err = load_toml::<Example>(Path::new("/nonexistent/quench.toml")).unwrap_err();
        assert!(matches!(err, ConfigError::Read { .. }));
        assert!(err.to_string().contains("/nonexistent/quench.toml"));
    }
}
