"""Every error path: ValueError naming the argument, RuntimeError for devices and panics."""

import subprocess
import sys

import numpy as np
import pytest

import quench
from quench import circuit, lindblad

X = np.array([[0, 1], [1, 0]], dtype=complex)
Z = np.array([[1, 0], [0, -1]], dtype=complex)
SM = np.array([[0, 1], [0, 0]], dtype=complex)
RHO = np.array([[1, 0], [0, 0]], dtype=complex)


@pytest.fixture
def system():
    return lindblad.System(Z, [X], [SM])


def run(system, **changes):
    args = dict(
        rho0=RHO,
        amplitudes=np.zeros((2, 3, 1)),
        rates=np.zeros((2, 1)),
        t_total=1.0,
    )
    args.update(changes)
    return lindblad.evolve(system, **args)


def raises(match, fn, *args, **kwargs):
    with pytest.raises(ValueError) as info:
        fn(*args, **kwargs)
    assert str(info.value).startswith(match), str(info.value)
    return str(info.value)


def test_system_errors_name_the_operator():
    raises("drift: expected a square", lindblad.System, np.zeros((2, 3)), [], [])
    raises("drift: expected a square", lindblad.System, np.zeros(2), [], [])
    # A scalar is shown as the scalar it is, not as a one-element vector.
    message = raises("drift: expected a square", lindblad.System, np.float64(1.0), [], [])
    assert "found shape []" in message, message
    raises("controls[0]: expected a 2 x 2 matrix", lindblad.System, Z, [np.eye(3)], [])
    raises("jumps[1]: expected a 2 x 2 matrix", lindblad.System, Z, [], [SM, np.eye(4)])
    message = raises("drift: not Hermitian", lindblad.System, SM, [], [])
    assert "largest |A_ij - conj(A_ji)| is 1e0" in message
    raises("controls[1]: not Hermitian", lindblad.System, Z, [X, 1j * X], [])
    raises("drift: entry (0, 0) is NaN", lindblad.System, np.array([[np.nan, 0], [0, 0]]), [], [])
    raises("drift: expected numbers", lindblad.System, [["a", "b"], ["c", "d"]], [], [])
    raises("controls[0]: cannot be read as an array", lindblad.System, Z, [[[1, 0], [0]]], [])
    raises("controls: expected a list", lindblad.System, Z, 3, [])
    # Jump operators need not be Hermitian.
    assert lindblad.System(Z, [], [SM]).jumps == 1


def test_rounding_is_not_mistaken_for_non_hermiticity():
    h = np.kron(X, Z) + 1e-15 * np.random.default_rng(0).normal(size=(4, 4))
    assert lindblad.System(h, [], []).dim == 4


def test_shapes_and_dtypes_are_named(system):
    raises("amplitudes: expected shape [tasks, segments, 1]", run, system, amplitudes=np.zeros((2, 3, 2)))
    raises("amplitudes: expected shape", run, system, amplitudes=np.zeros((2, 3)))
    raises("amplitudes: expected real numbers, found complex", run, system, amplitudes=np.zeros((2, 3, 1), complex))
    raises("amplitudes: expected numbers", run, system, amplitudes=np.full((2, 3, 1), "x"))
    raises("rates: expected shape [2, 1]", run, system, rates=np.zeros((3, 1)))
    raises("rho0: expected shape [2, 2] or [2, 2, 2]", run, system, rho0=np.eye(3) / 3)
    raises("rho0: expected shape", run, system, rho0=np.stack([RHO] * 3))
    raises("t_total: expected a real number", run, system, t_total="1")
    raises("system: expected a quench.lindblad.System", lindblad.evolve, "nope", RHO, np.zeros((1, 1, 1)), np.zeros((1, 1)), 1.0)


def test_values_are_named(system):
    nan = np.zeros((2, 3, 1))
    nan[1, 2, 0] = np.nan
    raises("amplitudes[1, 2, 0]: NaN is not finite", run, system, amplitudes=nan)
    raises("rates[1, 0]: rate -0.1 must be finite in f32 and non-negative", run, system, rates=np.array([[0.0], [-0.1]]))
    raises("t_total = -1: must be positive and finite", run, system, t_total=-1.0)
    raises("t_total = NaN", run, system, t_total=float("nan"))
    raises("method: expected \"exact\", \"rk4\" or \"euler\", found \"leapfrog\"", run, system, method="leapfrog")
    raises("dt: missing", run, system, method="rk4")
    raises("dt = -0.1", run, system, method="rk4", dt=-0.1)
    raises("dt = 1e-9: rk4 would take", run, system, method="rk4", dt=1e-9)


def test_states_are_checked(system):
    raises("rho0: trace is 2, expected 1", run, system, rho0=2 * RHO)
    raises("rho0: not Hermitian", run, system, rho0=np.array([[0.5, 0.5], [0, 0.5]]))
    raises("rho0: not positive semidefinite", run, system, rho0=np.array([[2, 0], [0, -1]]))
    raises("rho0: entry (0, 0) is NaN", run, system, rho0=np.array([[np.nan, 0], [0, 1]]))
    batch = np.stack([RHO, 2 * RHO])
    raises("rho0[1]: trace is 2", run, system, rho0=batch)
    args = (system, RHO, np.zeros((1, 1, 1)), np.zeros((1, 1)), 1.0)
    raises("target: not a pure state", lindblad.fidelity_and_grad, *args, np.eye(2) / 2)
    raises("target: trace is 4", lindblad.fidelity_and_grad, *args, np.array([2, 0]))
    raises("target: expected a state vector [2]", lindblad.fidelity_and_grad, *args, np.ones(3))


def test_an_unphysical_result_is_refused(system):
    # Euler at dt = 0.5 under a drive of 3: each step multiplies by 1 + dt L, whose eigenvalues
    # leave the unit disc, and the state gains a negative eigenvalue: refused as the pulse
    # documents refuse it (quench_lindblad::states::check_result), not handed back.
    message = raises(
        "task 0: the final state is not physical",
        run,
        system,
        amplitudes=np.full((2, 3, 1), 3.0),
        method="euler",
        dt=0.5,
    )
    assert "(try a smaller dt)" in message and "the exact method has none" in message


def test_sizes_are_refused_before_any_allocation():
    # A failed allocation aborts the interpreter: sizes are estimated first.
    raises("drift: 33 is more than 32", lindblad.System, np.eye(33), [], [])
    free = lindblad.System(Z, [], [])
    # No controls and no jumps: numpy holds 10^12 tasks in zero bytes.
    message = raises(
        "amplitudes: 1000000000000 tasks of dimension 2",
        lindblad.evolve,
        free,
        RHO,
        np.zeros((10**12, 1, 0)),
        np.zeros((10**12, 0)),
        1.0,
    )
    assert "host memory" in message


def test_extreme_numbers_are_named(system):
    raises("t_total: an integer of 401 digits", run, system, t_total=10**400)
    # 1e308 is infinite in the solver's f32: the element is named (on the host, before any
    # upload), not a `control_bound = inf` the caller never set.
    message = raises("amplitudes[0, 0, 0]: 1e308 is not finite in f32", run, system,
                     amplitudes=np.full((2, 3, 1), 1e308))
    assert "control_bound" not in message, message
    raises("rates[1, 0]: rate 1e39 must be finite in f32", run, system,
           rates=np.array([[0.0], [1e39]]))
    # Finite in f32 but too large for any accurate exponential: the exact solver's check.
    message = raises("amplitudes: a pulse of 1e0 over 3 segments", run, system,
                     amplitudes=np.full((2, 3, 1), 1e30))
    assert "no accurate digit" in message, message
    # A drift no exact propagator survives is the system's, not the pulse's length.
    huge = lindblad.System(np.full((2, 2), 1e15), [np.array([[0, 1], [1, 0]])],
                           [np.array([[0, 1], [0, 0]])])
    message = raises("drift: a pulse of 1e0", run, huge)
    assert "from the drift" in message, message


def test_devices_are_parsed_and_opened(system):
    raises("device: invalid device `gpu9`", run, system, device="gpu9")
    raises("device: invalid device `cuda:x`", run, system, device="cuda:x")
    raises("device: expected a string", run, system, device=0)
    raises("device: invalid device", circuit.expectations, 1, [[]], device="tpu")
    assert run(system, device="CPU").shape == (2, 2, 2)
    if not any(d.startswith("cuda") for d in quench.devices()):
        # Well-formed but not available in this build or on this machine: the device failed.
        with pytest.raises(RuntimeError, match="cuda"):
            run(system, device="cuda:0")


def test_circuit_errors_name_circuit_and_gate():
    raises('circuit 0, gate 1: unknown gate "foo"', circuit.expectations, 1, [[{"gate": "h", "wires": [0]}, {"gate": "foo", "wires": [0]}]])
    raises("circuit 1: gate 0 (x): wire 3 out of range for 2 qubits", circuit.expectations, 2, [[], [{"gate": "x", "wires": [3]}]])
    raises("circuit 0: qubits = 0: must be between 1 and 30", circuit.expectations, 0, [[]])
    raises("qubits: missing or not a non-negative integer", circuit.expectations, -1, [[]])
    raises("circuits: empty", circuit.expectations, 1, [])
    raises("circuits: cannot be written as gate dicts", circuit.expectations, 1, [[{"gate": "rx", "wires": [0], "angle": float("nan")}]])
    raises("circuits: cannot be written as gate dicts", circuit.expectations, 1, [[{"gate": "rx", "wires": [0], "angle": object()}]])


def test_a_panic_becomes_a_runtime_error():
    with pytest.raises(RuntimeError, match="a Rust panic"):
        quench._panic_for_test()
    # `except Exception` catches it (pyo3's own PanicException would escape it) ...
    try:
        quench._panic_for_test()
    except Exception as error:
        assert isinstance(error, RuntimeError)
    # ... and the interpreter carries on.
    assert "cpu" in quench.devices()


def test_a_panic_leaves_a_fresh_interpreter_running():
    code = (
        "import quench\n"
        "try:\n    quench._panic_for_test()\nexcept RuntimeError:\n    print('caught')\n"
        "print(quench.devices())\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == "caught"


def test_a_device_that_is_not_a_string_is_a_value_error_everywhere():
    import quench
    from quench import bench, hybrid, qrng, sgld, temporal

    calls = [
        lambda d: quench.doctor(d),
        lambda d: bench.run("configs/devices.toml", device=d, only="sgld"),
        lambda d: qrng.classify({}, device=d),
        lambda d: qrng.tournament({}, device=d),
        lambda d: temporal.train("mlp", device=d),
        lambda d: hybrid.train(device=d),
        lambda d: sgld.run_grid({}, device=d),
    ]
    for call in calls:
        for device in (None, 3):
            with pytest.raises(ValueError, match="device"):
                call(device)


def test_training_runs_too_large_for_the_host_are_refused_before_any_work():
    from quench import hybrid, qrng

    seeds = list(range(10**6))
    with pytest.raises(ValueError, match="memory"):
        qrng.classify({"max_epochs": 1, "seeds": seeds},
                      data={"source": "synthetic", "synthetic_lines": 60}, device="cpu")
    with pytest.raises(ValueError, match="memory"):
        hybrid.train({"seeds": seeds, "epochs": 1, "batch_size": 32},
                     data={"train_samples": 64, "validation_samples": 32, "test_samples": 32,
                           "calibration_images": 32}, device="cpu")


def test_a_step_given_to_the_exact_method_is_still_checked(system):
    for dt in (float("nan"), -5.0):
        raises("dt = ", run, system, method="exact", dt=dt)
    assert run(system, method="exact", dt=0.01).shape == (2, 2, 2)


def test_the_work_limit_is_set_from_python_as_its_refusal_says():
    from quench import meta

    settings = {"iterations": 1, "tasks_per_batch": 2, "inner_steps": 1, "val_tasks": 2}
    before = quench.set_max_hours(1e-9)
    try:
        with pytest.raises(ValueError, match="quench.set_max_hours") as refused:
            meta.train(settings, device="cpu")
        assert "would take at least" in str(refused.value)
    finally:
        assert quench.set_max_hours(before) == 1e-9
    for bad in (0, -1.0, float("nan"), float("inf"), "24"):
        with pytest.raises(ValueError, match="^hours"):
            quench.set_max_hours(bad)
