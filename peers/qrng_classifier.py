"""PyTorch peer of Quench's `qrng-classifier` workload (guide 000, 1a), written from
shared/WORKLOADS.md: the bits -> 30 -> 20 -> classes MLP trained the original's way, one seed
at a time at batch 8 through a DataLoader, with Quench's model selection on a validation split
carved from the training part.

Prints one JSON line: the time per epoch of all seeds (Quench's `epoch (all seeds)`: the
run's time times the seeds over the epochs trained), the training samples per second, and the
mean test accuracy.
"""

import argparse
import math

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from common import add_timing_args, read_bit_strings, report, timed


def split(n, seed, test_fraction=0.2, validation_fraction=0.2):
    """Quench's sizes: the training part is floor(n (1 - test)), validation floor(train x val)."""
    train_part = math.floor(n * (1 - test_fraction))
    validation = math.floor(train_part * validation_fraction)
    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
    return order[: train_part - validation], order[train_part - validation : train_part], order[train_part:]


def network(bits, classes, dropout):
    layers = [
        nn.Linear(bits, 30), nn.ReLU(), nn.Dropout(dropout),
        nn.Linear(30, 20), nn.ReLU(), nn.Dropout(dropout),
        nn.Linear(20, classes),
    ]
    for layer in layers:
        if isinstance(layer, nn.Linear):
            nn.init.xavier_uniform_(layer.weight)
            nn.init.zeros_(layer.bias)
    return nn.Sequential(*layers)


def accuracy(model, x, y):
    model.eval()
    with torch.no_grad():
        right = (model(x).argmax(1) == y).float().mean().item()
    model.train()
    return right


def train_seed(x, y, classes, seed, args):
    torch.manual_seed(seed)
    train, validation, test = split(len(y), seed)
    model = network(x.shape[1], classes, args.dropout).to(args.device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, mode="max", factor=0.5, patience=50)
    loader = DataLoader(TensorDataset(x[train], y[train]), batch_size=args.batch_size, shuffle=True)
    loss_fn = nn.CrossEntropyLoss()
    xv, yv = x[validation].to(args.device), y[validation].to(args.device)
    best, best_state, since_best, epochs = -1.0, None, 0, 0
    for _ in range(args.max_epochs):
        for xb, yb in loader:
            xb, yb = xb.to(args.device), yb.to(args.device)
            loss = loss_fn(model(xb), yb) + 0.002 * sum(p.abs().sum() for p in model.parameters())
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
        epochs += 1
        current = accuracy(model, xv, yv)
        plateau.step(current)
        if current > best:
            best, since_best = current, 0
            best_state = {k: v.clone() for k, v in model.state_dict().items()}
        else:
            since_best += 1
            if since_best >= args.patience:
                break
    model.load_state_dict(best_state)
    return accuracy(model, x[test].to(args.device), y[test].to(args.device)), epochs, len(train)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data", required=True)
    parser.add_argument("--seeds", default="89,90,91,92")
    parser.add_argument("--max-epochs", type=int, default=1000)
    parser.add_argument("--patience", type=int, default=100)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--dropout", type=float, default=0.2)
    parser.add_argument("--device", default="cpu")
    add_timing_args(parser)
    args = parser.parse_args()
    lines, labels = read_bit_strings(args.data)
    classes = sorted(set(labels))
    x = torch.tensor([[c == "1" for c in line] for line in lines], dtype=torch.float32)
    y = torch.tensor([classes.index(l) for l in labels])
    seeds = [int(s) for s in args.seeds.split(",")]
    seconds, outcomes = timed(
        lambda: [train_seed(x, y, len(classes), seed, args) for seed in seeds], args
    )
    epochs = sum(e for _, e, _ in outcomes)
    samples = sum(e * n for _, e, n in outcomes)
    report(
        "qrng-classifier",
        seconds * len(seeds) / epochs,
        "epoch (all seeds)",
        "mean test accuracy",
        sum(a for a, _, _ in outcomes) / len(outcomes),
        args.device,
        throughput=samples / seconds,
        throughput_unit="samples/s",
    )


if __name__ == "__main__":
    main()
