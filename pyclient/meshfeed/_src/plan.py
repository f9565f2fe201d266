"""The contract's step arithmetic (docs/DESIGN.md, "Batch" and "Steps per
epoch"), computed in this one place on the client: rows per slice and steps
per epoch. The server plans the same (Go's batching package); the Loader
derives its Layout with rows_per_slice and checks the server's plan against
steps_per_epoch."""

from __future__ import annotations

from typing import get_args

from .config import LastBatch


def rows_per_slice(global_batch_size: int, num_slices: int) -> int:
    """``b = B / D``, the rows of each of the ``D`` slices of a global batch of
    ``B`` rows. Raises ValueError unless ``D`` divides ``B``."""
    B, D = global_batch_size, num_slices
    if D < 1 or B < 1 or B % D:
        raise ValueError(f"{D} slices do not divide a global batch of {B} rows")
    return B // D


def steps_per_epoch(num_rows: int, global_batch_size: int, last_batch: LastBatch) -> int:
    """Global steps in an epoch of ``N = num_rows`` rows at ``B =
    global_batch_size`` rows a step: ``ceil(N / B)`` with ``"pad"``,
    ``floor(N / B)`` with ``"drop"`` and ``"raise"`` (which the server plans
    only when ``N % B == 0``)."""
    if last_batch not in get_args(LastBatch):
        raise ValueError(f"last_batch={last_batch!r}: want one of {', '.join(get_args(LastBatch))}")
    N, B = num_rows, global_batch_size
    return -(-N // B) if last_batch == "pad" else N // B
