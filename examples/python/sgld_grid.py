"""A Gibbs-posterior SGLD grid (guide 002) from Python: the test grid of configs/sgld/ with a
hotter inverse temperature added, its errors and PAC-Bayes bounds per beta
(pip install ./crates/quench-py). Run from the repository's root."""
import tomllib

from quench import sgld

with open("configs/sgld/synth-test.toml", "rb") as f:
    settings = tomllib.load(f)
settings["betas"] = [0, 1, 10, 100]
settings["epochs"] = [1, 10, 50, 50]
settings["a0"] = [1e-7, 1e-7, 0.1, 0.1]

result = sgld.run_grid(settings)
print(f"{result['data']}: {result['n_train']} training and {result['n_test']} test points")
for b in result["betas"]:
    print(
        f"beta {b['beta']:6.1f}: test error {b['test_error']['mean']:.3f} "
        f"+- {b['test_error']['std']:.3f}, loss gap {b['loss_gap']['mean']:+.4f}, "
        f"bound {b['bound']['gap']:.4f}"
    )
