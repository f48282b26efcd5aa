"""PyTorch peer of Quench's `qrng-gan` workload (guide 000, 1b), written from
shared/WORKLOADS.md: the GAN tournament played the original's way, one match (pair x seed) at a
time, noise drawn with torch.randn each epoch.

Prints one JSON line: the time per epoch of the whole tournament (all matches, as Quench's
`epoch (all matches)`) and the mean final KL(p_real || g).
"""

import argparse
import itertools

import torch
from torch import nn

from common import add_timing_args, read_bit_strings, report, timed


def frequencies(lines, labels, bits):
    """Per source (labels in increasing order): the frequency of 1 at each leading position."""
    out = []
    for label in sorted(set(labels)):
        rows = [[c == "1" for c in line[:bits]] for line, l in zip(lines, labels) if l == label]
        out.append((label, torch.tensor(rows, dtype=torch.float32).mean(0)))
    return out


def target(f_a, f_b):
    grid = f_b[None, :].double() - f_a[:, None].double()
    grid = grid - grid.min()
    return (grid / grid.sum()).reshape(-1).float()


def kl(p, g):
    p, g = p.clamp(1e-10, 1.0), g.clamp(1e-10, 1.0)
    p, g = p / p.sum(), g / g.sum()
    return float((p * (p.log() - g.log())).sum())


def weighted_bce(d, t, w):
    return -(w * (t * torch.log(d + 1e-8) + (1 - t) * torch.log(1 - d + 1e-8))).sum()


def play(p_real, bits, epochs, seed, device):
    torch.manual_seed(seed)
    k = bits * bits
    generator = nn.Sequential(
        nn.Linear(k, 128), nn.ReLU(), nn.Linear(128, 256), nn.ReLU(), nn.Linear(256, k),
        nn.Softmax(dim=-1),
    ).to(device)
    discriminator = nn.Sequential(
        nn.Linear(2, 20), nn.LeakyReLU(0.2), nn.Linear(20, 1), nn.Sigmoid()
    ).to(device)
    adam = dict(lr=0.01, betas=(0.7, 0.999), weight_decay=0.005)
    g_opt = torch.optim.Adam(generator.parameters(), **adam)
    d_opt = torch.optim.Adam(discriminator.parameters(), **adam)
    axis = torch.linspace(0, 1, bits)
    # Point i * bits + j sits at (x_j, y_i).
    points = torch.stack([axis.repeat(bits), axis.repeat_interleave(bits)], 1).to(device)
    p_real = p_real.to(device)
    history = []
    for _ in range(epochs):
        z = torch.randn(k).to(device)
        g = generator(z)
        history.append(kl(p_real.detach().cpu(), g.detach().cpu()))
        d = discriminator(points).reshape(-1)
        g_opt.zero_grad()
        weighted_bce(d, 1.0, g).backward()
        g_opt.step()
        d_opt.zero_grad()
        d = discriminator(points).reshape(-1)
        ((weighted_bce(d, 1.0, p_real) + weighted_bce(d, 0.0, g.detach())) / 2).backward()
        d_opt.step()
    return history


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data", required=True)
    parser.add_argument("--epochs", type=int, default=100)
    parser.add_argument("--seeds", default="42")
    parser.add_argument("--bits", type=int, default=64)
    parser.add_argument("--device", default="cpu")
    add_timing_args(parser)
    args = parser.parse_args()
    lines, labels = read_bit_strings(args.data)
    sources = frequencies(lines, labels, args.bits)
    seeds = [int(s) for s in args.seeds.split(",")]

    def tournament():
        return [
            play(target(f_a, f_b), args.bits, args.epochs, seed, args.device)[-1]
            for (_, f_a), (_, f_b) in itertools.combinations(sources, 2)
            for seed in seeds
        ]

    seconds, finals = timed(tournament, args)
    report(
        "qrng-gan",
        seconds / args.epochs,
        "epoch (all matches)",
        "mean final KL(p_real || g)",
        sum(finals) / len(finals),
        args.device,
    )


if __name__ == "__main__":
    main()
