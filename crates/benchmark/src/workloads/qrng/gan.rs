//! Workload `qrng-gan`: the GAN tournament, a generator per pair of sources; the baseline plays
//! the matches one at a time with noise drawn on the host and autodiff, as the original did.

use quench_kernels::QuenchBackend;
use std::path::Path;

use anyhow::Context;

use quench_qrng::Batching;
use quench_qrng::features::check_bits;
use quench_qrng::gan::{GanConfig, Noise, gan_tournament_shard};
use quench_train::settings::Valid;
use serde::Deserialize;

use crate::peers::Peer;
use crate::workload::{
    Claim, NoMembers, PerVariant, PrecisionRole, Quality, TableWorkload, Tolerance, Variant,
    VariantContext, VariantOutcome, time_runs,
};
use quench_qrng::recording::{DataSettings, Recording};

/// Guide 000's claim for the GAN tournament: 3-5x.
const GAN_CLAIM: Claim = Claim {
    low: 3.0,
    high: 5.0,
};

/// Workload `qrng-gan`.
pub struct QrngGan;

/// Parameters of `qrng-gan`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GanParams {
    /// The bit strings.
    data: DataSettings,
    /// The tournament's settings; `noise` and `fused` are set by the variant.
    #[serde(deserialize_with = "tournament")]
    tournament: GanConfig,
}

/// The suite's `tournament` table, without the keys each variant sets.
fn tournament<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<GanConfig, D::Error> {
    crate::workload::deserialize_suite_settings(deserializer, "tournament", &["noise", "fused"])
}

/// `qrng-gan` prepared for a suite.
pub struct PreparedGan {
    params: GanParams,
    recording: Recording,
    /// Each variant's tournament settings.
    configs: PerVariant<GanConfig>,
}

/// How a variant plays the tournament.
#[derive(Debug, Clone, Copy)]
pub struct GanSetting {
    batching: Batching,
    noise: Noise,
    /// [`GanConfig::fused`].
    fused: bool,
}

const GAN_VARIANTS: [Variant<GanSetting>; 3] = [
    Variant {
        name: "baseline",
        description: "matches (pairs x seeds) one at a time, noise drawn on the host, autodiff \
                      and Adam op by op (the original's way)",
        baseline: true,
        claim: None,
        precision: PrecisionRole::F32,
        setting: GanSetting {
            batching: Batching::OneAtATime,
            noise: Noise::Host,
            fused: false,
        },
    },
    Variant {
        name: "batched",
        description: "every match a member of one batched program, noise drawn on the device, \
                      autodiff",
        baseline: false,
        claim: Some(GAN_CLAIM),
        precision: PrecisionRole::F32,
        setting: GanSetting {
            batching: Batching::Members,
            noise: Noise::Device,
            fused: false,
        },
    },
    Variant {
        name: "all",
        description: "batched, with hand-derived gradients and each player's backward fused \
                      with its Adam step (the seam's member-MLP step: a host kernel on the CPU, \
                      CubeCL kernels on a GPU)",
        baseline: false,
        claim: Some(GAN_CLAIM),
        precision: PrecisionRole::F32,
        setting: GanSetting {
            batching: Batching::Members,
            noise: Noise::Device,
            fused: true,
        },
    },
];

impl TableWorkload for QrngGan {
    type Params = GanParams;
    type Prepared = PreparedGan;
    type Setting = GanSetting;
    const NAME: &'static str = "qrng-gan";
    /// Matches (pair x seed) are dealt over the ranks.
    const SHARDS: bool = true;
    const SUMMARY: &'static str =
        "guide 000: GAN tournament, a 4096-128-256-4096 generator per pair of qRNG sources";

    fn table(&self) -> &[Variant<GanSetting>] {
        &GAN_VARIANTS
    }

    /// The recording read (or the synthetic one drawn) once; each variant's tournament
    /// settings checked.
    fn prepare(&self, params: GanParams) -> anyhow::Result<PreparedGan> {
        let configs = PerVariant::new(&GAN_VARIANTS, |variant| {
            let GanSetting { noise, fused, .. } = variant.setting;
            let config = GanConfig {
                noise,
                fused,
                ..params.tournament.clone()
            };
            Valid::new(config).context("tournament")
        })?;
        let recording = params.data.load()?;
        check_bits(params.tournament.bits, &recording.strings).context("tournament")?;
        Ok(PreparedGan {
            recording,
            configs,
            params,
        })
    }

    fn peer(&self, prepared: &PreparedGan, _inputs: &Path) -> anyhow::Result<Option<Peer>> {
        let params = &prepared.params;
        let t = &params.tournament;
        let seeds: Vec<String> = t.seeds.iter().map(u64::to_string).collect();
        let Some(mut args) = super::peer_args(&params.data) else {
            return Ok(None);
        };
        args.extend([
            "--epochs".into(),
            t.epochs.to_string(),
            "--seeds".into(),
            seeds.join(","),
            "--bits".into(),
            t.bits.to_string(),
        ]);
        Ok(Some(Peer {
            script: "qrng_gan.py",
            args,
            repeats: None,
        }))
    }

    fn run_variant<B: QuenchBackend>(
        &self,
        variant: &Variant<GanSetting>,
        prepared: &PreparedGan,
        ctx: &VariantContext,
        device: &B::Device,
    ) -> anyhow::Result<VariantOutcome> {
        let Recording { strings, note } = &prepared.recording;
        let batching = variant.setting.batching;
        let config = prepared.configs.of(variant)?;
        let shard = ctx.world.shard();
        let (tournament, seconds, counts) = time_runs::<B, _>(device, ctx.timing, || {
            Ok(gan_tournament_shard::<B>(
                strings, config, batching, shard, device,
            )?)
        })?;
        if tournament.matches.is_empty() {
            return Err(NoMembers {
                what: "matches".into(),
            }
            .into());
        }
        let finals: Vec<f64> = tournament.matches.iter().map(|m| m.final_kl()).collect();
        let epochs = config.epochs as f64;
        let mut notes: Vec<String> = tournament
            .table()
            .iter()
            .map(|row| {
                format!(
                    "{}v{}: final KL {:.4} +- {:.4} over {} seed(s); a uniform generator scores {:.4}",
                    row.sources.0,
                    row.sources.1,
                    row.mean,
                    row.std,
                    row.final_kl.len(),
                    row.uniform_kl
                )
            })
            .collect();
        notes.push(format!(
            "{} epochs, {} match(es); the original's quick setting is 100 epochs, its full one 1,000",
            config.epochs,
            tournament.matches.len()
        ));
        notes.push(note.clone());
        Ok(VariantOutcome {
            training_loss: None,
            sharded: ctx.share(finals.len(), &finals),
            per_iteration: seconds.scaled(1.0 / epochs),
            counts: Some(counts.per(epochs)),
            iteration_unit: "epoch (all matches)".into(),
            iterations_per_run: epochs,
            items_per_iteration: tournament.matches.len() as f64,
            throughput_unit: "match-epochs/s".into(),
            quality: Some(Quality {
                metric: "mean final KL(p_real || g)".into(),
                value: tournament.mean_final_kl(),
                higher_is_better: false,
                tolerance: Tolerance::Relative(0.1),
                chance: None,
                caveat: None,
            }),
            notes,
        })
    }
}
