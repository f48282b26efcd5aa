//! The ranks of an MPI run (`mpirun -n N benchmark run`): each rank measures its share of a
//! variant's members, and rank 0 gathers the ranks' measurements and joins them into the one
//! variant of the report. The ranks run at once, so the variant's time is the slowest rank's;
//! its work items and its quality (a mean over members) are those of every rank together.

use quench_scale::World;
use quench_support::Stats;
use serde::{Deserialize, Serialize};

use crate::report::RankTiming;
use crate::workload::{NoMembers, Sharded, Tolerance, VariantRun};

/// What one rank sends rank 0 about one variant.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum RankRun {
    /// It measured its share.
    Measured {
        /// Its seconds per iteration.
        per_iteration: Stats,
        /// Its work items per iteration.
        items_per_iteration: f64,
        /// Its members and quality sums; `None`: the workload ran whole on this rank.
        sharded: Option<Sharded>,
        /// Its members' final training loss where finite (JSON has no NaN: `diverged` says
        /// a member's loss was not finite).
        training_loss: Option<f64>,
        /// Whether its training loss was not finite.
        diverged: bool,
    },
    /// The device could not run the variant.
    Unsupported(String),
    /// Its run failed.
    Failed(String),
    /// The workload does not shard: rank 0 runs it alone.
    NotRun,
    /// The workload shards but left this rank no member (more ranks than members).
    Idle,
}

impl RankRun {
    /// The message of this rank's run (`None`: it did not run it).
    pub fn of(run: Option<&anyhow::Result<VariantRun>>) -> Self {
        match run {
            None => Self::NotRun,
            Some(Err(err)) if err.downcast_ref::<NoMembers>().is_some() => Self::Idle,
            Some(Err(err)) => Self::Failed(crate::error_line::one_line(err)),
            Some(Ok(VariantRun::Unsupported(why))) => Self::Unsupported(why.clone()),
            Some(Ok(VariantRun::Measured(outcome, _))) => Self::Measured {
                per_iteration: outcome.per_iteration,
                items_per_iteration: outcome.items_per_iteration,
                sharded: outcome.sharded,
                training_loss: outcome.training_loss.filter(|l| l.is_finite()),
                diverged: outcome.training_loss.is_some_and(|l| !l.is_finite()),
            },
        }
    }
}

/// Gathers every rank's run of one variant on rank 0 and joins them there: the joined run and
/// each rank's timing (empty in one process). `None` on the other ranks. `own` is this rank's
/// run (`None`: it did not run the variant).
pub fn gather(
    world: &World,
    own: Option<anyhow::Result<VariantRun>>,
) -> anyhow::Result<Option<(anyhow::Result<VariantRun>, Vec<RankTiming>)>> {
    if world.shard().ranks == 1 {
        return Ok(own.map(|run| (run, Vec::new())));
    }
    let message = serde_json::to_vec(&RankRun::of(own.as_ref()))?;
    let Some(parts) = world.gather(&message)? else {
        return Ok(None);
    };
    let parts: Vec<RankRun> = parts
        .iter()
        .map(|bytes| serde_json::from_slice(bytes))
        .collect::<Result<_, _>>()?;
    let own = own.ok_or_else(|| anyhow::anyhow!("rank 0 runs every variant"))?;
    Ok(Some(join(own, &parts)))
}

/// Rank 0's run `own` joined with every rank's message `parts` (rank 0's own first).
pub fn join(
    own: anyhow::Result<VariantRun>,
    parts: &[RankRun],
) -> (anyhow::Result<VariantRun>, Vec<RankTiming>) {
    let ranks = parts.len();
    if let Some((rank, why)) = parts.iter().enumerate().find_map(|(r, p)| match p {
        RankRun::Failed(why) => Some((r, why)),
        _ => None,
    }) {
        return (
            Err(anyhow::anyhow!("rank {rank} of {ranks}: {why}")),
            Vec::new(),
        );
    }
    let Ok(VariantRun::Measured(mut outcome, precision)) = own else {
        return (own, Vec::new());
    };
    let mut timings = Vec::new();
    let mut slowest = outcome.per_iteration;
    let (mut items, mut members, mut sum, mut sq_sum, mut count) = (0.0, 0, 0.0, 0.0, 0);
    // The members' training loss: each rank's mean weighted by its members; any rank's
    // non-finite loss makes the joined one NaN (a failed variant).
    let (mut loss_sum, mut loss_members, mut diverged_anywhere) = (0.0, 0, false);
    for (rank, part) in parts.iter().enumerate() {
        match part {
            RankRun::Measured {
                per_iteration,
                items_per_iteration,
                sharded: Some(share),
                training_loss,
                diverged,
            } => {
                diverged_anywhere |= *diverged;
                if let Some(loss) = training_loss {
                    loss_sum += loss * share.members as f64;
                    loss_members += share.members;
                }
                if per_iteration.median > slowest.median {
                    slowest = *per_iteration;
                }
                items += items_per_iteration;
                members += share.members;
                sum += share.quality_sum;
                sq_sum += share.quality_sq_sum;
                count += share.quality_count;
                timings.push(RankTiming {
                    rank,
                    members: share.members,
                    per_iteration_s: per_iteration.median,
                });
            }
            RankRun::Idle => {}
            RankRun::Unsupported(why) => {
                return (
                    Ok(VariantRun::Unsupported(format!(
                        "rank {rank} of {ranks}: {why}"
                    ))),
                    Vec::new(),
                );
            }
            // A workload that does not shard ran whole on rank 0.
            _ => return (Ok(VariantRun::Measured(outcome, precision)), Vec::new()),
        }
    }
    outcome.per_iteration = slowest;
    outcome.items_per_iteration = items;
    outcome.training_loss = if diverged_anywhere {
        Some(f64::NAN)
    } else {
        (loss_members > 0).then(|| loss_sum / loss_members as f64)
    };
    let n = count as f64;
    let mean = if count == 0 { f64::NAN } else { sum / n };
    let spread_floor = outcome.sharded.and_then(|s| s.spread_floor);
    if let Some(quality) = outcome.quality.as_mut() {
        quality.value = mean;
        if let Some(floor) = spread_floor {
            let spread = (sq_sum / n - mean * mean).max(0.0).sqrt();
            quality.tolerance = Tolerance::Absolute(spread.max(floor));
        }
    }
    outcome.sharded = Some(Sharded {
        members,
        quality_sum: sum,
        quality_sq_sum: sq_sum,
        quality_count: count,
        spread_floor,
    });
    outcome.notes.push(format!(
        "{members} members over {ranks} ranks; the time is the slowest rank's"
    ));
    (Ok(VariantRun::Measured(outcome, precision)), timings)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::{Quality, VariantOutcome};
    use quench_device::Precision;

    fn stats(median: f64) -> Stats {
        Stats {
            median,
            min: median,
            max: median,
            mean: median,
            std: 0.0,
            count: 1,
        }
    }

    fn outcome(median: f64, sharded: Sharded) -> VariantOutcome {
        VariantOutcome {
            training_loss: None,
            per_iteration: stats(median),
            counts: None,
            iteration_unit: "epoch".into(),
            iterations_per_run: 1.0,
            items_per_iteration: 10.0,
            throughput_unit: "samples/s".into(),
            quality: Some(Quality {
                metric: "mean test accuracy".into(),
                value: sharded.quality_sum / sharded.quality_count as f64,
                higher_is_better: true,
                tolerance: Tolerance::Absolute(0.01),
                chance: None,
                caveat: None,
            }),
            notes: Vec::new(),
            sharded: Some(sharded),
        }
    }

    #[test]
    fn the_slowest_rank_sets_the_time_and_every_member_the_quality() {
        let mine = Sharded::of(2, &[0.7, 0.9], Some(0.01));
        let theirs = Sharded::of(1, &[0.5], Some(0.01));
        let own = outcome(1.0, mine);
        let parts = [
            RankRun::of(Some(&Ok(VariantRun::Measured(own.clone(), Precision::F32)))),
            RankRun::Measured {
                per_iteration: stats(3.0),
                items_per_iteration: 5.0,
                sharded: Some(theirs),
                training_loss: None,
                diverged: false,
            },
        ];
        let (run, timings) = join(Ok(VariantRun::Measured(own, Precision::F32)), &parts);
        let Ok(VariantRun::Measured(joined, _)) = run else {
            panic!("{run:?}")
        };
        assert_eq!(joined.per_iteration.median, 3.0);
        assert_eq!(joined.items_per_iteration, 15.0);
        let quality = joined.quality.unwrap();
        assert!((quality.value - 0.7).abs() < 1e-12);
        // The spread of 0.7, 0.9 and 0.5, not rank 0's alone.
        let Tolerance::Absolute(t) = quality.tolerance else {
            panic!("{:?}", quality.tolerance)
        };
        assert!((t - (0.08_f64 / 3.0).sqrt()).abs() < 1e-9, "{t}");
        assert_eq!(timings.len(), 2);
        assert_eq!((timings[1].rank, timings[1].members), (1, 1));
    }

    /// A member's training loss that diverged on another rank fails the variant on rank 0
    /// (it reached rank 0 as JSON, which has no NaN); finite losses join weighted by members.
    #[test]
    fn the_training_loss_joins_every_ranks_members() {
        let own = VariantOutcome {
            training_loss: Some(0.4),
            ..outcome(1.0, Sharded::of(2, &[0.7, 0.9], None))
        };
        let theirs = |loss: f64| VariantOutcome {
            training_loss: Some(loss),
            ..outcome(1.0, Sharded::of(1, &[0.5], None))
        };
        for (loss, joined_loss) in [(0.7, Some(0.5)), (f64::NAN, None)] {
            let message = serde_json::to_vec(&RankRun::of(Some(&Ok(VariantRun::Measured(
                theirs(loss),
                Precision::F32,
            )))))
            .unwrap();
            let parts = [
                RankRun::of(Some(&Ok(VariantRun::Measured(own.clone(), Precision::F32)))),
                serde_json::from_slice(&message).unwrap(),
            ];
            let (run, _) = join(
                Ok(VariantRun::Measured(own.clone(), Precision::F32)),
                &parts,
            );
            let Ok(VariantRun::Measured(joined, _)) = run else {
                panic!("{run:?}")
            };
            let loss = joined.training_loss.unwrap();
            match joined_loss {
                // (2 x 0.4 + 1 x 0.7) / 3.
                Some(expected) => assert!((loss - expected).abs() < 1e-12, "{loss}"),
                None => assert!(loss.is_nan(), "{loss}"),
            }
        }
    }

    #[test]
    fn a_rank_without_members_sits_the_variant_out() {
        let own = outcome(1.0, Sharded::of(1, &[0.8], None));
        let idle: anyhow::Result<VariantRun> = Err(NoMembers {
            what: "seeds".into(),
        }
        .into());
        let parts = [
            RankRun::of(Some(&Ok(VariantRun::Measured(own.clone(), Precision::F32)))),
            RankRun::of(Some(&idle)),
        ];
        assert_eq!(parts[1], RankRun::Idle);
        let (run, timings) = join(Ok(VariantRun::Measured(own, Precision::F32)), &parts);
        let Ok(VariantRun::Measured(joined, _)) = run else {
            panic!("{run:?}")
        };
        assert_eq!(joined.quality.unwrap().value, 0.8);
        assert_eq!(timings.len(), 1);
    }

    #[test]
    fn a_failing_rank_fails_the_variant_with_its_rank_named() {
        let parts = [RankRun::NotRun, RankRun::Failed("out of memory".into())];
        let (run, timings) = join(Ok(VariantRun::Unsupported("x".into())), &parts);
        let err = run.unwrap_err().to_string();
        assert!(
            err.contains("rank 1 of 2") && err.contains("out of memory"),
            "{err}"
        );
        assert!(timings.is_empty());
    }

    #[test]
    fn a_workload_that_does_not_shard_keeps_rank_0s_run() {
        let own = outcome(2.0, Sharded::of(1, &[0.9], None));
        let parts = [RankRun::NotRun, RankRun::NotRun];
        let (run, timings) = join(
            Ok(VariantRun::Measured(own.clone(), Precision::F32)),
            &parts,
        );
        assert_eq!(run.unwrap(), VariantRun::Measured(own, Precision::F32));
        assert!(timings.is_empty());
    }
}
