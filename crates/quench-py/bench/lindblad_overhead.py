"""Issue 52's overhead measurement: what the Python call `quench.lindblad.evolve` adds over its
Rust half, in one process, on the problem of `lindblad_peers.py` (guide 001's qubit, 1,024
tasks of 20 segments, exact method, CPU backend).

The Rust half is timed inside Rust by the benchmark hook `quench._native.lindblad_native_seconds`
(not part of the API): the request's checks, the evolution and the conversion of the states
back into matrices, for the same arguments, without the conversion of the arguments to numpy
arrays, their copies into Rust and the result's handing over as a numpy array. Calls
alternate one by one (a Python call on the wall clock, then one Rust half timed inside Rust,
each reached from the same Python loop), so that both see the same gaps between calls (the
CPU backend's worker threads go to sleep in a long one) and the same drift of the machine's
speed; the overhead is the difference of the medians over the Rust median, with the spread of
each round's overhead beside it.

    python crates/quench-py/bench/lindblad_overhead.py [--tasks 1024] [--rounds 9] [--calls 20]
"""

import argparse
import platform
import statistics
import time

import numpy as np

from lindblad_peers import RHO0, SX, SY, SZ, T_TOTAL, problem
from quench import _native, lindblad


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--calls", type=int, default=20)
    args = parser.parse_args()

    amplitudes, rates = problem(args.tasks)
    per_jump = np.repeat(rates[:, None], 3, axis=1)
    system = lindblad.System(0.1 * SZ, [SX, SY], [SX, SY, SZ])

    def python_call():
        return lindblad.evolve(system, RHO0, amplitudes, per_jump, T_TOTAL, device="cpu")

    def rust_calls(count):
        return _native.lindblad_native_seconds(
            system._native, RHO0, amplitudes, per_jump, T_TOTAL, "exact", None, "cpu", None,
            count,
        )

    python_call()  # warm-up: buffers, the thread pool
    rust_calls(1)
    python_times, rust_times, overheads = [], [], []
    for _ in range(args.rounds):
        round_python, round_rust = [], []
        for _ in range(args.calls):
            start = time.perf_counter()
            python_call()
            round_python.append(time.perf_counter() - start)
            round_rust += rust_calls(1)
        python_times += round_python
        rust_times += round_rust
        p, r = statistics.median(round_python), statistics.median(round_rust)
        overheads.append((p - r) / r)

    p, r = statistics.median(python_times), statistics.median(rust_times)
    print(f"{platform.processor() or platform.machine()}, {args.tasks} tasks x 20 segments, "
          f"exact, CPU; {args.rounds} rounds of {args.calls} calls of each")
    print(f"Python call  quench.lindblad.evolve   median {p * 1e3:8.3f} ms")
    print(f"Rust half    (timed inside Rust)      median {r * 1e3:8.3f} ms")
    print(f"overhead     {100 * (p - r) / r:+.2f} % of the Rust half "
          f"({(p - r) * 1e6:.0f} us); per round {100 * min(overheads):+.2f} to "
          f"{100 * max(overheads):+.2f} %")


if __name__ == "__main__":
    main()
