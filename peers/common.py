"""What every PyTorch peer shares: reading Quench's data files and the one JSON line Quench
reads back (`crates/benchmark/src/peers.rs`)."""

import copy
import json
import os
import time

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


def read_npy(directory, name, dtype, ndim):
    """`<directory>/<name>.npy`, which Quench wrote for the peer, checked to be an `ndim`-d
    array of `dtype`."""
    import numpy as np  # only the peers that read Quench's arrays need numpy

    path = os.path.join(directory, name + ".npy")
    try:
        array = np.load(path, allow_pickle=False)
    except OSError as err:
        raise SystemExit(f"{path}: {err}")
    except ValueError as err:
        raise SystemExit(f"{path}: not a numpy array file ({err})")
    if array.dtype != dtype or array.ndim != ndim:
        raise SystemExit(f"{path}: expected {ndim}-d {dtype}, found {array.ndim}-d {array.dtype}")
    return array


class EarlyStopping:
    """Early stopping that keeps the best weights, as Quench's: the initial weights are the
    best until a validation score strictly improves on them, and training stops once
    `patience` epochs in a row have not."""

    def __init__(self, model, patience, higher_is_better):
        self.best = float("-inf") if higher_is_better else float("inf")
        self.better = (lambda a, b: a > b) if higher_is_better else (lambda a, b: a < b)
        self.state = copy.deepcopy(model.state_dict())
        self.patience, self.since_best = patience, 0

    def stop(self, model, score):
        """Records the epoch's `score` (keeping the weights if it improved); whether to stop."""
        if self.better(score, self.best):
            self.best, self.since_best = score, 0
            self.state = copy.deepcopy(model.state_dict())
            return False
        self.since_best += 1
        return self.since_best >= self.patience

    def restore(self, model):
        """Puts the best weights back."""
        model.load_state_dict(self.state)


def add_timing_args(parser):
    """`--warmup` and `--repeats`, which Quench passes from the suite's timing (or from the
    workload's own count of timed runs, where its parameters set one)."""
    parser.add_argument("--warmup", type=int, default=0, help="untimed runs first")
    parser.add_argument("--repeats", type=int, default=1, help="timed runs (the median is kept)")


def timed(run, args):
    """Runs `run()` `args.warmup` times untimed, then `args.repeats` times timed, waiting for
    the device after each: the median run's (seconds, output)."""
    if args.warmup < 0 or args.repeats < 1:
        raise SystemExit(f"--warmup {args.warmup} --repeats {args.repeats}: need >= 0 and >= 1")

    def once():
        start = time.perf_counter()
        out = run()
        if str(args.device).startswith("cuda"):
            torch.cuda.synchronize()
        return time.perf_counter() - start, out

    for _ in range(args.warmup):
        once()
    runs = sorted((once() for _ in range(args.repeats)), key=lambda r: r[0])
    return runs[len(runs) // 2]


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


def read_idx(path):
    """An IDX file (MNIST's format), gzipped or not: a uint8 tensor of the header's shape."""
    import gzip
    import struct

    opener = gzip.open if str(path).endswith(".gz") else open
    try:
        with opener(path, "rb") as f:
            head = f.read(4)
            if len(head) != 4 or head[0] != 0 or head[1] != 0 or head[2] != 0x08:
                raise SystemExit(f"{path}: not an unsigned-byte IDX file (magic {head.hex()})")
            dims = struct.unpack(f">{head[3]}I", f.read(4 * head[3]))
            count = 1
            for d in dims:
                count *= d
            body = f.read(count)
    except OSError as err:
        raise SystemExit(f"{path}: {err}")
    if len(body) != count:
        raise SystemExit(f"{path}: {len(body)} bytes of data, the header declares {count}")
    return torch.frombuffer(bytearray(body), dtype=torch.uint8).reshape(dims)


def mnist_split(directory, split):
    """Images [n, 28, 28] (uint8) and labels [n] of `split` ("train" or "t10k") in
    `directory`, each file plain or gzipped, as Quench finds them."""
    import os

    def find(stem):
        for name in (stem, stem + ".gz"):
            path = os.path.join(directory, name)
            if os.path.exists(path):
                return path
        raise SystemExit(f"{directory}: no {stem} or {stem}.gz")

    images = read_idx(find(f"{split}-images-idx3-ubyte"))
    labels = read_idx(find(f"{split}-labels-idx1-ubyte"))
    if len(images) != len(labels):
        raise SystemExit(f"{directory}: {len(images)} {split} images but {len(labels)} labels")
    return images, labels
