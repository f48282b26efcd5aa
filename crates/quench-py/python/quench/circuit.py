"""Batched state-vector simulation of small qubit circuits.

A circuit is a list of gate dicts, the JSON interface's format:
``{"gate": "ry", "wires": [0], "angle": 0.3}``. Gates: ``h``, ``x``, ``y``, ``z``; ``rx``,
``ry``, ``rz``, ``phase`` (with ``"angle"``, radians; PennyLane's conventions,
``RX(t) = exp(-i t X / 2)``, ``Phase(t) = diag(1, e^{i t})``); ``cnot`` and ``cz`` (wires
``[control, target]``); ``swap``. Every circuit starts from ``|0...0>``; wire 0 is the most
significant bit of a basis index.

:func:`run` takes one circuit whose angles may also be ``{"input": k}`` (column ``k`` of
per-sample inputs, an encoding) or ``{"weight": k}`` (entry ``k`` of shared weights), and gives
``<Z_i>``, ``<Z_i Z_j>`` and their vector-Jacobian products with respect to both.
"""

from typing import NamedTuple

import numpy as np

from . import _native
from ._convert import encoded, integer, real_array, shown, text

__all__ = ["expectations", "run", "CircuitRun"]


def expectations(qubits, circuits, device="auto"):
    """``<Z_i>`` of every qubit of every circuit.

    Arguments:

    * ``qubits`` -- the number of qubits ``n`` of every circuit (1 to 30).
    * ``circuits`` -- a list of circuits, each a list of gate dicts
      ``{"gate": name, "wires": [..], "angle": radians}`` (``angle`` only for rotations).
    * ``device`` -- as for :func:`quench.lindblad.evolve`.

    Returns float64 ``[circuits, n]``, ``<Z_0>, ..., <Z_{n-1}>`` per circuit (PennyLane's
    ``qml.expval(qml.PauliZ(i))``). Circuits of the same gates and wires run as one batch, in
    32-bit floats on the device.

    Raises ``ValueError`` with the simulator's one-line message naming the circuit and gate
    (e.g. ``circuit 0, gate 1: unknown gate "foo" (known: ...)``), or naming ``qubits``,
    ``circuits`` or ``device``; ``RuntimeError`` when the device fails.
    """
    device = text("device", device)
    document = encoded(
        "circuits", {"qubits": qubits, "circuits": circuits}, "cannot be written as gate dicts"
    )
    return _native.circuit_expectations(document, device)


class CircuitRun(NamedTuple):
    """What :func:`run` returns."""

    #: ``<Z_i>``, float64 ``[batch, qubits]``.
    z: np.ndarray
    #: ``<Z_i Z_j>`` of each pair, float64 ``[batch, pairs]``.
    zz: np.ndarray
    #: With cotangents: the gradient with respect to the inputs, ``[batch, inputs]``.
    inputs_grad: "np.ndarray | None"
    #: With cotangents: the gradient with respect to the weights, ``[weights]``.
    weights_grad: "np.ndarray | None"


def _wires(pairs):
    """``pairs`` as a list of ``(i, j)`` Python ints, each entry checked by
    :func:`quench._convert.integer` and named with its index and value (a wire beyond the
    circuit is the native call's to name: it knows the qubits)."""
    if isinstance(pairs, (str, bytes)) or not hasattr(pairs, "__iter__"):
        raise ValueError(f"pairs: expected a list of (i, j) wire pairs, not {type(pairs).__name__}")
    wires = []
    for k, pair in enumerate(pairs):
        try:
            i, j = pair
        except (TypeError, ValueError):  # not iterable, or not two items
            raise ValueError(
                f"pairs[{k}]: expected a pair (i, j) of wires, found {shown(pair)}"
            ) from None
        entry = f"pairs[{k}] = ({shown(i)}, {shown(j)})"
        wires.append((integer(entry, i), integer(entry, j)))
    return wires


def run(
    qubits,
    gates,
    inputs=None,
    weights=None,
    pairs=(),
    z_cotangent=None,
    zz_cotangent=None,
    device="auto",
):
    """One circuit run on a batch of per-sample inputs with shared weights.

    Arguments:

    * ``qubits`` -- the number of qubits ``n`` (1 to 30).
    * ``gates`` -- the circuit, a list of gate dicts as for :func:`expectations`, where a
      rotation's ``"angle"`` is a number, ``{"input": k}`` (column ``k`` of ``inputs``) or
      ``{"weight": k}`` (entry ``k`` of ``weights``).
    * ``inputs`` -- float ``[batch, inputs]``, one row per sample (needed when a gate reads an
      input; without, the batch is one row).
    * ``weights`` -- float ``[weights]``, the same for every row.
    * ``pairs`` -- the wire pairs ``(i, j)`` whose ``<Z_i Z_j>`` are wanted (Python or numpy
      integers).
    * ``z_cotangent`` -- float ``[batch, n]``: with it, the gradients of ``sum(z *
      z_cotangent) + sum(zz * zz_cotangent)`` are returned (a vector-Jacobian product, what
      an autograd bridge or an optimiser needs); ``zz_cotangent`` ``[batch, pairs]`` is 0
      when not given.
    * ``device`` -- as for :func:`quench.lindblad.evolve`.

    Returns a :class:`CircuitRun` ``(z, zz, inputs_grad, weights_grad)``; the gradients are
    ``None`` without cotangents. The batch runs as one tensor program in 32-bit floats.

    Raises ``ValueError`` naming the argument, gate or value; ``RuntimeError`` when the device
    fails.
    """
    device = text("device", device)
    template = encoded("gates", {"qubits": qubits, "gates": gates}, "cannot be written as gate dicts")

    def shaped(name, value, ndim):
        if value is None:
            return None
        array = real_array(name, value)
        if array.ndim != ndim:
            raise ValueError(f"{name}: expected a {ndim}-D array, found shape {list(array.shape)}")
        return array

    z, zz, grads = _native.circuit_run(
        template,
        shaped("inputs", inputs, 2),
        shaped("weights", weights, 1),
        _wires(pairs),
        shaped("z_cotangent", z_cotangent, 2),
        shaped("zz_cotangent", zz_cotangent, 2),
        device,
    )
    inputs_grad, weights_grad = grads if grads is not None else (None, None)
    return CircuitRun(z, zz, inputs_grad, weights_grad)
