"""<Z_i> of a batch of angle-encoded ring circuits, as the hybrid classifier's circuit runs them
(pip install ./crates/quench-py). Circuits of the same gates and wires run as one batch."""
import numpy as np
from quench import circuit

QUBITS, LAYERS = 4, 3
rng = np.random.default_rng(0)
inputs = rng.uniform(-np.pi, np.pi, size=(256, QUBITS))  # one row of angles per sample
weights = rng.normal(0, 0.1, size=(LAYERS, QUBITS))      # shared by every sample


def ring(angles):
    gates = [{"gate": "ry", "wires": [q], "angle": a} for q, a in enumerate(angles)]
    for layer in weights:
        gates += [{"gate": "ry", "wires": [q], "angle": w} for q, w in enumerate(layer)]
        gates += [{"gate": "cnot", "wires": [q, (q + 1) % QUBITS]} for q in range(QUBITS)]
    return gates


z = circuit.expectations(QUBITS, [ring(row) for row in inputs])  # [256, 4]
print(f"<Z_i> {z.shape}: mean {z.mean(axis=0).round(4)}, range [{z.min():.3f}, {z.max():.3f}]")
