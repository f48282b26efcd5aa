"""Guide 004's market-direction classifiers: a bidirectional LSTM with attention pooling, a
pre-norm Transformer encoder or a gated MLP, each predicting whether the price moves down, stays
flat or moves up over the next bars, from windows of market bars; every seed a member of one
batched program, trained the product's way (the fused LSTM, windows resident on the device).

``config`` overrides the model's default training settings (the original's: ``seeds``,
``epochs``, ``batch_size``, ``learning_rate``, ``weight_decay``, ``warmup_epochs``,
``cosine``, ``label_smoothing``, ``class_weighted``, ``clip_norm``, ``patience``, ``dropout``,
``widths``), as a dict or a TOML file's path. ``data`` says which bars: ``None`` for the seeded
synthetic market, or a dict with ``files`` (MetaTrader-5 exports, one symbol each, each once),
``market`` (the synthetic market when there are no files: ``symbols``, ``bars``,
``interval_seconds``, ``seed``; refused beside ``files``) and
``windows`` (``window``, ``horizon``, ``threshold``, the ``train`` and ``validation``
fractions).
"""

import os
from collections.abc import Mapping

from . import _native
from ._convert import finished, settings, table, text, utf8

__all__ = ["train"]


def train(model, config=None, data=None, device="auto"):
    """Trains ``model`` (``"lstm"``, ``"transformer"`` or ``"mlp"``) with ``config``'s settings
    on the windows of ``data`` and returns a dict: ``data`` (where the bars came from, with a
    warning when a symbol was too short or every training window has one label), ``model``,
    ``seeds`` (per seed: ``seed``, ``validation`` and ``test`` scores (``accuracy``,
    ``macro_f1``) of the weights with the best validation loss, ``best_epoch``, ``train_loss``
    and ``validation_loss`` per epoch), ``epochs``, ``batches_per_epoch``, ``train_windows``,
    ``baselines`` (what always predicting the majority class, or the last move, scores on the
    same parts) and ``skipped_steps``.

    Raises ``ValueError`` for a model, setting, file or data table that cannot be used (the
    message names ``model``, ``config`` or the file, ``data`` and the field), ``RuntimeError``
    for a device failure and for a training that diverged (a seed's last training loss NaN or
    infinite; its ``outcome`` attribute holds the outcome). Ctrl-C is honoured between epochs:
    the run stops after the epoch in flight and raises ``KeyboardInterrupt`` whose ``outcome``
    attribute holds the outcome so far (every seed scored on its best weights).
    """
    if not isinstance(model, str):
        raise ValueError(
            f"model: \"lstm\", \"transformer\" or \"mlp\", not {type(model).__name__}"
        )
    utf8("model", model)
    device = text("device", device)
    path, given = settings("config", {} if config is None else config)
    if isinstance(data, Mapping) and isinstance(data.get("files"), (str, bytes, os.PathLike)):
        raise ValueError("data: files: a list of paths, one file per symbol")
    market = None if data is None else table(
        "data", data, "a dict of files, market and windows", paths=("files",)
    )
    return finished(_native.temporal_train(model, path, given, market, device), "the training")
