"""quench.qrng.classify and quench.qrng.tournament: the shipped configurations, shrunk, on
synthetic sources and on a recorded file, their outcomes' structure and repeatability, and the
refusals."""

import pathlib
import random
import tomllib

import pytest

from quench import qrng

CONFIGS = pathlib.Path(__file__).resolve().parents[3] / "configs" / "qrng"
SYNTHETIC = {"source": "synthetic", "synthetic_lines": 60, "synthetic_seed": 3}


def small_classifier():
    settings = tomllib.loads((CONFIGS / "classifier.toml").read_text())
    settings.update(seeds=[1, 2], max_epochs=3)
    return settings


def small_tournament():
    settings = tomllib.loads((CONFIGS / "gan.toml").read_text())
    settings.update(epochs=3, seeds=[5], bits=8)
    return settings


def test_the_classifier_trains_every_seed_and_reports_its_history():
    settings = small_classifier()
    outcome = qrng.classify(settings, data=SYNTHETIC, device="cpu")
    assert "synthetic sources, 60 lines each (seed 3)" in outcome["data"]
    assert [s["seed"] for s in outcome["seeds"]] == settings["seeds"]
    for seed in outcome["seeds"]:
        assert 1 <= seed["epochs"] <= settings["max_epochs"]
        assert len(seed["history"]) == seed["epochs"]
        assert 0.0 <= seed["test_accuracy"] <= 1.0
        for epoch in seed["history"]:
            assert epoch["train_loss"] > 0.0 and 0.0 <= epoch["validation_accuracy"] <= 1.0
    accuracies = [s["test_accuracy"] for s in outcome["seeds"]]
    assert outcome["test_accuracy"]["mean"] == pytest.approx(sum(accuracies) / len(accuracies))
    # Counter-based dropout and one batched program: the same call gives the same numbers.
    assert qrng.classify(settings, data=SYNTHETIC, device="cpu") == outcome


def test_the_tournament_plays_every_pair_of_sources():
    settings = small_tournament()
    outcome = qrng.tournament(settings, data=SYNTHETIC, device="cpu")
    assert [tuple(p["sources"]) for p in outcome["pairs"]] == [(1, 2), (1, 3), (2, 3)]
    assert len(outcome["matches"]) == 3 * len(settings["seeds"])
    for match in outcome["matches"]:
        assert len(match["kl_history"]) == settings["epochs"]
        # A KL divergence is never negative.
        assert min(match["kl_history"]) >= 0.0 and match["uniform_kl"] >= 0.0
    finals = [p["mean"] for p in outcome["pairs"]]
    assert outcome["mean_final_kl"] == pytest.approx(sum(finals) / len(finals))


def recording_of(path, sources, lines_each):
    """Lines in the original's format: 100 bits, a space, the source's label."""
    draw = random.Random(7)
    path.write_text("".join(
        "".join(draw.choice("01") for _ in range(100)) + f" {source}\n"
        for source in sources
        for _ in range(lines_each)
    ))
    return path


def test_a_recorded_file_is_read_from_its_path(tmp_path):
    recording = recording_of(tmp_path / "bits.txt", (1, 2, 3), 40)
    outcome = qrng.classify(small_classifier(), data=recording, device="cpu")
    assert str(recording) in outcome["data"]
    assert len(outcome["seeds"]) == 2


@pytest.mark.parametrize(
    "call, arguments, message",
    [
        (qrng.classify, {"config": {"lr": 0.0}}, "lr"),
        (qrng.classify, {"config": {"no_such_setting": 1}}, "no_such_setting"),
        (qrng.classify, {"config": "no-such.toml"}, "no-such.toml"),
        (qrng.classify, {"config": {}, "data": {"source": "tape"}}, "data"),
        (qrng.classify, {"config": {}, "data": "no-such-bits.txt"}, "no-such-bits.txt"),
        (qrng.classify, {"config": {}, "data": 3}, "data"),
        (qrng.tournament, {"config": {"epochs": 0}}, "epochs"),
        (qrng.tournament, {"config": {"adam": {"beta1": 2}}}, "adam.beta1"),
        (qrng.tournament, {"config": {}, "device": "tpu"}, "device"),
    ],
)
def test_bad_input_is_a_value_error_naming_it(call, arguments, message):
    with pytest.raises(ValueError, match=message):
        call(**{"device": "cpu", **arguments})


def test_a_file_where_a_source_has_no_line_is_refused_naming_it(tmp_path):
    recording = recording_of(tmp_path / "two-sources.txt", (1, 2), 20)
    with pytest.raises(ValueError, match="two-sources.txt.*label 3"):
        qrng.classify(small_classifier(), data=recording, device="cpu")


def test_a_classifier_that_diverges_is_an_error_carrying_its_outcome():
    settings = small_classifier()
    settings.update(seeds=[1], lr=1e30)
    with pytest.raises(RuntimeError, match="seed 1: the training loss became NaN") as raised:
        qrng.classify(settings, data=SYNTHETIC, device="cpu")
    assert raised.value.outcome["seeds"][0]["history"][0]["train_loss"] is None
