//! The command line as a user meets it, against the release binary: a run's output fits 100
//! columns and carries no escape codes when it goes to a file, the global options are taken
//! before or after the command, and misplaced or bad options are refused by name.

mod common;

use common::{benchmark, run_suite};

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A small suite: the tournament (no training), and the SGLD grid's baseline against `all`
/// (a larger batch, so a verdict with a footnote where its quality falls short).
const SUITE: &str = "[timing]\nwarmup = 0\nrepeats = 1\n\n\
    [workloads.qrng-distinguish]\ndata = { source = \"synthetic\", synthetic_lines = 300 }\n\n\
    [workloads.sgld]\nvariants = [\"baseline\", \"all\"]\nconfig = \"configs/sgld/synth-test.toml\"\n";

#[test]
fn a_run_into_a_file_fits_100_columns_without_escape_codes() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("suite.toml"), SUITE).unwrap();
    // Global options before the command, run's own after it.
    let out = benchmark(
        &[
            "--device",
            "cpu",
            "--out",
            "out",
            "run",
            "--suite",
            "suite.toml",
        ],
        dir.path(),
    );
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stdout}\n{stderr}");
    for line in stdout.lines().chain(stderr.lines()) {
        assert!(line.chars().count() <= 100, "over 100 columns: {line}");
        assert!(!line.contains('\u{1b}'), "escape code in: {line:?}");
    }
    assert!(stdout.contains("sgld: time per grid epoch"), "{stdout}");
    assert!(dir.path().join("out/report.json").is_file());
    // Every verdict other than parity points to a footnote that gives its reason.
    for (i, _) in stdout
        .match_indices("WORSE [")
        .chain(stdout.match_indices("not judged ["))
    {
        let number = &stdout[i..]
            .split('[')
            .nth(1)
            .unwrap()
            .split(']')
            .next()
            .unwrap();
        assert!(stdout.contains(&format!("  [{number}] ")), "{stdout}");
    }
    let wide = run_suite(dir.path(), &["--wide"]);
    assert!(wide.status.success(), "{}", text(&wide.stderr));
    assert!(
        text(&wide.stdout).contains("per iteration"),
        "{}",
        text(&wide.stdout)
    );
}

#[test]
fn options_are_refused_by_name_where_they_cannot_apply() {
    let dir = tempfile::tempdir().unwrap();
    let bad_device = benchmark(&["--device", "tpu", "doctor"], dir.path());
    let stderr = text(&bad_device.stderr);
    assert_eq!(bad_device.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("tpu") && stderr.contains("--device"),
        "{stderr}"
    );
    let misplaced = benchmark(&["--suite", "x.toml", "doctor"], dir.path());
    let stderr = text(&misplaced.stderr);
    assert_eq!(misplaced.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("`doctor`") && stderr.contains("after `run`"),
        "{stderr}"
    );
    let bad_precision = benchmark(&["verify", "--precision", "f8"], dir.path());
    let stderr = text(&bad_precision.stderr);
    assert_eq!(bad_precision.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("f8"), "{stderr}");
}
