"""One training step of guide 004's networks in PyTorch at the guide's batch of 256 windows of
20 bars x 29 features, dropout off: the peer of Quench's criterion benchmark
`cargo bench -p quench-benches --bench temporal` (group `temporal_step_b256`). A step is the
forward pass, cross-entropy with label smoothing 0.1, the backward pass and every gradient
summed once (Quench's benchmark reads a gradient back), on random inputs.

The networks are `peers/temporal.py`'s (`LstmNet`: bidirectional `nn.LSTM`, 2 layers of 128,
attention pooling; `TransformerNet`: pre-norm encoder, 3 layers, d 128, 8 heads, feed-forward
512), at their defaults. Prints one JSON line per model: the median and the spread of
`--repeats` steps after `--warmup` untimed ones, in milliseconds, and PyTorch's thread count.
"""

import argparse
import json
import statistics
import time

import torch
from torch import nn

from temporal import LstmNet, TransformerNet

BATCH, WINDOW, FEATURES = 256, 20, 29


def step_times(model, warmup, repeats):
    x = torch.randn(BATCH, WINDOW, FEATURES)
    y = torch.randint(0, 3, (BATCH,))
    loss_fn = nn.CrossEntropyLoss(label_smoothing=0.1)
    times = []
    for k in range(warmup + repeats):
        start = time.perf_counter()
        model.zero_grad(set_to_none=True)
        loss_fn(model(x), y).backward()
        total = sum(p.grad.sum() for p in model.parameters())
        total.item()
        if k >= warmup:
            times.append(time.perf_counter() - start)
    return times


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="lstm,transformer")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    if args.warmup < 0 or args.repeats < 1:
        raise SystemExit(f"--warmup {args.warmup} --repeats {args.repeats}: need >= 0 and >= 1")
    torch.manual_seed(1)
    for name in args.models.split(","):
        if name == "lstm":
            model = LstmNet(FEATURES, 128, 2, 128, 0.0)
        elif name == "transformer":
            model = TransformerNet(FEATURES, WINDOW, 128, 8, 512, 3, 0.0)
        else:
            raise SystemExit(f"--models: {name!r} is not lstm or transformer")
        model.train()
        times = step_times(model, args.warmup, args.repeats)
        print(json.dumps({
            "model": name,
            "batch": BATCH,
            "median_ms": round(1e3 * statistics.median(times), 2),
            "min_ms": round(1e3 * min(times), 2),
            "max_ms": round(1e3 * max(times), 2),
            "threads": torch.get_num_threads(),
            "torch": torch.__version__,
        }))


if __name__ == "__main__":
    main()
