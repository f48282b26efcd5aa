//! PyTorch peers: the programs in `peers/`, written from the workload specs, that do a
//! workload the way a user would without Quench. `benchmark run --peers` runs each suite
//! workload's peer at the suite's size on the same device and adds its row, and every
//! variant's ratio against it, to the report; `benchmark peers` runs the peers alone.
//!
//! A peer prints one JSON line ([`PeerReport`]'s timing and quality fields). Quench does not
//! need Python: when none with `torch` is found the run says so, says how to install it, and
//! goes on without peers.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::Context as _;
use quench_device::TimingConfig;
use quench_kernels::SelectedDevice;
use quench_support::files::in_working_folder_or_source_tree;
use serde::{Deserialize, Serialize};

/// Where the peers live, relative to the working folder or the source tree.
const PEERS: &str = "peers";

/// A Python that imports `torch`.
#[derive(Debug, Clone, PartialEq)]
pub struct Python {
    /// The interpreter as it was found (a path or a name on `PATH`).
    pub path: PathBuf,
    /// `torch.__version__`.
    pub torch: String,
    /// How long one peer may run before it is stopped and recorded as failed.
    pub peer_timeout: Duration,
}

/// How long one peer may run unless `--peer-timeout` says otherwise: the quick suite's peers
/// take seconds to a minute each, the full suite's baselines some minutes.
pub const DEFAULT_PEER_TIMEOUT: Duration = Duration::from_secs(900);

/// The longest `--peer-timeout`, in seconds: a week, far above any peer's run (the full SYNTH
/// SGLD grid one chain at a time takes about three hours in PyTorch) and far below the
/// seconds an `Instant` can be moved by.
pub const MAX_PEER_TIMEOUT_S: u64 = 7 * 24 * 3600;

/// How long the probe for torch may take: importing torch takes seconds, a first import after
/// installing it up to a minute.
const PROBE_TIMEOUT: Duration = Duration::from_secs(120);

/// A workload's peer at the suite's size: the script in `peers/` and its arguments.
#[derive(Debug, Clone, PartialEq)]
pub struct Peer {
    /// The script's file name in `peers/`.
    pub script: &'static str,
    /// Its arguments (the device and the timing are added by [`run_peer`]).
    pub args: Vec<String>,
    /// A count of timed runs the peer always makes, whatever the run asks (`--repeats`
    /// included): a peer one of whose runs takes minutes (lindblad-meta's RK4 meta-iteration,
    /// once); `None` takes the run's.
    pub repeats: Option<usize>,
}

/// What a peer measured, as its JSON line gives it, with the Python that ran it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PeerReport {
    /// The interpreter.
    #[serde(default)]
    pub python: String,
    /// `torch.__version__`.
    pub torch: String,
    /// The device it ran on (`cpu`, `cuda`, `cuda:N`).
    pub device: String,
    /// Seconds per iteration, in [`iteration_unit`](Self::iteration_unit).
    pub per_iteration_s: f64,
    /// The workload's own unit; a ratio is only taken against a variant of the same unit.
    pub iteration_unit: String,
    /// The quality metric's name, as the workload reports it.
    pub quality_metric: String,
    /// Its value.
    pub quality: f64,
}

/// How to get a Python with torch, for the message that says none was found.
pub const INSTALL_HINT: &str = "install PyTorch into a Python (`python3 -m venv .venv && \
     .venv/bin/pip install torch`) and pass `--python .venv/bin/python`, or set QUENCH_PYTHON";

/// The first of `explicit`, `$QUENCH_PYTHON`, `python3` and `python` that imports torch and
/// prints a version of it (a program that exits 0 without one, such as `/bin/true`, is not a
/// Python with torch); each probe is stopped after two minutes, or `peer_timeout` if that is
/// shorter. The error says what was tried and why each failed.
pub fn find_python(explicit: Option<&Path>, peer_timeout: Duration) -> Result<Python, String> {
    let candidates: Vec<PathBuf> = match explicit {
        Some(path) => vec![path.to_path_buf()],
        None => std::env::var_os("QUENCH_PYTHON")
            .map(PathBuf::from)
            .into_iter()
            .chain(["python3", "python"].map(PathBuf::from))
            .collect(),
    };
    let mut tried = Vec::new();
    for path in candidates {
        let what = format!("{} -c 'import torch'", path.display());
        let probe = crate::child::run(
            Command::new(&path).args(["-c", "import torch; print(torch.__version__)"]),
            PROBE_TIMEOUT.min(peer_timeout),
            &what,
        );
        match probe {
            Ok(out) if out.status.success() => {
                let printed = String::from_utf8_lossy(&out.stdout);
                let torch = printed.lines().last().unwrap_or("").trim().to_string();
                if is_version(&torch) {
                    return Ok(Python {
                        path,
                        torch,
                        peer_timeout,
                    });
                }
                tried.push(format!(
                    "{}: printed no torch version (`{}`)",
                    path.display(),
                    torch.chars().take(40).collect::<String>()
                ));
            }
            Ok(out) => {
                let why = String::from_utf8_lossy(&out.stderr);
                let last = why.lines().last().unwrap_or("exited with an error");
                tried.push(format!("{}: {last}", path.display()));
            }
            Err(err) => tried.push(crate::error_line::one_line(&err)),
        }
    }
    Err(format!(
        "no Python with torch found ({}); {INSTALL_HINT}",
        tried.join("; ")
    ))
}

/// Whether `text` reads as a version, as `torch.__version__` does (`2.11.0+cu130`): a digit,
/// then digits, dots and a local suffix.
fn is_version(text: &str) -> bool {
    text.starts_with(|c: char| c.is_ascii_digit())
        && text.contains('.')
        && text.len() <= 64
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || ".+-_".contains(c))
}

/// Runs `peer` with `python` on `device`, with the suite's warm-up and the suite's (or the
/// workload's own) count of timed runs, and reads its JSON line.
pub fn run_peer(
    python: &Python,
    peer: &Peer,
    device: &str,
    timing: TimingConfig,
) -> anyhow::Result<PeerReport> {
    let script = in_working_folder_or_source_tree(&Path::new(PEERS).join(peer.script));
    let repeats = peer.repeats.unwrap_or(timing.repeats).max(1);
    let out = crate::child::run(
        Command::new(&python.path)
            .arg(&script)
            .args(&peer.args)
            .args(["--device", device])
            .args(["--warmup", &timing.warmup.to_string()])
            .args(["--repeats", &repeats.to_string()]),
        python.peer_timeout,
        &format!("peer {} (--peer-timeout)", script.display()),
    )?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        anyhow::bail!(
            "peer {} failed ({}): {}",
            script.display(),
            out.status,
            stderr.lines().last().unwrap_or("no message")
        );
    }
    let mut report =
        parse_line(&stdout).with_context(|| format!("peer {}: its output", script.display()))?;
    report.python = python.path.display().to_string();
    Ok(report)
}

/// The last line of `stdout` that is a JSON object, as a [`PeerReport`]; a non-finite or
/// non-positive time is refused.
pub fn parse_line(stdout: &str) -> anyhow::Result<PeerReport> {
    let line = stdout
        .lines()
        .rev()
        .find(|l| l.trim_start().starts_with('{'))
        .context("no JSON line")?;
    let report: PeerReport = serde_json::from_str(line).with_context(|| format!("`{line}`"))?;
    if !(report.per_iteration_s > 0.0 && report.per_iteration_s.is_finite()) {
        anyhow::bail!(
            "per_iteration_s = {}: must be positive and finite",
            report.per_iteration_s
        );
    }
    if !report.quality.is_finite() {
        anyhow::bail!("quality = {}: not a finite number", report.quality);
    }
    Ok(report)
}

/// The device name a peer understands for Quench's device (`cpu`, `cuda:N`): PyTorch has
/// no wgpu device, so a wgpu run's peer runs on the CPU (and the report says so).
pub fn peer_device(device: SelectedDevice) -> String {
    match device {
        SelectedDevice::Cuda(index) => format!("cuda:{index}"),
        SelectedDevice::Cpu | SelectedDevice::Wgpu(_) => "cpu".into(),
    }
}

/// Why a workload has no peer figure.
#[derive(Debug, Clone, PartialEq)]
pub enum NoFigure {
    /// No peer is written for this workload or its data (the `device` workload's, synthetic
    /// qRNG sources): nothing failed.
    NoPeer,
    /// There is a peer, and it could not run (no Python with torch, inputs that could not be
    /// written) or failed: why.
    Failed(String),
}

impl std::fmt::Display for NoFigure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::NoPeer => f.write_str("no PyTorch peer for this workload or its data"),
            Self::Failed(why) => f.write_str(why),
        }
    }
}

/// Runs the workload's peer if there is a Python to run it (`python`: what [`find_python`]
/// found, or why it found none) and a peer (`peer`: [`Workload::peer`], called only when
/// there is a Python, since it may write the peer's inputs): the report, or why there is none.
///
/// [`Workload::peer`]: crate::workload::Workload::peer
pub fn measure(
    python: Result<&Python, &str>,
    peer: impl FnOnce() -> anyhow::Result<Option<Peer>>,
    device: &str,
    timing: TimingConfig,
) -> Result<PeerReport, NoFigure> {
    let failed = |e: &anyhow::Error| NoFigure::Failed(crate::error_line::one_line(e));
    let python = python.map_err(|why| NoFigure::Failed(why.to_string()))?;
    let peer = peer().map_err(|e| failed(&e))?.ok_or(NoFigure::NoPeer)?;
    run_peer(python, &peer, device, timing).map_err(|e| failed(&e))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A stand-in Python: a shell script that answers the torch probe, and for a peer keeps its
    /// arguments in `args` beside itself and prints `line`.
    pub(crate) fn fake_python(dir: &Path, line: &str) -> Python {
        let path = dir.join("python");
        let script = format!(
            "#!/bin/sh\nif [ \"$1\" = -c ]; then echo 9.9.9; exit 0; fi\n\
             [ -f \"$1\" ] || {{ echo \"cannot open $1\" >&2; exit 2; }}\n\
             shift; echo \"$@\" > \"$(dirname \"$0\")/args\"\n\
             echo 'warming up'\necho '{line}'\n"
        );
        std::fs::write(&path, script).unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        find_python(Some(&path), DEFAULT_PEER_TIMEOUT).unwrap()
    }

    pub(crate) const LINE: &str = r#"{"workload": "qrng-gan", "variant": "pytorch", "per_iteration_s": 0.05, "iteration_unit": "epoch (all matches)", "quality_metric": "mean final KL(p_real || g)", "quality": 0.125, "torch": "9.9.9", "device": "cpu"}"#;

    #[test]
    fn a_fake_python_is_found_run_and_parsed() {
        let dir = tempfile::tempdir().unwrap();
        let python = fake_python(dir.path(), LINE);
        assert_eq!(python.torch, "9.9.9");
        let peer = Peer {
            script: "qrng_gan.py",
            args: vec!["--epochs".into(), "3".into()],
            repeats: None,
        };
        let timing = TimingConfig {
            warmup: 2,
            repeats: 5,
        };
        let args = || std::fs::read_to_string(dir.path().join("args")).unwrap();
        let report = run_peer(&python, &peer, "cpu", timing).unwrap();
        assert_eq!(
            args().trim(),
            "--epochs 3 --device cpu --warmup 2 --repeats 5"
        );
        let own = Peer {
            repeats: Some(1),
            ..peer
        };
        run_peer(&python, &own, "cuda:1", timing).unwrap();
        assert_eq!(
            args().trim(),
            "--epochs 3 --device cuda:1 --warmup 2 --repeats 1"
        );
        assert_eq!(report.per_iteration_s, 0.05);
        assert_eq!(report.iteration_unit, "epoch (all matches)");
        assert_eq!(report.python, python.path.display().to_string());
    }

    #[test]
    fn a_missing_python_and_bad_lines_are_clear_errors() {
        let err =
            find_python(Some(Path::new("/nonexistent/python")), DEFAULT_PEER_TIMEOUT).unwrap_err();
        assert!(
            err.contains("/nonexistent/python") && err.contains("pip install torch"),
            "{err}"
        );
        assert!(
            measure(
                Err("no Python"),
                || unreachable!(),
                "cpu",
                TimingConfig::default()
            )
            .unwrap_err()
            .to_string()
            .contains("no Python")
        );
        let dir = tempfile::tempdir().unwrap();
        let python = fake_python(dir.path(), LINE);
        let measured = |peer: anyhow::Result<Option<Peer>>| {
            measure(Ok(&python), || peer, "cpu", TimingConfig::default()).unwrap_err()
        };
        assert_eq!(measured(Ok(None)), NoFigure::NoPeer);
        let unwritable = measured(Err(anyhow::anyhow!("cannot write /x/rows.npy")));
        assert!(
            matches!(&unwritable, NoFigure::Failed(why) if why.contains("/x/rows.npy")),
            "{unwritable}"
        );
        for (bad, why) in [
            ("nothing here", "no JSON line"),
            ("{\"per_iteration_s\": 1}", "missing field"),
            (&LINE.replace("0.05", "-1.0"), "per_iteration_s = -1"),
            (&LINE.replace("0.125", "NaN"), "NaN"),
        ] {
            let err = format!("{:#}", parse_line(bad).unwrap_err());
            assert!(err.contains(why), "{bad}: {err}");
        }
    }

    #[cfg(unix)]
    #[test]
    fn a_program_without_torch_and_a_hanging_peer_are_refused() {
        // `/bin/true` exits 0 and prints nothing: no torch version.
        let err = find_python(Some(Path::new("/bin/true")), DEFAULT_PEER_TIMEOUT).unwrap_err();
        assert!(err.contains("printed no torch version"), "{err}");
        // A peer that never ends is stopped at the timeout, and the run can go on.
        let dir = tempfile::tempdir().unwrap();
        let python = Python {
            peer_timeout: Duration::from_millis(300),
            ..fake_python(dir.path(), LINE)
        };
        std::fs::write(
            &python.path,
            "#!/bin/sh\nif [ \"$1\" = -c ]; then echo 9.9.9; exit 0; fi\nexec sleep 60\n",
        )
        .unwrap();
        let peer = Peer {
            script: "qrng_gan.py",
            args: Vec::new(),
            repeats: None,
        };
        let start = std::time::Instant::now();
        let err = measure(
            Ok(&python),
            || Ok(Some(peer)),
            "cpu",
            TimingConfig::default(),
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("ran past its limit") && err.contains("--peer-timeout"),
            "{err}"
        );
        assert!(start.elapsed() < Duration::from_secs(30));
    }

    #[test]
    fn versions_are_told_from_other_output() {
        for good in ["2.11.0+cu130", "9.9.9", "2.5.1"] {
            assert!(is_version(good), "{good}");
        }
        for bad in ["", "hello", "Traceback", "2", "import torch"] {
            assert!(!is_version(bad), "{bad}");
        }
    }
}
