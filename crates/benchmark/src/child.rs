//! Child processes the benchmark waits for (the PyTorch peers and the probe for a Python with
//! torch): each with a time limit and a cap on the output kept, and ended with the benchmark
//! when a signal stops it, so that a hanging or chattering child can neither hang the run nor
//! exhaust its memory.

use std::io::Read;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::Context as _;

/// The bytes kept of each of a child's two streams: its last ones, where a peer prints its
/// JSON line and Python its error.
pub const KEPT_BYTES: usize = 1 << 20;

/// What a child left.
#[derive(Debug)]
pub struct Finished {
    /// How it ended.
    pub status: ExitStatus,
    /// The last [`KEPT_BYTES`] of its standard output.
    pub stdout: Vec<u8>,
    /// The last [`KEPT_BYTES`] of its standard error.
    pub stderr: Vec<u8>,
}

/// The child being waited for, so that [`stop_running`] can end it.
static RUNNING: Mutex<Option<u32>> = Mutex::new(None);

/// Runs `command` with no standard input, waits at most `limit` for it, and keeps the last
/// [`KEPT_BYTES`] of each output stream. `what` names it in errors (`peer peers/gan.py`). The
/// child leads a process group of its own, and whatever it started that is still in the group
/// when it ends or is stopped is killed with it: a grandchild holding the output pipes open
/// would otherwise hang the run after the child exited.
///
/// # Errors
/// When it cannot be started, and when it runs past `limit` (it is killed then).
pub fn run(command: &mut Command, limit: Duration, what: &str) -> anyhow::Result<Finished> {
    #[cfg(unix)]
    std::os::unix::process::CommandExt::process_group(command, 0);
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("cannot start {what}"))?;
    *lock_running() = Some(child.id());
    let outcome = wait_bounded(&mut child, limit, what);
    *lock_running() = None;
    outcome
}

/// Ends the child [`run`] is waiting for, if any (for a signal handler that exits next).
pub fn stop_running() {
    // A handler must not wait on a lock held by the thread it interrupted: skip if taken.
    if let Ok(running) = RUNNING.try_lock()
        && let Some(pid) = *running
    {
        kill_group(pid);
    }
}

/// Kills the process group led by the child `pid` ([`run`] makes each child a group leader):
/// the child and whatever it started that stayed in its group. A no-op where the group is
/// gone, and off Unix.
fn kill_group(pid: u32) {
    #[cfg(unix)]
    if let Ok(pid) = libc::pid_t::try_from(pid) {
        // SAFETY: kill(2) of the group a child of this process leads; nothing is read or
        // written through pointers. A group id is not reused while any member lives.
        unsafe {
            libc::kill(-pid, libc::SIGKILL);
        }
    }
    #[cfg(not(unix))]
    let _ = pid;
}

fn lock_running() -> std::sync::MutexGuard<'static, Option<u32>> {
    RUNNING
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn wait_bounded(child: &mut Child, limit: Duration, what: &str) -> anyhow::Result<Finished> {
    // Both streams are drained as they come, each by a thread of its own, so that a child
    // writing more than a pipe holds is never blocked, and only their tails are kept.
    let readers = [
        child.stdout.take().map(|s| tail_reader(Box::new(s))),
        child.stderr.take().map(|s| tail_reader(Box::new(s))),
    ];
    // A limit past what an `Instant` can hold means no deadline, not a panic.
    let deadline = Instant::now().checked_add(limit);
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if deadline.is_some_and(|deadline| Instant::now() >= deadline) => {
                kill_group(child.id());
                let _ = child.kill();
                let _ = child.wait();
                anyhow::bail!(
                    "{what} ran past its limit of {} s and was stopped",
                    limit.as_secs()
                );
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(err) => return Err(err).with_context(|| format!("waiting for {what}")),
        }
    };
    // What the child left running would keep the pipes open, and the readers waiting.
    kill_group(child.id());
    let [stdout, stderr] =
        readers.map(|r| r.map_or_else(Vec::new, |h| h.join().unwrap_or_default()));
    Ok(Finished {
        status,
        stdout,
        stderr,
    })
}

/// A thread reading `stream` to its end and returning its last [`KEPT_BYTES`].
fn tail_reader(mut stream: Box<dyn Read + Send>) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut kept = Vec::new();
        let mut buffer = vec![0u8; 64 * 1024];
        while let Ok(n) = stream.read(&mut buffer) {
            if n == 0 {
                break;
            }
            kept.extend_from_slice(&buffer[..n]);
            if kept.len() > 2 * KEPT_BYTES {
                kept.drain(..kept.len() - KEPT_BYTES);
            }
        }
        if kept.len() > KEPT_BYTES {
            kept.drain(..kept.len() - KEPT_BYTES);
        }
        kept
    })
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;

    fn shell(script: &str) -> Command {
        let mut command = Command::new("sh");
        command.args(["-c", script]);
        command
    }

    #[test]
    fn a_hanging_child_is_stopped_at_its_limit() {
        let start = Instant::now();
        let err = run(
            &mut shell("sleep 30"),
            Duration::from_millis(300),
            "the sleeper",
        )
        .unwrap_err();
        assert!(
            format!("{err:#}").contains("the sleeper ran past its limit"),
            "{err:#}"
        );
        assert!(start.elapsed() < Duration::from_secs(10));
    }

    #[test]
    fn what_a_child_leaves_running_ends_with_it_and_cannot_hold_the_run() {
        // The child exits at once; its background sleeper keeps both pipes open for 30 s.
        let dir = tempfile::tempdir().unwrap();
        let pid_file = dir.path().join("pid");
        let script = format!("sleep 30 & echo $! > '{}'; echo done", pid_file.display());
        let start = Instant::now();
        let out = run(&mut shell(&script), Duration::from_secs(60), "the parent").unwrap();
        assert!(start.elapsed() < Duration::from_secs(10));
        assert!(out.status.success());
        assert!(out.stdout.ends_with(b"done\n"));
        let pid = std::fs::read_to_string(&pid_file).unwrap();
        // Killed: gone, or a zombie where nothing reaps orphans (PID 1 of some containers).
        // SIGKILL is delivered asynchronously: kill(2) returns while the target may still be
        // scheduled (state R), so the test waits a bounded while for it to die; a sleeper
        // that was never signalled would still sleep (state S) for 30 s.
        let dead =
            |stat: &std::io::Result<String>| stat.as_ref().map_or(true, |s| s.contains(") Z "));
        let waited = Instant::now();
        let mut stat = std::fs::read_to_string(format!("/proc/{}/stat", pid.trim()));
        while !dead(&stat) && waited.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(10));
            stat = std::fs::read_to_string(format!("/proc/{}/stat", pid.trim()));
        }
        assert!(dead(&stat), "the sleeper still runs: {stat:?}");
    }

    #[test]
    fn only_the_tail_of_a_flood_is_kept_and_the_last_line_survives() {
        // 8 MiB of output, then the line a peer would print last.
        let out = run(
            &mut shell("head -c 8388608 /dev/zero | tr '\\0' x; echo; echo LAST"),
            Duration::from_secs(60),
            "the flood",
        )
        .unwrap();
        assert!(out.status.success());
        assert!(out.stdout.len() <= KEPT_BYTES);
        assert!(out.stdout.ends_with(b"\nLAST\n"));
    }

    #[test]
    fn a_limit_past_what_an_instant_holds_means_no_deadline() {
        let out = run(&mut shell("echo ok"), Duration::MAX, "the unbounded").unwrap();
        assert!(out.status.success());
        assert_eq!(out.stdout, b"ok\n");
    }

    #[test]
    fn a_child_that_cannot_start_is_named() {
        let err = run(
            &mut Command::new("/nonexistent/python"),
            Duration::from_secs(1),
            "the probe",
        )
        .unwrap_err();
        assert!(
            format!("{err:#}").contains("cannot start the probe"),
            "{err:#}"
        );
    }
}
