"""The simulated training step of ``meshfeed bench``: a plain sleep, or a
jitted computation calibrated to take a given time on the present device."""

from __future__ import annotations

import time
from typing import Any, Callable

import numpy as np

_DIM = 256          # the busy loop multiplies a _DIM x _DIM matrix
_PROBE_S = 0.05     # calibration: time spent per probe


class SleepStep:
    """Sleeps ``ms`` milliseconds per step (the device stays idle)."""

    kind = "sleep"

    def __init__(self, ms: float):
        self.ms = float(ms)
        self.iterations = 0

    def __call__(self, batch: Any) -> None:
        if self.ms > 0:
            time.sleep(self.ms / 1e3)


class ComputeStep:
    """A jitted loop of ``_DIM``-square matrix products on ``device``, run for
    ``iterations`` iterations per step (a runtime argument: one compilation),
    chosen by :meth:`calibrate` so that a step takes about ``ms`` ms there."""

    kind = "compute"

    def __init__(self, ms: float, device: Any):
        import jax
        import jax.numpy as jnp

        self.ms = float(ms)
        self.iterations = 0
        self._jax = jax

        def busy(carry, n):
            def body(_, c):
                return jnp.tanh(c @ c) * 0.5 + 0.25
            return jax.lax.fori_loop(0, n, body, carry)

        self._fn = jax.jit(busy)
        self._carry = jax.device_put(np.full((_DIM, _DIM), 0.01, np.float32), device)

    def _run(self, n: int) -> float:
        t = time.perf_counter()
        self._carry = self._fn(self._carry, np.int32(n))
        self._carry.block_until_ready()
        return time.perf_counter() - t

    def calibrate(self) -> float:
        """Fits seconds per iteration (compiling first), sets ``iterations``
        for ``ms`` and returns the measured milliseconds of one step."""
        if self.ms <= 0:
            return 0.0
        self._run(1)  # compile
        n = 1
        while True:  # grow until a probe is long enough to time
            t = self._run(n)
            if t >= _PROBE_S or n >= 1 << 24:
                break
            n *= 4
        t0 = min(self._run(0) for _ in range(3))  # dispatch overhead
        per_iter = max((min(t, self._run(n)) - t0) / n, 1e-9)
        self.iterations = max(1, round((self.ms / 1e3 - t0) / per_iter))
        return 1e3 * float(np.median([self._run(self.iterations) for _ in range(3)]))

    def __call__(self, batch: Any) -> None:
        self._carry = self._fn(self._carry, np.int32(self.iterations))
        self._carry.block_until_ready()


def make_step(kind: str, ms: float, device: Any) -> Callable[[Any], None] | None:
    """The step of ``--step KIND --step-ms MS`` (None when ``ms`` is 0)."""
    if ms <= 0:
        return None
    if kind == "sleep":
        return SleepStep(ms)
    return ComputeStep(ms, device)
