"""Guide 000's analyses of quantum random-number sources: a classifier that names the source of
a line of bits (``classify``) and the GAN tournament between every pair of sources
(``tournament``), each from the settings of its file under ``configs/qrng/`` (``classifier.toml``,
``gan.toml``), given as the file's path or as a dict of the same keys, trained the product's
way: every seed (or match) in one batched program with the seam's fused member-MLP step.

``data`` says which lines: ``None`` for the original's recording shipped with the repository
(``data/qrng/AI_2qubits_training_data.txt``, 100 bits and a source label 1-3 per line),
another file of that format (its path), or a dict of the ``data`` table the benchmark suites
use: ``{"source": "synthetic", "synthetic_lines": 300, "synthetic_seed": 1}`` for stand-in
sources, ``{"source": "recorded", "path": ...}``.
"""

import json
import os

from . import _native
from ._convert import finished, path, settings, table, text

__all__ = ["classify", "tournament"]


def _data(data):
    if data is None:
        return None
    if isinstance(data, (str, os.PathLike)):
        return json.dumps({"source": "recorded", "path": path("data", data)})
    return table("data", data, "a file's path or a dict of the data table", paths=("path",))


def classify(config, data=None, device="auto"):
    """Trains the classifier of ``config`` (a TOML file's path or a dict of its settings:
    ``seeds``, ``max_epochs``, ``early_stopping_patience``, ``batch_size``, ``lr``, ``l1``,
    ``dropout``, ``[plateau]``, ...) on the lines of ``data``, once per seed, and returns a
    dict: ``data`` (where the lines came from), ``seeds`` (per seed: ``seed``,
    ``test_accuracy`` on the untouched test split, ``best_validation_accuracy``,
    ``best_epoch``, ``epochs`` and ``history``, a dict per epoch: ``validation_accuracy``,
    ``train_loss``, ``lr``), ``test_accuracy`` (``{"mean", "std"}`` over the seeds) and
    ``member_epochs``.

    Raises ``ValueError`` for a file that cannot be read, a setting out of range or data that
    cannot be used (the message names the file, ``config`` or ``data`` and the field or line),
    ``RuntimeError`` for a device failure and for a training that diverged (a seed's last
    training loss NaN or infinite; its ``outcome`` attribute holds the outcome). Ctrl-C is
    honoured between epochs: the run stops after the epoch in flight and raises
    ``KeyboardInterrupt`` whose ``outcome`` attribute holds the outcome so far (every seed
    scored on its best weights).
    """
    device = text("device", device)
    path, given = settings("config", config)
    return finished(_native.qrng_classify(path, given, _data(data), device), "the classifier")


def tournament(config, data=None, device="auto"):
    """Plays the GAN tournament of ``config`` (a TOML file's path or a dict of its settings:
    ``epochs``, ``seeds``, ``bits``, ``lr``, ``noise``, ``[adam]``, ...) between every pair of
    the sources of ``data``, once per seed, and returns a dict: ``data``, ``matches`` (per
    pair and seed: ``sources``, ``seed``, ``kl_history``, ``KL(p_real || g)`` in nats of the
    generator each epoch started with, and ``uniform_kl``, a uniform generator's), ``pairs``
    (per pair: ``sources``, ``final_kl`` per seed, their ``mean`` and ``std``, ``uniform_kl``) and
    ``mean_final_kl`` (the benchmark's quality: lower is better).

    Errors as :func:`classify`; one call: Ctrl-C is seen when it returns.
    """
    device = text("device", device)
    path, given = settings("config", config)
    return json.loads(_native.qrng_tournament(path, given, _data(data), device))
