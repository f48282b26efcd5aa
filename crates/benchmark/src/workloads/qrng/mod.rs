//! Workloads `qrng-distinguish`, `qrng-gan` and `qrng-classifier` (guide 000): the qRNG
//! distinguishability tournament, the GAN tournament and the source classifier on the
//! recorded bit strings (or on synthetic stand-in sources).
//!
//! The baselines reproduce the original's way on purpose (GAN matches one at a time with noise
//! drawn on the host; classifier seeds one at a time at batch 8 in f32, data streamed from the
//! host); every other variant changes one thing, and `all` changes them together.
mod classifier;
mod distinguish;
mod gan;

use quench_qrng::recording::DataSettings;

pub use classifier::QrngClassifier;
pub use distinguish::QrngDistinguish;
pub use gan::QrngGan;

/// The recorded file of `data`, resolved, as a PyTorch peer's `--data` argument; none for
/// synthetic sources, which the peers do not generate.
fn peer_args(data: &DataSettings) -> Option<Vec<String>> {
    data.recorded_path()
        .map(|path| vec!["--data".into(), path.display().to_string()])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::{PrepareAndRun, RunContext, VariantOutcome, VariantRun, Workload};

    fn ctx() -> RunContext<'static> {
        RunContext::quick_cpu()
    }

    /// A tiny synthetic recording and `extra` workload parameters.
    fn params(extra: &str) -> toml::Table {
        toml::from_str(&format!(
            "data = {{ source = \"synthetic\", synthetic_lines = 40 }}\n{extra}"
        ))
        .unwrap()
    }

    fn measured(run: VariantRun) -> VariantOutcome {
        match run {
            VariantRun::Measured(outcome, _) => outcome,
            VariantRun::Unsupported(reason) => panic!("unsupported: {reason}"),
        }
    }

    #[test]
    fn every_variant_runs_on_synthetic_sources() {
        let gan = params("tournament = { epochs = 2, bits = 8 }");
        for variant in QrngGan.variants() {
            let outcome = measured(QrngGan.run(&variant, &gan, &ctx()).unwrap());
            assert_eq!(outcome.iterations_per_run, 2.0);
            assert!(outcome.quality.unwrap().value.is_finite());
            assert!(outcome.notes.iter().any(|n| n.starts_with("1v2: final KL")));
        }
        let classifier = params("training = { max_epochs = 2, seeds = [1, 2] }");
        for variant in QrngClassifier.variants() {
            let run = QrngClassifier.run(&variant, &classifier, &ctx()).unwrap();
            if variant.name == "mixed-precision" {
                assert!(matches!(run, VariantRun::Unsupported(ref r) if r.contains("bf16")));
                continue;
            }
            let outcome = measured(run);
            assert_eq!(outcome.iterations_per_run, 2.0, "{}", variant.name);
            let accuracy = outcome.quality.unwrap().value;
            assert!((0.0..=1.0).contains(&accuracy));
            if variant.name == "all" {
                assert!(outcome.notes.iter().any(|n| n.contains("ran in f32")));
            }
        }
        let distinguish = params("tournament = { bits = 16 }");
        let variant = &QrngDistinguish.variants()[0];
        let outcome = measured(QrngDistinguish.run(variant, &distinguish, &ctx()).unwrap());
        assert_eq!(outcome.items_per_iteration, 3.0);
        assert!(outcome.notes.iter().any(|n| n.starts_with("1v3: KL bits")));
    }

    #[test]
    fn one_baseline_each_and_parameters_are_checked() {
        for workload in [&QrngGan as &dyn Workload, &QrngClassifier] {
            let baselines = workload.variants().iter().filter(|v| v.baseline).count();
            assert_eq!(baselines, 1, "{}", workload.name());
        }
        assert!(QrngClassifier.check_params(&params("")).is_ok());
        let err = QrngGan
            .check_params(&params("tournament = { epoch = 3 }"))
            .unwrap_err();
        assert!(format!("{err:#}").contains("epoch"), "{err:#}");
        // A key each variant sets would be ignored: refused, named.
        for (workload, table, key) in [
            (
                &QrngGan as &dyn Workload,
                "tournament = { fused = false }",
                "tournament.fused",
            ),
            (
                &QrngGan,
                "tournament = { noise = \"host\" }",
                "tournament.noise",
            ),
            (
                &QrngClassifier,
                "training = { batch_size = 8 }",
                "training.batch_size",
            ),
        ] {
            let err = workload.check_params(&params(table)).unwrap_err();
            let message = format!("{err:#}");
            assert!(
                message.contains(key) && message.contains("set by each variant"),
                "{message}"
            );
        }
        let missing: toml::Table =
            toml::from_str("data = { path = \"/nonexistent/qrng.txt\" }").unwrap();
        let err = QrngDistinguish
            .run(&QrngDistinguish.variants()[0], &missing, &ctx())
            .unwrap_err();
        assert!(
            format!("{err:#}").contains("/nonexistent/qrng.txt"),
            "{err:#}"
        );
    }
}
