"""Transforms for benchmarks/transform.py (and `meshfeed bench --transform
transform_fns:gil_1ms` with benchmarks/ on PYTHONPATH). Imports only the
standard library: worker processes import this module.

``gil_1ms`` spins a pure-Python loop, which holds the GIL, for about 1 ms
(``LOOPS`` iterations: $MESHFEED_BENCH_GIL_LOOPS, which the driver sets
from one calibration so that every process spins the same count, else
calibrated at import), then returns the step's columns unchanged.
"""

import os
import time


def _spin(n: int) -> int:
    x = 0
    for i in range(n):
        x += i
    return x


def calibrate(ms: float = 1.0) -> int:
    """Iterations of _spin that take ``ms`` milliseconds here (the fastest
    of 7 probes of 20,000 iterations: the machine's speed, not its load)."""
    probe = 20_000
    best = min(_t(probe) for _ in range(7))
    return max(1, round(probe * ms / 1e3 / best))


def _t(n: int) -> float:
    t = time.perf_counter()
    _spin(n)
    return time.perf_counter() - t


LOOPS = int(os.environ.get("MESHFEED_BENCH_GIL_LOOPS") or 0) or calibrate()


def gil_1ms(batch, rng):
    """About 1 ms of pure Python (the GIL held throughout); the step as it came."""
    _spin(LOOPS)
    return dict(batch)
