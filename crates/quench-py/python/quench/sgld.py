"""Gibbs-posterior SGLD (guide 002): a grid of inverse temperatures x repetitions of
one-hidden-layer networks sampled by stochastic-gradient Langevin dynamics, scored on their
training and test splits, with the PAC-Bayes bound on the generalisation gap.

The grid runs as the benchmark's batched way runs it: every chain in one program, the noise
from counter-based streams where the step runs, the fused step. Its settings are those of the
grid files under ``configs/sgld/`` (``betas``, ``epochs``, ``a0``, ``repetitions``,
``batch_size``, ``hidden``, ``dataset``, ``[synth]``, ...), given as the file's path or as a
dict of the same keys.
"""

import json

from . import _native
from ._convert import settings, text

__all__ = ["run_grid"]


def run_grid(config, device="auto"):
    """Runs the grid ``config`` (a TOML file's path, or a dict of its settings) on ``device``.

    Returns a dict: ``data`` (what the data was), ``n_train`` and ``n_test`` (points per
    chain), ``chains`` (a dict per chain: ``beta_index``, ``repetition``, ``train_loss``,
    ``test_loss`` (the bounded cross-entropy rescaled to [0, 1]), ``train_error``,
    ``test_error`` (0-1 errors)), and ``betas`` (a dict per inverse temperature, ascending:
    ``beta``, ``epochs``, ``a0``, the losses, errors and gaps as ``{"mean", "std"}`` over the
    repetitions, and ``bound``: ``integral``, ``kl``, ``inner``, ``gap``, the PAC-Bayes bound
    on the loss gap).

    Raises ``ValueError`` for a file that cannot be read or a setting out of range (the message
    names the file or ``config`` and the field), ``RuntimeError`` for a device failure. The
    call holds no GIL while the chains run; it is one call (Ctrl-C is seen when it returns).
    """
    device = text("device", device)
    path, given = settings("config", config)
    return json.loads(_native.sgld_run_grid(path, given, device))
