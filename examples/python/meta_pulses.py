"""Meta-learning of control pulses (guide 001) from Python: the test configuration of
configs/lindblad/ with more iterations, the validation fidelity before and after each task's
few inner steps (pip install ./crates/quench-py). Ctrl-C stops it between meta-iterations and
keeps what finished. Run from the repository's root."""
import tomllib

from quench import meta

with open("configs/lindblad/test.toml", "rb") as f:
    settings = tomllib.load(f)
settings["iterations"] = 40
settings["val_interval"] = 10

try:
    history = meta.train(settings)
except KeyboardInterrupt as stop:
    history = stop.history
    print(stop)
for v in history["validations"]:
    before, after = v["before"]["state"], v["after"]["state"]
    print(
        f"iteration {v['iteration']:3}: fidelity {before['mean']:.3f} before adaptation, "
        f"{after['mean']:.3f} +- {after['std']:.3f} after ({after['tasks']} fresh tasks)"
    )
