"""quench.lindblad against an independent complex128 numpy reference (and qutip, if present)."""

import numpy as np
import pytest

import quench
from quench import lindblad

import reference

# The solver runs in f32 on the device. Each exact segment propagator is a Taylor polynomial
# and a few squarings, each rounding at f32's epsilon 1.2e-7 times the norms involved (the
# states' entries are at most 1, the propagators' norms about 1 for these generators of norm
# about 1), so a segment adds some 1e-7 * (terms + squarings) ~ 1e-6 and 3-5 segments some
# 1e-6 to 5e-6 per element; the library's own tests measure at most 4.4e-6 on these scales.
# 1e-5 per element is that with a factor of two to spare; the reference is exact to 1e-14.
STATE_TOLERANCE = 1e-5


def random_case(seed, d=None):
    rng = np.random.default_rng(seed)
    d = d or int(rng.integers(2, 5))
    n_controls = int(rng.integers(1, 3))
    n_jumps = int(rng.integers(1, 3))
    tasks = int(rng.integers(2, 4))
    segments = int(rng.integers(3, 6))
    drift = reference.random_hermitian(rng, d, 0.5)
    controls = [reference.random_hermitian(rng, d, 0.5) for _ in range(n_controls)]
    jumps = [
        0.5 * (rng.normal(size=(d, d)) + 1j * rng.normal(size=(d, d))) for _ in range(n_jumps)
    ]
    rho0 = np.stack([reference.random_density(rng, d) for _ in range(tasks)])
    amplitudes = rng.uniform(-1.0, 1.0, size=(tasks, segments, n_controls))
    rates = rng.uniform(0.0, 0.5, size=(tasks, n_jumps))
    return drift, controls, jumps, rho0, amplitudes, rates


@pytest.mark.parametrize("seed", range(6))
def test_evolve_matches_the_numpy_reference(seed):
    drift, controls, jumps, rho0, amplitudes, rates = random_case(seed)
    system = lindblad.System(drift, controls, jumps)
    got = lindblad.evolve(system, rho0, amplitudes, rates, 1.0, device="cpu")
    want = reference.evolve(drift, controls, jumps, rho0, amplitudes, rates, 1.0)
    assert got.dtype == np.complex128 and got.shape == want.shape
    assert np.max(np.abs(got - want)) < STATE_TOLERANCE


def test_one_initial_state_serves_every_task():
    drift, controls, jumps, rho0, amplitudes, rates = random_case(11, d=3)
    system = lindblad.System(drift, controls, jumps)
    got = lindblad.evolve(system, rho0[0], amplitudes, rates, 0.7)
    want = reference.evolve(drift, controls, jumps, rho0[0], amplitudes, rates, 0.7)
    assert got.shape == (amplitudes.shape[0], 3, 3)
    assert np.max(np.abs(got - want)) < STATE_TOLERANCE


@pytest.mark.parametrize("method", ["rk4", "euler"])
def test_steppers_converge_to_the_reference(method):
    drift, controls, jumps, rho0, amplitudes, rates = random_case(3, d=2)
    system = lindblad.System(drift, controls, jumps)
    want = reference.evolve(drift, controls, jumps, rho0, amplitudes, rates, 1.0)
    # RK4's global error is O(dt^4) (1e-8 at dt 0.01), Euler's O(dt) (about 1e-3 at 1e-3).
    dt, tolerance = (0.01, STATE_TOLERANCE) if method == "rk4" else (1e-3, 5e-3)
    got = lindblad.evolve(system, rho0, amplitudes, rates, 1.0, method=method, dt=dt)
    assert np.max(np.abs(got - want)) < tolerance


def test_integer_inputs_are_converted():
    system = lindblad.System([[1, 0], [0, -1]], [[[0, 1], [1, 0]]], [[[0, 1], [0, 0]]])
    assert (system.dim, system.controls, system.jumps) == (2, 1, 1)
    out = lindblad.evolve(system, [[1, 0], [0, 0]], [[[0], [0]]], [[0]], 1)
    assert np.allclose(out[0], [[1, 0], [0, 0]], atol=1e-6)


def qutip_final_states(drift, controls, jumps, rho0, amplitudes, rates, t_total):
    qutip = pytest.importorskip("qutip", reason="qutip is not installed (CI installs it)")
    tasks, segments, _ = amplitudes.shape
    t_seg = t_total / segments
    out = []
    for t in range(tasks):
        rho = qutip.Qobj(rho0[t])
        c_ops = [qutip.Qobj(np.sqrt(g) * l) for l, g in zip(jumps, rates[t])]
        for s in range(segments):
            h = qutip.Qobj(drift + sum(u * hc for u, hc in zip(amplitudes[t, s], controls)))
            try:
                result = qutip.mesolve(
                    h, rho, [0.0, t_seg], c_ops, options={"atol": 1e-12, "rtol": 1e-10}
                )
            except TypeError:  # qutip 4 takes an Options object
                result = qutip.mesolve(
                    h, rho, [0.0, t_seg], c_ops, [], options=qutip.Options(atol=1e-12, rtol=1e-10)
                )
            rho = result.states[-1]
        out.append(rho.full())
    return np.stack(out)


@pytest.mark.parametrize("seed", range(2))
def test_evolve_matches_qutip(seed):
    drift, controls, jumps, rho0, amplitudes, rates = random_case(100 + seed)
    want = qutip_final_states(drift, controls, jumps, rho0, amplitudes, rates, 1.0)
    system = lindblad.System(drift, controls, jumps)
    got = lindblad.evolve(system, rho0, amplitudes, rates, 1.0, device="cpu")
    # qutip's adaptive integrator at rtol 1e-10 is far inside the f32 tolerance.
    assert np.max(np.abs(got - want)) < STATE_TOLERANCE


def reference_fidelity(case, target, amplitudes):
    drift, controls, jumps, rho0, _, rates = case
    states = reference.evolve(drift, controls, jumps, rho0, amplitudes, rates, 1.0)
    return np.einsum("tij,ji->t", states, target).real


@pytest.mark.parametrize("seed", range(3))
def test_fidelity_gradients_match_central_differences(seed):
    case = random_case(200 + seed)
    drift, controls, jumps, rho0, amplitudes, rates = case
    d = drift.shape[0]
    psi = reference.random_pure(np.random.default_rng(seed), d)
    target = np.outer(psi, psi.conj())
    system = lindblad.System(drift, controls, jumps)
    fid, grad = lindblad.fidelity_and_grad(system, rho0, amplitudes, rates, 1.0, psi)
    assert fid.shape == (amplitudes.shape[0],) and grad.shape == amplitudes.shape
    assert np.max(np.abs(fid - reference_fidelity(case, target, amplitudes))) < STATE_TOLERANCE
    # Central differences of the f64 reference: with step h = 1e-5 the truncation error is
    # h^2 / 6 * |F'''| ~ 2e-11 (F is smooth in u, with derivatives of order 1 for these norms)
    # and the rounding error 1e-16 / h ~ 1e-11, so the differences are exact to about 1e-10:
    # the comparison measures the autodiff gradient's own f32 error alone.
    h = 1e-5
    numeric = np.zeros_like(amplitudes)
    for index in np.ndindex(*amplitudes.shape[1:]):
        plus, minus = amplitudes.copy(), amplitudes.copy()
        plus[(slice(None),) + index] += h
        minus[(slice(None),) + index] -= h
        # Each task's fidelity depends on its own amplitudes only: one batch per entry.
        numeric[(slice(None),) + index] = (
            reference_fidelity(case, target, plus) - reference_fidelity(case, target, minus)
        ) / (2 * h)
    # 1e-2 relative, with an absolute floor of 1e-4 for entries near zero (the f32 autodiff
    # error is about 1e-5 on these scales).
    np.testing.assert_allclose(grad, numeric, rtol=1e-2, atol=1e-4)


def test_target_as_density_matrix_equals_target_as_vector():
    case = random_case(7, d=2)
    drift, controls, jumps, rho0, amplitudes, rates = case
    system = lindblad.System(drift, controls, jumps)
    psi = np.array([0, 1], dtype=complex)
    f1, g1 = lindblad.fidelity_and_grad(system, rho0, amplitudes, rates, 1.0, psi)
    f2, g2 = lindblad.fidelity_and_grad(system, rho0, amplitudes, rates, 1.0, np.outer(psi, psi))
    assert np.allclose(f1, f2, atol=1e-7) and np.allclose(g1, g2, atol=1e-7)


def test_devices_and_version():
    assert "cpu" in quench.devices()
    assert isinstance(quench.__version__, str) and quench.__version__
