"""quench.bench.run, quench.doctor and python -m quench: a suite run from Python agrees with the
command line's, its report kept in an output folder, Ctrl-C between variants, the refusals."""

import _thread
import json
import pathlib
import subprocess
import sys
import threading

import pytest

import quench
from quench import bench

ROOT = pathlib.Path(__file__).resolve().parents[3]
# The device-agreement suite: every workload at tiny sizes, seconds on a CPU. Its workloads'
# files are named relative to the repository's root, the folder a suite runs in.
SUITE = ROOT / "configs" / "devices.toml"


@pytest.fixture
def in_root(monkeypatch):
    monkeypatch.chdir(ROOT)


def qualities(report):
    return {
        (w["name"], v["name"]): v["quality"]["value"]
        for w in report["workloads"]
        for v in w["variants"]
    }


def test_a_suite_from_python_equals_the_command_line_run_bit_for_bit(in_root, tmp_path):
    only = ["qrng-gan", "sgld"]
    variants = ["all", "fused-step"]
    report = bench.run(
        SUITE, device="cpu", only=only, variants=variants, repeats=1, out=tmp_path / "py"
    )
    assert report["status"] == "complete"
    assert [w["name"] for w in report["workloads"]] == only
    assert [[v["name"] for v in w["variants"]] for w in report["workloads"]] == [
        ["all"], ["fused-step"]
    ]
    for workload in report["workloads"]:
        assert workload["failed"] == [] and workload["variants"]
        for variant in workload["variants"]:
            assert variant["per_iteration_s"]["median"] > 0.0
    # What it wrote is what it returned.
    written = json.loads((tmp_path / "py" / "report.json").read_text())
    assert written["workloads"] == report["workloads"]
    # The command line, through `python -m quench`, in a process of its own.
    done = subprocess.run(
        [sys.executable, "-m", "quench", "run", "--suite", str(SUITE), "--only", ",".join(only),
         "--variants", ",".join(variants), "--device", "cpu", "--repeats", "1", "--out", str(tmp_path / "cli")],
        capture_output=True, text=True, timeout=600,
    )
    assert done.returncode == 0, done.stderr
    cli = json.loads((tmp_path / "cli" / "report.json").read_text())
    assert qualities(cli) == qualities(report)
    assert "sgld/fused-step: started" in done.stderr


def test_ctrl_c_stops_after_the_variant_in_flight_keeping_what_finished(in_root, tmp_path):
    # Every workload, five repeats each: seconds of work, stopped half a second in.
    timer = threading.Timer(0.5, _thread.interrupt_main)
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt) as stopped:
            bench.run(SUITE, device="cpu", repeats=5, out=tmp_path)
    finally:
        timer.cancel()
    report = stopped.value.report
    assert report["status"] == "interrupted"
    finished = sum(len(w["variants"]) for w in report["workloads"])
    assert finished < 7
    assert json.loads((tmp_path / "report.json").read_text())["status"] == "interrupted"


@pytest.mark.parametrize(
    "arguments, message",
    [
        ({"suite": "no-such-suite.toml"}, "no-such-suite.toml"),
        ({"suite": SUITE, "only": ["no-such-workload"]}, "no-such-workload"),
        ({"suite": SUITE, "device": "tpu"}, "device"),
        ({"suite": SUITE, "repeats": 0}, "repeats"),
        ({"suite": SUITE, "precision": "f99"}, "f99"),
        ({"suite": SUITE, "only": [3]}, "only"),
        ({"suite": SUITE, "only": 5}, "only"),
        ({"suite": SUITE, "variants": ["no-such-variant"]}, "no-such-variant"),
        ({"suite": SUITE, "variants": [1]}, "variants"),
        ({"suite": SUITE, "only": "qrng-gan", "variants": "fused-step"}, "`fused-step`"),
        ({"suite": SUITE, "only": ["qrng-gan", "sgld"], "variants": "all"}, "`sgld` would run none"),
        ({"suite": SUITE, "variants": []}, "variants"),
        ({"suite": SUITE, "repeats": 10**30}, "repeats"),
        ({"suite": SUITE, "repeats": 2**31}, "repeats"),
        ({"suite": SUITE, "out": ""}, "out"),
        ({"suite": SUITE, "peers": True, "python": "/nonexistent/python"}, "/nonexistent/python"),
    ],
)
def test_bad_requests_are_value_errors_naming_what_is_wrong(in_root, arguments, message):
    with pytest.raises(ValueError, match=message):
        bench.run(**{"device": "cpu", **arguments})


def test_variants_leave_out_the_rest_of_a_workloads_variants(in_root, tmp_path):
    suite = tmp_path / "gan.toml"
    suite.write_text(
        "[timing]\nwarmup = 0\nrepeats = 1\n\n"
        "[workloads.qrng-gan]\ntournament = { epochs = 2, bits = 4 }\n"
    )
    every = bench.run(suite, device="cpu")
    assert [v["name"] for v in every["workloads"][0]["variants"]] == ["baseline", "batched", "all"]
    narrowed = bench.run(suite, device="cpu", variants="all")
    assert [v["name"] for v in narrowed["workloads"][0]["variants"]] == ["all"]


def test_an_output_folder_that_is_a_file_is_refused_before_any_work(in_root, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    with pytest.raises(ValueError, match="a-file"):
        bench.run(SUITE, device="cpu", only="sgld", out=blocker)
    assert blocker.read_text() == "not a folder"


def test_doctor_measures_the_cpu():
    found = quench.doctor("cpu")
    assert set(found) == {"machine", "figures", "precisions", "text"}
    assert found["figures"]["matmul"], found["figures"]
    assert all(f["gflops"] > 0.0 for f in found["figures"]["matmul"]), found["figures"]
    assert dict(found["precisions"])["f32"] is None
    assert "host gemm" in found["text"]


def test_doctor_refuses_a_malformed_device():
    with pytest.raises(ValueError, match="device"):
        quench.doctor("tpu")


def test_python_m_quench_is_the_command_line():
    listed = subprocess.run(
        [sys.executable, "-m", "quench", "list"], capture_output=True, text=True, timeout=120
    )
    assert listed.returncode == 0, listed.stderr
    assert "qrng-gan" in listed.stdout and "temporal-transformer" in listed.stdout
    wrong = subprocess.run(
        [sys.executable, "-m", "quench", "--no-such-option"],
        capture_output=True, text=True, timeout=120,
    )
    assert wrong.returncode == 2
    assert "--no-such-option" in wrong.stderr and "Traceback" not in wrong.stderr
