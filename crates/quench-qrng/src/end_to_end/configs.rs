//! The shipped qRNG configurations parse into their types and hold the original's settings.

use std::path::{Path, PathBuf};

use crate::classifier::ClassifierConfig;
use crate::distinguish::DistinguishConfig;
use crate::gan::GanConfig;
use quench_support::load_toml;

fn config(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../configs/qrng")
        .join(name)
}

#[test]
fn shipped_configurations_are_the_documented_settings() {
    let distinguish: DistinguishConfig = load_toml(&config("distinguish.toml")).unwrap();
    assert_eq!(distinguish, DistinguishConfig::default());
    let classifier: ClassifierConfig = load_toml(&config("classifier.toml")).unwrap();
    assert_eq!(classifier, ClassifierConfig::default());
    let gan: GanConfig = load_toml(&config("gan.toml")).unwrap();
    assert_eq!(
        gan,
        GanConfig {
            epochs: 1_000,
            seeds: vec![42, 43, 44],
            ..GanConfig::default()
        }
    );
}

#[test]
fn unknown_fields_are_refused_with_their_name() {
    let err = quench_support::config::parse_toml::<ClassifierConfig>(
        "batch = 8",
        Path::new("classifier.toml"),
    )
    .unwrap_err();
    assert!(err.to_string().contains("batch"), "{err}");
}
