"""PyTorch peer of Quench's `loader` workload (guide 002's loader settings), written from
shared/WORKLOADS.md: one epoch of binary MNIST-like data (classes 0 and 1) through the
784 -> 500 -> 1 ReLU MLP with plain SGD, fed the original's way by a torch DataLoader (batch 32,
shuffled, last batch kept, no workers, the tensors uploaded batch by batch), then the test
accuracy, as Quench times it. Each timed run starts from the same initial weights.

Prints one JSON line: the time per epoch (training and test accuracy) and the test accuracy.
"""

import argparse

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from common import add_timing_args, mnist_split, report, timed


def binary(directory, split, mean, std, limit):
    images, labels = mnist_split(directory, split)
    keep = (labels == 0) | (labels == 1)
    x = (images[keep].reshape(-1, 784).float() / 255 - mean) / std
    y = labels[keep].float()
    if 0 < limit < len(y):
        x, y = x[:limit], y[:limit]
    return x, y


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data-dir", required=True, help="directory of the IDX files")
    parser.add_argument("--train-samples", type=int, default=0, help="first N samples; 0: all")
    parser.add_argument("--learning-rate", type=float, default=0.01)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--mean", type=float, default=0.1307)
    parser.add_argument("--std", type=float, default=0.3081)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--device", default="cpu")
    add_timing_args(parser)
    args = parser.parse_args()
    if args.batch_size < 1 or not args.learning_rate > 0:
        raise SystemExit("--batch-size and --learning-rate must be positive")
    device = torch.device(args.device)
    x, y = binary(args.data_dir, "train", args.mean, args.std, args.train_samples)
    xt, yt = binary(args.data_dir, "t10k", args.mean, args.std, 0)
    xt, yt = xt.to(device), yt.to(device)
    torch.manual_seed(args.seed)
    initial = nn.Sequential(nn.Linear(784, 500), nn.ReLU(), nn.Linear(500, 1)).state_dict()
    loader = DataLoader(
        TensorDataset(x, y),
        batch_size=args.batch_size,
        shuffle=True,
        drop_last=False,
        num_workers=args.workers,
        generator=torch.Generator().manual_seed(args.seed),
    )
    loss_fn = nn.BCEWithLogitsLoss()

    def epoch():
        model = nn.Sequential(nn.Linear(784, 500), nn.ReLU(), nn.Linear(500, 1))
        model.load_state_dict(initial)
        model.to(device)
        optimiser = torch.optim.SGD(model.parameters(), lr=args.learning_rate)
        for xb, yb in loader:
            xb, yb = xb.to(device), yb.to(device)
            optimiser.zero_grad()
            loss_fn(model(xb).squeeze(1), yb).backward()
            optimiser.step()
        with torch.no_grad():
            return float(((model(xt).squeeze(1) > 0).float() == yt).float().mean())

    seconds, accuracy = timed(epoch, args)
    report(
        "loader",
        seconds,
        "epoch",
        "test accuracy",
        accuracy,
        args.device,
        throughput=len(y) / seconds,
        throughput_unit="samples/s",
    )


if __name__ == "__main__":
    main()
