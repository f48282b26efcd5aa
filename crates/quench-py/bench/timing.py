"""What the Python-side benchmarks share: each peer timed the plain way, its own call on the
wall clock."""

import statistics
import time


def timed(call, repeats):
    """The warm-up call's seconds, the median of `repeats` more, and the last result."""
    start = time.perf_counter()
    result = call()
    first = time.perf_counter() - start
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        result = call()
        times.append(time.perf_counter() - start)
    return first, statistics.median(times), result
