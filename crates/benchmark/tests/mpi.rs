//! `mpirun -n 2 benchmark run` (`--features mpi`, Open MPI's `mpirun` on `PATH`): the sgld
//! workload's chains split over two ranks give the one-process report's qualities and
//! verdicts, with each rank's share and time.
#![cfg(feature = "mpi")]

use std::path::Path;
use std::process::{Command, Stdio};

fn report(dir: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join("report.json")).unwrap()).unwrap()
}

fn run(launcher: Option<&str>, out: &Path) {
    let bin = env!("CARGO_BIN_EXE_benchmark");
    let mut cmd = match launcher {
        Some(n) => {
            let mut c = Command::new("mpirun");
            c.args(["--oversubscribe", "-n", n, bin]);
            c
        }
        None => Command::new(bin),
    };
    let out = cmd
        .args([
            "run",
            "--only",
            "sgld",
            "--repeats",
            "1",
            "--device",
            "cpu",
            "--out",
        ])
        .arg(out)
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn two_ranks_report_the_one_process_qualities_with_each_ranks_share() {
    let dir = tempfile::tempdir().unwrap();
    let (alone, ranked) = (dir.path().join("alone"), dir.path().join("ranked"));
    run(None, &alone);
    run(Some("2"), &ranked);
    let variants =
        |r: &serde_json::Value| r["workloads"][0]["variants"].as_array().unwrap().clone();
    let (a, b) = (variants(&report(&alone)), variants(&report(&ranked)));
    assert_eq!(a.len(), b.len());
    for (a, b) in a.iter().zip(&b) {
        assert_eq!(a["name"], b["name"]);
        let (qa, qb) = (&a["quality"]["value"], &b["quality"]["value"]);
        assert!(
            (qa.as_f64().unwrap() - qb.as_f64().unwrap()).abs() < 1e-12,
            "{}: {qa} alone, {qb} over two ranks",
            a["name"]
        );
        assert_eq!(a["parity"], b["parity"], "{}", a["name"]);
        assert!(a.get("ranks").is_none(), "{a}");
        let ranks = b["ranks"].as_array().unwrap();
        assert_eq!(ranks.len(), 2, "{b}");
        assert_eq!(
            ranks[0]["members"].as_u64().unwrap() + ranks[1]["members"].as_u64().unwrap(),
            6
        );
    }
}
