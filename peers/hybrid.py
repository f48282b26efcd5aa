"""PyTorch peer of Quench's `hybrid` workload (guide 003), written from shared/WORKLOADS.md and
Quench's `quench-hybrid` crate: the hybrid quantum-classical MNIST classifier trained the
original's way, one seed at a time in eager PyTorch at batch 64.

The network: a frozen ResNet18 (BasicBlock [2, 2, 2, 2], a random 1-channel 7x7 stride-2 conv1,
no fc) run on every batch, an encoder 512 -> 128 -> 32 -> 4 (ReLU and dropout after each hidden
layer, tanh on the angles), the 4-qubit circuit (RY(x_i) angle encoding, then 3 layers of RY(w)
on every qubit and the CNOT ring 0->1, 1->2, 2->3, 3->0, read out <Z_i>), and a head
4 -> 16 -> 10. Adam (lr 1e-3, coupled weight decay 1e-4), StepLR(10, 0.1) per epoch, gradient
norm clipped to 1.0, early stopping on the validation accuracy (patience 10), the best
validation weights tested.

The circuit: the original runs each sample's circuit through PennyLane on the host
(`default.qubit`, parameter-shift gradients). PennyLane is not a dependency here, so this peer
simulates it the PyTorch-native way: every gate is real, so the state is a real 16-amplitude
vector; the batch's circuits run together as torch operations (wire 0 the most significant bit
of the basis index, as PennyLane orders it) and autograd gives the gradients, the same values
and gradients as the parameter-shift rule.

The backbone: random weights as torchvision initialises them (Kaiming-normal, fan-out), frozen,
in eval mode, its BatchNorm running statistics set to the statistics of the first
`--calibration-images` training images, layer by layer in forward order (as Quench's
`ResNet18::calibrate` does: a random backbone's (0, 1) statistics would normalise nothing).

Data: MNIST-format IDX files in `--data-dir` (plain or gzipped), scaled to [0, 1] and
normalised by (0.1307, 0.3081); the training images split 90 % / 10 % into train and
validation by a permutation seeded with `--split-seed` (the original's
`random_split(.., generator=manual_seed(42))`), each part cut to its first N samples; the first
`--test-samples` test images. Quench draws its split, backbone and initialisations from its own
generators, so the peer trains on other samples of the same sizes and from other draws.

Prints one JSON line: Quench's `batch of 64 (all seeds)`, the whole run's time (every seed's
training with its validation passes, and its test) over the batches of 64 of one seed's
training in the epochs run (the most any seed ran, as Quench counts the epochs of its batched
program), and the mean test accuracy over seeds.
"""

import argparse

import torch
from torch import nn

from common import EarlyStopping, add_timing_args, mnist_split, report, timed

QUBITS = 4
ENCODER = [512, 128, 32, QUBITS]
HEAD = [QUBITS, 16, 10]


# --- Backbone -------------------------------------------------------------------------------


def conv(in_channels, out_channels, kernel, stride):
    """A bias-free convolution padded by half its kernel, Kaiming-normal in fan-out mode."""
    layer = nn.Conv2d(in_channels, out_channels, kernel, stride, kernel // 2, bias=False)
    nn.init.kaiming_normal_(layer.weight, mode="fan_out", nonlinearity="relu")
    return layer


class BasicBlock(nn.Module):
    """torchvision's BasicBlock: two 3x3 convolutions with BatchNorm and a residual."""

    def __init__(self, in_channels, out_channels, stride):
        super().__init__()
        self.conv1 = conv(in_channels, out_channels, 3, stride)
        self.bn1 = nn.BatchNorm2d(out_channels)
        self.conv2 = conv(out_channels, out_channels, 3, 1)
        self.bn2 = nn.BatchNorm2d(out_channels)
        self.downsample = None
        if stride != 1 or in_channels != out_channels:
            self.downsample = nn.Sequential(
                conv(in_channels, out_channels, 1, stride), nn.BatchNorm2d(out_channels)
            )

    def forward(self, x):
        out = torch.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        identity = x if self.downsample is None else self.downsample(x)
        return torch.relu(out + identity)


class ResNet18(nn.Module):
    """ResNet18 with a 1-channel 7x7 stride-2 stem and no fc: [n, 1, 28, 28] -> [n, 512]."""

    def __init__(self):
        super().__init__()
        self.conv1 = conv(1, 64, 7, 2)
        self.bn1 = nn.BatchNorm2d(64)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        stages, in_channels = [], 64
        for channels, stride in [(64, 1), (128, 2), (256, 2), (512, 2)]:
            stages.append(
                nn.Sequential(
                    BasicBlock(in_channels, channels, stride), BasicBlock(channels, channels, 1)
                )
            )
            in_channels = channels
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.avgpool = nn.AdaptiveAvgPool2d(1)

    def forward(self, x):
        x = self.maxpool(torch.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.avgpool(x).flatten(1)


def frozen_backbone(seed, calibration, device):
    """The random backbone drawn from `seed`, frozen in eval mode, each BatchNorm's running
    statistics set to the per-channel mean and biased variance of its input on `calibration`
    [n, 1, 28, 28], in forward order (each later layer sees inputs normalised by the new
    statistics of the earlier ones)."""
    torch.manual_seed(seed)
    backbone = ResNet18().to(device).eval()
    for p in backbone.parameters():
        p.requires_grad_(False)

    def set_statistics(bn, inputs):
        x = inputs[0]
        bn.running_mean.copy_(x.mean(dim=(0, 2, 3)))
        bn.running_var.copy_(x.var(dim=(0, 2, 3), unbiased=False))

    hooks = [
        m.register_forward_pre_hook(set_statistics)
        for m in backbone.modules()
        if isinstance(m, nn.BatchNorm2d)
    ]
    with torch.no_grad():
        backbone(calibration.to(device))
    for hook in hooks:
        hook.remove()
    return backbone


# --- Circuit --------------------------------------------------------------------------------


def ry(state, wire, angle):
    """RY(angle) on `wire` of real states [n, 16]; `angle` is [n] or a scalar tensor."""
    n = state.shape[0]
    view = state.reshape(n, 2**wire, 2, 2 ** (QUBITS - 1 - wire))
    a0, a1 = view[:, :, 0], view[:, :, 1]
    half = angle / 2
    c, s = torch.cos(half), torch.sin(half)
    if c.dim() == 1:
        c, s = c.reshape(n, 1, 1), s.reshape(n, 1, 1)
    return torch.stack([c * a0 - s * a1, s * a0 + c * a1], dim=2).reshape(n, 2**QUBITS)


def cnot_permutation(control, target):
    """The basis permutation of CNOT(control -> target): amplitude k comes from k ^ target's
    bit where control's bit is set (wire 0 the most significant bit)."""
    c, t = 1 << (QUBITS - 1 - control), 1 << (QUBITS - 1 - target)
    return torch.tensor([k ^ t if k & c else k for k in range(2**QUBITS)])


RING = [cnot_permutation(i, (i + 1) % QUBITS) for i in range(QUBITS)]


class Circuit(nn.Module):
    """The variational circuit: angles [n, 4] -> <Z_i> [n, 4], weights [layers, 4] drawn
    N(0, weight_std^2)."""

    def __init__(self, layers, weight_std):
        super().__init__()
        self.weights = nn.Parameter(torch.randn(layers, QUBITS) * weight_std)
        self.register_buffer("ring", torch.stack(RING), persistent=False)

    def forward(self, angles):
        n = angles.shape[0]
        state = torch.zeros(n, 2**QUBITS, dtype=angles.dtype, device=angles.device)
        state[:, 0] = 1.0
        for wire in range(QUBITS):
            state = ry(state, wire, angles[:, wire])
        for layer in self.weights:
            for wire in range(QUBITS):
                state = ry(state, wire, layer[wire])
            for permutation in self.ring:
                state = state[:, permutation]
        probabilities = state.square()
        z = []
        for wire in range(QUBITS):
            view = probabilities.reshape(n, 2**wire, 2, 2 ** (QUBITS - 1 - wire))
            z.append(view[:, :, 0].sum(dim=(1, 2)) - view[:, :, 1].sum(dim=(1, 2)))
        return torch.stack(z, dim=1)


def mlp(widths, dropout):
    layers = []
    for i, (a, b) in enumerate(zip(widths, widths[1:])):
        layers.append(nn.Linear(a, b))
        if i < len(widths) - 2:
            layers += [nn.ReLU(), nn.Dropout(dropout)]
    return layers


class Hybrid(nn.Module):
    """Backbone features [n, 512] -> encoder -> tanh -> circuit -> head -> logits [n, 10]."""

    def __init__(self, args):
        super().__init__()
        self.encoder = nn.Sequential(*mlp(ENCODER, args.dropout), nn.Tanh())
        self.circuit = Circuit(args.layers, args.weight_std)
        self.head = nn.Sequential(*mlp(HEAD, args.dropout))

    def forward(self, features):
        return self.head(self.circuit(self.encoder(features)))


# --- Training -------------------------------------------------------------------------------


def load(args):
    """Train, validation and test parts: images [n, 1, 28, 28] normalised, labels [n]."""

    def normalised(images):
        return ((images.float() / 255 - args.mean) / args.std).unsqueeze(1)

    images, labels = mnist_split(args.data_dir, "train")
    order = torch.randperm(len(labels), generator=torch.Generator().manual_seed(args.split_seed))
    cut = len(labels) * 9 // 10

    def keep(part, n):
        return part if n == 0 else part[:n]

    train = keep(order[:cut], args.train_samples)
    validation = keep(order[cut:], args.validation_samples)
    test_images, test_labels = mnist_split(args.data_dir, "t10k")
    test = slice(None) if args.test_samples == 0 else slice(0, args.test_samples)
    x, y = normalised(images), labels.long()
    parts = (x[train], y[train]), (x[validation], y[validation]), (
        normalised(test_images[test]),
        test_labels[test].long(),
    )
    for name, (_, part_labels) in zip(["validation", "test"], parts[1:]):
        if len(part_labels) == 0:
            raise SystemExit(f"--{name}-samples: the {name} part is empty")
    if len(parts[0][1]) < args.batch_size:
        raise SystemExit(
            f"--batch-size {args.batch_size}: larger than the {len(parts[0][1])} training "
            "samples (the last partial batch is dropped)"
        )
    return parts


def accuracy(backbone, model, x, y, batch_size, device):
    """The whole model's accuracy on (x, y), backbone included, in batches."""
    model.eval()
    right = 0
    with torch.no_grad():
        for start in range(0, len(y), batch_size):
            xb = x[start : start + batch_size].to(device)
            yb = y[start : start + batch_size].to(device)
            right += (model(backbone(xb)).argmax(1) == yb).sum().item()
    model.train()
    return right / len(y)


def train_seed(seed, backbone, parts, args, device):
    """One seed's training: its test accuracy and the epochs it ran."""
    (x, y), (xv, yv), (xt, yt) = parts
    torch.manual_seed(seed)
    model = Hybrid(args).to(device)
    optimiser = torch.optim.Adam(
        model.parameters(), lr=args.learning_rate, weight_decay=args.weight_decay
    )
    schedule = torch.optim.lr_scheduler.StepLR(optimiser, args.step_size, args.gamma)
    loss_fn = nn.CrossEntropyLoss()
    shuffle = torch.Generator().manual_seed(seed)
    stopping, epochs = EarlyStopping(model, args.patience, higher_is_better=True), 0
    batches = len(y) // args.batch_size
    for _ in range(args.epochs):
        order = torch.randperm(len(y), generator=shuffle)
        for b in range(batches):
            rows = order[b * args.batch_size : (b + 1) * args.batch_size]
            xb, yb = x[rows].to(device), y[rows].to(device)
            with torch.no_grad():
                features = backbone(xb)
            loss = loss_fn(model(features), yb)
            optimiser.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip_norm)
            optimiser.step()
        schedule.step()
        epochs += 1
        if stopping.stop(model, accuracy(backbone, model, xv, yv, args.batch_size, device)):
            break
    stopping.restore(model)
    return accuracy(backbone, model, xt, yt, args.batch_size, device), epochs


def checked_device(name):
    if name == "cpu":
        return torch.device("cpu")
    if name == "cuda" or (name.startswith("cuda:") and name[5:].isdigit()):
        if not torch.cuda.is_available():
            raise SystemExit(f"--device {name}: this torch has no CUDA device")
        if name != "cuda" and int(name[5:]) >= torch.cuda.device_count():
            raise SystemExit(f"--device {name}: only {torch.cuda.device_count()} CUDA devices")
        return torch.device(name)
    raise SystemExit(f"--device {name}: expected cpu, cuda or cuda:N")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", required=True, help="directory of the IDX files")
    parser.add_argument("--train-samples", type=int, default=0, help="0: all 54,000")
    parser.add_argument("--validation-samples", type=int, default=0, help="0: all 6,000")
    parser.add_argument("--test-samples", type=int, default=0, help="0: all 10,000")
    parser.add_argument("--split-seed", type=int, default=42)
    parser.add_argument("--backbone-seed", type=int, default=7)
    parser.add_argument("--calibration-images", type=int, default=512)
    parser.add_argument("--seeds", default="42", help="comma-separated, one training each")
    parser.add_argument("--epochs", type=int, default=50)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    parser.add_argument("--weight-decay", type=float, default=1e-4)
    parser.add_argument("--step-size", type=int, default=10)
    parser.add_argument("--gamma", type=float, default=0.1)
    parser.add_argument("--patience", type=int, default=10)
    parser.add_argument("--clip-norm", type=float, default=1.0)
    parser.add_argument("--dropout", type=float, default=0.2)
    parser.add_argument("--layers", type=int, default=3, help="variational layers")
    parser.add_argument("--weight-std", type=float, default=0.01)
    parser.add_argument("--mean", type=float, default=0.1307)
    parser.add_argument("--std", type=float, default=0.3081)
    parser.add_argument("--device", default="cpu")
    add_timing_args(parser)
    args = parser.parse_args()
    try:
        seeds = [int(s) for s in args.seeds.split(",")]
    except ValueError:
        raise SystemExit(f"--seeds {args.seeds}: expected comma-separated integers")
    for name in ["train_samples", "validation_samples", "test_samples", "layers"]:
        if getattr(args, name) < 0:
            raise SystemExit(f"--{name.replace('_', '-')} {getattr(args, name)}: must be >= 0")
    for name in ["epochs", "batch_size", "step_size", "calibration_images"]:
        if getattr(args, name) < 1:
            raise SystemExit(f"--{name.replace('_', '-')} {getattr(args, name)}: must be >= 1")
    if not (args.learning_rate > 0 and args.clip_norm > 0 and args.std > 0):
        raise SystemExit("--learning-rate, --clip-norm and --std must be positive")
    if not (args.weight_decay >= 0 and args.gamma >= 0 and args.weight_std >= 0):
        raise SystemExit("--weight-decay, --gamma and --weight-std must be >= 0")
    if not 0 <= args.dropout < 1:
        raise SystemExit(f"--dropout {args.dropout}: must be in [0, 1)")
    device = checked_device(args.device)
    parts = load(args)
    calibration = parts[0][0][: args.calibration_images]
    backbone = frozen_backbone(args.backbone_seed, calibration, device)

    def run():
        return [train_seed(seed, backbone, parts, args, device) for seed in seeds]

    seconds, outcomes = timed(run, args)
    # Quench's unit: the run over the batches of 64 of one seed in the epochs run.
    epochs = max(e for _, e in outcomes)
    batches_of_64 = epochs * (len(parts[0][1]) // args.batch_size) * args.batch_size / 64
    per_batch = seconds / max(batches_of_64, 1.0)
    accuracies = [a for a, _ in outcomes]
    report(
        "hybrid",
        per_batch,
        "batch of 64 (all seeds)",
        "mean test accuracy",
        sum(accuracies) / len(accuracies),
        args.device,
        test_accuracies=accuracies,
        epochs=[e for _, e in outcomes],
        throughput=64 * len(seeds) / per_batch,
        throughput_unit="samples/s",
    )


if __name__ == "__main__":
    main()
