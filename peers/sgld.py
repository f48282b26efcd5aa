"""PyTorch peer of Quench's `sgld` workload (guide 002), written from shared/WORKLOADS.md: every
(beta, repetition) chain of the grid run the original's way, one chain at a time through
autograd, noise from torch.randn.

Prints one JSON line: the time per grid epoch (the run's time over the grid's largest epoch
count, as Quench's `grid epoch`) and the mean test 0-1 error over repetitions at the last beta.

Data: SYNTH drawn here with torch's generator (seed + repetition), so the points are not
Quench's but the distribution is; or, with `--mnist-dir`, MNIST-binary from the same IDX files
Quench reads: `--per-class` training images of each of classes 0 and 1 drawn with the seed
(the same count, not the same images), every test image of the two classes, normalised
`(p / 255 - mean) / std`, one set shared by every chain.
"""

import argparse
import math

import torch
from torch import nn

from common import add_timing_args, mnist_split, report, timed


def floats(text):
    return [float(v) for v in text.split(",")]


def synth(seed, n_train, n_test, random_labels):
    g = torch.Generator().manual_seed(seed)
    direction = torch.randn(4, generator=g)
    w = torch.randn(1, generator=g).abs() * direction / direction.norm()
    x = torch.randn(n_train + n_test, 4, generator=g)
    if random_labels:
        y = torch.bernoulli(torch.full((n_train + n_test,), 0.5), generator=g)
    else:
        y = (x @ w > 0).float()
    return x[:n_train], y[:n_train], x[n_train:], y[n_train:]


def mnist_binary(directory, per_class, mean, std, seed):
    g = torch.Generator().manual_seed(seed)

    def binary(images, labels, take):
        rows = []
        for cls in (0, 1):
            of_class = (labels == cls).nonzero().squeeze(1)
            if len(of_class) < take.get(cls, 0):
                raise SystemExit(
                    f"--per-class {per_class}: class {cls} has only {len(of_class)} images"
                )
            if cls in take:
                of_class = of_class[torch.randperm(len(of_class), generator=g)[: take[cls]]]
            rows.append(of_class)
        picked = torch.cat(rows)
        x = (images[picked].reshape(len(picked), -1).float() / 255 - mean) / std
        return x, (labels[picked] == 1).float()

    x, y = binary(*mnist_split(directory, "train"), {0: per_class, 1: per_class})
    xt, yt = binary(*mnist_split(directory, "t10k"), {})
    return x, y, xt, yt


def bounded_loss(logits, y, l_max):
    """Mean of clamp(-log psi, 0, l_max), psi = e^-l + (1 - 2 e^-l) p(true class)."""
    p = torch.sigmoid(logits)
    p_true = torch.where(y > 0.5, p, 1 - p)
    floor = math.exp(-l_max)
    psi = floor + (1 - 2 * floor) * p_true
    return (-psi.log()).clamp(0, l_max).mean()


def chain(data, beta, epochs, a0, args):
    x, y, xt, yt = data
    model = nn.Sequential(nn.Linear(x.shape[1], args.hidden), nn.ReLU(), nn.Linear(args.hidden, 1))
    scale = 1.0 / args.l_max if args.loss == "unit" else 1.0
    n = len(y)
    for epoch in range(epochs):
        lr = a0 / math.sqrt(epoch + 1)
        order = torch.randperm(n)
        for start in range(0, n, args.batch_size):
            batch = order[start : start + args.batch_size]
            model.zero_grad()
            loss = bounded_loss(model(x[batch]).squeeze(1), y[batch], args.l_max) * scale
            loss.backward()
            with torch.no_grad():
                for p in model.parameters():
                    xi = torch.randn_like(p)
                    if beta > 0:
                        p -= lr / 2 * (p.grad + p / args.prior_sigma**2)
                        p -= math.sqrt(lr / beta) * xi
                    else:
                        p -= lr * xi
    with torch.no_grad():
        return float(((model(xt).squeeze(1) > 0).float() != yt).float().mean())


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--betas", type=floats, required=True)
    parser.add_argument("--epochs", type=lambda t: [int(v) for v in t.split(",")], required=True)
    parser.add_argument("--a0", type=floats, required=True)
    parser.add_argument("--repetitions", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=10)
    parser.add_argument("--hidden", type=int, default=500)
    parser.add_argument("--l-max", type=float, default=4.0)
    parser.add_argument("--loss", choices=["unit", "raw"], default="unit")
    parser.add_argument("--prior-sigma", type=float, default=1000.0)
    parser.add_argument("--train", type=int, default=50)
    parser.add_argument("--test", type=int, default=100)
    parser.add_argument("--random-labels", action="store_true")
    parser.add_argument("--mnist-dir", help="MNIST-binary from these IDX files instead of SYNTH")
    parser.add_argument("--per-class", type=int, default=5000)
    parser.add_argument("--mean", type=float, default=0.1307)
    parser.add_argument("--std", type=float, default=0.3081)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cpu")
    add_timing_args(parser)
    args = parser.parse_args()
    if args.device != "cpu":
        raise SystemExit("the sgld peer runs on the CPU only (its chains are tiny)")
    if not (len(args.betas) == len(args.epochs) == len(args.a0)):
        raise SystemExit("--betas, --epochs and --a0 need one value per beta")
    shared = None
    if args.mnist_dir:
        shared = mnist_binary(args.mnist_dir, args.per_class, args.mean, args.std, args.seed)

    def grid():
        torch.manual_seed(args.seed)
        last = []
        for r in range(args.repetitions):
            data = shared or synth(args.seed + r, args.train, args.test, args.random_labels)
            for k, (beta, epochs, a0) in enumerate(zip(args.betas, args.epochs, args.a0)):
                error = chain(data, beta, epochs, a0, args)
                if k == len(args.betas) - 1:
                    last.append(error)
        return last

    seconds, last = timed(grid, args)
    report(
        "sgld",
        seconds / max(args.epochs),
        "grid epoch",
        f"test 0-1 error at beta {args.betas[-1]:g} (mean of {args.repetitions} repetitions)",
        sum(last) / len(last),
        args.device,
    )


if __name__ == "__main__":
    main()
