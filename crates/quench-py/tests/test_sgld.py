"""quench.sgld.run_grid: the test grid of configs/sgld/ from its file and as a dict, its
results' structure and repeatability, and the refusals."""

import pathlib
import tomllib

import pytest

from quench import sgld

GRID = pathlib.Path(__file__).resolve().parents[3] / "configs" / "sgld" / "synth-test.toml"


def test_the_test_grid_runs_and_reports_every_chain_and_beta():
    result = sgld.run_grid(GRID, device="cpu")
    settings = tomllib.loads(GRID.read_text())
    betas, reps = settings["betas"], settings["repetitions"]
    assert len(result["chains"]) == len(betas) * reps
    assert [b["beta"] for b in result["betas"]] == sorted(float(b) for b in betas)
    assert result["n_train"] == settings["synth"]["train"]
    assert result["n_test"] == settings["synth"]["test"]
    for chain in result["chains"]:
        for key in ("train_loss", "test_loss", "train_error", "test_error"):
            assert 0.0 <= chain[key] <= 1.0, (key, chain)
    for summary in result["betas"]:
        # A KL divergence is never negative, so neither is the bound's gap.
        assert summary["bound"]["kl"] >= 0.0 and summary["bound"]["gap"] >= 0.0
        assert summary["test_error"]["std"] >= 0.0


def test_a_dict_of_the_same_settings_gives_the_same_results_bit_for_bit():
    settings = tomllib.loads(GRID.read_text())
    assert sgld.run_grid(settings, device="cpu") == sgld.run_grid(GRID, device="cpu")


@pytest.mark.parametrize(
    "change, message",
    [
        ({"betas": [1, 2, 3]}, "betas"),
        ({"repetitions": 0}, "repetitions"),
        ({"hidden": "wide"}, "config"),
    ],
)
def test_bad_settings_are_refused_naming_the_field(change, message):
    settings = tomllib.loads(GRID.read_text())
    settings.update(change)
    with pytest.raises(ValueError, match=message):
        sgld.run_grid(settings, device="cpu")


def test_a_missing_file_and_a_wrong_type_are_value_errors():
    with pytest.raises(ValueError, match="no-such-grid.toml"):
        sgld.run_grid("no-such-grid.toml", device="cpu")
    with pytest.raises(ValueError, match="config"):
        sgld.run_grid(42, device="cpu")
    with pytest.raises(ValueError, match="config"):
        sgld.run_grid({"betas": [0.0, float("nan")]}, device="cpu")
