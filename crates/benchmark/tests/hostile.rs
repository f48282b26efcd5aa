//! Hostile input against the release binary, from files the tests write: every case ends in a
//! clear error naming what is wrong (exit 1), never a panic (101), a hang or a result.

use std::path::Path;
use std::process::Output;

mod common;

use common::benchmark;

/// `benchmark run` of `dir/suite.toml` on the CPU into `dir/out`.
fn run_suite(dir: &Path) -> Output {
    common::run_suite(dir, &[])
}

/// Asserts exit status 1 (an error, not a panic) with every one of `words` in stderr.
fn refused(out: &Output, words: &[&str]) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    for word in words {
        assert!(stderr.contains(word), "`{word}` not in: {stderr}");
    }
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    use std::io::Write as _;
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    encoder.write_all(bytes).unwrap();
    encoder.finish().unwrap()
}

#[test]
fn bad_data_files_are_refused_by_what_is_wrong() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, bytes: &[u8]| {
        std::fs::write(dir.path().join(name), bytes).unwrap();
        name.to_string()
    };
    // An IDX header with a broken magic number: binary, so not guessed as bit strings.
    let magic = write("magic-idx1-ubyte", &[1, 0, 8, 1, 0, 0, 0, 1, 7]);
    refused(
        &benchmark(&["data", &magic], dir.path()),
        &["magic-idx1-ubyte", "01 00 08 01", "--format"],
    );
    // A gzip IDX declaring one byte that inflates to 16 MiB more.
    let mut bomb = vec![0, 0, 8, 1, 0, 0, 0, 1, 7];
    bomb.resize(bomb.len() + (16 << 20), 0);
    let bomb = write("bomb-idx1-ubyte.gz", &gzip(&bomb));
    refused(
        &benchmark(&["data", &bomb], dir.path()),
        &["bomb-idx1-ubyte.gz"],
    );
    // Market bars without --format: text is guessed as bit strings, and the refusal says how
    // to read bars.
    let bars = write(
        "EURUSD.csv",
        b"time,open,high,low,close\n1,1.1,1.2,1.0,1.1\n",
    );
    refused(
        &benchmark(&["data", &bars], dir.path()),
        &[
            "EURUSD.csv",
            "line 1",
            "guessed from its text",
            "--format ohlcv",
        ],
    );
    // Labels in a non-canonical form.
    for (name, label) in [("plus.txt", "+1"), ("zeros.txt", "0001")] {
        let file = write(name, format!("0101 1\n1010 {label}\n").as_bytes());
        refused(
            &benchmark(&["data", &file], dir.path()),
            &[name, "line 2", label],
        );
    }
}

#[test]
fn market_files_that_would_train_on_nan_or_fill_memory_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let header = "time,open,high,low,close,tick_volume,spread,real_volume\n";
    let bar = |i: usize, spread: &str| {
        format!(
            "{},1.1,1.2,1.0,1.1,10,{spread},0\n",
            1_577_836_800 + 900 * i
        )
    };
    // A spread beyond f32's range: its feature is infinite, and normalised it would be NaN.
    let bars: String = (0..600)
        .map(|i| bar(i, if i == 300 { "1e39" } else { "2" }))
        .collect();
    std::fs::write(dir.path().join("SPREAD.csv"), format!("{header}{bars}")).unwrap();
    std::fs::write(
        dir.path().join("suite.toml"),
        "[workloads.temporal-lstm]\nfiles = [\"SPREAD.csv\"]\n",
    )
    .unwrap();
    refused(
        &run_suite(dir.path()),
        &["temporal-lstm", "bar 300", "spread_close is inf"],
    );
    assert!(!dir.path().join("out/report.json").exists(), "nothing ran");
    // One 100 kB line: refused at the line, not read whole and echoed.
    let line = format!("{header}{}\n", "9".repeat(100_000));
    std::fs::write(dir.path().join("LONG.csv"), line).unwrap();
    let out = benchmark(&["data", "LONG.csv", "--format", "ohlcv"], dir.path());
    refused(&out, &["LONG.csv", "line 2", "longer than 4096 bytes"]);
    assert!(
        out.stderr.len() < 400,
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_suite_with_a_missing_file_fails_before_any_work() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("suite.toml"),
        "[workloads.qrng-distinguish]\ndata = { source = \"synthetic\", synthetic_lines = 40 }\n\n\
         [workloads.sgld]\nconfig = \"missing-grid.toml\"\n",
    )
    .unwrap();
    let out = run_suite(dir.path());
    refused(&out, &["missing-grid.toml"]);
    assert!(
        !dir.path().join("out/report.json").exists(),
        "no report: nothing ran"
    );
}

#[test]
fn every_workload_checks_its_parameters_and_files_before_any_work() {
    let dir = tempfile::tempdir().unwrap();
    // Each suite runs a quick first workload, then a later one whose parameters or files are
    // bad: the suite is refused before the first, naming what is wrong.
    let first = "[workloads.qrng-distinguish]\n\
                 data = { source = \"synthetic\", synthetic_lines = 40 }\n\n";
    for (later, words) in [
        (
            "[workloads.temporal-lstm]\nfiles = [\"missing-EURUSD.csv\"]\n",
            &["temporal-lstm", "missing-EURUSD.csv"][..],
        ),
        (
            "[workloads.temporal-mlp]\ntraining = { learning_rate = -1.0 }\n",
            &["temporal-mlp", "learning_rate"][..],
        ),
        (
            "[workloads.hybrid]\nbackbone_weights = \"missing-resnet18.safetensors\"\n",
            &["hybrid", "missing-resnet18.safetensors"][..],
        ),
        (
            "[workloads.hybrid]\ntraining = { epochs = 0 }\n",
            &["hybrid", "epochs"][..],
        ),
        (
            "[workloads.lindblad-meta]\ntasks_per_batch = 0\n",
            &["lindblad-meta", "tasks_per_batch"][..],
        ),
        (
            "[workloads.hybrid]\ntraining = { seeds = [1], epochs = 1, layers = 0 }\n",
            &["hybrid", "layers = 0"][..],
        ),
        (
            "[workloads.hybrid]\ntraining = { patience = 0 }\n",
            &["hybrid", "patience = 0"][..],
        ),
        (
            "[workloads.hybrid]\ntraining = { batch_size = 32 }\n",
            &["hybrid", "training.batch_size", "set by each variant"][..],
        ),
        // Keys each variant sets, which the suite's value would not change.
        (
            "[workloads.qrng-gan]\ntournament = { fused = false }\n",
            &["qrng-gan", "tournament.fused", "set by each variant"][..],
        ),
        (
            "[workloads.temporal-mlp]\ntraining = { batch_size = 8 }\n",
            &["temporal-mlp", "training.batch_size", "set by each variant"][..],
        ),
        // Settings the chosen source or files do not use.
        (
            "[workloads.qrng-gan]\ndata = { source = \"synthetic\", path = \"mine.txt\" }\n",
            &[
                "qrng-gan",
                "data.path = mine.txt",
                "not used by this `data.source`",
            ][..],
        ),
        (
            "[workloads.qrng-classifier]\ndata = { synthetic_lines = 40 }\n",
            &["qrng-classifier", "data.synthetic_lines = 40", "not used"][..],
        ),
        (
            "[workloads.temporal-lstm]\nfiles = [\"a.csv\"]\nmarket = { symbols = 3 }\n",
            &["temporal-lstm", "market = ", "given with `files`"][..],
        ),
        (
            "[workloads.qrng-gan]\ntournament = { seeds = [4, 4] }\n",
            &["qrng-gan", "seeds = 4 (given twice)"][..],
        ),
        // Settings that only met the data when a variant ran.
        (
            "[workloads.qrng-gan]\ntournament = { bits = 0 }\n",
            &["qrng-gan", "bits = 0", "at least 1"][..],
        ),
        (
            "[workloads.qrng-gan]\ndata = { source = \"synthetic\", synthetic_lines = 40 }\n\
             tournament = { bits = 1000 }\n",
            &["qrng-gan", "bits = 1000", "the lines hold only"][..],
        ),
        (
            "[workloads.qrng-classifier]\ntraining = { test_fraction = 0.0 }\n",
            &[
                "qrng-classifier",
                "test_fraction = 0",
                "strictly between 0 and 1",
            ][..],
        ),
        (
            "[workloads.hybrid]\nvariants = [\"all\"]\ntrain_samples = 128\n",
            &[
                "hybrid",
                "variant `all`",
                "batch_size = 256",
                "larger than the training",
            ][..],
        ),
        // Sizes no host holds: refused with the estimate, before anything is allocated.
        (
            "[workloads.hybrid]\ntraining = { layers = 1000000 }\n",
            &["hybrid", "layers = 1000000", "needs about"][..],
        ),
        (
            "[workloads.temporal-mlp]\ntraining = { widths = { mlp = [1000000, 1000000] } }\n",
            &["temporal-mlp", "1000000", "needs about"][..],
        ),
        (
            "[workloads.temporal-lstm]\ntraining = { widths = { lstm_hidden = 1000000 } }\n",
            &["temporal-lstm", "lstm_hidden: 1000000", "needs about"][..],
        ),
        (
            "[workloads.temporal-transformer]\n\
             training = { widths = { feed_forward = 1000000000 } }\n",
            &[
                "temporal-transformer",
                "feed_forward: 1000000000",
                "needs about",
            ][..],
        ),
        (
            "[workloads.temporal-lstm]\nmarket = { symbols = 1000000, bars = 1000000 }\n",
            &[
                "temporal-lstm",
                "1000000 symbols x 1000000 bars",
                "needs about",
            ][..],
        ),
        (
            "[workloads.loader]\nlearning_rate = nan\n",
            &["loader", "learning_rate = NaN"][..],
        ),
        (
            "[workloads.loader]\ntrain_samples = 1000000000\n",
            &["loader", "train_samples = 1000000000", "0 takes them all"][..],
        ),
    ] {
        std::fs::write(dir.path().join("suite.toml"), format!("{first}{later}")).unwrap();
        refused(&run_suite(dir.path()), words);
        assert!(
            !dir.path().join("out/report.json").exists(),
            "{later}: no report, nothing ran"
        );
    }
}

#[test]
fn a_recording_without_one_of_its_sources_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    // Lines of sources 1 and 2 only: a classifier would tell two sources apart and look good.
    let line = |label: u32| format!("{} {label}\n", "01".repeat(50));
    let text: String = (0..20).map(|i| line(1 + i % 2)).collect();
    std::fs::write(dir.path().join("two-sources.txt"), text).unwrap();
    std::fs::write(
        dir.path().join("suite.toml"),
        "[workloads.qrng-classifier]\ndata = { path = \"two-sources.txt\" }\n",
    )
    .unwrap();
    refused(
        &run_suite(dir.path()),
        &["two-sources.txt", "no line has label 3"],
    );
    // Nor a synthetic recording of no line, refused before any variant runs.
    std::fs::write(
        dir.path().join("suite.toml"),
        "[workloads.qrng-gan]
data = { source = \"synthetic\", synthetic_lines = 0 }
",
    )
    .unwrap();
    refused(
        &run_suite(dir.path()),
        &["data.synthetic_lines = 0", "at least one line"],
    );
    assert!(!dir.path().join("out").join("report.json").exists());
}

/// A suite of one quick workload.
const QUICK: &str =
    "[workloads.qrng-distinguish]\ndata = { source = \"synthetic\", synthetic_lines = 40 }\n";

#[test]
fn an_output_folder_in_use_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    std::fs::create_dir(&out).unwrap();
    // This test's own process stands for the run that holds the folder: it holds the OS lock.
    let lock = std::fs::File::create(out.join(".quench-run.lock")).unwrap();
    lock.try_lock().unwrap();
    std::fs::write(out.join(".quench-run.lock"), std::process::id().to_string()).unwrap();
    std::fs::write(dir.path().join("suite.toml"), QUICK).unwrap();
    let run = run_suite(dir.path());
    refused(
        &run,
        &["another benchmark run", &std::process::id().to_string()],
    );
    drop(lock);
}

#[test]
fn a_lock_file_naming_a_live_process_that_holds_no_lock_is_taken_over() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    std::fs::create_dir(&out).unwrap();
    // PID 1 always runs (init, or a container's first process) but holds no lock here.
    std::fs::write(out.join(".quench-run.lock"), "1").unwrap();
    std::fs::write(dir.path().join("suite.toml"), QUICK).unwrap();
    let run = run_suite(dir.path());
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert!(
        !out.join(".quench-run.lock").exists(),
        "the lock goes with the run"
    );
}

/// A command line clap cannot read: one line naming the argument, exit 2 as clap's own.
#[test]
fn a_command_line_that_cannot_be_read_gets_one_line_naming_the_argument() {
    let dir = tempfile::tempdir().unwrap();
    for (args, named) in [
        (&["run", "--repeats", "many"][..], "--repeats"),
        (&["compare", "a.json", "b.json", "--agree", "-1"][..], "-1"),
        (&["run", "--no-such-flag"][..], "--no-such-flag"),
        (&["compare", "a.json"][..], "<B>"),
    ] {
        let out = benchmark(args, dir.path());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert_eq!(stderr.trim_end().lines().count(), 1, "{args:?}: {stderr}");
        assert!(stderr.contains(named), "{args:?}: {stderr}");
    }
}

/// Issue 53, item 5: settings that would make a run endless, refused before any work with
/// the estimate or the limit; an empty SGLD grid file no longer means the full default grid.
#[test]
fn work_that_would_not_end_is_refused_before_any_work() {
    let dir = tempfile::tempdir().unwrap();
    let suite = |text: &str| std::fs::write(dir.path().join("suite.toml"), text).unwrap();
    suite("[workloads.device]\ntiny_ops = 10000000000\n");
    refused(
        &run_suite(dir.path()),
        &["tiny_ops = 10000000000", "must be 1 to 1000000"],
    );
    // 100 meta-iterations of 16 tasks, each adapted 10^8 times: at least 89 hours.
    suite("[workloads.lindblad-meta]\ninner_steps = 100000000\n");
    refused(
        &run_suite(dir.path()),
        &[
            "inner_steps",
            "100000000",
            "would take at least",
            "--max-hours",
        ],
    );
    // A billion quality meta-iterations of the devices suite's four tasks: at least 37 hours,
    // named by the suite's own setting.
    suite(
        "[workloads.lindblad-meta]\ntasks_per_batch = 4\ninner_steps = 3\nquality_iterations = 1000000000\n",
    );
    refused(
        &run_suite(dir.path()),
        &["quality_iterations = 1000000000", "would take at least"],
    );
    // Epoch limits whose early stopping never fires: a billion epochs, at least 1 ms each.
    for (workload, training) in [
        (
            "qrng-classifier",
            "{ max_epochs = 1000000000, seeds = [1] }",
        ),
        (
            "hybrid",
            "{ epochs = 1000000000, patience = 1000000000, seeds = [1] }",
        ),
        (
            "temporal-lstm",
            "{ epochs = 1000000000, patience = 1000000000, seeds = [1] }",
        ),
    ] {
        suite(&format!("[workloads.{workload}]\ntraining = {training}\n"));
        refused(
            &run_suite(dir.path()),
            &["epochs = 1000000000", "would take at least"],
        );
    }
    // The limit itself must be a positive number of hours: a usage error otherwise.
    let out = common::run_suite(dir.path(), &["--max-hours", "0"]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::write(dir.path().join("grid.toml"), "# nothing set\n").unwrap();
    suite("[workloads.sgld]\nconfig = \"grid.toml\"\n");
    refused(&run_suite(dir.path()), &["grid.toml", "names no setting"]);
    assert!(
        !dir.path().join("out").join("report.json").exists(),
        "refused before the first workload ran"
    );
}

#[test]
fn sizes_beyond_memory_and_counts_beyond_the_limit_are_refused_before_any_work() {
    let dir = tempfile::tempdir().unwrap();
    let suite = |text: &str| std::fs::write(dir.path().join("suite.toml"), text).unwrap();
    let first = "[workloads.qrng-distinguish]\n\
                 data = { source = \"synthetic\", synthetic_lines = 40 }\n\n";
    // Each of these aborted the process (exit 134) with the report left `running`.
    suite(first);
    refused(
        &common::run_suite(dir.path(), &["--repeats", "4294967296"]),
        &["--repeats = 4294967296", "at most 1000000"],
    );
    suite(&format!(
        "[timing]\nwarmup = 0\nrepeats = 4294967296\n\n{first}"
    ));
    refused(
        &run_suite(dir.path()),
        &["suite.toml: [timing] repeats = 4294967296"],
    );
    // 2^40 MiB and 2^40 products of 1024 x 1024: beyond any host's memory or address space.
    suite(&format!(
        "{first}[workloads.device]\ncopy_mib = 1099511627776\n"
    ));
    refused(
        &run_suite(dir.path()),
        &["device", "copy_mib = 1099511627776", "host memory"],
    );
    suite(&format!(
        "{first}[workloads.device]\nmatmul_batches = [1, 1, 1, 1099511627776]\n"
    ));
    refused(
        &run_suite(dir.path()),
        &[
            "matmul_batches[3] = 1099511627776 (n = 1024)",
            "host memory",
        ],
    );
    // Zero sizes timed nothing and printed infinite rates; a million loader threads failed
    // with an error naming no setting.
    for (table, words) in [
        ("[workloads.device]\ncopy_mib = 0\n", "copy_mib = 0"),
        (
            "[workloads.device]\nmatmul_batches = [16, 0, 1, 1]\n",
            "matmul_batches[1] = 0",
        ),
        (
            "[workloads.loader]\nworkers = 1000000\n",
            "workers = 1000000",
        ),
    ] {
        suite(&format!("{first}{table}"));
        refused(&run_suite(dir.path()), &[words, "must be"]);
    }
    suite(&format!(
        "{first}[workloads.lindblad-meta]\ntasks_per_batch = 100000000\n"
    ));
    refused(
        &run_suite(dir.path()),
        &[
            "lindblad-meta",
            "tasks_per_batch",
            "100000000",
            "host memory",
        ],
    );
    std::fs::write(
        dir.path().join("grid.toml"),
        "betas = [0.0, 1.0]\nepochs = [1, 1]\na0 = [0.1, 0.1]\nhidden = 1000000000000\n",
    )
    .unwrap();
    suite(&format!(
        "{first}[workloads.sgld]\nconfig = \"grid.toml\"\n"
    ));
    refused(
        &run_suite(dir.path()),
        &[
            "grid.toml",
            "repetitions, hidden, synth.train",
            "host memory",
        ],
    );
    assert!(
        !dir.path().join("out").join("report.json").exists(),
        "refused before the first workload ran"
    );
}

#[test]
fn a_suite_with_nothing_to_run_is_an_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("suite.toml"),
        "[workloads.qrng-distinguish]\nvariants = []\n",
    )
    .unwrap();
    refused(&run_suite(dir.path()), &["suite.toml", "nothing to run"]);
    assert!(
        !dir.path().join("out").exists(),
        "a refused run leaves no empty output folder"
    );
}

#[cfg(unix)]
#[test]
fn a_fifo_for_a_suite_is_refused_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = std::ffi::CString::new(dir.path().join("suite.toml").to_str().unwrap()).unwrap();
    // SAFETY: mkfifo(3) with a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
    let start = std::time::Instant::now();
    refused(
        &run_suite(dir.path()),
        &["suite.toml", "not a regular file"],
    );
    assert!(start.elapsed() < std::time::Duration::from_secs(30));
}

#[cfg(unix)]
#[test]
fn every_stopping_signal_keeps_the_report_interrupted_and_gives_the_folder_back() {
    for (signal, name) in [
        (libc::SIGTERM, "SIGTERM"),
        (libc::SIGHUP, "SIGHUP"),
        (libc::SIGQUIT, "SIGQUIT"),
        (libc::SIGUSR1, "SIGUSR1"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        // A GAN tournament of many epochs: still running when the signal comes.
        std::fs::write(
            dir.path().join("suite.toml"),
            "[workloads.qrng-gan]\ntournament = { epochs = 100000, seeds = [42] }\n",
        )
        .unwrap();
        let mut child = common::run_suite_command(dir.path(), &[])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let report = dir.path().join("out").join("report.json");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while !report.exists() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        assert!(report.exists(), "the run wrote no report");
        // SAFETY: kill(2) of the child this test spawned and has not reaped.
        assert_eq!(unsafe { libc::kill(child.id() as libc::pid_t, signal) }, 0);
        let status = child.wait().unwrap();
        assert_eq!(status.code(), Some(128 + signal), "{name}");
        let kept: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
        assert_eq!(kept["status"], "interrupted", "{name}");
        assert_eq!(kept["stopped_by"], name);
        assert!(!dir.path().join("out/.quench-run.lock").exists(), "{name}");
    }
}

#[test]
fn compare_refuses_a_reference_that_did_not_measure_what_it_judges() {
    let dir = tempfile::tempdir().unwrap();
    // A workload with a quality metric, at a size that takes a second.
    std::fs::write(
        dir.path().join("suite.toml"),
        "[workloads.qrng-gan]\ntournament = { epochs = 2, seeds = [42] }\nvariants = [\"all\"]\n",
    )
    .unwrap();
    let run = run_suite(dir.path());
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let good = std::fs::read_to_string(dir.path().join("out/report.json")).unwrap();
    let agree = |a: &str, b: &str| benchmark(&["compare", a, b, "--agree", "0.05"], dir.path());
    assert!(agree("out/report.json", "out/report.json").status.success());
    let value: serde_json::Value = serde_json::from_str(&good).unwrap();
    let mutated = |name: &str, change: &dyn Fn(&mut serde_json::Value)| {
        let mut v = value.clone();
        change(&mut v);
        std::fs::write(dir.path().join(name), serde_json::to_string(&v).unwrap()).unwrap();
        name.to_string()
    };
    let cases: Vec<(String, &str)> = vec![
        (
            mutated("failed.json", &|v| {
                v["status"] = "failed".into();
                v["workloads"] = serde_json::json!([]);
            }),
            "A is not a complete run",
        ),
        (
            mutated("running.json", &|v| v["status"] = "running".into()),
            "status is running",
        ),
        (
            mutated("empty.json", &|v| {
                v["workloads"][0]["variants"] = serde_json::json!([])
            }),
            "A ran no variant",
        ),
        (
            mutated("null.json", &|v| {
                v["workloads"][0]["variants"][0]["quality"] = serde_json::Value::Null
            }),
            "A has no quality where B has",
        ),
        (
            mutated("metric.json", &|v| {
                v["workloads"][0]["variants"][0]["quality"]["metric"] = "something else".into();
            }),
            "something else",
        ),
        (
            mutated("direction.json", &|v| {
                let q = &mut v["workloads"][0]["variants"][0]["quality"]["higher_is_better"];
                *q = (!q.as_bool().unwrap()).into();
            }),
            "higher in one report",
        ),
        (
            mutated("schema.json", &|v| v["schema"] = 99.into()),
            "schema 99",
        ),
        (
            mutated("zero.json", &|v| {
                v["workloads"][0]["variants"][0]["per_iteration_s"]["median"] = 0.0.into();
            }),
            "not a positive time",
        ),
        (
            mutated("huge.json", &|v| {
                v["workloads"][0]["variants"][0]["per_run_s"]["median"] = 1e308.into();
                v["workloads"][0]["variants"][0]["per_run_s"]["count"] = 0.into();
            }),
            "per_run_s.count = 0, times of no timed run",
        ),
    ];
    for (reference, why) in cases {
        let out = agree(&reference, "out/report.json");
        let all = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(out.status.code(), Some(1), "{reference}: {all}");
        assert!(all.contains(why), "{reference}: `{why}` not in {all}");
    }
    // A byte-order mark is no reason to refuse a report.
    std::fs::write(dir.path().join("bom.json"), format!("\u{feff}{good}")).unwrap();
    assert!(agree("bom.json", "out/report.json").status.success());
}

#[test]
fn a_peer_timeout_out_of_range_is_a_usage_error() {
    let dir = tempfile::tempdir().unwrap();
    // u64::MAX seconds once overflowed the peer's deadline: a panic after the run.
    for value in ["0", "18446744073709551615"] {
        let out = benchmark(
            &["run", "--device", "cpu", "--peers", "--peer-timeout", value],
            dir.path(),
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(
            stderr.contains("--peer-timeout") && stderr.contains(value),
            "{stderr}"
        );
    }
}

#[cfg(unix)]
#[test]
fn standard_output_that_cannot_be_written_ends_the_command_without_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let list = || {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_benchmark"));
        command.arg("list").current_dir(dir.path());
        command
    };
    // The reader gone before the first line (`benchmark list | head -0`): the status a shell
    // reports for a program SIGPIPE ended, and nothing said.
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let out = list().stdout(writer).output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(141),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // A full disk: an error naming standard output.
    if let Ok(full) = std::fs::OpenOptions::new().write(true).open("/dev/full") {
        let out = list().stdout(full).output().unwrap();
        refused(&out, &["standard output", "No space left"]);
    }
}

/// IDX files of MNIST's layout in `dir`: `train` and `test` images of `rows` x `cols` pixels
/// (labels cycling through the ten classes).
fn mnist_like(dir: &Path, [rows, cols]: [u32; 2], train: u32, test: u32) {
    std::fs::create_dir_all(dir).unwrap();
    for (prefix, count) in [("train", train), ("t10k", test)] {
        let header = |dims: &[u32]| -> Vec<u8> {
            let mut bytes = vec![0, 0, 8, dims.len() as u8];
            dims.iter().for_each(|d| bytes.extend(d.to_be_bytes()));
            bytes
        };
        let mut images = header(&[count, rows, cols]);
        images.resize(images.len() + (count * rows * cols) as usize, 128);
        let mut labels = header(&[count]);
        labels.extend((0..count).map(|i| (i % 10) as u8));
        std::fs::write(dir.join(format!("{prefix}-images-idx3-ubyte")), images).unwrap();
        std::fs::write(dir.join(format!("{prefix}-labels-idx1-ubyte")), labels).unwrap();
    }
}

#[test]
fn image_folders_the_models_cannot_read_are_refused_by_shape_and_size() {
    let dir = tempfile::tempdir().unwrap();
    mnist_like(&dir.path().join("one-pixel"), [1, 1], 200, 200);
    // 784 pixels a sample, but not the 28 x 28 the backbone's convolutions read.
    mnist_like(&dir.path().join("strips"), [16, 49], 200, 200);
    mnist_like(&dir.path().join("no-test"), [28, 28], 200, 0);
    let suites = [
        (
            "loader",
            "[workloads.loader]\ntrain_samples = 0\nvariants = [\"baseline\"]\n",
        ),
        (
            "hybrid",
            "[workloads.hybrid]\nvariants = [\"all\"]\ncalibration_images = 8\nrepeats = 1\n\
             training = { seeds = [1], epochs = 1 }\n",
        ),
    ];
    for (workload, suite) in suites {
        std::fs::write(dir.path().join("suite.toml"), suite).unwrap();
        for (folder, words) in [
            ("one-pixel", ["sample_shape", "[1, 1]", "one-pixel"]),
            ("strips", ["sample_shape", "[16, 49]", "strips"]),
            (
                "no-test",
                ["0 (test images", "at least one image", "no-test"],
            ),
        ] {
            let out = common::run_suite_command(dir.path(), &[])
                .env("QUENCH_MNIST_DIR", dir.path().join(folder))
                .output()
                .unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(
                !stderr.contains("panicked"),
                "{workload} on {folder}: {stderr}"
            );
            refused(&out, &words);
        }
    }
}

#[test]
fn a_variant_listed_twice_by_a_suite_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("suite.toml"),
        "[workloads.qrng-gan]\nvariants = [\"all\", \"baseline\", \"all\"]\n",
    )
    .unwrap();
    refused(&run_suite(dir.path()), &["qrng-gan", "`all` twice"]);
}

#[test]
fn counts_of_zero_are_refused_by_their_setting_not_raised_to_one() {
    let dir = tempfile::tempdir().unwrap();
    for (suite, words) in [
        (
            "[timing]\nrepeats = 0\n[workloads.qrng-gan]\nvariants = [\"all\"]\n",
            &["suite.toml: [timing] repeats = 0"][..],
        ),
        (
            "[workloads.temporal-mlp]\nrepeats = 0\n",
            &["temporal-mlp", "repeats = 0"][..],
        ),
        (
            "[workloads.hybrid]\nrepeats = 100000000000\n",
            &["hybrid", "repeats = 100000000000", "at most"][..],
        ),
        (
            "[workloads.lindblad-meta]\ntimed_iterations = 0\n",
            &["timed_iterations = 0", "at least 1"][..],
        ),
    ] {
        std::fs::write(dir.path().join("suite.toml"), suite).unwrap();
        refused(&run_suite(dir.path()), words);
        assert!(
            !dir.path().join("out").join("report.json").exists(),
            "{suite}: refused before any work"
        );
    }
    let out = common::run_suite(dir.path(), &["--repeats", "0"]);
    refused(&out, &["--repeats = 0"]);
}

// The stand-in Python is a shell script.
#[cfg(unix)]
#[test]
fn peers_that_do_not_run_fail_the_peers_command() {
    let dir = tempfile::tempdir().unwrap();
    // A Python that answers the probe for torch and fails every peer it is asked to run.
    let python = dir.path().join("python");
    std::fs::write(
        &python,
        "#!/bin/sh\nif [ \"$1\" = -c ]; then echo 9.9.9; exit 0; fi\necho broken >&2\nexit 1\n",
    )
    .unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&python, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let peers = |suite: &str| {
        std::fs::write(dir.path().join("suite.toml"), suite).unwrap();
        benchmark(
            &[
                "peers",
                "--suite",
                "suite.toml",
                "--device",
                "cpu",
                "--python",
                python.to_str().unwrap(),
            ],
            dir.path(),
        )
    };
    // The GAN has a peer on the recorded data, and it fails.
    let distinguish = "[workloads.qrng-distinguish]\n\
                       data = { source = \"synthetic\", synthetic_lines = 40 }\n";
    let out = peers(&format!(
        "{distinguish}[workloads.qrng-gan]\ntournament = {{ epochs = 1 }}\n"
    ));
    refused(&out, &["1 PyTorch peer(s) of the 2 workload(s) not run"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("qrng-gan/pytorch not run"), "{stdout}");
    // A workload that has no peer is no failure.
    let out = peers(distinguish);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("no PyTorch peer for this workload"),
        "{stdout}"
    );
}

#[test]
fn a_diverging_loader_training_fails_instead_of_scoring_one_class() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("suite.toml"),
        "[timing]\nwarmup = 0\nrepeats = 1\n\n[workloads.loader]\ntrain_samples = 2000\n\
         learning_rate = 1e30\nvariants = [\"baseline\"]\n",
    )
    .unwrap();
    refused(
        &run_suite(dir.path()),
        &[
            "loader/baseline",
            "the training diverged",
            "lower the learning rate",
        ],
    );
}
