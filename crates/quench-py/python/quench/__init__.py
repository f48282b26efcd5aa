"""Quench: batched, differentiable Lindblad and quantum-circuit simulation, numpy in and out.

Submodules:

* :mod:`quench.lindblad` -- open-system evolutions of a batch of pulses and the gradients of
  their fidelities (``System``, ``evolve``, ``fidelity_and_grad``).
* :mod:`quench.circuit` -- ``<Z_i>`` of qubit circuits written as gate dicts
  (``expectations``).
* :mod:`quench.meta` -- meta-learning of control pulses from its settings (``train``), Ctrl-C
  honoured between meta-iterations.
* :mod:`quench.qrng` -- guide 000's analyses of random-number sources: the classifier of a
  line's source (``classify``) and the GAN tournament between sources (``tournament``).
* :mod:`quench.sgld` -- a Gibbs-posterior SGLD grid from its settings, with the PAC-Bayes
  bound (``run_grid``).
* :mod:`quench.hybrid` -- guide 003's hybrid quantum-classical classifier (frozen ResNet18,
  4-qubit circuit, head) on Fashion-MNIST (``train``).
* :mod:`quench.temporal` -- guide 004's market-direction classifiers (LSTM, Transformer,
  MLP) on windows of market bars (``train``).
* :mod:`quench.bench` -- the benchmark's suites (every workload of the five guides, with the
  PyTorch peers when asked), their report as a dict (``run``); ``python -m quench`` is the
  ``benchmark`` command line.

Every function takes ``device="auto"`` (or ``"cpu"``, ``"cuda"``, ``"cuda:N"``, ``"wgpu"``,
``"wgpu:N"``); :func:`devices` lists what this build can use. Bad input raises ``ValueError``
naming the argument (``TypeError`` for a numpy masked array, whose mask Quench cannot honour); a
device that fails (or a bug inside Quench) raises ``RuntimeError``.
"""

from . import _native
from ._convert import real_scalar, text
import json

from . import bench, circuit, hybrid, lindblad, meta, qrng, sgld, temporal

__version__: str = _native.__version__

__all__ = [
    "__version__", "bench", "circuit", "devices", "doctor", "hybrid", "lindblad", "meta",
    "qrng", "set_max_hours", "sgld", "temporal",
]


def devices() -> list:
    """The device strings this build can use.

    Always ``"cpu"``; ``"cuda:N"`` for every CUDA device that opens in a build with the
    ``cuda`` feature; ``"wgpu:N"`` for every wgpu adapter the driver lists in a build with
    the ``wgpu`` feature. Any of them (or ``"auto"``) can be passed as ``device=``.
    """
    return _native.devices()


def doctor(device="auto") -> dict:
    """Describes ``device`` and measures it, as ``benchmark doctor`` does: a dict with
    ``machine`` (host, cores, the device's name and backend), ``figures`` (``tiny_op``: the
    latency of one small operation; ``matmul``: GFLOP/s per shape; ``copy``: bandwidths to,
    from and on the device), ``precisions`` (``[name, None]`` for each precision the device
    runs, ``[name, why not]`` for the others) and ``text`` (the printed report, with where the
    GPU kernel cache is and what it holds, and the host GEMM's figures).

    Takes a few seconds (longer on a GPU's first use, which compiles its kernels). Raises
    ``ValueError`` for a malformed device string, ``RuntimeError`` for a device that cannot be
    used.
    """
    return json.loads(_native.doctor(text("device", device)))


def set_max_hours(hours) -> float:
    """Sets the longest run one setting may ask for, in hours (24 unless set), for this process,
    and returns the limit that held before.

    Every training and simulation estimates its work from its settings (a count times a
    documented lower bound of one unit's cost) and refuses, before any work, a run whose
    estimate exceeds the limit, naming the setting: the refusal that says "raise the limit"
    is followed here (``benchmark --max-hours`` on the command line). Raises ``ValueError``
    for a value that is not a finite positive number.
    """
    return _native.set_max_hours(real_scalar("hours", hours))


def _panic_for_test() -> None:
    """Test hook, not part of the API: panics inside the Rust wrapper.

    Raises ``RuntimeError`` (the panic, caught before it reaches Python); the tests use it to
    check that no Rust panic escapes as pyo3's ``PanicException``.
    """
    _native._panic_for_test()
