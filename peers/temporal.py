"""PyTorch peer of Quench's `temporal-lstm`, `temporal-transformer` and `temporal-mlp` workloads
(guide 004), written from shared/WORKLOADS.md and Quench's `quench-temporal` crate: the
3-class direction classifiers on 20-bar windows of 29 market features, trained the original's
way, one seed at a time in eager PyTorch, each batch assembled sample by sample by a
`DataLoader` without workers.

The networks (`--model`):
- lstm: LayerNorm on the input, `nn.LSTM` (bidirectional, `--lstm-layers` layers of
  `--lstm-hidden` units, dropout between layers; Xavier-uniform input weights, orthogonal
  recurrent weights, zero biases), LayerNorm, attention pooling over time (`2h -> head`, tanh,
  `-> 1`, softmax), then LayerNorm, dropout, `2h -> head`, ReLU, LayerNorm, `-> 3`.
- transformer: `Linear(29 -> d)` + LayerNorm, sinusoidal positions (sin on even, cos on odd
  channels), `nn.TransformerEncoder` of `nn.TransformerEncoderLayer(norm_first=True, GELU)`, a
  final LayerNorm, mean pooling over time, `d -> d/2` (GELU) `-> 3`. Each encoder layer is
  drawn on its own and its attention's projections and biases from U(+-1/sqrt(d)), as Quench
  (Burn) draws them. One difference stays: PyTorch's attention drops out the softmax's weights,
  Burn's the scores before the softmax.
- mlp: on the window's last bar, per hidden width Linear, BatchNorm1d, ReLU, dropout; a gate
  `h * sigmoid(Linear(h))`; `-> 3`.
Every other layer has PyTorch's default initialisation, which is Quench's.

Training: AdamW (betas 0.9, 0.999, eps 1e-8) on every parameter, the learning rate per epoch a
linear warm-up from `lr / warmup` then a cosine to zero at the last epoch (or constant without
`--cosine`), cross-entropy with label smoothing and, with `--class-weighted`, the balanced class
weights `n / (3 n_c)`, gradient norm clipped (0: not), shuffled batches keeping the last
partial one (for the MLP, unless it is a single window, on which BatchNorm cannot train), early
stopping on the validation cross-entropy (unsmoothed, unweighted; strictly lower counts), the
best weights tested. Validation and test are evaluated in chunks of 2,048 windows, as Quench
does.

Data: the windows Quench trains on, exported by its `benchmark` into `--data` (numpy files):
`rows.npy` float32 `[rows, features]` (normalised feature rows, symbols one after another), and
per part (train, validation, test) `<part>_ends.npy` int64 `[n]` (the row of each window's last
bar) and `<part>_labels.npy` int64 `[n]` (0 down, 1 flat, 2 up). A window is the `--window`
rows ending at its end row, the same values as Quench's windows.

Prints one JSON line: Quench's `epoch (all seeds)`, the whole run's time (every seed's training
with its validation passes, and its scoring) times the seeds over the epochs the seeds trained,
and the mean test macro-F1 over seeds (scikit-learn's `zero_division=0`).
"""

import argparse
import math
import os

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from common import EarlyStopping, add_timing_args, read_npy, report, timed

CLASSES = 3
PARTS = ("train", "validation", "test")
# Windows per evaluation pass, as Quench's `EVALUATION_CHUNK`.
EVALUATION_CHUNK = 2048


# --- Data -----------------------------------------------------------------------------------


def load_windows(directory, window):
    """Every part's windows `[n, window, features]` (float32) and labels `[n]` (int64)."""
    rows = read_npy(directory, "rows", np.float32, 2)
    parts = {}
    for part in PARTS:
        ends = read_npy(directory, f"{part}_ends", np.int64, 1)
        labels = read_npy(directory, f"{part}_labels", np.int64, 1)
        where = os.path.join(directory, part)
        if len(ends) == 0 or len(ends) != len(labels):
            raise SystemExit(f"{where}_*.npy: {len(ends)} window ends and {len(labels)} labels")
        if ends.min() < window - 1 or ends.max() >= len(rows):
            raise SystemExit(
                f"{where}_ends.npy: windows of {window} rows must end in rows "
                f"{window - 1}..{len(rows) - 1} (--window {window} is not the exported one?)"
            )
        if labels.min() < 0 or labels.max() >= CLASSES:
            raise SystemExit(f"{where}_labels.npy: labels outside 0..{CLASSES - 1}")
        index = ends[:, None] + np.arange(1 - window, 1)
        parts[part] = (torch.from_numpy(rows[index]), torch.from_numpy(labels))
    return parts


# --- Networks -------------------------------------------------------------------------------


class LstmNet(nn.Module):
    def __init__(self, features, hidden, layers, head, dropout):
        super().__init__()
        two_h = 2 * hidden
        self.input_norm = nn.LayerNorm(features)
        self.lstm = nn.LSTM(
            features, hidden, num_layers=layers, batch_first=True, bidirectional=True,
            dropout=dropout if layers > 1 else 0.0,
        )
        for name, p in self.lstm.named_parameters():
            if name.startswith("weight_ih"):
                nn.init.xavier_uniform_(p)
            elif name.startswith("weight_hh"):
                nn.init.orthogonal_(p)
            else:
                nn.init.zeros_(p)
        self.norm = nn.LayerNorm(two_h)
        self.attention = nn.Sequential(nn.Linear(two_h, head), nn.Tanh(), nn.Linear(head, 1))
        self.classifier = nn.Sequential(
            nn.LayerNorm(two_h), nn.Dropout(dropout), nn.Linear(two_h, head), nn.ReLU(),
            nn.LayerNorm(head), nn.Linear(head, CLASSES),
        )

    def forward(self, x):
        h, _ = self.lstm(self.input_norm(x))
        h = self.norm(h)
        weights = torch.softmax(self.attention(h), dim=1)
        return self.classifier((h * weights).sum(1))


def sinusoids(length, d):
    """`[length, d]`: channel `2k` is `sin(t w_k)`, `2k + 1` is `cos(t w_k)`, `w_k =
    10000^(-2k / d)`."""
    t = torch.arange(length, dtype=torch.float32)[:, None]
    w = torch.exp(torch.arange(0, d, 2, dtype=torch.float32) * (-math.log(10_000.0) / d))
    table = torch.zeros(length, d)
    table[:, 0::2] = torch.sin(t * w)
    table[:, 1::2] = torch.cos(t * w)
    return table


class TransformerNet(nn.Module):
    def __init__(self, features, window, d, heads, feed_forward, layers, dropout):
        super().__init__()
        self.input = nn.Linear(features, d)
        self.input_norm = nn.LayerNorm(d)
        self.register_buffer("positions", sinusoids(window, d))
        layer = nn.TransformerEncoderLayer(
            d, heads, feed_forward, dropout, activation="gelu", batch_first=True, norm_first=True,
        )
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        # PyTorch's encoder deep-copies one layer, so its layers would start equal, and its
        # attention starts Xavier-uniform with zero biases; Quench (Burn) draws each layer on
        # its own, the attention's projections and biases from U(+-1/sqrt(d)). Drawn here as
        # Quench draws them, so that the two start from the same distribution.
        bound = 1.0 / math.sqrt(d)
        for block in self.encoder.layers:
            attention = block.self_attn
            for p in (attention.in_proj_weight, attention.in_proj_bias,
                      attention.out_proj.weight, attention.out_proj.bias):
                nn.init.uniform_(p, -bound, bound)
            block.linear1.reset_parameters()
            block.linear2.reset_parameters()
        self.final_norm = nn.LayerNorm(d)
        self.hidden = nn.Linear(d, d // 2)
        self.output = nn.Linear(d // 2, CLASSES)

    def forward(self, x):
        h = self.input_norm(self.input(x)) + self.positions
        pooled = self.final_norm(self.encoder(h)).mean(1)
        return self.output(nn.functional.gelu(self.hidden(pooled)))


class GatedMlp(nn.Module):
    def __init__(self, features, widths, dropout):
        super().__init__()
        layers, fan_in = [], features
        for width in widths:
            layers += [nn.Linear(fan_in, width), nn.BatchNorm1d(width), nn.ReLU(), nn.Dropout(dropout)]
            fan_in = width
        self.body = nn.Sequential(*layers)
        self.gate = nn.Linear(fan_in, fan_in)
        self.output = nn.Linear(fan_in, CLASSES)

    def forward(self, x):
        h = self.body(x[:, -1, :])
        return self.output(h * torch.sigmoid(self.gate(h)))


def network(args, window, features):
    if args.model == "lstm":
        return LstmNet(features, args.lstm_hidden, args.lstm_layers, args.lstm_head, args.dropout)
    if args.model == "transformer":
        return TransformerNet(
            features, window, args.d_model, args.heads, args.feed_forward, args.encoder_layers,
            args.dropout,
        )
    return GatedMlp(features, args.mlp, args.dropout)


# --- Training -------------------------------------------------------------------------------


def rate_factor(epoch, args):
    """The learning rate of `epoch` (from 0) over the peak: Quench's `learning_rate_at`."""
    if epoch < args.warmup_epochs:
        return (epoch + 1) / args.warmup_epochs
    if not args.cosine:
        return 1.0
    span = max(args.epochs - args.warmup_epochs, 1)
    return 0.5 * (1.0 + math.cos(math.pi * (epoch - args.warmup_epochs) / span))


def balanced_weights(labels):
    counts = torch.bincount(labels, minlength=CLASSES).float()
    return torch.where(counts > 0, len(labels) / (CLASSES * counts), torch.zeros(CLASSES))


def macro_f1(predicted, labels):
    """Mean over the classes of 2 tp / (predicted + actual); 0 for a class in neither."""
    scores = []
    for c in range(CLASSES):
        tp = ((predicted == c) & (labels == c)).sum().item()
        denominator = (predicted == c).sum().item() + (labels == c).sum().item()
        scores.append(2 * tp / denominator if denominator else 0.0)
    return sum(scores) / CLASSES


def evaluate(model, x, y, device):
    """Mean cross-entropy and predicted classes of the whole part, in chunks."""
    model.eval()
    loss, predicted = 0.0, []
    with torch.no_grad():
        for start in range(0, len(y), EVALUATION_CHUNK):
            xb = x[start : start + EVALUATION_CHUNK].to(device)
            yb = y[start : start + EVALUATION_CHUNK].to(device)
            logits = model(xb)
            loss += nn.functional.cross_entropy(logits, yb, reduction="sum").item()
            predicted.append(logits.argmax(1).cpu())
    model.train()
    return loss / len(y), torch.cat(predicted)


def train_seed(data, seed, args):
    """One seed's run: ([(macro-F1, accuracy) on validation, on test], epochs trained)."""
    torch.manual_seed(seed)
    x, y = data["train"]
    xv, yv = data["validation"]
    window, features = x.shape[1], x.shape[2]
    model = network(args, window, features).to(args.device)
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=args.learning_rate, weight_decay=args.weight_decay
    )
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda e: rate_factor(e, args))
    weights = balanced_weights(y).to(args.device) if args.class_weighted else None
    loss_fn = nn.CrossEntropyLoss(weight=weights, label_smoothing=args.label_smoothing)
    loader = DataLoader(
        TensorDataset(x, y), batch_size=args.batch_size, shuffle=True,
        generator=torch.Generator().manual_seed(seed),
        # BatchNorm cannot train on a last batch of one window; Quench's can, so only then is
        # it dropped (one window fewer per epoch).
        drop_last=args.model == "mlp" and len(y) % args.batch_size == 1,
    )
    stopping, epochs = EarlyStopping(model, args.patience, higher_is_better=False), 0
    # The validation part is uploaded once per run, as Quench uploads it.
    xv, yv = xv.to(args.device), yv.to(args.device)
    for _ in range(args.epochs):
        for xb, yb in loader:
            xb, yb = xb.to(args.device), yb.to(args.device)
            loss = loss_fn(model(xb), yb)
            optimizer.zero_grad()
            loss.backward()
            if args.clip_norm > 0:
                nn.utils.clip_grad_norm_(model.parameters(), args.clip_norm)
            optimizer.step()
        schedule.step()
        epochs += 1
        validation_loss, _ = evaluate(model, xv, yv, args.device)
        if stopping.stop(model, validation_loss):
            break
    stopping.restore(model)
    # Validation and test scored with the best weights, as Quench scores both.
    scores = []
    for part in ("validation", "test"):
        xs, ys = data[part]
        _, predicted = evaluate(model, xs, ys, args.device)
        scores.append((macro_f1(predicted, ys), (predicted == ys).float().mean().item()))
    return scores, epochs


# --- Command line ---------------------------------------------------------------------------


def int_list(text):
    try:
        values = [int(v) for v in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected comma-separated integers")
    if not values or min(values) < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: expected non-negative integers")
    return values


def check(args):
    """Refuses, by name, settings no run can use."""
    for name in ("window", "epochs", "batch_size", "patience", "lstm_hidden", "lstm_layers",
                 "lstm_head", "d_model", "heads", "feed_forward", "encoder_layers"):
        if getattr(args, name) < 1:
            raise SystemExit(f"--{name.replace('_', '-')} {getattr(args, name)}: must be at least 1")
    if not args.seeds:
        raise SystemExit("--seeds: at least one seed")
    if args.learning_rate <= 0:
        raise SystemExit(f"--learning-rate {args.learning_rate}: must be positive")
    for name in ("weight_decay", "clip_norm", "warmup_epochs"):
        if getattr(args, name) < 0:
            raise SystemExit(f"--{name.replace('_', '-')} {getattr(args, name)}: must be at least 0")
    for name in ("label_smoothing", "dropout"):
        if not 0 <= getattr(args, name) < 1:
            raise SystemExit(f"--{name.replace('_', '-')} {getattr(args, name)}: must lie in [0, 1)")
    if args.d_model % args.heads or args.d_model < 2 or args.d_model % 2:
        raise SystemExit(f"--d-model {args.d_model}: must be even and divisible by --heads {args.heads}")
    if 0 in args.mlp:
        raise SystemExit(f"--mlp {args.mlp}: widths must be at least 1")
    if args.device != "cpu" and not (args.device == "cuda" or args.device.startswith("cuda:")):
        raise SystemExit(f"--device {args.device}: this peer runs on cpu, cuda or cuda:N")
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit(f"--device {args.device}: this torch has no CUDA device")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, choices=["lstm", "transformer", "mlp"])
    parser.add_argument("--data", required=True, help="folder of the windows Quench exported")
    parser.add_argument("--window", type=int, default=20, help="bars per window")
    parser.add_argument("--seeds", type=int_list, default=[42])
    parser.add_argument("--epochs", type=int, default=50)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--learning-rate", type=float, default=5e-4)
    parser.add_argument("--weight-decay", type=float, default=5e-4)
    parser.add_argument("--warmup-epochs", type=int, default=5)
    parser.add_argument("--cosine", action="store_true", help="cosine decay after the warm-up")
    parser.add_argument("--label-smoothing", type=float, default=0.1)
    parser.add_argument("--class-weighted", action="store_true")
    parser.add_argument("--clip-norm", type=float, default=0.5)
    parser.add_argument("--patience", type=int, default=15)
    parser.add_argument("--dropout", type=float, default=0.4)
    parser.add_argument("--lstm-hidden", type=int, default=128)
    parser.add_argument("--lstm-layers", type=int, default=2)
    parser.add_argument("--lstm-head", type=int, default=128)
    parser.add_argument("--d-model", type=int, default=128)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--feed-forward", type=int, default=512)
    parser.add_argument("--encoder-layers", type=int, default=3)
    parser.add_argument("--mlp", type=int_list, default=[128, 96, 64, 32])
    parser.add_argument("--device", default="cpu")
    add_timing_args(parser)
    args = parser.parse_args()
    check(args)
    data = load_windows(args.data, args.window)
    seconds, outcomes = timed(lambda: [train_seed(data, seed, args) for seed in args.seeds], args)
    epochs = sum(e for _, e in outcomes)
    train_windows = len(data["train"][1])

    def mean(part, k):
        return sum(scores[part][k] for scores, _ in outcomes) / len(outcomes)

    report(
        f"temporal-{args.model}",
        seconds * len(args.seeds) / epochs,
        "epoch (all seeds)",
        "mean test macro-F1",
        mean(1, 0),
        args.device,
        throughput=train_windows * epochs / seconds,
        throughput_unit="windows/s",
        test_accuracy=mean(1, 1),
        validation_macro_f1=mean(0, 0),
        epochs=[e for _, e in outcomes],
    )


if __name__ == "__main__":
    main()
