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

/// Settings given as JSON `text` (a Python dict, written by the Python side) as `T`, read as
/// TOML's values are, so that a refusal names the setting's path (`policy.controls: invalid
/// type: ...`) rather than a line and column of a text the user never wrote. A key set to
/// null (Python's `None`) is left out: the setting takes its default, as a keyword argument
/// of `None` does in Python; a null in a list is refused by its place.
pub fn from_json_settings<T: DeserializeOwned>(text: &str) -> Result<T, String> {
    let value: serde_json::Value = serde_json::from_str(text).map_err(|err| err.to_string())?;
    let value = toml_value(value, "")?;
    T::deserialize(value).map_err(|err| located(&err.to_string(), ""))
}

/// `defaults` with the top-level keys of `overrides` (the settings table called `table` in
/// messages; empty for none) put in their place, as `T`: a suite's or a caller's settings over
/// a model's own defaults. Refusals name the setting.
pub fn overridden<T: serde::Serialize + DeserializeOwned>(
    defaults: &T,
    overrides: toml::Table,
    table: &str,
) -> Result<T, String> {
    let mut merged = toml::Table::try_from(defaults).map_err(|err| err.to_string())?;
    merged.extend(overrides);
    T::deserialize(toml::Value::Table(merged)).map_err(|err| located(&err.to_string(), table))
}

/// A TOML value deserializer's `message` (`what\nin `path`\n`) as one line that starts with
/// the setting's path under `table` (`table.path: what`; `table` empty for the top level); a
/// message with no path (an unknown key) starts with `table`.
pub fn located(message: &str, table: &str) -> String {
    let message = message.trim();
    let (path, what) = match message.rsplit_once("\nin `") {
        Some((what, path)) => (path.trim_end_matches('`'), what.trim().replace('\n', " ")),
        None => ("", message.replace('\n', " ")),
    };
    match (table, path) {
        ("", "") => what,
        ("", path) | (path, "") => format!("{path}: {what}"),
        (table, path) => format!("{table}.{path}: {what}"),
    }
}

/// JSON's `value` as TOML's, at `path` (dotted, for errors); object keys whose value is null
/// left out.
fn toml_value(value: serde_json::Value, path: &str) -> Result<toml::Value, String> {
    use serde_json::Value as Json;
    let at = |key: &str| {
        if path.is_empty() {
            key.to_string()
        } else {
            format!("{path}.{key}")
        }
    };
    Ok(match value {
        Json::Null => return Err(format!("{path}: None is not a value here")),
        Json::Bool(b) => toml::Value::Boolean(b),
        Json::String(s) => toml::Value::String(s),
        Json::Number(n) => match (n.as_i64(), n.as_f64()) {
            (Some(i), _) => toml::Value::Integer(i),
            // Integers past i64 (TOML's integers) are refused, not rounded into floats.
            (None, _) if n.is_u64() => {
                return Err(format!(
                    "{path}: {n} is larger than a setting can hold (2^63 - 1)"
                ));
            }
            (None, Some(x)) => toml::Value::Float(x),
            (None, None) => return Err(format!("{path}: {n} is not a number a setting holds")),
        },
        Json::Array(items) => toml::Value::Array(
            items
                .into_iter()
                .enumerate()
                .map(|(i, item)| toml_value(item, &format!("{path}[{i}]")))
                .collect::<Result<_, _>>()?,
        ),
        Json::Object(entries) => toml::Value::Table(
            entries
                .into_iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| {
                    let value = toml_value(v, &at(&k))?;
                    Ok((k, value))
                })
                .collect::<Result<_, String>>()?,
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Deserialize, serde::Serialize, PartialEq, Default)]
    #[serde(deny_unknown_fields, default)]
    struct Example {
        repeats: usize,
        name: String,
    }

    #[derive(Debug, Deserialize, serde::Serialize, PartialEq, Default)]
    #[serde(deny_unknown_fields, default)]
    struct Nested {
        inner: Example,
        rates: Vec<f64>,
        seed: u64,
    }

    #[test]
    fn json_settings_name_the_setting_a_refusal_is_about() {
        let read = |text| from_json_settings::<Nested>(text);
        assert_eq!(
            read(r#"{"inner": {"repeats": 2.5}}"#).unwrap_err(),
            "inner.repeats: invalid type: floating point `2.5`, expected usize"
        );
        assert!(
            read(r#"{"inner": {"repeets": 2}}"#)
                .unwrap_err()
                .contains("unknown field `repeets`")
        );
        assert_eq!(
            read(r#"{"rates": [1.0, null]}"#).unwrap_err(),
            "rates[1]: None is not a value here"
        );
        assert_eq!(
            read(r#"{"seed": 18446744073709551615}"#).unwrap_err(),
            "seed: 18446744073709551615 is larger than a setting can hold (2^63 - 1)"
        );
        // None leaves a setting at its default; the rest is read as given.
        let nested = read(r#"{"inner": {"repeats": 3, "name": null}, "rates": [0.5]}"#).unwrap();
        assert_eq!(nested.inner.repeats, 3);
        assert_eq!(nested.rates, [0.5]);
    }

    #[test]
    fn overrides_replace_the_defaults_keys() {
        let defaults = Nested {
            seed: 7,
            rates: vec![1.0],
            ..Nested::default()
        };
        let overrides: toml::Table = toml::from_str("rates = [2.0, 3.0]").unwrap();
        let merged = overridden(&defaults, overrides, "").unwrap();
        assert_eq!((merged.seed, merged.rates), (7, vec![2.0, 3.0]));
        let bad: toml::Table = toml::from_str("seed = \"x\"").unwrap();
        let refused = overridden(&defaults, bad.clone(), "training").unwrap_err();
        assert!(
            refused.starts_with("training.seed: invalid type"),
            "{refused}"
        );
        let refused = overridden(&defaults, bad, "").unwrap_err();
        assert!(refused.starts_with("seed: invalid type"), "{refused}");
        let unknown: toml::Table = toml::from_str("sede = 1").unwrap();
        let refused = overridden(&defaults, unknown, "training").unwrap_err();
        assert!(
            refused.starts_with("training: unknown field `sede`"),
            "{refused}"
        );
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
