"""quench.circuit against a numpy state-vector simulation."""

import numpy as np
import pytest

from quench import circuit

import reference

ONE = ["h", "x", "y", "z", "rx", "ry", "rz", "phase"]
TWO = ["cnot", "cz", "swap"]


def random_circuit(rng, qubits, length):
    gates = []
    for _ in range(length):
        if qubits > 1 and rng.random() < 0.3:
            a, b = rng.choice(qubits, size=2, replace=False)
            gates.append({"gate": str(rng.choice(TWO)), "wires": [int(a), int(b)]})
        else:
            name = str(rng.choice(ONE))
            gate = {"gate": name, "wires": [int(rng.integers(qubits))]}
            if name in ("rx", "ry", "rz", "phase"):
                gate["angle"] = float(rng.uniform(-np.pi, np.pi))
            gates.append(gate)
    return gates


@pytest.mark.parametrize("qubits", [1, 2, 3, 4])
def test_expectations_match_a_state_vector_simulation(qubits):
    rng = np.random.default_rng(qubits)
    circuits = [random_circuit(rng, qubits, 12) for _ in range(5)]
    # Two circuits of one structure (angles aside) run as one batch.
    twin = [dict(g) for g in circuits[0]]
    for g in twin:
        if "angle" in g:
            g["angle"] += 0.5
    circuits.append(twin)
    got = circuit.expectations(qubits, circuits, device="cpu")
    want = np.stack([reference.circuit_z(qubits, c) for c in circuits])
    assert got.dtype == np.float64 and got.shape == (len(circuits), qubits)
    # f32 state vectors: a dozen gates each rounding at 1.2e-7 of a unit-norm state.
    np.testing.assert_allclose(got, want, atol=1e-5)


def test_bell_pair():
    bell = [{"gate": "h", "wires": [0]}, {"gate": "cnot", "wires": [0, 1]}]
    ry = [{"gate": "ry", "wires": [0], "angle": np.float64(0.3)}]
    got = circuit.expectations(np.int64(2), [bell, ry])
    np.testing.assert_allclose(got, [[0, 0], [np.cos(0.3), 1]], atol=1e-6)


def test_a_fixed_angle_beyond_f32_is_refused_naming_the_gate():
    # Finite in f64, infinite on the device: NaN expectations before.
    with pytest.raises(ValueError, match=r"gate 0 \(rx\): angle 1e39 is not finite in f32"):
        circuit.expectations(2, [[{"gate": "rx", "wires": [0], "angle": 1e39}]], device="cpu")
