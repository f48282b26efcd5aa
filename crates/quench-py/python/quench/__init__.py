"""Quench: batched, differentiable Lindblad and quantum-circuit simulation, numpy in and out.

Submodules:

* :mod:`quench.lindblad` -- open-system evolutions of a batch of pulses and the gradients of
  their fidelities (``System``, ``evolve``, ``fidelity_and_grad``).
* :mod:`quench.circuit` -- ``<Z_i>`` of qubit circuits written as gate dicts
  (``expectations``).
* :mod:`quench.meta` -- meta-learning of control pulses from its settings (``train``), Ctrl-C
  honoured between meta-iterations.
* :mod:`quench.sgld` -- a Gibbs-posterior SGLD grid from its settings, with the PAC-Bayes
  bound (``run_grid``).

Every function takes ``device="auto"`` (or ``"cpu"``, ``"cuda"``, ``"cuda:N"``, ``"wgpu"``,
``"wgpu:N"``); :func:`devices` lists what this build can use. Bad input raises ``ValueError``
naming the argument; a device that fails (or a bug inside Quench) raises ``RuntimeError``.
"""

from . import _native
from . import circuit, lindblad, meta, sgld

__version__: str = _native.__version__

__all__ = ["__version__", "circuit", "devices", "lindblad", "meta", "sgld"]


def devices() -> list:
    """The device strings this build can use.

    Always ``"cpu"``; ``"cuda:N"`` for every CUDA device that opens in a build with the
    ``cuda`` feature; ``"wgpu:N"`` for every wgpu adapter the driver lists in a build with
    the ``wgpu`` feature. Any of them (or ``"auto"``) can be passed as ``device=``.
    """
    return _native.devices()


def _panic_for_test() -> None:
    """Test hook, not part of the API: panics inside the Rust wrapper.

    Raises ``RuntimeError`` (the panic, caught before it reaches Python); the tests use it to
    check that no Rust panic escapes as pyo3's ``PanicException``.
    """
    _native._panic_for_test()
