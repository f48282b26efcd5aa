//! Running a suite: select the device, run every variant, compare with the baseline, report.

pub mod output;
mod progress;
pub mod ranks;
pub mod signals;
pub mod suite;

use anyhow::Context as _;
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use quench_device::machine::MachineInfo;
use quench_device::memory::{peak_memory, release_host_buffers, reset_peak_rss};
use quench_device::{Precision, Selection, TimingConfig};
use quench_scale::World;

use crate::peers::{self, Python};
use crate::report::{
    FailedVariant, Report, RunStatus, SCHEMA_VERSION, UnsupportedVariant, VariantReport,
    WorkloadReport,
};
use crate::run::progress::Progress;
use crate::run::suite::{Suite, split_variants};
use crate::workload::{
    CheckedPrecision, PreparedWorkload, RunContext, RunPrecision, VariantInfo, VariantRun, Workload,
};
use crate::workloads::registry;

/// What the command line asked of a run.
#[derive(Debug, Clone)]
pub struct RunRequest<'a> {
    /// The suite file.
    pub suite_path: &'a Path,
    /// Only these workloads, when given.
    pub only: Option<Vec<String>>,
    /// Of each workload's variants (the suite's selection), only those of these names, when
    /// given (`--variants`).
    pub variants: Option<Vec<String>>,
    /// The selected device.
    pub selection: Selection,
    /// The run's `--precision`, checked on the selected device.
    pub precision: CheckedPrecision,
    /// Overrides the suite's repeats.
    pub repeats: Option<usize>,
    /// Run each workload's PyTorch peer too: with the Python found, or `Err` saying why
    /// none was (each workload's report then says so).
    pub peers: Option<Result<Python, String>>,
    /// Where workloads write the files their peers read, a folder per workload (the output
    /// folder's `peer-inputs`).
    pub peer_inputs: PathBuf,
    /// The processes of the run: one, or the ranks of an MPI launch. Only rank 0 keeps the
    /// report and runs the peers.
    pub world: &'a World,
}

/// Runs the suite and returns its report. `keep` gets the report as it stands before the first
/// workload (so that an output folder that cannot be written fails before any work) and after
/// every variant, so that what finished is kept whatever happens next. A variant that fails
/// (an error, or a quality that is not finite) is recorded as failed and the suite goes on.
pub fn run_suite(
    request: &RunRequest<'_>,
    keep: &mut dyn FnMut(&Report) -> anyhow::Result<()>,
) -> anyhow::Result<Report> {
    run_suite_of(request, &registry(), keep)
}

/// [`run_suite`] with `workloads` in place of the registered ones (tests add workloads that
/// fail on purpose).
fn run_suite_of(
    request: &RunRequest<'_>,
    workloads: &[Box<dyn Workload>],
    keep: &mut dyn FnMut(&Report) -> anyhow::Result<()>,
) -> anyhow::Result<Report> {
    let suite = Suite::load(request.suite_path)?;
    let timing = TimingConfig {
        repeats: request.repeats.unwrap_or(suite.timing.repeats),
        ..suite.timing
    };
    let repeats_from = if request.repeats.is_some() {
        "--repeats".to_string()
    } else {
        format!("{}: [timing] repeats", request.suite_path.display())
    };
    let warmup_from = format!("{}: [timing] warmup", request.suite_path.display());
    // Before the workloads are prepared (data read, models built): a refusal costs nothing.
    timing.check(&repeats_from, &warmup_from)?;
    let plan = plan(
        &suite,
        request.suite_path,
        request.only.as_deref(),
        request.variants.as_deref(),
        workloads,
    )?;
    let ctx = RunContext {
        device: request.selection.device,
        precision: request.precision.clone(),
        timing,
        repeats_given: request.repeats.is_some(),
        world: request.world,
    };
    let shard = request.world.shard();

    if let RunPrecision::Fixed(precision) = request.precision.asked()
        && precision != Precision::F32
        && !plan
            .iter()
            .any(|(_, _, variants)| variants.iter().any(|(_, v)| v.precision.follows_run()))
    {
        anyhow::bail!(
            "--precision {precision}: no selected variant follows it (none of {} has a \
             mixed-precision variant); leave --precision at auto, or select a workload that has one \
             (`benchmark list` marks them)",
            plan.iter()
                .map(|(w, _, _)| w.name())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }

    let total: usize = plan.iter().map(|(_, _, v)| v.len()).sum();
    if total == 0 {
        anyhow::bail!(
            "{}: nothing to run{} (no workload, or only empty `variants = []`)",
            request.suite_path.display(),
            request
                .only
                .as_deref()
                .map_or(String::new(), |only| format!(
                    " with --only {}",
                    only.join(",")
                ))
        );
    }
    let progress = Progress::new(total, shard.is_root());
    let mut report = Report {
        schema: SCHEMA_VERSION,
        quench_version: env!("CARGO_PKG_VERSION").to_string(),
        burn_version: crate::report::BURN_VERSION.to_string(),
        git_revision: git_revision(),
        started_unix: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        suite: request.suite_path.display().to_string(),
        machine: MachineInfo::read(ctx.device),
        fallback: request.selection.fallback.clone(),
        precision: ctx.precision.asked(),
        timing,
        status: RunStatus::Running,
        stopped_by: None,
        workloads: Vec::new(),
    };
    if shard.is_root() {
        keep(&report)?;
    }
    if let Err(err) = run_planned(plan, request, &ctx, &mut report, keep, &progress) {
        // What finished is kept; the status says the run did not end normally.
        report.status = RunStatus::Failed;
        if shard.is_root()
            && let Err(also) = keep(&report)
        {
            anyhow::bail!("{err:#}; the report could not be marked failed either: {also:#}");
        }
        return Err(err);
    }
    progress.finish();
    report.status = RunStatus::Complete;
    Ok(report)
}

/// A prepared workload with the variants chosen to run, each with its row in the workload's
/// table (baseline first).
pub type Chosen<'w> = (
    &'w dyn Workload,
    Box<dyn PreparedWorkload + 'w>,
    Vec<(usize, VariantInfo)>,
);

/// The workloads of `plan`, variant after variant, into `report` (see [`run_suite`]).
fn run_planned(
    plan: Vec<Chosen<'_>>,
    request: &RunRequest<'_>,
    ctx: &RunContext<'_>,
    report: &mut Report,
    keep: &mut dyn FnMut(&Report) -> anyhow::Result<()>,
    progress: &Progress,
) -> anyhow::Result<()> {
    let shard = request.world.shard();
    let timing = ctx.timing;
    for (workload, prepared, variants) in plan {
        report.workloads.push(WorkloadReport {
            name: workload.name().to_string(),
            summary: workload.summary().to_string(),
            variants: Vec::new(),
            unsupported: Vec::new(),
            failed: Vec::new(),
            peer: None,
            peer_missing: None,
        });
        for (row, variant) in variants {
            let what = format!("{}/{}", workload.name(), variant.name);
            progress.start(&what);
            // The variant's peak counts its own buffers, not those an earlier one left to the
            // host kernels' pool.
            release_host_buffers();
            reset_peak_rss();
            // A workload whose members do not split runs on rank 0 alone.
            let own = (shard.is_root() || workload.shards())
                .then(|| run_caught(prepared.as_ref(), row, ctx));
            progress.variant_ended();
            let Some((run, rank_timings)) = ranks::gather(request.world, own)? else {
                continue;
            };
            let entry = report
                .workloads
                .last_mut()
                .unwrap_or_else(|| unreachable!("pushed above"));
            match run {
                Ok(VariantRun::Measured(outcome, precision)) => {
                    if let Some(q) = outcome.quality.as_ref().filter(|q| !q.value.is_finite()) {
                        entry.failed.push(FailedVariant {
                            name: variant.name.to_string(),
                            error: format!(
                                "quality `{}` is {}, not a finite number",
                                q.metric, q.value
                            ),
                        });
                    } else if let Some(loss) = outcome.training_loss.filter(|l| !l.is_finite()) {
                        // A diverged run can still score a plausible quality (an accuracy of
                        // one class's share): the loss tells it from a weak run.
                        entry.failed.push(FailedVariant {
                            name: variant.name.to_string(),
                            error: format!(
                                "the training loss became {loss}: training diverged (a smaller \
                                 learning rate or initial scale may help)"
                            ),
                        });
                    } else {
                        let mut measured =
                            measured(&variant, outcome, precision, &entry.variants, ctx);
                        measured.ranks = rank_timings;
                        progress.line(&format!(
                            "{what}: ended, {:.4e} s per {}",
                            measured.per_iteration_s.median, measured.iteration_unit
                        ));
                        entry.variants.push(measured);
                    }
                }
                Ok(VariantRun::Unsupported(reason)) => {
                    progress.line(&format!("{what}: not supported here: {reason}"));
                    entry.unsupported.push(UnsupportedVariant {
                        name: variant.name.to_string(),
                        reason,
                    });
                }
                Err(err) => {
                    let error = crate::error_line::one_line(&err);
                    progress.println(&format!("{what} failed: {error}"));
                    entry.failed.push(FailedVariant {
                        name: variant.name.to_string(),
                        error,
                    });
                }
            }
            keep(report)?;
        }
        if !shard.is_root() {
            continue;
        }
        if let Some(python) = &request.peers {
            let what = format!("{}/pytorch", workload.name());
            progress.start(&what);
            let entry = report
                .workloads
                .last_mut()
                .unwrap_or_else(|| unreachable!("pushed above"));
            let device = peers::peer_device(ctx.device);
            let python = python.as_ref().map_err(String::as_str);
            let inputs = request.peer_inputs.join(workload.name());
            match peers::measure(python, || prepared.peer(&inputs), &device, timing) {
                Ok(peer) => {
                    progress.line(&format!(
                        "{what}: ended, {:.4e} s per {}",
                        peer.per_iteration_s, peer.iteration_unit
                    ));
                    for v in &mut entry.variants {
                        v.vs_pytorch = (v.iteration_unit == peer.iteration_unit)
                            .then(|| peer.per_iteration_s / v.per_iteration_s.median);
                    }
                    entry.peer = Some(peer);
                }
                Err(why) => {
                    progress.line(&format!("{what}: no figure: {why}"));
                    entry.peer_missing = Some(why.to_string());
                }
            }
            keep(report)?;
        }
    }
    Ok(())
}

/// Runs one variant; a panic inside it (a bug, or an assertion in a library) becomes that
/// variant's error, so that the report records it and the suite goes on.
fn run_caught(
    prepared: &dyn PreparedWorkload,
    row: usize,
    ctx: &RunContext<'_>,
) -> anyhow::Result<VariantRun> {
    std::panic::catch_unwind(AssertUnwindSafe(|| prepared.run(row, ctx))).unwrap_or_else(
        |payload| {
            let message =
                quench_device::error::panic_text(payload.as_ref()).unwrap_or("no message");
            Err(anyhow::anyhow!("panicked: {message}"))
        },
    )
}

/// The suite's workloads in registry order, those of `only` when given, each with the variants
/// the suite selects (all by default) narrowed to `variants` when given, then prepared
/// ([`Workload::prepare`]: parameters validated, data loaded, once for the run). Refused before
/// any workload is prepared: a workload the registry does not have, an `--only` name the suite
/// does not have, a variant name the workload does not have, a `--variants` name that none of
/// the selected workloads runs, a workload `--variants` leaves with none; then bad parameters
/// and data that cannot be read.
pub fn plan<'w>(
    suite: &Suite,
    suite_path: &Path,
    only: Option<&[String]>,
    variants: Option<&[String]>,
    workloads: &'w [Box<dyn Workload>],
) -> anyhow::Result<Vec<Chosen<'w>>> {
    for name in suite.workloads.keys() {
        if !workloads.iter().any(|w| w.name() == name) {
            anyhow::bail!(
                "{}: unknown workload `{name}` (registered: {})",
                suite_path.display(),
                names(workloads)
            );
        }
    }
    for name in only.unwrap_or_default() {
        if !suite.workloads.contains_key(name) {
            anyhow::bail!(
                "--only {name}: not in suite {} (it has: {})",
                suite_path.display(),
                suite
                    .workloads
                    .keys()
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
    }
    let mut selected: Vec<Selected<'w>> = Vec::new();
    for workload in workloads {
        let Some(table) = suite.workloads.get(workload.name()) else {
            continue;
        };
        if only.is_some_and(|only| !only.iter().any(|n| n == workload.name())) {
            continue;
        }
        let (names, params) = split_variants(workload.name(), table)?;
        let chosen = choose_variants(workload.as_ref(), names.as_deref())?;
        selected.push((workload.as_ref(), params, chosen));
    }
    if let Some(names) = variants {
        narrow_variants(names, &mut selected)?;
    }
    selected
        .into_iter()
        .map(|(workload, params, chosen)| {
            let prepared = workload
                .prepare(&params)
                .with_context(|| suite_path.display().to_string())?;
            for (row, _) in &chosen {
                prepared
                    .check(*row)
                    .with_context(|| suite_path.display().to_string())?;
            }
            Ok((workload, prepared, chosen))
        })
        .collect()
}

/// The report of a measured variant, compared with the baseline among `earlier` (the baseline
/// runs first).
fn measured(
    variant: &VariantInfo,
    outcome: crate::workload::VariantOutcome,
    precision: Precision,
    earlier: &[VariantReport],
    ctx: &RunContext,
) -> VariantReport {
    let baseline = earlier.iter().find(|v| v.baseline);
    let per_run_s = outcome.per_iteration.scaled(outcome.iterations_per_run);
    let verdict = outcome
        .quality
        .as_ref()
        .map(|q| q.verdict(baseline.and_then(|b| b.quality.as_ref())));
    VariantReport {
        name: variant.name.to_string(),
        description: variant.description.to_string(),
        baseline: variant.baseline,
        speedup: baseline
            .filter(|_| !variant.baseline)
            .map(|b| b.per_iteration_s.median / outcome.per_iteration.median),
        parity: verdict.as_ref().and_then(|v| v.parity),
        parity_note: verdict.and_then(|v| v.note),
        iteration_unit: outcome.iteration_unit,
        per_iteration_s: outcome.per_iteration,
        per_run_s,
        throughput: outcome.items_per_iteration / outcome.per_iteration.median,
        throughput_unit: outcome.throughput_unit,
        peak_memory: peak_memory(ctx.device),
        quality: outcome.quality,
        training_loss: outcome.training_loss,
        claim: variant.claim,
        precision,
        notes: outcome.notes,
        vs_pytorch: None,
        ranks: Vec::new(),
        launches_per_iteration: outcome.counts.and_then(|c| c.launches),
        readbacks_per_iteration: outcome.counts.map(|c| c.readbacks),
    }
}

/// The variants to run with their rows in the workload's table, baseline first so the others
/// can be compared with it.
fn choose_variants(
    workload: &dyn Workload,
    selected: Option<&[String]>,
) -> anyhow::Result<Vec<(usize, VariantInfo)>> {
    let all = workload.variants();
    let mut chosen = match selected {
        None => all.iter().cloned().enumerate().collect(),
        Some(names) => names
            .iter()
            .enumerate()
            .map(|(i, name)| {
                // Twice the same row would be measured twice, and `compare` refuses a report
                // that lists a variant twice.
                if names[..i].contains(name) {
                    anyhow::bail!(
                        "workload `{}`: variants lists `{name}` twice",
                        workload.name()
                    );
                }
                let row = all.iter().position(|v| v.name == name);
                row.map(|row| (row, all[row].clone())).ok_or_else(|| {
                    anyhow::anyhow!(
                        "workload `{}` has no variant `{name}` (it has: {})",
                        workload.name(),
                        all.iter().map(|v| v.name).collect::<Vec<_>>().join(", ")
                    )
                })
            })
            .collect::<anyhow::Result<Vec<_>>>()?,
    };
    chosen.sort_by_key(|(_, v)| !v.baseline);
    Ok(chosen)
}

/// A workload of the suite with its parameters and the variants chosen to run, before it is
/// prepared.
type Selected<'w> = (&'w dyn Workload, toml::Table, Vec<(usize, VariantInfo)>);

/// Keeps, of each workload's chosen variants, those named in `names` (`--variants`). Refused:
/// no name or an empty one, a name that none of the workloads runs (a typo, or a variant the
/// suite leaves out, would otherwise run less than asked without a word), and a workload left
/// with none (one the suite already disables with `variants = []` stays as it is).
fn narrow_variants(names: &[String], selected: &mut [Selected<'_>]) -> anyhow::Result<()> {
    if names.is_empty() || names.iter().any(String::is_empty) {
        anyhow::bail!("--variants: give one or more variant names, comma separated");
    }
    for name in names {
        if !selected
            .iter()
            .any(|(_, _, chosen)| chosen.iter().any(|(_, v)| v.name == name))
        {
            anyhow::bail!(
                "--variants: `{name}` is not among the variants the suite selects in {} \
                 (`benchmark list` names each workload's)",
                selected
                    .iter()
                    .map(|(w, _, _)| format!("`{}`", w.name()))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
    }
    let named = |v: &VariantInfo| names.iter().any(|n| n == v.name);
    for (workload, _, chosen) in selected.iter_mut() {
        if !chosen.is_empty() && !chosen.iter().any(|(_, v)| named(v)) {
            anyhow::bail!(
                "--variants {}: workload `{}` would run none of its variants here ({}); \
                 leave it out with --only",
                names.join(","),
                workload.name(),
                chosen
                    .iter()
                    .map(|(_, v)| v.name)
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        chosen.retain(|(_, v)| named(v));
    }
    Ok(())
}

fn names(workloads: &[Box<dyn Workload>]) -> String {
    workloads
        .iter()
        .map(|w| w.name())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The source tree's git revision, `unknown` where git or the checkout is absent.
fn git_revision() -> String {
    std::process::Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|out| out.status.success())
        .and_then(|out| String::from_utf8(out.stdout).ok())
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use quench_kernels::SelectedDevice;

    /// A workload whose one variant fails when it runs (after every check before the run
    /// passed), as a diverging training would.
    struct Failing;

    impl crate::workload::TableWorkload for Failing {
        type Params = FailingParams;
        type Prepared = ();
        type Setting = ();
        const NAME: &'static str = "failing";
        const SUMMARY: &'static str = "a variant that fails when it runs";

        fn table(&self) -> &[crate::workload::Variant<()>] {
            &[crate::workload::Variant {
                name: "baseline",
                description: "fails",
                baseline: true,
                claim: None,
                precision: crate::workload::PrecisionRole::F32,
                setting: (),
            }]
        }

        fn prepare(&self, _: FailingParams) -> anyhow::Result<()> {
            Ok(())
        }

        fn run_variant<B: quench_kernels::QuenchBackend>(
            &self,
            _: &crate::workload::Variant<()>,
            _: &(),
            _: &crate::workload::VariantContext,
            _: &B::Device,
        ) -> anyhow::Result<crate::workload::VariantOutcome> {
            anyhow::bail!("training loss became NaN")
        }
    }

    /// [`Failing`]'s parameters: none.
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct FailingParams {}

    /// A small synthetic distinguishability tournament, then [`Failing`]'s variant.
    fn suite(dir: &Path) -> std::path::PathBuf {
        let path = dir.join("suite.toml");
        std::fs::write(
            &path,
            "[timing]\nwarmup = 0\nrepeats = 1\n\n[workloads.failing]\n\n\
             [workloads.qrng-distinguish]\n\
             data = { source = \"synthetic\", synthetic_lines = 40 }\ntournament = { bits = 16 }\n",
        )
        .unwrap();
        path
    }

    /// [`run_suite`] over the registered workloads and [`Failing`].
    fn run_suite(
        request: &RunRequest<'_>,
        keep: &mut dyn FnMut(&Report) -> anyhow::Result<()>,
    ) -> anyhow::Result<Report> {
        let mut workloads = registry();
        workloads.push(Box::new(Failing));
        run_suite_of(request, &workloads, keep)
    }

    /// `--precision auto` checked on the CPU.
    fn auto() -> CheckedPrecision {
        RunPrecision::Auto.check_on(SelectedDevice::Cpu).unwrap()
    }

    fn request(suite_path: &Path, precision: CheckedPrecision) -> RunRequest<'_> {
        RunRequest {
            peers: None,
            peer_inputs: suite_path.with_file_name("peer-inputs"),
            suite_path,
            only: None,
            variants: None,
            selection: Selection {
                device: SelectedDevice::Cpu,
                fallback: None,
            },
            precision,
            repeats: None,
            world: RunContext::quick_cpu().world,
        }
    }

    #[test]
    fn a_failing_workload_is_recorded_and_the_suite_goes_on_keeping_every_step() {
        let dir = tempfile::tempdir().unwrap();
        let path = suite(dir.path());
        let mut kept: Vec<Report> = Vec::new();
        let report = run_suite(&request(&path, auto()), &mut |r| {
            kept.push(r.clone());
            Ok(())
        })
        .unwrap();
        // Before the first workload, then after each of the two variants.
        assert_eq!(kept.len(), 3);
        assert!(kept[0].workloads.is_empty() && kept[0].status == RunStatus::Running);
        assert_eq!(kept[1].workloads[0].name, "qrng-distinguish");
        assert_eq!(kept[1].workloads[0].variants.len(), 1);
        assert_eq!(report.status, RunStatus::Complete);
        let failures = report.failures();
        assert_eq!(failures.len(), 1, "{failures:?}");
        assert_eq!(
            failures,
            ["failing/baseline: training loss became NaN".to_string()]
        );
        // A keeper that cannot write stops the run before any workload.
        let mut calls = 0;
        let err = run_suite(&request(&path, auto()), &mut |_| {
            calls += 1;
            anyhow::bail!("read-only folder")
        })
        .unwrap_err();
        assert_eq!(
            (calls, err.to_string()),
            (1, "read-only folder".to_string())
        );
    }

    #[test]
    fn a_run_stopped_by_an_error_leaves_its_report_marked_failed() {
        let dir = tempfile::tempdir().unwrap();
        let path = suite(dir.path());
        // The folder becomes unwritable after the first variant, then writable again.
        let mut kept: Vec<Report> = Vec::new();
        let mut calls = 0;
        let err = run_suite(&request(&path, auto()), &mut |r| {
            calls += 1;
            if calls == 2 {
                anyhow::bail!("disk full");
            }
            kept.push(r.clone());
            Ok(())
        })
        .unwrap_err();
        assert_eq!(err.to_string(), "disk full");
        let last = kept.last().unwrap();
        assert_eq!(last.status, RunStatus::Failed);
        assert_eq!(last.workloads[0].variants.len(), 1, "what finished is kept");
        // When even that write fails, the error says so.
        let mut calls = 0;
        let err = run_suite(&request(&path, auto()), &mut |_| {
            calls += 1;
            if calls > 1 {
                anyhow::bail!("disk full");
            }
            Ok(())
        })
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "disk full; the report could not be marked failed either: disk full"
        );
    }

    /// A prepared workload whose every variant panics, as a library bug would.
    struct Panicking;

    impl PreparedWorkload for Panicking {
        fn run(&self, _: usize, _: &RunContext) -> anyhow::Result<VariantRun> {
            let widths: Vec<usize> = Vec::new();
            panic!(
                "index out of bounds: the len is {} but the index is 0",
                widths.len()
            )
        }
        fn peer(&self, _: &Path) -> anyhow::Result<Option<crate::peers::Peer>> {
            Ok(None)
        }
        fn check(&self, _: usize) -> anyhow::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_panicking_variant_becomes_its_error() {
        let err = run_caught(&Panicking, 0, &RunContext::quick_cpu()).unwrap_err();
        assert_eq!(
            err.to_string(),
            "panicked: index out of bounds: the len is 0 but the index is 0"
        );
    }

    #[test]
    fn a_missing_file_of_a_later_workload_fails_the_suite_before_any_work() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("suite.toml");
        std::fs::write(
            &path,
            "[workloads.qrng-distinguish]\n\
             data = { source = \"synthetic\", synthetic_lines = 40 }\n\n\
             [workloads.sgld]\nconfig = \"/nonexistent/grid.toml\"\n",
        )
        .unwrap();
        let mut kept = 0;
        let err = run_suite(&request(&path, auto()), &mut |_| {
            kept += 1;
            Ok(())
        })
        .unwrap_err();
        assert_eq!(kept, 0, "nothing ran");
        let err = format!("{err:#}");
        assert!(
            err.contains("sgld") && err.contains("/nonexistent/grid.toml"),
            "{err}"
        );
    }

    /// quench-data's load events on this thread while `work` runs, and what it returned.
    fn loads_during<T>(work: impl FnOnce() -> T) -> (T, usize) {
        use std::sync::Arc;
        use std::sync::atomic::{AtomicUsize, Ordering};
        use tracing_subscriber::layer::{Context, Layer, SubscriberExt};

        struct Count(Arc<AtomicUsize>);
        impl<S: tracing::Subscriber> Layer<S> for Count {
            fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
                if event.metadata().target() == quench_data::LOAD_TARGET {
                    self.0.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        let count = Arc::new(AtomicUsize::new(0));
        let subscriber = tracing_subscriber::registry().with(Count(Arc::clone(&count)));
        let out = tracing::subscriber::with_default(subscriber, work);
        (out, count.load(Ordering::Relaxed))
    }

    #[test]
    fn each_workloads_data_is_loaded_once_for_all_its_variants_and_its_peer() {
        // Workloads whose data is read or drawn, small, and the variant a one-variant run keeps.
        let workloads = [
            (
                "qrng-gan",
                "data = { source = \"synthetic\", synthetic_lines = 40 }\n\
                 tournament = { epochs = 1, bits = 4 }",
                "batched",
            ),
            (
                "qrng-classifier",
                "data = { source = \"synthetic\", synthetic_lines = 40 }\n\
                 training = { max_epochs = 1, seeds = [1] }",
                "baseline",
            ),
            ("sgld", "config = \"configs/sgld/synth-test.toml\"", "all"),
            (
                "temporal-mlp",
                "market = { symbols = 2, bars = 200 }\nrepeats = 1\n\
                 training = { seeds = [1], epochs = 1 }",
                "baseline",
            ),
        ];
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, one_variant: bool| {
            let mut text = String::from("[timing]\nwarmup = 0\nrepeats = 1\n");
            for (workload, params, variant) in workloads {
                text.push_str(&format!("\n[workloads.{workload}]\n{params}\n"));
                if one_variant {
                    text.push_str(&format!("variants = [\"{variant}\"]\n"));
                }
            }
            let path = dir.path().join(name);
            std::fs::write(&path, text).unwrap();
            path
        };
        let (every, one) = (write("every.toml", false), write("one.toml", true));
        let python = crate::peers::tests::fake_python(dir.path(), crate::peers::tests::LINE);
        let mut with_peers = request(&every, auto());
        with_peers.peers = Some(Ok(python));
        let (report, loads) = loads_during(|| run_suite(&with_peers, &mut |_| Ok(())));
        let report = report.unwrap();
        assert!(report.failures().is_empty(), "{:?}", report.failures());
        let variants: usize = report.workloads.iter().map(|w| w.variants.len()).sum();
        assert!(variants > 2 * workloads.len(), "{variants} variants ran");
        let temporal = report.workloads.iter().find(|w| w.name == "temporal-mlp");
        assert!(temporal.is_some_and(|w| w.peer.is_some()), "the peer ran");
        // One data set each for the GAN, the classifier and the market; SYNTH is one data set
        // per repetition (two in synth-test). The peer trains on what was loaded.
        assert_eq!(loads, 1 + 1 + 2 + 1, "every variant with its peer");
        let (alone, loads_alone) =
            loads_during(|| run_suite(&request(&one, auto()), &mut |_| Ok(())));
        alone.unwrap();
        assert_eq!(loads_alone, loads, "one variant each, no peer");
    }

    #[test]
    fn an_explicit_precision_that_no_selected_variant_follows_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = suite(dir.path());
        // As on a device with bf16 (the CPU refuses it before the suite).
        let bf16 = CheckedPrecision::as_if_checked(RunPrecision::Fixed(Precision::Bf16));
        let mut request = request(&path, bf16);
        request.only = Some(vec!["qrng-distinguish".into()]);
        let err = run_suite(&request, &mut |_| Ok(())).unwrap_err();
        assert!(
            err.to_string().contains("no selected variant follows it"),
            "{err}"
        );
    }

    #[test]
    fn variants_narrow_each_workload_and_a_name_that_selects_nothing_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("suite.toml");
        std::fs::write(
            &path,
            "[timing]\nwarmup = 0\nrepeats = 1\n\n\
             [workloads.qrng-gan]\ntournament = { epochs = 2, bits = 4 }\n\n\
             [workloads.qrng-classifier]\nvariants = [\"baseline\"]\n\
             data = { source = \"synthetic\", synthetic_lines = 1 }\n",
        )
        .unwrap();
        let mut narrowed = request(&path, auto());
        narrowed.only = Some(vec!["qrng-gan".into()]);
        narrowed.variants = Some(vec!["all".into()]);
        let report = run_suite(&narrowed, &mut |_| Ok(())).unwrap();
        let ran: Vec<&str> = report.workloads[0]
            .variants
            .iter()
            .map(|v| v.name.as_str())
            .collect();
        assert_eq!(
            ran,
            ["all"],
            "the baseline and batched variants are left out"
        );
        assert!(report.workloads[0].variants[0].speedup.is_none());

        // A typo, a variant the suite leaves out, no name: refused, naming what was asked.
        for (names, named) in [
            (
                vec!["all", "no-such-variant"],
                "`no-such-variant` is not among",
            ),
            (vec!["all", "batch-128"], "`batch-128` is not among"),
            (vec!["all", ""], "give one or more variant names"),
        ] {
            narrowed.only = None;
            narrowed.variants = Some(names.into_iter().map(String::from).collect());
            let err = run_suite(&narrowed, &mut |_| Ok(())).unwrap_err();
            assert!(err.to_string().contains(named), "{err}");
        }

        // The classifier has `all`, but the suite selects only its baseline.
        narrowed.only = None;
        narrowed.variants = Some(vec!["all".into()]);
        let err = run_suite(&narrowed, &mut |_| Ok(())).unwrap_err();
        assert!(
            err.to_string().contains("`qrng-classifier` would run none"),
            "{err}"
        );
    }

    #[test]
    fn peers_add_a_row_and_ratios_or_say_why_they_are_missing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("suite.toml");
        // The recorded file (the peers read files, not Quench's synthetic sources) with a
        // small grid, and a distinguishability tournament, which has no peer.
        std::fs::write(
            &path,
            "[timing]\nwarmup = 0\nrepeats = 1\n\n\
             [workloads.qrng-gan]\ntournament = { epochs = 2, bits = 4 }\nvariants = [\"all\"]\n\n\
             [workloads.qrng-distinguish]\n\
             data = { source = \"synthetic\", synthetic_lines = 40 }\ntournament = { bits = 16 }\n",
        )
        .unwrap();
        let python = crate::peers::tests::fake_python(dir.path(), crate::peers::tests::LINE);
        let mut with = request(&path, auto());
        with.peers = Some(Ok(python));
        let report = run_suite(&with, &mut |_| Ok(())).unwrap();
        let gan = report
            .workloads
            .iter()
            .find(|w| w.name == "qrng-gan")
            .unwrap();
        let peer = gan.peer.as_ref().expect("the fake peer's row");
        assert_eq!((peer.per_iteration_s, peer.torch.as_str()), (0.05, "9.9.9"));
        let all = &gan.variants[0];
        let want = 0.05 / all.per_iteration_s.median;
        assert_eq!(all.vs_pytorch, Some(want));
        let distinguish = report
            .workloads
            .iter()
            .find(|w| w.name == "qrng-distinguish")
            .unwrap();
        assert!(distinguish.peer.is_none());
        assert!(
            distinguish
                .peer_missing
                .as_deref()
                .unwrap()
                .contains("no PyTorch peer"),
            "{:?}",
            distinguish.peer_missing
        );
        assert!(report.markdown().contains("| pytorch [torch 9.9.9, cpu] |"));

        // No Python with torch: every workload says why, and the run still completes.
        let mut without = request(&path, auto());
        without.peers = Some(Err(
            "no Python with torch found (python3: No module named torch)".into(),
        ));
        without.only = Some(vec!["qrng-gan".into()]);
        let report = run_suite(&without, &mut |_| Ok(())).unwrap();
        assert_eq!(report.status, RunStatus::Complete);
        let gan = &report.workloads[0];
        assert!(gan.peer.is_none() && gan.variants[0].vs_pytorch.is_none());
        assert!(
            gan.peer_missing
                .as_deref()
                .unwrap()
                .contains("No module named torch")
        );
        assert!(
            report
                .table()
                .contains("qrng-gan/pytorch not run: no Python with torch")
        );
    }
}
