"""A batch of 64 noisy qubit pulses: final states and fidelity gradients (pip install ./crates/quench-py)."""
import numpy as np
from quench import lindblad

X, Z, SM = np.array([[0, 1], [1, 0]]), np.diag([1.0, -1.0]), np.array([[0, 1], [0, 0]])
system = lindblad.System(0.1 * Z, [X], [SM])  # drift, one control, one decay channel
rng = np.random.default_rng(0)
amplitudes = np.pi / 2 + 0.1 * rng.normal(size=(64, 20, 1))  # [tasks, segments, controls]
rates = rng.uniform(0, 0.05, size=(64, 1))  # [tasks, jumps]
rho = lindblad.evolve(system, np.diag([1.0, 0.0]), amplitudes, rates, t_total=1.0)
fid, grad = lindblad.fidelity_and_grad(system, np.diag([1.0, 0.0]), amplitudes, rates, 1.0, target=[0, 1])
print(f"states {rho.shape}, P(1) of task 0 = {rho[0, 1, 1].real:.4f}, best F = {fid.max():.4f}, |dF/du| = {np.abs(grad).mean():.2e}")
