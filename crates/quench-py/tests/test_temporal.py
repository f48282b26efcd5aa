"""quench.temporal.train: each model on a small synthetic market, the outcome's structure and
repeatability, settings from a dict and a file, and the refusals."""

import pytest

from quench import temporal

MARKET = {"market": {"symbols": 2, "bars": 900, "seed": 3}}
SMALL = {
    "seeds": [1, 2],
    "epochs": 2,
    "widths": {"lstm_hidden": 8, "lstm_layers": 1, "lstm_head": 8, "d_model": 16, "heads": 2,
               "feed_forward": 32, "encoder_layers": 1, "mlp": [16, 8]},
}


@pytest.mark.parametrize("model", ["lstm", "transformer", "mlp"])
def test_each_model_trains_every_seed_and_scores_it(model):
    outcome = temporal.train(model, SMALL, data=MARKET, device="cpu")
    assert outcome["model"] == model
    assert "synthetic market, 2 symbols x 900 bars" in outcome["data"]
    assert [s["seed"] for s in outcome["seeds"]] == SMALL["seeds"]
    for seed in outcome["seeds"]:
        assert 1 <= len(seed["train_loss"]) <= SMALL["epochs"]
        for part in ("validation", "test"):
            assert 0.0 <= seed[part]["accuracy"] <= 1.0
            assert 0.0 <= seed[part]["macro_f1"] <= 1.0
    assert outcome["train_windows"] > 0 and outcome["batches_per_epoch"] > 0


def test_the_same_call_gives_the_same_outcome_and_a_file_the_same_as_a_dict(tmp_path):
    settings = tmp_path / "lstm.toml"
    settings.write_text(
        "seeds = [1, 2]\nepochs = 2\n[widths]\nlstm_hidden = 8\nlstm_layers = 1\nlstm_head = 8\n"
        "d_model = 16\nheads = 2\nfeed_forward = 32\nencoder_layers = 1\nmlp = [16, 8]\n"
    )
    outcome = temporal.train("lstm", SMALL, data=MARKET, device="cpu")
    assert temporal.train("lstm", SMALL, data=MARKET, device="cpu") == outcome
    assert temporal.train("lstm", settings, data=MARKET, device="cpu") == outcome


@pytest.mark.parametrize(
    "arguments, message",
    [
        ({"model": "gru"}, "model"),
        ({"model": 3}, "model"),
        ({"config": {"model": "mlp"}}, "model"),
        ({"config": {"epochs": 0}}, "epochs"),
        ({"config": {"no_such_setting": 1}}, "no_such_setting"),
        ({"config": {"epochs": "two"}}, r"^config: epochs: invalid type"),
        ({"config": "no-such.toml"}, "no-such.toml"),
        ({"data": {"files": ["/nonexistent/EURUSD_M1.csv"]}}, "EURUSD_M1.csv"),
        ({"data": {"market": {"symbols": 0}}}, "symbols"),
        ({"data": {"tape": 1}}, "data"),
        ({"data": {"market": {"symbols": "x"}}}, r"^data: market\.symbols: invalid type"),
        ({"data": {"files": ["a.csv"], "market": {"symbols": 3}}}, r"^data: market = "),
        ({"device": "tpu"}, "device"),
        # Refused before any work by the run's memory estimate, as the caller's settings.
        ({"config": {**SMALL, "widths": {**SMALL["widths"], "mlp": [10**9, 8]}}}, "memory"),
    ],
)
def test_bad_input_is_a_value_error_naming_it(arguments, message):
    with pytest.raises(ValueError, match=message):
        temporal.train(**{"model": "mlp", "config": SMALL, "data": MARKET, "device": "cpu",
                          **arguments})


def test_a_nan_in_a_settings_file_is_refused_as_the_nan_it_is(tmp_path):
    # Read through JSON, TOML's nan had become null ("invalid type: null").
    path = tmp_path / "nan.toml"
    path.write_text("learning_rate = nan\n")
    with pytest.raises(ValueError, match=r"learning_rate = NaN"):
        temporal.train("mlp", str(path), data=MARKET, device="cpu")
