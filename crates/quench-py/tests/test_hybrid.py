"""quench.hybrid.train: a few hundred images (Fashion-MNIST where installed, else the stand-in),
the outcome's structure and repeatability, and the refusals."""

import pytest

from quench import hybrid

SMALL = {"seeds": [1, 2], "epochs": 2, "batch_size": 32}
IMAGES = {"train_samples": 128, "validation_samples": 32, "test_samples": 32,
          "calibration_images": 32}


def test_every_seed_trains_and_is_scored_on_the_test_images():
    outcome = hybrid.train(SMALL, data=IMAGES, device="cpu")
    assert "random frozen ResNet18 (seed 7)" in outcome["backbone"]
    assert "calibrated on 32 training images" in outcome["backbone"]
    assert outcome["data"]
    assert [s["seed"] for s in outcome["seeds"]] == SMALL["seeds"]
    # 128 training images at batch 32.
    assert outcome["batches_per_epoch"] == 4
    for seed in outcome["seeds"]:
        assert 0.0 <= seed["test_accuracy"] <= 1.0
        assert 1 <= len(seed["train_loss"]) <= SMALL["epochs"]
        assert all(loss > 0.0 for loss in seed["train_loss"])
    assert hybrid.train(SMALL, data=IMAGES, device="cpu") == outcome


@pytest.mark.parametrize(
    "arguments, message",
    [
        ({"config": {"epochs": 0}}, "epochs"),
        ({"config": {"no_such_setting": 1}}, "no_such_setting"),
        ({"data": {"tape": 1}}, "data"),
        ({"data": {**IMAGES, "calibration_images": 0}}, "calibration_images"),
        ({"data": {**IMAGES, "backbone_weights": "/nonexistent/resnet18.pt"}}, "resnet18.pt"),
        ({"data": 3}, "data"),
        ({"data": {**IMAGES, "train_samples": 10**12}}, "train_samples"),
        ({"device": "tpu"}, "device"),
    ],
)
def test_bad_input_is_a_value_error_naming_it(arguments, message):
    with pytest.raises(ValueError, match=message):
        hybrid.train(**{"config": SMALL, "data": IMAGES, "device": "cpu", **arguments})


def test_a_training_that_diverges_is_an_error_carrying_its_outcome():
    with pytest.raises(RuntimeError, match="seed 1: the training loss became NaN or infinite in "
                                           "epoch 0 .*training diverged") as raised:
        hybrid.train({**SMALL, "seeds": [1], "learning_rate": 1e30}, data=IMAGES, device="cpu")
    assert raised.value.outcome["seeds"][0]["train_loss"][0] is None
