"""Issue 52's Python-side benchmark: one batched Lindblad problem through Quench, dynamiqs and
QuTiP, in one process, each timed the plain way (its own call, wall clock, median of repeats
after a warm-up call that is reported apart: JAX compiles there).

The problem is guide 001's qubit, as `quench_lindblad::presets::one_qubit` and the criterion
bench `benches/lindblad.rs` have it: H = 0.1 sz + u1(t) sx + u2(t) sy, the jumps sx, sy, sz at
each task's rate G, 1,024 tasks of 20 piecewise-constant segments over T = 1, amplitudes in
[-2, 2] and rates G in [0, 0.15] drawn from a fixed seed, every task from |0><0|.

- Quench: `quench.lindblad.evolve`, the exact method (each segment's propagator to rounding),
  f32, on the CPU backend.
- dynamiqs: `dq.mesolve` with the Hamiltonian as `dq.pwc` batched over the tasks and the jump
  operators batched beside it (`cartesian_batching=False`), its default single precision, JAX
  on the CPU, one call for the whole batch; with its default method (Tsit5, adaptive, default
  tolerances) and with `Expm` (each constant piece's propagator, Quench's exact method's way).
- QuTiP: one `qutip.mesolve` per task (its way: no batch), the segments as step-function
  coefficients (`order=0`) with `max_step` a tenth of a segment so that the integrator does not
  step over a jump of the pulse. QuTiP's loop runs `--qutip-tasks` tasks (64 by default) and is
  scaled to 1,024: a per-task loop costs the same per task (the printout says so).

Each peer's final states are compared with Quench's (the largest |difference| of a
density-matrix element over the tasks it ran).

    python crates/quench-py/bench/lindblad_peers.py [--tasks 1024] [--repeats 5]
"""

import argparse
import os
import platform

import numpy as np

from timing import timed

SX = np.array([[0, 1], [1, 0]], dtype=complex)
SY = np.array([[0, -1j], [1j, 0]], dtype=complex)
SZ = np.array([[1, 0], [0, -1]], dtype=complex)
RHO0 = np.array([[1, 0], [0, 0]], dtype=complex)
SEGMENTS = 20
T_TOTAL = 1.0


def problem(tasks, seed=52):
    """Amplitudes `[tasks, segments, 2]` and each task's rate `[tasks]`."""
    rng = np.random.default_rng(seed)
    amplitudes = rng.uniform(-2.0, 2.0, size=(tasks, SEGMENTS, 2))
    rates = rng.uniform(0.0, 0.15, size=tasks)
    return amplitudes, rates


def quench_states(amplitudes, rates):
    from quench import lindblad

    system = lindblad.System(0.1 * SZ, [SX, SY], [SX, SY, SZ])
    per_jump = np.repeat(rates[:, None], 3, axis=1)
    return lambda: lindblad.evolve(system, RHO0, amplitudes, per_jump, T_TOTAL, device="cpu")


def dynamiqs_states(amplitudes, rates, method):
    import dynamiqs as dq
    import jax
    import jax.numpy as jnp

    jax.config.update("jax_platform_name", "cpu")
    edges = jnp.linspace(0.0, T_TOTAL, SEGMENTS + 1)
    u = jnp.asarray(amplitudes, dtype=jnp.float32)
    hamiltonian = (
        dq.constant(0.1 * dq.sigmaz())
        + dq.pwc(edges, u[:, :, 0], dq.sigmax())
        + dq.pwc(edges, u[:, :, 1], dq.sigmay())
    )
    root = jnp.sqrt(jnp.asarray(rates, dtype=jnp.float32))[:, None, None]
    jumps = [root * op.to_jax() for op in (dq.sigmax(), dq.sigmay(), dq.sigmaz())]
    def run():
        result = dq.mesolve(
            hamiltonian,
            jumps,
            dq.basis_dm(2, 0),
            jnp.array([0.0, T_TOTAL]),
            method=method,
            cartesian_batching=False,
            progress_meter=False,
        )
        states = result.states.to_jax()[..., -1, :, :]
        return np.asarray(states.block_until_ready())

    return run


def qutip_states(amplitudes, rates):
    import qutip

    edges = np.linspace(0.0, T_TOTAL, SEGMENTS + 1)
    sx, sy, sz = qutip.sigmax(), qutip.sigmay(), qutip.sigmaz()
    rho0 = qutip.Qobj(RHO0)
    options = {"max_step": T_TOTAL / SEGMENTS / 10, "store_states": False, "store_final_state": True}

    def step(values):
        # Held from each edge to the next; the last edge repeats the last segment's value.
        return qutip.coefficient(np.append(values, values[-1]), tlist=edges, order=0)

    def run():
        states = []
        for u, g in zip(amplitudes, rates):
            h = qutip.QobjEvo([0.1 * sz, [sx, step(u[:, 0])], [sy, step(u[:, 1])]])
            c_ops = [np.sqrt(g) * op for op in (sx, sy, sz)]
            result = qutip.mesolve(h, rho0, [0.0, T_TOTAL], c_ops, options=options)
            states.append(result.final_state.full())
        return np.array(states)

    return run


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--qutip-tasks", type=int, default=64)
    parser.add_argument("--skip", nargs="*", default=[], choices=["dynamiqs", "qutip"])
    args = parser.parse_args()
    amplitudes, rates = problem(args.tasks)
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores")
    print(f"{args.tasks} tasks x {SEGMENTS} segments, guide 001's qubit; median of {args.repeats}")

    first, median, reference = timed(quench_states(amplitudes, rates), args.repeats)
    print(f"quench    first {first:8.4f} s  median {median:8.4f} s")
    quench_median = median

    if "dynamiqs" not in args.skip:
        import dynamiqs as dq

        for name, method in [("Tsit5", dq.method.Tsit5()), ("Expm", dq.method.Expm())]:
            run = dynamiqs_states(amplitudes, rates, method)
            first, median, states = timed(run, args.repeats)
            diff = np.abs(states - reference).max()
            print(
                f"dynamiqs {name:5} first {first:8.4f} s  median {median:8.4f} s  "
                f"quench {median / quench_median:6.1f}x faster  max |diff| {diff:.1e}  "
                f"(dynamiqs {dq.__version__})"
            )

    if "qutip" not in args.skip:
        import qutip

        some = min(args.qutip_tasks, args.tasks)
        run = qutip_states(amplitudes[:some], rates[:some])
        first, median, states = timed(run, max(1, args.repeats // 2))
        scaled = median * args.tasks / some
        diff = np.abs(states - reference[:some]).max()
        print(
            f"qutip     {some} tasks: median {median:8.4f} s, scaled to {args.tasks}: "
            f"{scaled:8.2f} s  quench {scaled / quench_median:6.0f}x faster  "
            f"max |diff| {diff:.1e}  (qutip {qutip.__version__})"
        )


if __name__ == "__main__":
    main()
