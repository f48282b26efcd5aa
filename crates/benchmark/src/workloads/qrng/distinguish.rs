//! Workload `qrng-distinguish`: the distinguishability tournament of every pair of sources.

use burn::tensor::backend::AutodiffBackend;
use quench_qrng::distinguish::{DistinguishConfig, distinguish};
use serde::Deserialize;

use super::DataParams;
use crate::workload::{
    PrecisionRole, TableWorkload, Variant, VariantContext, VariantOutcome, time_runs,
};

/// Workload `qrng-distinguish`.
pub struct QrngDistinguish;

/// Parameters of `qrng-distinguish`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DistinguishParams {
    /// The bit strings.
    data: DataParams,
    /// The tournament's settings.
    tournament: DistinguishConfig,
}

const DISTINGUISH_VARIANTS: [Variant<()>; 1] = [Variant {
    name: "tournament",
    description: "three feature sets per source and every pair's divergences in one batched \
                  program on the device",
    baseline: false,
    claim: None,
    precision: PrecisionRole::F32,
    setting: (),
}];

impl TableWorkload for QrngDistinguish {
    type Params = DistinguishParams;
    type Setting = ();
    const NAME: &'static str = "qrng-distinguish";
    const SUMMARY: &'static str =
        "guide 000: symmetric-KL distinguishability of every pair of qRNG sources, no training";

    fn table(&self) -> &[Variant<()>] {
        &DISTINGUISH_VARIANTS
    }

    /// The recording (or the synthetic one's settings) reads.
    fn check(&self, params: &DistinguishParams) -> anyhow::Result<()> {
        params.data.load().map(drop)
    }

    fn run_variant<B: AutodiffBackend>(
        &self,
        _variant: &Variant<()>,
        params: DistinguishParams,
        ctx: &VariantContext,
        device: &B::Device,
    ) -> anyhow::Result<VariantOutcome> {
        let (strings, source) = params.data.load()?;
        let (table, seconds, counts) = time_runs::<B, _>(device, ctx.timing, || {
            Ok(distinguish::<B::InnerBackend>(
                &strings,
                &params.tournament,
                device,
            )?)
        })?;
        let mut notes: Vec<String> = table
            .pairs
            .iter()
            .map(|p| {
                format!(
                    "{}v{}: KL bits {:.6}, KL pattern {:.6}, KL diff {:.6}, composite {:.6}",
                    p.sources.0, p.sources.1, p.kl_bits, p.kl_pattern, p.kl_diff, p.composite
                )
            })
            .collect();
        if let Some(best) = table.most_distinguishable() {
            notes.push(format!(
                "most distinguishable: {}v{}",
                best.sources.0, best.sources.1
            ));
        }
        notes.push(source);
        Ok(VariantOutcome {
            sharded: None,
            per_iteration: seconds,
            counts: Some(counts),
            iteration_unit: "tournament".into(),
            iterations_per_run: 1.0,
            items_per_iteration: table.pairs.len() as f64,
            throughput_unit: "pairs/s".into(),
            quality: None,
            notes,
        })
    }
}
