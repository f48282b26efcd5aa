"""Guide 003's hybrid quantum-classical classifier: a frozen ResNet18 backbone, an encoder to
four angles, a 4-qubit variational circuit read out as ``<Z_i>``, and a head over
Fashion-MNIST's ten classes; every seed a member of one batched program, trained the
product's way (each image's backbone features computed once, the circuit read out by the
seam's fused operation, f32).

``config`` is the training's settings (``seeds``, ``epochs``, ``batch_size``,
``learning_rate``, ``weight_decay``, ``step_size``, ``gamma``, ``patience``, ``clip_norm``,
``dropout``, ``layers``, ``weight_std``), a dict or a TOML file's path. ``data`` says which
images and which backbone, a dict: ``train_samples``, ``validation_samples``,
``test_samples`` (0, the default, keeps the original's 54,000 / 6,000 / 10,000),
``split_seed``, ``backbone_seed``, ``calibration_images`` (the random backbone's batch norms
are calibrated on that many training images), ``backbone_weights`` (a torchvision-format
ResNet18 file with a one-channel ``conv1`` instead of the random backbone). The images are
Fashion-MNIST's where one is found (``$QUENCH_MNIST_DIR``, then the system's data folders), else
a seeded stand-in of the same shape, and the result says which.
"""

from . import _native
from ._convert import finished, settings, table, text

__all__ = ["train"]


def train(config=None, data=None, device="auto"):
    """Trains the hybrid classifier with ``config``'s settings (``None``: the original's) on
    the images of ``data`` and returns a dict: ``data`` (where the images came from),
    ``backbone`` (which backbone), ``seeds`` (per seed: ``seed``, ``test_accuracy`` of the
    best-validation weights, ``best_validation_accuracy``, ``best_epoch``, ``train_loss`` per
    epoch), ``epochs``, ``batches_per_epoch`` and ``skipped_steps``.

    Raises ``ValueError`` for a setting, file or ``data`` key that cannot be used (the message
    names ``config`` or the file, or ``data``, and the field), ``RuntimeError`` for a device
    failure and for a training that diverged (a seed's last training loss NaN or infinite; its
    ``outcome`` attribute holds the outcome). Ctrl-C is honoured between epochs: the run stops
    after the epoch in flight and raises ``KeyboardInterrupt`` whose ``outcome`` attribute
    holds the outcome so far (every seed scored on its best weights).
    """
    device = text("device", device)
    path, given = settings("config", {} if config is None else config)
    images = None if data is None else table(
        "data", data, "a dict of the images' and backbone's settings", paths=("backbone_weights",)
    )
    return finished(_native.hybrid_train(path, given, images, device), "the training")
