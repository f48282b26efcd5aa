//! Scale-out under a real MPI launcher (`--features mpi`, Open MPI's `mpirun` on `PATH`): the
//! workloads' examples (quench-sgld's `sgld_grid`, quench-meta's `meta_train`) run as two ranks
//! give the one-process results, and a failing rank stops the run with its name instead of
//! leaving the others waiting. The examples are built by the workspace's test build with the
//! feature (`cargo test --workspace --release --features quench-scale/mpi`).
#![cfg(feature = "mpi")]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// An example built beside this test with the `mpi` feature (`cargo build --release -p
/// quench-sgld -p quench-meta --features quench-scale/mpi --examples`: `cargo test -p
/// quench-scale --test mpi` alone does not build them).
fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let profile = exe.parent().and_then(Path::parent).unwrap();
    let path = profile.join("examples").join(name);
    assert!(path.is_file(), "{} is not built", path.display());
    path
}

fn config(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../configs")
        .join(name)
}

/// `mpirun` with what a two-core CI container needs: more ranks than cores, and root.
fn mpirun() -> Command {
    let mut cmd = Command::new("mpirun");
    cmd.arg("--oversubscribe")
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
    cmd
}

/// Runs `cmd` to completion or fails the test after `limit`: a hang is a failure, not a
/// stuck CI job.
fn finish(mut cmd: Command, limit: Duration) -> Output {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("cannot start mpirun (is Open MPI installed?)");
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > limit {
            child.kill().ok();
            panic!("still running after {limit:?}: a rank is waiting for one that failed");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn two_ranks_run_the_sgld_grid_as_one_process_does() {
    let dir = tempfile::tempdir().unwrap();
    let grid = config("sgld/synth-test.toml");
    let (alone, ranked) = (
        dir.path().join("alone.json"),
        dir.path().join("ranked.json"),
    );
    let mut one = Command::new(example("sgld_grid"));
    one.arg(&grid).arg("--chains").arg(&alone);
    let out = finish(one, Duration::from_secs(120));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let mut two = mpirun();
    two.args(["-n", "2"])
        .arg(example("sgld_grid"))
        .arg(&grid)
        .arg("--chains")
        .arg(&ranked);
    let out = finish(two, Duration::from_secs(120));
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    assert!(
        stdout.contains("over 2 ranks") && stdout.contains("rank 1: 3 chains"),
        "{stdout}"
    );
    assert_eq!(
        std::fs::read_to_string(&ranked).unwrap(),
        std::fs::read_to_string(&alone).unwrap(),
        "the ranks' chains differ from the one-process run"
    );
}

#[test]
fn a_failing_rank_stops_the_run_and_names_itself() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-mnist-here");
    let bad = dir.path().join("bad.toml");
    let text_of = std::fs::read_to_string(config("sgld/mnist-test.toml")).unwrap();
    std::fs::write(
        &bad,
        text_of.replace("[mnist]", &format!("[mnist]\ndir = {:?}", missing)),
    )
    .unwrap();
    // Rank 0 gets a good grid and waits for rank 1 in the gather; rank 1 cannot read its data.
    let mut cmd = mpirun();
    cmd.args(["-n", "1"])
        .arg(example("sgld_grid"))
        .arg(config("sgld/synth-test.toml"))
        .args([":", "-n", "1"])
        .arg(example("sgld_grid"))
        .arg(&bad);
    let out = finish(cmd, Duration::from_secs(120));
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("rank 1 of 2")
            && stderr.contains("chains (beta index, repetition)")
            && stderr.contains("no-mnist-here"),
        "{stderr}"
    );
}

/// `configs/lindblad/exact.toml` cut to `iterations` meta-iterations of `tasks` tasks, in
/// `dir`.
fn meta_config(dir: &Path, name: &str, tasks: usize, iterations: usize) -> PathBuf {
    let text = std::fs::read_to_string(config("lindblad/exact.toml"))
        .unwrap()
        .replace("iterations = 200", &format!("iterations = {iterations}"))
        .replace(
            "tasks_per_batch = 16",
            &format!("tasks_per_batch = {tasks}"),
        )
        .replace("val_interval = 10", "val_interval = 2");
    assert!(
        text.contains(&format!("tasks_per_batch = {tasks}")),
        "{text}"
    );
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

fn history(dir: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join("history.json")).unwrap()).unwrap()
}

/// The `key` of every record of `list` in a history.
fn series(history: &serde_json::Value, list: &str, key: &[&str]) -> Vec<f64> {
    history[list]
        .as_array()
        .unwrap()
        .iter()
        .map(|record| {
            key.iter()
                .fold(record, |v, k| &v[*k])
                .as_f64()
                .unwrap_or(f64::NAN)
        })
        .collect()
}

#[test]
fn two_ranks_of_n_tasks_train_as_one_process_of_2n() {
    let dir = tempfile::tempdir().unwrap();
    let (alone, ranked) = (dir.path().join("alone"), dir.path().join("ranked"));
    let mut one = Command::new(example("meta_train"));
    one.arg(meta_config(dir.path(), "eight.toml", 8, 4))
        .arg(&alone);
    let out = finish(one, Duration::from_secs(300));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let mut two = mpirun();
    two.args(["-n", "2"])
        .arg(example("meta_train"))
        .arg(meta_config(dir.path(), "four.toml", 4, 4))
        .arg(&ranked);
    let out = finish(two, Duration::from_secs(300));
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    assert!(
        stdout.contains("2 ranks x 4 tasks") && stdout.contains("all-reduce"),
        "{stdout}"
    );
    let (a, b) = (history(&alone), history(&ranked));
    for (list, key) in [
        ("iterations", &["loss_before"][..]),
        ("iterations", &["loss_after"]),
        ("iterations", &["skipped_tasks"]),
        ("validations", &["after", "squared_overlap", "mean"]),
        ("validations", &["before", "state", "mean"]),
    ] {
        let (x, y) = (series(&a, list, key), series(&b, list, key));
        assert_eq!(x.len(), y.len(), "{list} {key:?}");
        assert!(!x.is_empty());
        for (x, y) in x.iter().zip(&y) {
            assert!(
                (x - y).abs() <= 1e-5 * x.abs().max(1.0),
                "{list} {key:?}: one process {x}, two ranks {y}"
            );
        }
    }
}
