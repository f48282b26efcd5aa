"""The shared conversion of arguments (quench._convert) as every module meets it: integers,
arrays too large to copy, masked arrays, configs JSON cannot hold, paths that are not UTF-8."""

import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from quench import _convert, bench, circuit, hybrid, lindblad, meta, qrng, sgld, temporal

X = np.array([[0, 1], [1, 0]], dtype=complex)
Z = np.array([[1, 0], [0, -1]], dtype=complex)
SM = np.array([[0, 1], [0, 0]], dtype=complex)
RHO = np.array([[1, 0], [0, 0]], dtype=complex)
BELL = [{"gate": "h", "wires": [0]}, {"gate": "cnot", "wires": [0, 1]}]
# A path as Python gives it for a file name that is not UTF-8 (os.fsdecode's escapes).
NOT_UTF8 = os.fsdecode(b"/tmp/x\xff.toml")


def refused(error, start, fn, *args, **kwargs):
    with pytest.raises(error) as info:
        fn(*args, **kwargs)
    assert str(info.value).startswith(start), str(info.value)
    return str(info.value)


# --- integers (pairs, repeats) -----------------------------------------------------------


@pytest.mark.parametrize(
    "pairs, start",
    [
        ([(-1, 0)], "pairs[0] = (-1, 0): a whole number of at least 0, not -1"),
        ([(0, 1), (0, 2**64)], "pairs[1] = (0, 18446744073709551616): 18446744073709551616 does not fit"),
        ([(0.7, 1.2)], "pairs[0] = (0.7, 1.2): a whole number, not float 0.7"),
        ([("0", "1")], "pairs[0] = ('0', '1'): a whole number, not str '0'"),
        ([(True, 0)], "pairs[0] = (True, 0): a whole number, not bool True"),
        ([(0, np.float64(1.0))], "pairs[0] = (0, np.float64(1.0)): a whole number, not float64"),
        ([(0, 1, 2)], "pairs[0]: expected a pair (i, j) of wires, found (0, 1, 2)"),
        ([0], "pairs[0]: expected a pair (i, j) of wires, found 0"),
        (3, "pairs: expected a list of (i, j) wire pairs, not int"),
        ("01", "pairs: expected a list of (i, j) wire pairs, not str"),
    ],
)
def test_pairs_are_whole_numbers_named_with_their_entry(pairs, start):
    refused(ValueError, start, circuit.run, 2, BELL, pairs=pairs, device="cpu")


def test_pairs_take_numpy_integers_and_rows():
    want = circuit.run(2, BELL, pairs=[(0, 1)], device="cpu").zz
    for pairs in ([(np.int64(0), np.uint8(1))], np.array([[0, 1]]), [[0, 1]]):
        np.testing.assert_array_equal(circuit.run(2, BELL, pairs=pairs, device="cpu").zz, want)


def test_a_huge_integer_is_named_not_written_out():
    # Python will not write an int of more than 4,300 digits as text: the message counts them.
    refused(ValueError, "t_total: an integer of 5001 digits", lindblad.evolve,
            lindblad.System(Z), RHO, np.zeros((1, 1, 0)), np.zeros((1, 0)), 10**5000)
    message = refused(ValueError, "pairs[0] = (0, an integer of 5001 digits)",
                      circuit.run, 2, BELL, pairs=[(0, 10**5000)], device="cpu")
    assert len(message) < 200, message


@pytest.mark.parametrize("repeats", [0, -1, 1.0, "1", True, np.bool_(True), np.float64(1), 2**63])
def test_bench_repeats_are_whole_numbers(repeats):
    with pytest.raises(ValueError, match="^repeats: "):
        bench.run("no-such-suite.toml", device="cpu", repeats=repeats)


def test_bench_takes_numpy_integer_repeats(tmp_path):
    suite = tmp_path / "gan.toml"
    suite.write_text("[timing]\nwarmup = 0\nrepeats = 3\n\n"
                     "[workloads.qrng-gan]\ntournament = { epochs = 2, bits = 4 }\n")
    report = bench.run(suite, device="cpu", variants="all", repeats=np.int64(1))
    assert report["status"] == "complete"
    assert report["timing"]["repeats"] == 1, report["timing"]


@pytest.mark.parametrize("peers", ["no", 0, 1, None, np.float64(1)])
def test_bench_peers_is_a_bool_not_anything_truthy(peers):
    with pytest.raises(ValueError, match="^peers: "):
        bench.run("no-such-suite.toml", device="cpu", peers=peers)


def test_configs_take_numpy_integers():
    # Encoded as the Python ints they are: the refusal is the unknown setting's, not JSON's.
    with pytest.raises(ValueError, match="no_such_setting"):
        qrng.classify({"seeds": [np.int64(1)], "max_epochs": np.int32(1), "no_such_setting": 1},
                      device="cpu")


# --- arrays ------------------------------------------------------------------------------


def test_huge_broadcast_arrays_are_refused_by_shape_before_any_copy():
    system = lindblad.System(Z, [X], [SM])
    huge = np.broadcast_to(np.zeros(1), (10**6, 10**6, 1))
    message = refused(ValueError, "amplitudes: shape [1000000, 1000000, 1] as float64 needs about ",
                      lindblad.evolve, system, RHO, huge, np.broadcast_to(np.zeros(1), (10**6, 1)), 1.0)
    assert "in host memory" in message, message
    refused(ValueError, "rates: shape [1000000, 1000000] as float64 needs about ", lindblad.evolve, system,
            RHO, np.zeros((1, 1, 1)), np.broadcast_to(np.zeros(1), (10**6, 10**6)), 1.0)
    refused(ValueError, "drift: shape [1000000, 1000000] as complex128 needs about ", lindblad.System,
            np.broadcast_to(np.zeros(1), (10**6, 10**6)))
    refused(ValueError, "inputs: shape [1000000, 1000000] as float64 needs about ", circuit.run, 1,
            [{"gate": "ry", "wires": [0], "angle": {"input": 0}}],
            inputs=np.broadcast_to(np.zeros(1), (10**6, 10**6)), device="cpu")


def test_the_host_check_counts_this_copy_and_the_native_one(monkeypatch):
    asked = []

    def check(what, needed):
        # The native rule, with a host of 1,000 bytes.
        asked.append(needed)
        if needed > 1000:
            raise ValueError(f"{what} needs about {needed} bytes, more than the 1000 bytes")

    monkeypatch.setattr(_convert._native, "check_host_memory", check)
    monkeypatch.setattr(_convert, "_CHECKED_FROM", 0)
    system = lindblad.System(Z, [X], [])
    # 60 contiguous float64s: 480 bytes, copied once (by the native call).
    assert lindblad.evolve(system, RHO, np.zeros((20, 3, 1)), np.zeros((20, 0)), 1.0).shape == (20, 2, 2)
    assert 480 in asked, asked
    # The same numbers as int64: converted here, then copied again: 960 bytes.
    lindblad.evolve(system, RHO, np.zeros((20, 3, 1), dtype=np.int64), np.zeros((20, 0)), 1.0)
    assert 960 in asked, asked
    # 75 elements converted and copied: 1,200 bytes, refused naming the argument and shape.
    refused(ValueError, "amplitudes: shape [25, 3, 1] as float64 needs about 1200 bytes",
            lindblad.evolve, system, RHO, np.zeros((25, 3, 1), dtype=np.int64),
            np.zeros((25, 0)), 1.0)


def test_a_copy_that_cannot_be_allocated_names_the_argument(monkeypatch):
    # Memory gone between the check and the copy: numpy's own refusal, named.
    def no_memory(*args, **kwargs):
        raise MemoryError("Unable to allocate")

    monkeypatch.setattr(_convert.np, "require", no_memory)
    refused(ValueError, "inputs: shape [2, 1] as float64 needs more host memory than there is",
            circuit.run, 1, [{"gate": "ry", "wires": [0], "angle": {"input": 0}}],
            inputs=np.zeros((2, 1)), device="cpu")


def test_masked_arrays_are_refused_naming_the_argument():
    masked = np.ma.masked_array(Z, mask=[[False, True], [False, False]])
    refused(TypeError, "drift: a masked array", lindblad.System, masked)
    refused(TypeError, "controls[0]: a masked array", lindblad.System, Z, [np.ma.masked_array(X)])
    refused(TypeError, "amplitudes: a masked array", lindblad.evolve, lindblad.System(Z, [X]),
            RHO, np.ma.zeros((1, 1, 1)), np.zeros((1, 0)), 1.0)
    refused(TypeError, "inputs: a masked array", circuit.run, 1,
            [{"gate": "ry", "wires": [0], "angle": {"input": 0}}],
            inputs=np.ma.masked_array(np.zeros((2, 1)), mask=True), device="cpu")


def test_fidelity_without_a_target_is_refused():
    args = (lindblad.System(Z, [X]), RHO, np.zeros((1, 1, 1)), np.zeros((1, 0)), 1.0)
    refused(ValueError, "target: ", lindblad.fidelity_and_grad, *args, None)
    refused(ValueError, "target: ", lindblad.fidelity_and_grad, *args, target=None)


# --- configs as JSON ---------------------------------------------------------------------


def nested(depth):
    value = {}
    for _ in range(depth):
        value = {"a": value}
    return value


@pytest.mark.parametrize(
    "call, start",
    [
        (lambda deep: sgld.run_grid(deep, device="cpu"), "config: nested too deeply"),
        (lambda deep: meta.train(deep, device="cpu"), "config: nested too deeply"),
        (lambda deep: qrng.classify({}, data=deep, device="cpu"), "data: nested too deeply"),
        (lambda deep: hybrid.train(deep, device="cpu"), "config: nested too deeply"),
        (lambda deep: temporal.train("mlp", data=deep, device="cpu"), "data: nested too deeply"),
        (lambda deep: circuit.expectations(1, [[deep]], device="cpu"),
         "circuits: cannot be written as gate dicts: nested too deeply"),
        (lambda deep: circuit.run(1, [deep], device="cpu"),
         "gates: cannot be written as gate dicts: nested too deeply"),
    ],
)
def test_configs_nested_too_deeply_for_json_are_named(call, start):
    refused(ValueError, start, call, nested(100_000))


# --- paths that are not UTF-8 ------------------------------------------------------------


@pytest.mark.parametrize(
    "call, name",
    [
        (lambda p: qrng.classify(p, device="cpu"), "config"),
        (lambda p: qrng.tournament(pathlib.Path(p), device="cpu"), "config"),
        (lambda p: sgld.run_grid(p, device="cpu"), "config"),
        (lambda p: meta.train(p, device="cpu"), "config"),
        (lambda p: hybrid.train(p, device="cpu"), "config"),
        (lambda p: temporal.train("mlp", p, device="cpu"), "config"),
        (lambda p: qrng.classify({}, data=p, device="cpu"), "data"),
        (lambda p: qrng.classify({}, data={"source": "recorded", "path": p}, device="cpu"),
         "data: path"),
        (lambda p: temporal.train("mlp", data={"files": ["a.csv", pathlib.Path(p)]}, device="cpu"),
         "data: files[1]"),
        (lambda p: hybrid.train(data={"backbone_weights": p}, device="cpu"),
         "data: backbone_weights"),
        (lambda p: sgld.run_grid({}, device=p), "device"),
        (lambda p: bench.run(None, only=["sgld", p], device="cpu"), "only[1]"),
        (lambda p: bench.run(None, precision=p, device="cpu"), "precision"),
        (lambda p: temporal.train(p, device="cpu"), "model"),
        (lambda p: lindblad.evolve(lindblad.System(Z), RHO, np.zeros((1, 1, 0)),
                                   np.zeros((1, 0)), 1.0, method=p), "method"),
    ],
)
def test_text_that_is_not_utf8_is_refused_naming_the_argument(call, name):
    message = refused(ValueError, f"{name}: b'/tmp/x\\xff.toml' is not valid UTF-8", call, NOT_UTF8)
    assert "surrogate" not in message, message


def test_python_m_quench_takes_a_file_name_that_is_not_utf8(tmp_path):
    # A qRNG recording whose name is not UTF-8: validated as the binary validates it.
    name = os.path.join(os.fsencode(tmp_path), b"bits\xff.txt")
    with open(name, "w") as f:
        f.write("".join(f"{'01' * 50} {1 + i % 3}\n" for i in range(30)))
    done = subprocess.run([sys.executable, "-m", "quench", "data", name],
                          capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert b"30" in done.stdout, done.stdout
