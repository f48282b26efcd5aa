"""Independent numpy references for the tests: a vectorised Lindbladian exponentiated per
segment in complex128, and a state-vector circuit simulator."""

import numpy as np


def expm(a):
    """exp(a) of a complex matrix: scaling and squaring with a degree-24 Taylor polynomial.

    After scaling ||a / 2^s||_1 <= 0.5 the truncation error is below 0.5^25 / 25! (1e-33),
    so the result is accurate to the rounding of the squarings, about s * 1e-16 * ||exp(a)||.
    """
    norm = np.abs(a).sum(axis=0).max()
    s = max(0, int(np.ceil(np.log2(norm / 0.5))) if norm > 0 else 0)
    scaled = a / 2.0**s
    result = np.eye(a.shape[0], dtype=np.complex128)
    term = np.eye(a.shape[0], dtype=np.complex128)
    for k in range(1, 25):
        term = term @ scaled / k
        result = result + term
    for _ in range(s):
        result = result @ result
    return result


def liouvillian(h, jumps, rates):
    """The Lindbladian as a d^2 x d^2 matrix acting on row-major vec(rho):
    vec(A rho B) = (A kron B^T) vec(rho)."""
    d = h.shape[0]
    eye = np.eye(d)
    sup = -1j * (np.kron(h, eye) - np.kron(eye, h.T))
    for l, g in zip(jumps, rates):
        ldl = l.conj().T @ l
        sup = sup + g * (np.kron(l, l.conj()) - 0.5 * np.kron(ldl, eye) - 0.5 * np.kron(eye, ldl.T))
    return sup


def evolve(drift, controls, jumps, rho0, amplitudes, rates, t_total):
    """Final states [tasks, d, d] (complex128) of piecewise-constant pulses."""
    tasks, segments, _ = amplitudes.shape
    d = drift.shape[0]
    rho0 = np.broadcast_to(rho0, (tasks, d, d))
    t_seg = t_total / segments
    out = np.empty((tasks, d, d), dtype=np.complex128)
    for t in range(tasks):
        v = rho0[t].reshape(-1).astype(np.complex128)
        for s in range(segments):
            h = drift + sum(u * hc for u, hc in zip(amplitudes[t, s], controls))
            v = expm(liouvillian(h, jumps, rates[t]) * t_seg) @ v
        out[t] = v.reshape(d, d)
    return out


def random_hermitian(rng, d, scale=1.0):
    a = rng.normal(size=(d, d)) + 1j * rng.normal(size=(d, d))
    return scale * (a + a.conj().T) / 2


def random_density(rng, d):
    a = rng.normal(size=(d, d)) + 1j * rng.normal(size=(d, d))
    rho = a @ a.conj().T
    return rho / np.trace(rho).real


def random_pure(rng, d):
    psi = rng.normal(size=d) + 1j * rng.normal(size=d)
    return psi / np.linalg.norm(psi)


# ---- circuits: PennyLane's conventions, wire 0 the most significant bit ----

_H = np.array([[1, 1], [1, -1]], dtype=complex) / np.sqrt(2)
_X = np.array([[0, 1], [1, 0]], dtype=complex)
_Y = np.array([[0, -1j], [1j, 0]], dtype=complex)
_Z = np.array([[1, 0], [0, -1]], dtype=complex)


def _one_qubit(name, angle):
    if name == "h":
        return _H
    if name == "x":
        return _X
    if name == "y":
        return _Y
    if name == "z":
        return _Z
    c, s = np.cos(angle / 2), np.sin(angle / 2)
    if name == "rx":
        return np.array([[c, -1j * s], [-1j * s, c]])
    if name == "ry":
        return np.array([[c, -s], [s, c]], dtype=complex)
    if name == "rz":
        return np.array([[np.exp(-1j * angle / 2), 0], [0, np.exp(1j * angle / 2)]])
    if name == "phase":
        return np.array([[1, 0], [0, np.exp(1j * angle)]])
    raise ValueError(name)


def circuit_probabilities(qubits, gates):
    """The basis-state probabilities, shape (2,) * qubits, of one circuit of gate dicts."""
    psi = np.zeros((2,) * qubits, dtype=complex)
    psi[(0,) * qubits] = 1
    for gate in gates:
        name, wires = gate["gate"], gate["wires"]
        if name in ("cnot", "cz", "swap"):
            a, b = wires
            p = np.moveaxis(psi, (a, b), (0, 1)).copy()
            if name == "cnot":
                p[1] = p[1][::-1].copy()
            elif name == "cz":
                p[1, 1] = -p[1, 1]
            else:
                p = p.transpose((1, 0) + tuple(range(2, qubits))).copy()
            psi = np.moveaxis(p, (0, 1), (a, b))
        else:
            u = _one_qubit(name, gate.get("angle", 0.0))
            psi = np.moveaxis(np.tensordot(u, psi, axes=([1], [wires[0]])), 0, wires[0])
    return np.abs(psi) ** 2


def circuit_z(qubits, gates):
    """<Z_i> [qubits] of one circuit of gate dicts."""
    prob = circuit_probabilities(qubits, gates)
    return np.array(
        [prob.take(0, axis=i).sum() - prob.take(1, axis=i).sum() for i in range(qubits)]
    )


def circuit_zz(qubits, gates, pairs):
    """<Z_i Z_j> [pairs] of one circuit of gate dicts."""
    prob = circuit_probabilities(qubits, gates)
    signs = lambda i: np.where(np.indices(prob.shape)[i] == 0, 1.0, -1.0)
    return np.array([(prob * signs(i) * signs(j)).sum() for i, j in pairs])
