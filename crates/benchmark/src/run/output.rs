//! The output folder of a run: checked before the first workload, the report rewritten after
//! every variant, and kept, marked interrupted, when a signal stops the run (Ctrl-C, SIGTERM,
//! SIGHUP). A file of [`RESERVE_BYTES`] held there while the run lasts is given up when the
//! disk fills, so that the report's last word (failed, interrupted, complete) can still be
//! written and no report is left `running`.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use anyhow::Context;
use quench_support::files::{FolderLock, write_all_atomically};

use crate::report::{Report, RunStatus};

/// The space held for the report's last write: a report and its Markdown beside the one they
/// replace (the quick suite's are about 50 kB).
pub const RESERVE_BYTES: usize = 1 << 20;
/// The reserve's file name in the output folder.
const RESERVE_FILE: &str = ".quench-reserve";

/// Where a run's reports go, and the last report written there. The folder is the run's
/// alone while it lasts ([`FolderLock`]).
pub struct Output {
    dir: PathBuf,
    latest: Arc<Mutex<Option<Report>>>,
    lock: FolderLock,
    /// Whether this run made the folder (it did not exist before).
    created: bool,
    /// The space held for the last report ([`RESERVE_BYTES`]).
    reserve: PathBuf,
}

impl Output {
    /// Creates `dir` (with its parents) and takes it for this run; a path that names a file,
    /// a folder that cannot be created, or one that another running benchmark holds, is
    /// refused here, before any work.
    pub fn new(dir: &Path) -> anyhow::Result<Self> {
        let created = !dir.exists();
        std::fs::create_dir_all(dir)
            .with_context(|| format!("--out {}: cannot create the output folder", dir.display()))?;
        let lock = FolderLock::take(dir).with_context(|| format!("--out {}", dir.display()))?;
        let reserve = dir.join(RESERVE_FILE);
        let output = Self {
            dir: dir.to_path_buf(),
            latest: Arc::new(Mutex::new(None)),
            lock,
            created,
            reserve,
        };
        if let Err(err) = hold_reserve(&output.reserve) {
            output.remove_if_unused();
            return Err(err).with_context(|| {
                format!(
                    "--out {}: cannot hold {} kB for the final report",
                    dir.display(),
                    RESERVE_BYTES / 1024
                )
            });
        }
        Ok(output)
    }

    /// Gives the folder back and, when this run made it and wrote nothing there, removes it:
    /// a run refused before its first report leaves no empty folder behind.
    pub fn remove_if_unused(self) {
        let (dir, created) = (self.dir.clone(), self.created);
        let unused = lock_report(&self.latest).is_none();
        drop(self);
        if created && unused {
            // Only an empty folder is removed; anything else there stays.
            let _ = std::fs::remove_dir(&dir);
        }
    }

    /// On a stopping signal (Ctrl-C's SIGINT, and SIGTERM and SIGHUP, which `timeout`, Slurm,
    /// `docker stop` and systemd send), waits for a write in progress, marks the last report
    /// interrupted by that signal, writes it, gives the folder back (removing it when this run
    /// made it and wrote nothing there yet), ends the PyTorch peer running, if any, and exits
    /// with status 128 + the signal's number.
    pub fn keep_on_interrupt(&self) -> anyhow::Result<()> {
        let (dir, latest) = (self.dir.clone(), Arc::clone(&self.latest));
        let lock = self.lock.path().to_path_buf();
        let (created, reserve) = (self.created, self.reserve.clone());
        crate::run::signals::on_stop(move |signal| {
            crate::child::stop_running();
            let mut latest = lock_report(&latest);
            let unused = latest.is_none();
            if let Some(report) = latest.as_mut() {
                report.status = RunStatus::Interrupted;
                report.stopped_by = Some(signal.name.to_string());
                match write_last(report, &dir, &reserve, write_report) {
                    Ok(()) => eprintln!(
                        "\ninterrupted by {}: {} keeps the variants that finished",
                        signal.name,
                        dir.join("report.json").display()
                    ),
                    Err(err) => eprintln!(
                        "\ninterrupted by {}, and the report could not be written: {err:#}",
                        signal.name
                    ),
                }
            }
            // Exiting skips `Drop`: give the folder back here (the OS lock goes with the
            // process).
            let _ = std::fs::remove_file(&reserve);
            let _ = std::fs::remove_file(&lock);
            // Stopped before its first report (in the torch probe, say): a folder this run
            // made is left empty, and goes (remove_dir refuses any other).
            if created && unused {
                let _ = std::fs::remove_dir(&dir);
            }
            // Not `exit`: it runs the C library's exit handlers, among them the CUDA driver's
            // teardown, while CubeCL's server thread still works in its context, and that
            // thread then panics on a driver already gone (seen on an H200 under `timeout`).
            // What is left to flush is stdout's last line.
            let _ = std::io::Write::flush(&mut std::io::stdout());
            // SAFETY: `_exit` ends the process at once; nothing runs after it.
            unsafe { libc::_exit(128 + signal.number) }
        })
    }

    /// Writes `report` (atomically) and remembers it for an interruption; a report with its
    /// last word that does not fit on the disk gets the reserve's space.
    pub fn keep(&self, report: &Report) -> anyhow::Result<()> {
        let mut latest = lock_report(&self.latest);
        write_last(report, &self.dir, &self.reserve, write_report)?;
        *latest = Some(report.clone());
        Ok(())
    }
}

impl Drop for Output {
    fn drop(&mut self) {
        // Nothing is lost if it stays: a later run in the folder holds it again.
        let _ = std::fs::remove_file(&self.reserve);
    }
}

/// Fills `path` with [`RESERVE_BYTES`] that no file system stores in less (not zeros, which a
/// compressing or sparse one would not keep).
fn hold_reserve(path: &Path) -> std::io::Result<()> {
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let bytes: Vec<u8> = (0..RESERVE_BYTES / 8)
        .flat_map(|_| {
            // xorshift64: cheap bytes no compressor shrinks.
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state.to_le_bytes()
        })
        .collect();
    std::fs::write(path, bytes)?;
    std::fs::File::open(path)?.sync_all()
}

/// `write`s `report` into `dir`; where that fails on a full disk and the report has its last
/// word (not `running`), gives up the reserve at `reserve` and writes it again.
fn write_last(
    report: &Report,
    dir: &Path,
    reserve: &Path,
    write: impl Fn(&Report, &Path) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let err = match write(report, dir) {
        Ok(()) => return Ok(()),
        Err(err) => err,
    };
    // A full disk, or a full quota (EDQUOT: the usual "full" on a cluster's shared disk).
    let full = err.chain().any(|cause| {
        cause.downcast_ref::<std::io::Error>().is_some_and(|io| {
            matches!(
                io.kind(),
                std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded
            )
        })
    });
    if !full || report.status == RunStatus::Running || std::fs::remove_file(reserve).is_err() {
        return Err(err);
    }
    write(report, dir).context("even with the space held for it given up")
}

/// Writes `report.json`, `report.md` and the SVG plots of `report` into `dir`, creating it;
/// the two reports are replaced atomically, so an interrupted run leaves no half-written
/// report; a plot that cannot be drawn is a warning.
pub fn write_report(report: &Report, dir: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir)
        .with_context(|| format!("cannot create output folder {}", dir.display()))?;
    let json = serde_json::to_string_pretty(report).context("cannot serialise the report")?;
    let (json_path, markdown_path) = (dir.join("report.json"), dir.join("report.md"));
    // Both or neither: a report.md that cannot be replaced must not leave a new report.json
    // beside the old one (nor a run's first report over an earlier run's).
    write_all_atomically(&[
        (&json_path, json.as_bytes()),
        (&markdown_path, report.markdown().as_bytes()),
    ])
    .context("cannot write the report")?;
    // The plots only draw what report.json holds: failing to draw one must not end a run.
    if let Err(err) = crate::report::plots::write_plots(&report.workloads, dir) {
        eprintln!("warning: plots not written: {err:#}");
    }
    Ok(())
}

/// The last report; a panic while it was held leaves a whole report or none, so a poisoned
/// lock is taken as it is.
fn lock_report(latest: &Mutex<Option<Report>>) -> MutexGuard<'_, Option<Report>> {
    latest.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::tests::sample_report;
    use quench_support::files::FOLDER_LOCK;

    #[test]
    fn an_output_path_that_names_a_file_is_refused_before_any_work() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("taken");
        std::fs::write(&file, "x").unwrap();
        let err = Output::new(&file).err().unwrap();
        assert!(format!("{err:#}").contains("taken"), "{err:#}");
        let nested = dir.path().join("a/b");
        let output = Output::new(&nested).unwrap();
        output.keep(&sample_report()).unwrap();
        assert!(nested.join("report.json").is_file());
    }

    #[test]
    fn a_folder_in_use_is_refused_and_a_stale_lock_taken_over() {
        let dir = tempfile::tempdir().unwrap();
        let first = Output::new(dir.path()).unwrap();
        let err = format!("{:#}", Output::new(dir.path()).err().unwrap());
        assert!(
            err.contains("another benchmark run") && err.contains(&std::process::id().to_string()),
            "{err}"
        );
        drop(first);
        assert!(
            !dir.path().join(FOLDER_LOCK).exists(),
            "the lock goes with its run"
        );
        // A lock naming a process that is gone (pid 0 is never a user process).
        std::fs::write(dir.path().join(FOLDER_LOCK), "0").unwrap();
        let taken = Output::new(dir.path()).unwrap();
        taken.keep(&sample_report()).unwrap();
        drop(taken);
        assert!(!dir.path().join(FOLDER_LOCK).exists());
    }

    #[test]
    fn a_full_disk_gives_the_last_report_the_reserve_and_only_the_last() {
        let dir = tempfile::tempdir().unwrap();
        let output = Output::new(dir.path()).unwrap();
        let reserve = dir.path().join(RESERVE_FILE);
        assert_eq!(
            std::fs::metadata(&reserve).unwrap().len(),
            RESERVE_BYTES as u64
        );
        // A disk (or a quota) that is full while the reserve is there.
        let full = |kind: std::io::ErrorKind| {
            let reserve = reserve.clone();
            move |_: &Report, _: &Path| -> anyhow::Result<()> {
                if reserve.exists() {
                    Err(std::io::Error::from(kind)).context("cannot write report.json")
                } else {
                    Ok(())
                }
            }
        };
        let mut report = sample_report();
        for kind in [
            std::io::ErrorKind::StorageFull,
            std::io::ErrorKind::QuotaExceeded,
        ] {
            report.status = RunStatus::Running;
            let err = write_last(&report, dir.path(), &reserve, full(kind)).unwrap_err();
            assert!(format!("{err:#}").contains("report.json"), "{err:#}");
            assert!(
                reserve.exists(),
                "a running report leaves the reserve for the last one"
            );
            report.status = RunStatus::Failed;
            write_last(&report, dir.path(), &reserve, full(kind)).unwrap();
            assert!(!reserve.exists());
            hold_reserve(&reserve).unwrap();
        }
        // Another failure is not a full disk's: the reserve stays.
        let denied = |_: &Report, _: &Path| -> anyhow::Result<()> {
            Err(std::io::Error::from(std::io::ErrorKind::PermissionDenied).into())
        };
        assert!(write_last(&report, dir.path(), &reserve, denied).is_err());
        assert!(reserve.exists());
        drop(output);
        assert!(!reserve.exists(), "the reserve goes with the run");
    }

    #[test]
    fn a_report_that_cannot_be_written_whole_leaves_the_earlier_one() {
        let dir = tempfile::tempdir().unwrap();
        let mut earlier = sample_report();
        earlier.status = RunStatus::Complete;
        write_report(&earlier, dir.path()).unwrap();
        // report.md replaced by a folder: the next report cannot be written whole.
        std::fs::remove_file(dir.path().join("report.md")).unwrap();
        std::fs::create_dir(dir.path().join("report.md")).unwrap();
        let mut next = sample_report();
        next.status = RunStatus::Running;
        let err = write_report(&next, dir.path()).unwrap_err();
        assert!(format!("{err:#}").contains("report.md"), "{err:#}");
        assert_eq!(
            Report::read(&dir.path().join("report.json")).unwrap(),
            earlier
        );
    }

    #[test]
    fn json_round_trips_through_files() {
        let scratch = tempfile::tempdir().unwrap();
        let dir = scratch.path().join("out");
        let report = sample_report();
        write_report(&report, &dir).unwrap();
        assert_eq!(Report::read(&dir.join("report.json")).unwrap(), report);
        let md = std::fs::read_to_string(dir.join("report.md")).unwrap();
        assert!(
            md.contains("| batched | 100.000 ms [90.000 ms-110.000 ms] /epoch"),
            "{md}"
        );
        assert!(md.contains("4.00x") && md.contains("6.000-15.00x"), "{md}");
        assert!(md.contains("- bf16: not run: no bf16 on ndarray"), "{md}");
        assert!(
            md.contains("- broken: FAILED: quality NaN is not finite"),
            "{md}"
        );
        assert_eq!(
            std::fs::read_dir(&dir)
                .unwrap()
                .filter(|e| e
                    .as_ref()
                    .unwrap()
                    .path()
                    .extension()
                    .is_some_and(|x| x == "tmp"))
                .count(),
            0,
            "no temporary file is left"
        );
    }
}
