"""Ctrl-C between epochs of the training calls (quench.qrng.classify, quench.temporal.train,
quench.hybrid.train): the run stops after the epoch in flight and KeyboardInterrupt carries
the outcome of the epochs that finished, every seed scored on its best weights so far."""

import _thread
import threading

import pytest

from quench import hybrid, qrng, temporal

# Far more epochs than half a second holds, and patience beyond them: only Ctrl-C stops these.
EPOCHS = 5_000


def interrupted(call):
    """Runs ``call`` with a Ctrl-C as Python delivers it (the main thread's pending
    KeyboardInterrupt) half a second in; returns the exception's outcome."""
    timer = threading.Timer(0.5, _thread.interrupt_main)
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt) as stopped:
            call()
    finally:
        timer.cancel()
    return stopped.value.outcome


def test_the_classifier_stops_between_epochs_keeping_every_seed():
    outcome = interrupted(lambda: qrng.classify(
        {"seeds": [1, 2], "max_epochs": EPOCHS, "early_stopping_patience": EPOCHS},
        data={"source": "synthetic", "synthetic_lines": 60},
        device="cpu",
    ))
    for seed in outcome["seeds"]:
        assert 1 <= seed["epochs"] < EPOCHS
        assert len(seed["history"]) == seed["epochs"]
        assert 0.0 <= seed["test_accuracy"] <= 1.0


def test_the_temporal_training_stops_between_epochs():
    outcome = interrupted(lambda: temporal.train(
        "mlp",
        {"seeds": [1], "epochs": EPOCHS, "patience": EPOCHS, "warmup_epochs": 0,
         "widths": {"mlp": [8, 8]}},
        data={"market": {"symbols": 1, "bars": 900, "seed": 3}},
        device="cpu",
    ))
    assert 1 <= outcome["epochs"] < EPOCHS
    assert 0.0 <= outcome["seeds"][0]["test"]["accuracy"] <= 1.0


def test_the_hybrid_training_stops_between_epochs():
    outcome = interrupted(lambda: hybrid.train(
        {"seeds": [1], "epochs": EPOCHS, "patience": EPOCHS, "batch_size": 32},
        data={"train_samples": 64, "validation_samples": 32, "test_samples": 32,
              "calibration_images": 32},
        device="cpu",
    ))
    assert 1 <= outcome["epochs"] < EPOCHS
    assert 0.0 <= outcome["seeds"][0]["test_accuracy"] <= 1.0
