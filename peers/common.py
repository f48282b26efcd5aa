"""What every PyTorch peer shares: reading Quench's data files and the one JSON line Quench
reads back (`crates/benchmark/src/peers.rs`)."""

import json

import torch


def read_bit_strings(path):
    """qRNG lines: '0'/'1' characters followed by an integer label."""
    lines, labels = [], []
    with open(path) as f:
        for number, line in enumerate(f, 1):
            parts = line.split()
            if not parts:
                continue
            if len(parts) != 2 or set(parts[0]) - {"0", "1"}:
                raise SystemExit(f"{path}:{number}: expected '<bits> <label>'")
            lines.append(parts[0])
            labels.append(int(parts[1]))
    return lines, labels


def report(workload, per_iteration_s, iteration_unit, quality_metric, quality, device, **extra):
    """Prints the peer's line: time per iteration in the workload's own unit and its quality."""
    print(json.dumps({
        "workload": workload,
        "variant": "pytorch",
        "per_iteration_s": per_iteration_s,
        "iteration_unit": iteration_unit,
        "quality_metric": quality_metric,
        "quality": quality,
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "device": device,
        **extra,
    }))
