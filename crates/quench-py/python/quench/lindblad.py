"""Batched, differentiable Lindblad evolution.

The master equation, for each task of a batch::

    drho/dt = -i [H0 + sum_c u_c(t) H_c, rho]
              + sum_k gamma_k (L_k rho L_k^+ - {L_k^+ L_k, rho} / 2)

with the drift ``H0``, control Hamiltonians ``H_c`` and unit-rate jump operators ``L_k`` of a
:class:`System`, amplitudes ``u_c`` piecewise constant over equal segments of ``t_total``,
and per-task rates ``gamma_k`` (in units of ``1 / t_total``'s time unit). Time is in the units
of ``1 / H``. The solver runs in the device's 32-bit floats: expect results to about 1e-6.
"""

from . import _native
from ._convert import complex_array, real_array, real_scalar, text

__all__ = ["System", "evolve", "fidelity_and_grad"]


class System:
    """An open quantum system of dimension ``d``.

    ``System(drift, controls=(), jumps=())`` takes complex ``[d, d]`` arrays (anything numpy
    reads as numbers; integers and floats are converted): the drift Hamiltonian, a list of
    control Hamiltonians and a list of jump operators of unit rate.

    Raises ``ValueError`` naming the argument (``drift``, ``controls[1]``, ``jumps[0]``) when
    a matrix is not square, not of the drift's dimension, has a non-finite entry, or (drift
    and controls) is not Hermitian within ``1e-10 * max(1, ||H||_1)``, e.g.
    ``controls[1]: not Hermitian (largest |A_ij - conj(A_ji)| is 1e0)``. The tolerance is
    about 5e5 times the f64 epsilon of the matrix's norm: far above the rounding of a
    Hamiltonian assembled in numpy (sums and Kronecker products, a few epsilon times the
    norm), far below any deliberate non-Hermitian part.
    """

    def __init__(self, drift, controls=(), jumps=()):
        if isinstance(controls, str) or not hasattr(controls, "__iter__"):
            raise ValueError("controls: expected a list of [d, d] arrays")
        if isinstance(jumps, str) or not hasattr(jumps, "__iter__"):
            raise ValueError("jumps: expected a list of [d, d] arrays")
        self._native = _native.System(
            complex_array("drift", drift),
            [complex_array(f"controls[{i}]", c) for i, c in enumerate(controls)],
            [complex_array(f"jumps[{i}]", j) for i, j in enumerate(jumps)],
        )

    @property
    def dim(self) -> int:
        """The Hilbert-space dimension ``d``."""
        return self._native.dim

    @property
    def controls(self) -> int:
        """The number of control Hamiltonians."""
        return self._native.controls

    @property
    def jumps(self) -> int:
        """The number of jump operators."""
        return self._native.jumps

    def __repr__(self) -> str:
        return f"System(dim={self.dim}, controls={self.controls}, jumps={self.jumps})"


def _run(system, rho0, amplitudes, rates, t_total, method, dt, device, target):
    if not isinstance(system, System):
        raise ValueError(f"system: expected a quench.lindblad.System, found {type(system).__name__}")
    return _native.lindblad_run(
        system._native,
        complex_array("rho0", rho0),
        real_array("amplitudes", amplitudes),
        real_array("rates", rates),
        real_scalar("t_total", t_total),
        text("method", method),
        None if dt is None else real_scalar("dt", dt),
        text("device", device),
        None if target is None else complex_array("target", target),
    )


def evolve(system, rho0, amplitudes, rates, t_total, method="exact", dt=None, device="auto"):
    """Evolves a batch of tasks and returns the final density matrices.

    Arguments:

    * ``system`` -- a :class:`System` of dimension ``d`` with ``C`` controls and ``K`` jumps.
    * ``rho0`` -- the initial density matrix, complex ``[d, d]`` (every task starts there) or
      ``[tasks, d, d]`` (one per task); Hermitian, unit trace, positive semidefinite within
      1e-9.
    * ``amplitudes`` -- real ``[tasks, segments, C]``: control amplitudes, constant over each
      of ``segments`` equal segments of ``t_total``.
    * ``rates`` -- real ``[tasks, K]``, non-negative: the rate ``gamma_k`` of each jump.
    * ``t_total`` -- the pulse length, positive.
    * ``method`` -- ``"exact"`` (each segment's propagator, to rounding), ``"rk4"`` or
      ``"euler"`` (fixed steps of at most ``dt``, required for these two; a ``dt`` given with
      ``"exact"`` is not used, but must still be positive and finite).
    * ``device`` -- ``"auto"``, ``"cpu"``, ``"cuda"``, ``"cuda:N"``, ``"wgpu"``, ``"wgpu:N"``.

    Returns complex128 ``[tasks, d, d]``. Computed in 32-bit floats on the device: a stepper's
    rounding builds up over its substeps (``t_total / dt`` of them), so past some point a
    smaller ``dt`` moves the result away from ``"exact"``'s, not closer.

    Raises ``ValueError`` naming the argument for a wrong shape or dtype, a non-finite
    number, a negative rate, a state that is not a density matrix, an unknown method or a
    malformed device string; ``RuntimeError`` when the device fails.
    """
    states, _, _ = _run(system, rho0, amplitudes, rates, t_total, method, dt, device, None)
    return states


def fidelity_and_grad(
    system, rho0, amplitudes, rates, t_total, target, method="exact", dt=None, device="auto"
):
    """Fidelities of a batch of evolutions to a pure target and their gradients.

    Arguments as :func:`evolve`, plus ``target``: a pure state, as a state vector ``[d]``
    (unit norm) or a density matrix ``[d, d]`` (``Tr(target^2) = 1``).

    Returns ``(fidelities, gradients)``: float64 ``[tasks]`` with
    ``F = Tr(rho(t_total) target)`` (``<psi| rho |psi>`` for a vector), and float64
    ``[tasks, segments, C]``, ``dF / du`` for every task's amplitudes, by Burn's autodiff
    through the solver (32-bit floats on the device).

    Raises as :func:`evolve`; ``target`` is named when it is missing or not a pure state.
    """
    if target is None:
        # `_run` reads a missing target as an evolution only, which has no fidelities.
        raise ValueError("target: expected a pure state, a state vector [d] or a density "
                         "matrix [d, d], not None")
    _, fidelities, gradients = _run(
        system, rho0, amplitudes, rates, t_total, method, dt, device, target
    )
    return fidelities, gradients
