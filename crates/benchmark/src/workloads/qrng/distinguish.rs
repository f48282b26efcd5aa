//! Workload `qrng-distinguish`: the distinguishability tournament of every pair of sources.

use anyhow::Context;
use quench_kernels::QuenchBackend;
use quench_qrng::distinguish::{DistinguishConfig, distinguish};
use quench_qrng::features::check_bits;
use quench_train::settings::Validate;
use serde::Deserialize;

use crate::workload::{
    PrecisionRole, TableWorkload, Variant, VariantContext, VariantOutcome, time_runs,
};
use quench_qrng::recording::{DataSettings, Recording};

/// Workload `qrng-distinguish`.
pub struct QrngDistinguish;

/// Parameters of `qrng-distinguish`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DistinguishParams {
    /// The bit strings.
    data: DataSettings,
    /// The tournament's settings.
    tournament: DistinguishConfig,
}

/// `qrng-distinguish` prepared for a suite.
pub struct PreparedDistinguish {
    recording: Recording,
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
    type Prepared = PreparedDistinguish;
    type Setting = ();
    const NAME: &'static str = "qrng-distinguish";
    const SUMMARY: &'static str =
        "guide 000: symmetric-KL distinguishability of every pair of qRNG sources, no training";

    fn table(&self) -> &[Variant<()>] {
        &DISTINGUISH_VARIANTS
    }

    /// The recording read (or the synthetic one drawn) once.
    fn prepare(&self, params: DistinguishParams) -> anyhow::Result<PreparedDistinguish> {
        params.tournament.validate().context("tournament")?;
        let recording = params.data.load()?;
        check_bits(params.tournament.bits, &recording.strings).context("tournament")?;
        Ok(PreparedDistinguish {
            recording,
            tournament: params.tournament,
        })
    }

    fn run_variant<B: QuenchBackend>(
        &self,
        _variant: &Variant<()>,
        prepared: &PreparedDistinguish,
        ctx: &VariantContext,
        device: &B::Device,
    ) -> anyhow::Result<VariantOutcome> {
        let Recording { strings, note } = &prepared.recording;
        let (table, seconds, counts) = time_runs::<B, _>(device, ctx.timing, || {
            Ok(distinguish::<B::InnerBackend>(
                strings,
                &prepared.tournament,
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
        notes.push(note.clone());
        Ok(VariantOutcome {
            training_loss: None,
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
