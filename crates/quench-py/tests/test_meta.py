"""quench.meta.train: the test configuration of configs/lindblad/ from its file and as a dict,
the history's structure and repeatability, Ctrl-C between meta-iterations, the refusals."""

import _thread
import pathlib
import threading
import tomllib

import pytest

from quench import meta

CONFIG = pathlib.Path(__file__).resolve().parents[3] / "configs" / "lindblad" / "test.toml"


def test_the_test_configuration_trains_and_records_every_iteration():
    history = meta.train(CONFIG, device="cpu")
    settings = tomllib.loads(CONFIG.read_text())
    assert [r["iteration"] for r in history["iterations"]] == list(
        range(1, settings["iterations"] + 1)
    )
    interval = settings["val_interval"]
    assert [v["iteration"] for v in history["validations"]] == list(
        range(interval, settings["iterations"] + 1, interval)
    )
    for v in history["validations"]:
        for when in ("before", "after"):
            fidelity = v[when]["state"]["mean"]
            assert 0.0 <= fidelity <= 1.0 + 1e-6, v


def test_a_dict_of_the_same_settings_trains_the_same_losses():
    settings = tomllib.loads(CONFIG.read_text())
    losses = lambda h: [(r["loss_before"], r["loss_after"]) for r in h["iterations"]]
    assert losses(meta.train(settings, device="cpu")) == losses(meta.train(CONFIG, device="cpu"))


def test_ctrl_c_stops_between_iterations_keeping_what_finished():
    settings = tomllib.loads(CONFIG.read_text())
    settings["iterations"] = 100_000
    settings["val_interval"] = 100_000
    # Ctrl-C as Python delivers it: the main thread's pending KeyboardInterrupt.
    timer = threading.Timer(0.5, _thread.interrupt_main)
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt) as stopped:
            meta.train(settings, device="cpu")
    finally:
        timer.cancel()
    done = stopped.value.history["iterations"]
    assert 1 <= len(done) < settings["iterations"]
    assert [r["iteration"] for r in done] == list(range(1, len(done) + 1))


@pytest.mark.parametrize(
    "change, message",
    [
        ({"iterations": 0}, "iterations"),
        ({"no_such_setting": 1}, "no_such_setting"),
        # A type refused by the setting's path, not by a place in JSON the caller never wrote.
        ({"iterations": 2.5}, r"^config: iterations: invalid type: floating point `2\.5`"),
        ({"policy": {"hidden": "wide"}}, r"^config: policy\.hidden: invalid type"),
        ({"inner_steps": 10**9}, "inner_steps"),
        # Refused where the system is built, still the caller's setting: a ValueError.
        ({"policy": {"controls": 1}}, "policy.controls = 1"),
    ],
)
def test_bad_settings_are_refused_naming_the_field(change, message):
    settings = tomllib.loads(CONFIG.read_text())
    settings.update(change)
    with pytest.raises(ValueError, match=message):
        meta.train(settings, device="cpu")


def test_a_missing_file_is_a_value_error_naming_it():
    with pytest.raises(ValueError, match="no-such-config.toml"):
        meta.train("no-such-config.toml", device="cpu")
