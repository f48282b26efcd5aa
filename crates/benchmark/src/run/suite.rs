//! Suites: a TOML file naming the workloads to run, their parameters and the timing.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use quench_device::TimingConfig;
use serde::Deserialize;

/// A suite file, e.g. `configs/quick.toml`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Suite {
    /// Warm-up and repeats of every variant; `--repeats` overrides the repeats.
    pub timing: TimingConfig,
    /// One table per workload to run, keyed by its registered name. The optional key
    /// `variants` lists the variants to run (all by default); every other key is the
    /// workload's own parameter.
    pub workloads: BTreeMap<String, toml::Table>,
}

impl Suite {
    /// Loads a suite file.
    pub fn load(path: &Path) -> anyhow::Result<Self> {
        Ok(quench_support::load_toml(path)?)
    }
}

/// Splits a workload table into its variant selection and its own parameters.
pub fn split_variants(
    workload: &str,
    table: &toml::Table,
) -> anyhow::Result<(Option<Vec<String>>, toml::Table)> {
    let mut params = table.clone();
    let Some(value) = params.remove("variants") else {
        return Ok((None, params));
    };
    let names = value
        .as_array()
        .and_then(|items| {
            items
                .iter()
                .map(|v| v.as_str().map(str::to_string))
                .collect::<Option<Vec<_>>>()
        })
        .ok_or_else(|| {
            anyhow::anyhow!("workloads.{workload}.variants must be a list of variant names")
        })?;
    Ok((Some(names), params))
}

/// The default suite: `configs/quick.toml` under the current folder, else the one of the
/// source tree this binary was built from.
pub fn default_suite_path() -> PathBuf {
    quench_support::files::in_working_folder_or_source_tree(Path::new("configs/quick.toml"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_the_variant_list_from_parameters() {
        let table: toml::Table = toml::from_str("variants = [\"a\", \"b\"]\nsize = 3").unwrap();
        let (variants, params) = split_variants("w", &table).unwrap();
        assert_eq!(variants, Some(vec!["a".to_string(), "b".to_string()]));
        assert_eq!(params.get("size").and_then(|v| v.as_integer()), Some(3));
        assert!(!params.contains_key("variants"));
        let bad: toml::Table = toml::from_str("variants = 3").unwrap();
        let err = split_variants("w", &bad).unwrap_err();
        assert!(err.to_string().contains("workloads.w.variants"), "{err}");
    }

    #[test]
    fn shipped_suites_parse() {
        for name in ["quick.toml", "full.toml"] {
            let path = Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../configs")
                .join(name);
            let suite = Suite::load(&path).unwrap();
            assert!(suite.workloads.contains_key("device"), "{name}");
            assert!(suite.timing.repeats >= 1);
        }
    }
}
