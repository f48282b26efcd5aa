"""Issue 52's Python-side benchmark, circuits: one batch of guide 003's circuit with gradients
through Quench and PennyLane, in one process, each timed the plain way (its own call, wall
clock, median of repeats after a warm-up call reported apart).

The problem: the hybrid's 4-qubit circuit (RY(x_i) angle encoding, then 3 layers of RY(w) on
every qubit followed by the CNOT ring 0->1->2->3->0), a batch of samples (1,024 by default)
with their own inputs and one set of 12 weights, read out as <Z_i>; the gradients of
sum(z * c) (c a fixed cotangent) with respect to every sample's inputs and the weights, what a
training step's backward pass asks of the circuit.

- Quench: `quench.circuit.run` with `z_cotangent`: the batch in one call (a real circuit: the
  seam's fused read-out, each sample's state in f64 on the CPU, adjoint gradients), CPU.
- PennyLane `default.qubit`, batched: one QNode call with the inputs broadcast over the batch
  (PennyLane's parameter broadcasting), backprop gradients through autograd: PennyLane's
  fastest way on the CPU for a batch.
- PennyLane `default.qubit`, one sample at a time with parameter-shift gradients: the
  original's way (as the hybrid's baseline reproduces it); run on `--per-sample` samples (64 by
  default) and scaled to the batch, a per-sample loop costing the same per sample.

Every peer's <Z_i> and gradients are compared with Quench's (the largest |difference|).

    python crates/quench-py/bench/circuit_peers.py [--batch 1024] [--repeats 5]
"""

import argparse
import os
import platform

import numpy as np

from timing import timed

QUBITS = 4
LAYERS = 3


def gates():
    """Guide 003's circuit in Quench's JSON gate format."""
    out = [{"gate": "ry", "wires": [q], "angle": {"input": q}} for q in range(QUBITS)]
    for layer in range(LAYERS):
        out += [
            {"gate": "ry", "wires": [q], "angle": {"weight": layer * QUBITS + q}}
            for q in range(QUBITS)
        ]
        out += [{"gate": "cnot", "wires": [q, (q + 1) % QUBITS]} for q in range(QUBITS)]
    return out


def problem(batch, seed=52):
    rng = np.random.default_rng(seed)
    inputs = rng.uniform(-np.pi / 2, np.pi / 2, (batch, QUBITS))
    weights = rng.uniform(-np.pi, np.pi, LAYERS * QUBITS)
    cotangent = rng.uniform(-1, 1, (batch, QUBITS))
    return inputs, weights, cotangent


def quench_run(inputs, weights, cotangent):
    from quench import circuit

    run = circuit.run(
        QUBITS, gates(), inputs=inputs, weights=weights, z_cotangent=cotangent, device="cpu"
    )
    return run.z, run.inputs_grad, run.weights_grad


def pennylane_qnode(diff_method):
    import pennylane as qml

    device = qml.device("default.qubit", wires=QUBITS)

    @qml.qnode(device, interface="autograd", diff_method=diff_method)
    def z(x, w):
        # `x` is [batch, qubits] (broadcast) or [qubits]; x[..., q] takes a column either way.
        for q in range(QUBITS):
            qml.RY(x[..., q], wires=q)
        for layer in range(LAYERS):
            for q in range(QUBITS):
                qml.RY(w[layer * QUBITS + q], wires=q)
            for q in range(QUBITS):
                qml.CNOT(wires=[q, (q + 1) % QUBITS])
        return [qml.expval(qml.PauliZ(q)) for q in range(QUBITS)]

    return z


def pennylane_batched(inputs, weights, cotangent):
    import pennylane as qml
    from pennylane import numpy as pnp

    z = pennylane_qnode("backprop")
    c = pnp.array(cotangent, requires_grad=False)

    def loss(x, w):
        values = pnp.stack(z(x, w), axis=-1)
        return pnp.sum(values * c)

    def run():
        x = pnp.array(inputs, requires_grad=True)
        w = pnp.array(weights, requires_grad=True)
        values = np.stack(z(x, w), axis=-1)
        dx, dw = qml.grad(loss, argnums=[0, 1])(x, w)
        return values, np.asarray(dx), np.asarray(dw)

    return run


def pennylane_per_sample(inputs, weights, cotangent):
    import pennylane as qml
    from pennylane import numpy as pnp

    z = pennylane_qnode("parameter-shift")

    def run():
        values, dxs = [], []
        dw = np.zeros_like(weights)
        for x, c in zip(inputs, cotangent):
            xs = pnp.array(x, requires_grad=True)
            w = pnp.array(weights, requires_grad=True)
            values.append(np.stack(z(xs, w)))
            loss = lambda a, b: pnp.sum(pnp.stack(z(a, b)) * pnp.array(c, requires_grad=False))
            dx, dwi = qml.grad(loss, argnums=[0, 1])(xs, w)
            dxs.append(np.asarray(dx))
            dw += np.asarray(dwi)
        return np.array(values), np.array(dxs), dw

    return run


def gap(a, b):
    return float(np.max(np.abs(np.asarray(a) - np.asarray(b))))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch", type=int, default=1024)
    parser.add_argument("--per-sample", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    inputs, weights, cotangent = problem(args.batch)
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores")
    print(f"guide 003's circuit, {QUBITS} qubits, {LAYERS} layers, batch {args.batch}, z and gradients")
    first, median, (z, dx, dw) = timed(lambda: quench_run(inputs, weights, cotangent), args.repeats)
    print(f"quench            {median * 1e3:10.3f} ms  (first call {first * 1e3:.3f} ms)")
    reference = median
    import pennylane as qml

    first, median, (pz, pdx, pdw) = timed(
        pennylane_batched(inputs, weights, cotangent), args.repeats
    )
    print(
        f"pennylane {qml.__version__} batched (backprop)  {median * 1e3:10.3f} ms  "
        f"(first {first * 1e3:.3f} ms)  {median / reference:7.1f}x Quench's time; "
        f"|dz| {gap(pz, z):.1e}, |dx| {gap(pdx, dx):.1e}, |dw| {gap(pdw, dw):.1e}"
    )
    n = min(args.per_sample, args.batch)
    first, median, (sz, sdx, sdw) = timed(
        pennylane_per_sample(inputs[:n], weights, cotangent[:n]), max(1, args.repeats // 5)
    )
    scaled = median * args.batch / n
    _, sub_dx, sub_dw = quench_run(inputs[:n], weights, cotangent[:n])
    print(
        f"pennylane per sample (parameter shift), {n} samples scaled to {args.batch}  "
        f"{scaled * 1e3:10.3f} ms  {scaled / reference:7.1f}x Quench's time; "
        f"|dz| {gap(sz, z[:n]):.1e}, |dx| {gap(sdx, sub_dx):.1e}, |dw| {gap(sdw, sub_dw):.1e}"
    )


if __name__ == "__main__":
    main()
