"""Batched state-vector simulation of small qubit circuits.

A circuit is a list of gate dicts, the JSON interface's format:
``{"gate": "ry", "wires": [0], "angle": 0.3}``. Gates: ``h``, ``x``, ``y``, ``z``; ``rx``,
``ry``, ``rz``, ``phase`` (with ``"angle"``, radians; PennyLane's conventions,
``RX(t) = exp(-i t X / 2)``, ``Phase(t) = diag(1, e^{i t})``); ``cnot`` and ``cz`` (wires
``[control, target]``); ``swap``. Every circuit starts from ``|0...0>``; wire 0 is the most
significant bit of a basis index.
"""

import json

import numpy as np

from . import _native
from ._convert import text

__all__ = ["expectations"]


def _plain(value):
    # numpy scalars (an angle taken from an array, a wire from np.arange) as Python numbers.
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"{type(value).__name__} is not a number, list or dict")


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
    try:
        document = json.dumps(
            {"qubits": qubits, "circuits": circuits}, default=_plain, allow_nan=False
        )
    except (TypeError, ValueError) as error:
        raise ValueError(f"circuits: cannot be written as gate dicts: {error}") from None
    return _native.circuit_expectations(document, device)
