"""PyTorch peer of Quench's `lindblad-meta` workload (guide 001), written from
shared/WORKLOADS.md: first-order MAML of qubit pulses the original's way. Tasks are adapted one
at a time; each evolution is a complex64 2x2 density matrix stepped by Euler or RK4 with
`substeps = max(1, floor((T / segments) / dt))` per segment, the trace renormalised after every
substep, and the Hamiltonian and jump operators rebuilt on every call. Gradients come from
autograd through the whole evolution.

It starts from Quench's initial policy and meets Quench's tasks, which `benchmark` writes into
`--inputs` (numpy files): `layer<l>_weight.npy` float32 `[in, out]` and `layer<l>_bias.npy`
float32 `[out]` (hidden layers `tanh(x W + b)`, the last one's output times 2 is the pulse
`[segments, controls]`), `train_tasks.npy` float64 `[iterations, tasks, 3]` (alpha, A, omega_c of
each meta-iteration's tasks) and `val_tasks.npy` float64 `[tasks, 3]`. Its quality is then
Quench's `euler-dt0.02` variant's, computed by other code.

Prints one JSON line: the median time per meta-iteration (`--timed-iterations` per run, with the
solver of `--method/--dt`: Quench's baseline uses RK4 dt 0.001) and the validation fidelity
after `--quality-iterations` meta-iterations of a separate training run with the solver of
`--quality-method/--quality-dt` (RK4 at dt 0.001 would take hours in eager PyTorch). The
fidelity is the mean clamped squared overlap on the validation tasks after adaptation, scored
with RK4 at dt 0.01 (Quench scores with its exact propagator; the two agree to 1e-4): Euler at
dt 0.02 leaves the state space (a pi pulse ends with a squared overlap above 1, which the clamp
hides), so the training solver cannot score itself.
"""

import argparse
import math
import os

import torch

import numpy as np

from common import add_timing_args, read_npy, report, timed

SEGMENTS, CONTROLS, T_TOTAL = 20, 2, 1.0
RANGES = [(0.5, 2.0, False), (0.001, 0.01, True), (100.0, 1000.0, True)]  # alpha, A, omega_c

SX = torch.tensor([[0, 1], [1, 0]], dtype=torch.complex64)
SY = torch.tensor([[0, -1j], [1j, 0]], dtype=torch.complex64)
SZ = torch.tensor([[1, 0], [0, -1]], dtype=torch.complex64)


def rate(alpha, amplitude, omega_c):
    """G: the 1/f spectrum, filtered to [0, w_max], by the trapezoid rule over [0, 2 w_max]."""
    w_max = SEGMENTS / T_TOTAL
    w = torch.linspace(0, 2 * w_max, 500, dtype=torch.float64)
    s = amplitude / (w.abs() ** alpha + omega_c**alpha + 1e-12) * (w <= w_max)
    return min(max(float(torch.trapezoid(s, w)) / (2 * w_max), 0.0), 1.0)


def features(task):
    out = []
    for v, (lo, hi, log) in zip(task, RANGES):
        if log:
            v, lo, hi = math.log(v), math.log(lo), math.log(hi)
        out.append(2 * (v - lo) / (hi - lo) - 1)
    return torch.tensor(out, dtype=torch.float32)


def read_draws(directory):
    """Quench's initial policy (weight, bias of every layer) and its training and validation
    tasks."""
    params, layer = [], 0
    while os.path.exists(os.path.join(directory, f"layer{layer}_weight.npy")):
        weight = read_npy(directory, f"layer{layer}_weight", np.float32, 2)
        bias = read_npy(directory, f"layer{layer}_bias", np.float32, 1)
        if params and weight.shape[0] != params[-1].shape[0] or weight.shape[1] != bias.shape[0]:
            raise SystemExit(f"{directory}: layer {layer}'s shapes do not follow the previous layer's")
        params += [torch.from_numpy(weight), torch.from_numpy(bias)]
        layer += 1
    if not params or params[0].shape[0] != 3 or params[-1].shape[0] != SEGMENTS * CONTROLS:
        raise SystemExit(f"{directory}: no policy from 3 task values to {SEGMENTS} x {CONTROLS} amplitudes")
    train = read_npy(directory, "train_tasks", np.float64, 3)
    val = read_npy(directory, "val_tasks", np.float64, 2)
    if train.shape[2] != 3 or val.shape[1] != 3 or len(val) == 0:
        raise SystemExit(f"{directory}: tasks must be (alpha, A, omega_c) triples")
    return params, train.tolist(), val.tolist()


def policy(params, x):
    for i in range(0, len(params) - 2, 2):
        x = torch.tanh(x @ params[i] + params[i + 1])
    return ((x @ params[-2] + params[-1]) * 2.0).reshape(SEGMENTS, CONTROLS)


def evolve(controls, g, method, dt):
    """The final state from |0><0| under the pulse, the original's way."""
    controls = controls.clamp(-10.0, 10.0).to(torch.complex64)
    jumps = torch.stack([SX, SY, SZ]) * math.sqrt(g)  # rebuilt on every call
    decay = (jumps.mH @ jumps).sum(0)
    rho = torch.tensor([[1, 0], [0, 0]], dtype=torch.complex64)
    t_seg = T_TOTAL / SEGMENTS
    substeps = max(1, math.floor(t_seg / dt))
    h = t_seg / substeps

    def rhs(r, ham):
        unitary = -1j * (ham @ r - r @ ham)
        return unitary + (jumps @ r @ jumps.mH).sum(0) - 0.5 * (decay @ r + r @ decay)

    for s in range(SEGMENTS):
        ham = 0.1 * SZ + controls[s, 0] * SX + controls[s, 1] * SY
        for _ in range(substeps):
            if method == "euler":
                rho = rho + h * rhs(rho, ham)
            else:
                k1 = rhs(rho, ham)
                k2 = rhs(rho + 0.5 * h * k1, ham)
                k3 = rhs(rho + 0.5 * h * k2, ham)
                k4 = rhs(rho + h * k3, ham)
                rho = rho + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
            rho = rho / torch.diagonal(rho).sum()
    return rho


def loss(params, task, method, dt):
    rho = evolve(policy(params, features(task)), rate(*task), method, dt)
    fidelity = (rho[1, 1].real ** 2).clamp(0.0, 1.0)  # target X|0> = |1>: |Tr(rho sigma)|^2
    return 1.0 - fidelity


def adapt(params, task, args, method, dt):
    phi = [p.detach().requires_grad_() for p in params]
    for _ in range(args.inner_steps):
        grads = torch.autograd.grad(loss(phi, task, method, dt), phi)
        phi = [(p - args.inner_lr * g).detach().requires_grad_() for p, g in zip(phi, grads)]
    return phi


def meta_step(params, adam, tasks, args, method, dt):
    total, kept = [torch.zeros_like(p) for p in params], 0
    for task in tasks:  # one at a time, as the original
        phi = adapt(params, task, args, method, dt)
        grads = torch.autograd.grad(loss(phi, task, method, dt), phi)
        if all(torch.isfinite(g).all() for g in grads):
            total = [t + g for t, g in zip(total, grads)]
            kept += 1
    for p, t in zip(params, total):
        p.grad = t / max(kept, 1)
    torch.nn.utils.clip_grad_norm_(params, 1.0)
    adam.step()


def train(args, initial, batches, method, dt):
    """The policy after a meta-step on each of `batches` from `initial`, with its optimiser."""
    params = [p.clone().requires_grad_() for p in initial]
    adam = torch.optim.Adam(params, lr=args.meta_lr)
    for tasks in batches:
        meta_step(params, adam, tasks, args, method, dt)
    return params, adam


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--inputs", required=True, help="folder of the draws Quench wrote")
    parser.add_argument("--timed-iterations", type=int, default=1)
    parser.add_argument("--quality-iterations", type=int, default=30)
    parser.add_argument("--tasks-per-batch", type=int, default=16)
    parser.add_argument("--inner-steps", type=int, default=5)
    parser.add_argument("--inner-lr", type=float, default=0.01)
    parser.add_argument("--meta-lr", type=float, default=0.001)
    parser.add_argument("--method", choices=["rk4", "euler"], default="rk4")
    parser.add_argument("--dt", type=float, default=0.001)
    parser.add_argument("--quality-method", choices=["rk4", "euler"], default="euler")
    parser.add_argument("--quality-dt", type=float, default=0.02)
    parser.add_argument("--device", default="cpu")
    add_timing_args(parser)
    args = parser.parse_args()
    if args.device != "cpu":
        raise SystemExit("the lindblad-meta peer runs on the CPU only (2x2 matrices, one task at a time)")
    for name in ["timed_iterations", "quality_iterations", "tasks_per_batch"]:
        if getattr(args, name) < 1:
            raise SystemExit(f"--{name.replace('_', '-')} must be at least 1")
    if not (args.dt > 0 and args.quality_dt > 0):
        raise SystemExit("--dt and --quality-dt must be positive")
    initial, batches, val = read_draws(args.inputs)
    needed = max(args.timed_iterations, args.quality_iterations)
    if len(batches) < needed or len(batches[0]) != args.tasks_per_batch:
        raise SystemExit(
            f"{args.inputs}/train_tasks.npy: {len(batches)} meta-batches of {len(batches[0])} tasks, "
            f"not {needed} of {args.tasks_per_batch}"
        )

    # Timed: meta-iterations from the initial policy, on the first meta-batches.
    seconds, _ = timed(
        lambda: train(args, initial, batches[: args.timed_iterations], args.method, args.dt), args
    )
    params, _ = train(
        args, initial, batches[: args.quality_iterations], args.quality_method, args.quality_dt
    )
    after = []
    for task in val:
        phi = adapt(params, task, args, args.quality_method, args.quality_dt)
        with torch.no_grad():
            after.append(1.0 - float(loss(phi, task, "rk4", 0.01)))
    report(
        "lindblad-meta",
        seconds / args.timed_iterations,
        "meta-iteration",
        f"val fidelity after {args.quality_iterations} it "
        f"(trained with {args.quality_method} dt {args.quality_dt:g}, scored with rk4 dt 0.01)",
        sum(after) / len(after),
        args.device,
        throughput=args.tasks_per_batch * args.timed_iterations / seconds,
        throughput_unit="tasks/s",
        val_tasks=len(val),
    )


if __name__ == "__main__":
    main()
