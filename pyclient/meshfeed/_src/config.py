"""The public configuration dataclasses: Shuffle and Column."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

_MAX_U64 = (1 << 64) - 1

DTYPES = ("bfloat16", "float16", "float32", "float64", "int8", "int16", "int32", "int64",
          "uint8", "uint16", "uint32", "uint64", "bool")
OVERFLOWS = ("reject", "truncate")
_FILL_WORDS = ("nan", "inf", "-inf")


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Shuffle:
    """Shuffling: row groups are permuted per epoch, and rows inside windows of
    ``window`` rows of each stream (``window=0``: row-group order only).

    Args:
        seed: seeds every permutation (an unsigned 64-bit integer).
        window: rows per shuffle window, >= 0.
    """

    seed: int = 0
    window: int = 0

    def __post_init__(self) -> None:
        if not _is_int(self.seed) or not 0 <= self.seed <= _MAX_U64:
            raise ValueError(f"Shuffle(seed={self.seed!r}): want an int in [0, 2**64)")
        if not _is_int(self.window) or self.window < 0:
            raise ValueError(f"Shuffle(window={self.window!r}): want an int >= 0")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Column:
    """How one column is shaped on the wire (all fields optional).

    Args:
        dtype: target element dtype (``"bfloat16"``, ``"float32"``, ``"int32"``, ...);
            None keeps the stored dtype.
        length: > 0 gives a list column the static length ``length`` (adds an
            int32 ``<name>_length`` column); 0 leaves it unshaped.
        fill: padding value: a number, or ``"nan"``, ``"inf"``, ``"-inf"``; None is zero.
        overflow: what happens to a list longer than ``length``: ``"reject"`` or
            ``"truncate"``; None is the server's default (reject).
        pack_ratio: > 0 packs the list column into rows of ``length`` tokens
            (needs ``length``).
        mask: True adds a boolean key ``<name>_valid``, False where the column
            holds a null; the nulls become ``fill`` (zero when None). The
            client fills them (a host copy of the column).
    """

    dtype: str | None = None
    length: int = 0
    fill: float | int | str | None = None
    overflow: str | None = None
    pack_ratio: float = 0
    mask: bool = False

    def __post_init__(self) -> None:
        if self.dtype is not None and self.dtype not in DTYPES:
            raise ValueError(f"Column(dtype={self.dtype!r}): want one of {', '.join(DTYPES)} or None")
        if not _is_int(self.length) or self.length < 0:
            raise ValueError(f"Column(length={self.length!r}): want an int >= 0")
        if self.fill is not None:
            if isinstance(self.fill, str):
                if self.fill not in _FILL_WORDS:
                    raise ValueError(f"Column(fill={self.fill!r}): want a number, 'nan', 'inf', '-inf' or None")
            elif isinstance(self.fill, bool) or not isinstance(self.fill, (int, float)):
                raise ValueError(f"Column(fill={self.fill!r}): want a number, 'nan', 'inf', '-inf' or None")
            elif isinstance(self.fill, float) and not math.isfinite(self.fill):
                raise ValueError(f"Column(fill={self.fill!r}): write non-finite fills as 'nan', 'inf' or '-inf'")
        if self.overflow is not None and self.overflow not in OVERFLOWS:
            raise ValueError(f"Column(overflow={self.overflow!r}): want one of {', '.join(OVERFLOWS)} or None")
        if isinstance(self.pack_ratio, bool) or not isinstance(self.pack_ratio, (int, float)) \
                or not math.isfinite(self.pack_ratio) or self.pack_ratio < 0:
            raise ValueError(f"Column(pack_ratio={self.pack_ratio!r}): want a finite number >= 0")
        if not isinstance(self.mask, bool):
            raise ValueError(f"Column(mask={self.mask!r}): want True or False")
        if self.pack_ratio > 0 and self.length == 0:
            raise ValueError(f"Column(pack_ratio={self.pack_ratio!r}, length=0): packing needs length > 0")

    def to_wire(self, name: str) -> dict[str, Any]:
        """The ticket's column object (docs/PROTOCOL.md) for column ``name``."""
        out: dict[str, Any] = {"name": name}
        if self.dtype is not None:
            out["dtype"] = self.dtype
        if self.length:
            out["length"] = self.length
        if self.overflow is not None:
            out["overflow"] = self.overflow
        if self.fill is not None and not self.mask:  # with a mask the client fills
            out["fill"] = self.fill
        if self.pack_ratio:
            out["pack_ratio"] = self.pack_ratio
        return out
