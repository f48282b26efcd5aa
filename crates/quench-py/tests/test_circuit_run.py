"""quench.circuit.run: per-sample inputs, shared weights, <Z_i Z_j> and gradients, against a
numpy state-vector simulation in f64."""

import numpy as np
import pytest

from quench import circuit

import reference

# A layer of RY encodings, a trained RX per qubit, a fixed RZ and a CNOT ring: every angle
# source and entangling gates, on three qubits.
QUBITS = 3
GATES = (
    [{"gate": "ry", "wires": [q], "angle": {"input": q}} for q in range(QUBITS)]
    + [{"gate": "rx", "wires": [q], "angle": {"weight": q}} for q in range(QUBITS)]
    + [{"gate": "rz", "wires": [1], "angle": 0.4}]
    + [{"gate": "cnot", "wires": [q, (q + 1) % QUBITS]} for q in range(QUBITS)]
    + [{"gate": "ry", "wires": [0], "angle": {"input": 0}}]
)
PAIRS = [(0, 1), (0, 2), (1, 2)]


def bound(gates, inputs, weights):
    """The gates with row ``inputs`` and ``weights`` put in for their sources."""
    out = []
    for gate in gates:
        gate = dict(gate)
        angle = gate.get("angle")
        if isinstance(angle, dict):
            gate["angle"] = inputs[angle["input"]] if "input" in angle else weights[angle["weight"]]
        out.append(gate)
    return out


def objective(inputs, weights, dz, dzz):
    """sum(z dz) + sum(zz dzz) in f64, row by row."""
    total = 0.0
    for row, cz, czz in zip(inputs, dz, dzz):
        gates = bound(GATES, row, weights)
        total += reference.circuit_z(QUBITS, gates) @ cz
        total += reference.circuit_zz(QUBITS, gates, PAIRS) @ czz
    return total


def test_outputs_and_gradients_match_an_f64_simulation():
    rng = np.random.default_rng(7)
    inputs = rng.uniform(-np.pi, np.pi, (5, QUBITS))
    weights = rng.uniform(-np.pi, np.pi, QUBITS)
    dz = rng.normal(size=(5, QUBITS))
    dzz = rng.normal(size=(5, len(PAIRS)))
    out = circuit.run(QUBITS, GATES, inputs, weights, PAIRS, dz, dzz, device="cpu")
    want_z = np.stack([reference.circuit_z(QUBITS, bound(GATES, r, weights)) for r in inputs])
    want_zz = np.stack([reference.circuit_zz(QUBITS, bound(GATES, r, weights), PAIRS) for r in inputs])
    # f32 state vectors: eleven gates, each rounding a unit-norm state at 1.2e-7.
    np.testing.assert_allclose(out.z, want_z, atol=1e-5)
    np.testing.assert_allclose(out.zz, want_zz, atol=1e-5)
    # Central differences in f64 (step 1e-5: truncation ~1e-10); Quench's f32 adjoint pass
    # carries about the forward pass's rounding per output, times the cotangents' sum (~20
    # terms of size ~1 for the weights, which every row shares).
    h = 1e-5
    numeric_inputs = np.zeros_like(inputs)
    for index in np.ndindex(inputs.shape):
        up, down = inputs.copy(), inputs.copy()
        up[index] += h
        down[index] -= h
        numeric_inputs[index] = (objective(up, weights, dz, dzz) - objective(down, weights, dz, dzz)) / (2 * h)
    numeric_weights = np.zeros_like(weights)
    for k in range(QUBITS):
        up, down = weights.copy(), weights.copy()
        up[k] += h
        down[k] -= h
        numeric_weights[k] = (objective(inputs, up, dz, dzz) - objective(inputs, down, dz, dzz)) / (2 * h)
    assert out.inputs_grad.shape == inputs.shape and out.weights_grad.shape == weights.shape
    np.testing.assert_allclose(out.inputs_grad, numeric_inputs, atol=1e-4)
    np.testing.assert_allclose(out.weights_grad, numeric_weights, atol=5e-4)


def test_without_cotangents_no_gradients_and_without_inputs_one_row():
    bell = [{"gate": "h", "wires": [0]}, {"gate": "cnot", "wires": [0, 1]}]
    out = circuit.run(2, bell, pairs=[(0, 1), (1, 0)])
    np.testing.assert_allclose(out.z, [[0, 0]], atol=1e-6)
    np.testing.assert_allclose(out.zz, [[1, 1]], atol=1e-6)
    assert out.inputs_grad is None and out.weights_grad is None
    # A weight only: its gradient through a one-row batch; d<Z>/dt of RY(t)|0> is -sin t.
    ry = [{"gate": "ry", "wires": [0], "angle": {"weight": 0}}]
    out = circuit.run(1, ry, weights=[0.3], z_cotangent=[[1.0]])
    np.testing.assert_allclose(out.z, [[np.cos(0.3)]], atol=1e-6)
    np.testing.assert_allclose(out.weights_grad, [-np.sin(0.3)], atol=1e-6)
    assert out.inputs_grad.shape == (1, 0)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(), "inputs: the circuit reads 3 input column(s)"),
        (dict(inputs=np.zeros((2, 2))), "inputs: expected shape [batch, 3], found [2, 2]"),
        (dict(inputs=np.zeros((0, 3)), weights=np.zeros(3)), "inputs: no rows"),
        (dict(inputs=np.zeros((2, 3))), "weights: the circuit reads 3 weight(s), found 0"),
        (dict(inputs=np.full((2, 3), np.nan), weights=np.zeros(3)), "inputs[0, 0]: NaN is not finite"),
        (dict(inputs=np.zeros((2, 3)), weights=[0, 0, 1e300 * 1e300]), "weights[2]: inf is not finite"),
        # Finite in f64, infinite once the device holds it in f32: refused, not NaN results.
        (dict(inputs=np.full((2, 3), 1e39), weights=np.zeros(3)), "inputs[0, 0]: 1e39 is not finite in f32"),
        (dict(inputs=np.zeros((2, 3)), weights=[0, 1e300, 0]), "weights[1]: 1e300 is not finite in f32"),
        (dict(inputs=np.zeros((2, 3)), weights=np.zeros(3), z_cotangent=np.full((2, 3), -1e300)),
         "z_cotangent[0, 0]: -1e300 is not finite in f32"),
        (dict(inputs=np.zeros((2, 3)), weights=np.zeros(3), pairs=[(0, 3)]), "pairs: (0, 3) names a wire beyond"),
        (dict(inputs=np.zeros((2, 3)), weights=np.zeros(3), z_cotangent=np.zeros((1, 3))), "z_cotangent: expected shape [2, 3]"),
        (dict(inputs=np.zeros((2, 3)), weights=np.zeros(3), zz_cotangent=np.zeros((2, 0))), "zz_cotangent: given without z_cotangent"),
        (dict(inputs=np.zeros((2, 3)) + 0j, weights=np.zeros(3)), "inputs: expected real numbers"),
        # The documented shapes, not flattened into them.
        (dict(inputs=np.zeros((2, 3)), weights=np.zeros((1, 3))), "weights: expected a 1-D array, found shape [1, 3]"),
        (dict(inputs=np.zeros((2, 3)), weights=0.5), "weights: expected a 1-D array, found shape []"),
        (dict(inputs=np.zeros(3), weights=np.zeros(3)), "inputs: expected a 2-D array, found shape [3]"),
    ],
)
def test_bad_arguments_are_named(kwargs, message):
    with pytest.raises(ValueError, match="^" + __import__("re").escape(message)):
        circuit.run(QUBITS, GATES, **kwargs)


def test_gradients_that_overflow_f32_are_refused_not_returned():
    # Each cotangent is finite in f32; the input's two gates add two such products.
    gates = [
        {"gate": "ry", "wires": [0], "angle": {"input": 0}},
        {"gate": "rx", "wires": [1], "angle": {"input": 0}},
        {"gate": "cnot", "wires": [0, 1]},
    ]
    with pytest.raises(ValueError, match=r"^z_cotangent, zz_cotangent: the gradients overflow f32"):
        circuit.run(2, gates, inputs=[[0.1]], z_cotangent=np.full((1, 2), 3e38))
    # A large cotangent whose gradients fit is no error.
    out = circuit.run(2, gates, inputs=[[0.1]], z_cotangent=np.full((1, 2), 1e30))
    assert np.isfinite(out.inputs_grad).all()


def test_a_bad_angle_source_names_the_gate():
    gates = [{"gate": "ry", "wires": [0], "angle": {"input": -1}}]
    with pytest.raises(ValueError, match=r"^circuit 0, gate 0: angle"):
        circuit.run(1, gates, inputs=np.zeros((1, 1)))
