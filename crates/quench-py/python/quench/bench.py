"""The benchmark from Python: a suite of workloads (``configs/quick.toml`` and the others under
``configs/``), each variant timed and its quality checked, the guides' claimed speed-ups beside
the measured ones, and the PyTorch peers on the same device when asked; the report is the
``report.json`` that ``benchmark run`` writes, as a dict.

The same from a shell: ``python -m quench run --suite configs/quick.toml`` (every option of the
``benchmark`` command line; ``python -m quench --help``).
"""

import json
import os

from . import _native
from ._convert import flag, integer, names, text, utf8

__all__ = ["run"]


def _path(name, value):
    if value is None:
        return None
    if isinstance(value, (str, os.PathLike)):
        path = os.fspath(value)
        if path == "":
            raise ValueError(f"{name}: an empty path")
        return path
    raise ValueError(f"{name}: a path, not {type(value).__name__}")


def run(
    suite=None,
    *,
    device="auto",
    only=None,
    variants=None,
    precision=None,
    repeats=None,
    out=None,
    peers=False,
    python=None,
):
    """Runs the suite file ``suite`` (default: ``configs/quick.toml`` in the working folder) on
    ``device`` and returns its report as a dict (``report.json``'s content: ``status``,
    ``machine``, ``timing`` and ``workloads``, each with its ``variants`` (``per_iteration_s``,
    ``throughput``, ``quality``, ``speedup``, ``claim``, ``vs_pytorch``, ...), ``failed``,
    ``unsupported`` and ``peer``).

    ``only``: workload names (a list, or one name); ``variants``: of each workload's variants
    (those the suite selects), only those of these names (a list, or one name; ``"all"`` runs
    the product's own path without the baselines; a name no selected workload has, or a
    workload left with none, is a ``ValueError``); ``precision``: ``"auto"``, ``"f32"``,
    ``"tf32"``, ``"bf16"`` or ``"f16"`` for the variants that follow it; ``repeats``: timed
    repeats of every variant, in place of a workload's own count too (default: the suite's);
    ``out``: a folder where ``report.json``, ``report.md`` and the plots are written after
    every variant (default: none); ``peers``:
    also run each workload's PyTorch program (``peers/``) with ``python`` (default: the first
    of ``$QUENCH_PYTHON``, ``python3``, ``python`` that imports torch; where none does, each
    workload's ``peer_missing`` says so and the run goes on; a ``python`` given that cannot
    import torch is a ``ValueError``).

    A variant that fails is recorded in its workload's ``failed`` list and the suite goes on.
    Ctrl-C is honoured after the variant in flight: the run stops and raises
    ``KeyboardInterrupt`` whose ``report`` attribute holds what finished (``status``
    ``"interrupted"``; written to ``out`` too). Raises ``ValueError`` for a suite file, a
    workload, a setting or an output folder that cannot be used (the message names it),
    ``RuntimeError`` for a device that cannot be used or cannot run the precision asked for.
    """
    only = names("only", only)
    variants = names("variants", variants)
    if repeats is not None:
        repeats = integer("repeats", repeats, least=1)
    device = text("device", device)
    if precision is not None:
        if not isinstance(precision, str):
            raise ValueError(f"precision: a name such as \"f32\", not {type(precision).__name__}")
        utf8("precision", precision)
    answer, stopped = _native.bench_run(
        _path("suite", suite),
        only,
        variants,
        device,
        precision,
        repeats,
        _path("out", out),
        flag("peers", peers),
        _path("python", python),
    )
    report = json.loads(answer)
    if stopped:
        finished = sum(len(w["variants"]) for w in report["workloads"])
        stop = KeyboardInterrupt(f"the suite stopped after {finished} variant(s)")
        stop.report = report
        raise stop
    return report
