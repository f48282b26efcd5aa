"""Meta-learning of control pulses (guide 001): a policy network maps a task's parameters to
the piecewise-constant amplitudes of its pulse, adapted per task by a few inner gradient steps
(first-order MAML or Reptile) through the differentiable Lindblad solver.

The settings are those of the files under ``configs/lindblad/`` (``algorithm``,
``iterations``, ``tasks_per_batch``, ``inner_steps``, ``inner_lr``, ``meta_lr``,
``val_tasks``, ``val_interval``, ``seed``, ``[solver]``, ``[policy]``, ...), given as the
file's path or as a dict of the same keys.
"""

import json

from . import _native
from ._convert import settings, text

__all__ = ["train"]


def train(config, device="auto"):
    """Trains the meta-learner of ``config`` (a TOML file's path, or a dict of its settings) on
    ``device`` and returns its history: a dict with ``config`` (every setting, defaults filled
    in), ``iterations`` (a dict per meta-iteration: ``iteration``, ``loss_before`` and
    ``loss_after`` (the mean task losses before and after adaptation), ``skipped_tasks``,
    ``seconds``) and
    ``validations`` (fresh tasks every ``val_interval`` iterations and after the last: the
    fidelities before and after adaptation as ``{"mean", "std", "tasks"}``).

    Ctrl-C is honoured between meta-iterations: the run stops after the iteration in flight and
    raises ``KeyboardInterrupt`` whose ``history`` attribute holds what finished. Raises
    ``ValueError`` for a file that cannot be read or a setting out of range (naming the file or
    ``config`` and the field), ``RuntimeError`` for a run that diverged or a device failure.
    """
    device = text("device", device)
    path, given = settings("config", config)
    outcome = json.loads(_native.meta_train(path, given, device))
    history = outcome["history"]
    if outcome["interrupted"]:
        stop = KeyboardInterrupt(
            f"meta-learning stopped after {len(history['iterations'])} of "
            f"{history['config']['iterations']} meta-iterations"
        )
        stop.history = history
        raise stop
    return history
