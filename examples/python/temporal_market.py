"""Guide 004 from Python: an LSTM and a Transformer predicting a synthetic market's next move
(down, flat, up) from 20-bar windows, three seeds each in one batched program, two epochs, against what
always predicting the majority class scores (pip install ./crates/quench-py). Run from the
repository's root."""
from quench import temporal

data = {"market": {"symbols": 2, "bars": 1200, "seed": 7}}
for model in ("lstm", "transformer"):
    outcome = temporal.train(model, {"seeds": [1, 2, 3], "epochs": 2}, data=data)
    print(f"{model}: {outcome['data']}; {outcome['train_windows']} training windows")
    for seed in outcome["seeds"]:
        print(f"  seed {seed['seed']}: test accuracy {seed['test']['accuracy']:.3f}, "
              f"macro F1 {seed['test']['macro_f1']:.3f} (best epoch {seed['best_epoch']})")
    majority = outcome["baselines"]["majority_test"]
    print(f"  always the majority class: accuracy {majority['accuracy']:.3f}, "
          f"macro F1 {majority['macro_f1']:.3f}")
