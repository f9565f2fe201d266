"""The configuration: the public Shuffle and Column, and the Loader's own
LoaderConfig, from which the wire request and the state fingerprint derive."""

from __future__ import annotations

import dataclasses
import math
import os
from typing import Any, Mapping, Sequence

import jax

from . import connect
from .errors import InvalidRequestError

_MAX_U64 = (1 << 64) - 1


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

    Which values are valid for the column's type (dtypes, lengths, packing)
    is the server's to say: the Loader sends the shaping with its plan
    request at construction and raises the server's refusal as an
    InvalidRequestError naming the column and the value. Here only what
    makes a well-formed request is checked.

    Args:
        dtype: target element dtype (``"bfloat16"``, ``"float32"``, ``"int32"``, ...,
            ``"float64"``, see docs/PROTOCOL.md); None keeps the stored dtype. A
            decimal becomes the nearest ``"float32"`` or, with jax_enable_x64 on,
            ``"float64"`` (docs/TYPES.md says what precision that loses).
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
        problems: list[str] = []

        def bad(field: str, want: str) -> None:
            problems.append(f"Column({field}={getattr(self, field)!r}): {want}")

        if self.dtype is not None and (not isinstance(self.dtype, str) or not self.dtype):
            bad("dtype", "want a dtype name or None")
        if not _is_int(self.length):
            bad("length", "want an int")
        if self.fill is not None and not isinstance(self.fill, str):
            if isinstance(self.fill, bool) or not isinstance(self.fill, (int, float)):
                bad("fill", "want a number, 'nan', 'inf', '-inf' or None")
            elif isinstance(self.fill, float) and not math.isfinite(self.fill):
                # JSON has no non-finite numbers: the request spells them as words.
                bad("fill", "write non-finite fills as 'nan', 'inf' or '-inf'")
        if self.overflow is not None and (not isinstance(self.overflow, str) or not self.overflow):
            bad("overflow", "want a rule name or None")
        if isinstance(self.pack_ratio, bool) or not isinstance(self.pack_ratio, (int, float)) \
                or not math.isfinite(self.pack_ratio):
            bad("pack_ratio", "want a finite number")
        if not isinstance(self.mask, bool):
            bad("mask", "want True or False")
        if problems:
            raise ValueError("; ".join(problems))

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


LAST_BATCH = ("drop", "pad", "raise")
# Request fields that say which rows this process takes or where it starts, not
# which stream it reads: a state taken by one process (or at one position, or
# with another number of epochs) resumes on any other. Every other field of the
# request is the stream's identity (LoaderConfig.fingerprint).
_NOT_IDENTITY = ("version", "slices", "start", "epochs")
WIRE_VERSION = 1


def _normalize_uri(uri: Any) -> tuple[str | None, str | None]:
    """(normalized URI, None) or (None, problem)."""
    if isinstance(uri, os.PathLike):
        uri = os.fspath(uri)
    if not isinstance(uri, str) or not uri:
        return None, f"data URI {uri!r}: want a non-empty string"
    if uri.startswith("gs://") or uri.startswith("file://"):
        return uri, None
    if "://" in uri:
        return None, f"data URI {uri!r}: want gs://bucket/path, file:///path or a local path"
    return os.path.abspath(os.path.expanduser(uri)), None


def _wire_columns(columns: Any, bad: Any) -> tuple[dict[str, Any], ...] | None:
    """The request's column objects for the Loader's ``columns`` argument."""
    if columns is None:
        return None
    if isinstance(columns, str):
        bad(f"columns={columns!r}: want a list of names or a dict, not a string")
        return None
    out = []
    if isinstance(columns, Mapping):
        if not columns:
            bad("columns: empty; pass None for all columns")
        for name, col in columns.items():
            if not isinstance(name, str) or not name:
                bad(f"columns: {name!r} is not a column name")
            elif col is not None and not isinstance(col, Column):
                bad(f"columns[{name!r}]={col!r}: want a meshfeed.Column or None")
            else:
                out.append((col or Column()).to_wire(name))
    else:
        try:
            names = list(columns)
        except TypeError:
            bad(f"columns={columns!r}: want None, a list of names or a dict of meshfeed.Column")
            return None
        if not names:
            bad("columns: empty; pass None for all columns")
        for name in names:
            if not isinstance(name, str) or not name:
                bad(f"columns: {name!r} is not a column name")
            else:
                out.append({"name": name})
    names = [c["name"] for c in out]
    if len(set(names)) != len(names):
        bad(f"columns: duplicate names in {names}")
    return tuple(out)


def _int_at_least(v: Any, lo: int) -> bool:
    return _is_int(v) and v >= lo


# How steps travel: "auto" (shared memory from a local server, else Flight),
# "shm" (shared memory, never Flight), "flight" (always Flight).
TRANSPORTS = ("auto", "shm", "flight")


@dataclasses.dataclass(frozen=True, kw_only=True)
class LoaderConfig:
    """Everything a Loader is asked for, checked once: the arguments of
    :class:`meshfeed.Loader` as given, validated in ``__post_init__``, which
    reports every problem at once (one InvalidRequestError naming each bad
    value). ``datasets`` and ``wire_columns`` hold the normalized forms
    (absolute paths, the request's column objects).

    The wire request (:meth:`request`) and the state fingerprint
    (:meth:`fingerprint`) both derive from it; which value the server accepts
    for a column's shaping is the server's to say (the Loader asks it at
    construction)."""

    data: Any
    global_batch_size: Any
    sharding: Any
    columns: Any = None
    last_batch: Any = "drop"
    shuffle: Any = None
    num_epochs: Any = 1
    prefetch: Any = 2
    server: Any = None
    mask_key: Any = "valid"
    binary: Any = None
    recovery_timeout: Any = 60.0
    server_args: Any = ()
    transport: Any = "auto"
    tls_root_certs: Any = None
    tls_server_name: Any = None
    token: Any = None
    datasets: tuple[str, ...] = dataclasses.field(init=False)
    wire_columns: tuple[dict[str, Any], ...] | None = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        problems: list[str] = []
        bad = problems.append
        uris = [self.data] if isinstance(self.data, (str, os.PathLike)) else list(self.data) \
            if isinstance(self.data, Sequence) else None
        datasets: list[str] = []
        if uris is None:
            bad(f"data={self.data!r}: want a dataset URI or a list of them")
        elif not uris:
            bad("data: name at least one dataset URI")
        for u in uris or ():
            norm, problem = _normalize_uri(u)
            if problem:
                bad(problem)
            else:
                datasets.append(norm)
        if not _int_at_least(self.global_batch_size, 1):
            bad(f"global_batch_size={self.global_batch_size!r}: want an int > 0")
        if not isinstance(self.sharding, jax.sharding.Sharding):
            bad(f"sharding={self.sharding!r}: want a jax.sharding.Sharding")
        if self.last_batch not in LAST_BATCH:
            bad(f"last_batch={self.last_batch!r}: want one of {', '.join(LAST_BATCH)}")
        if self.shuffle is not None and not isinstance(self.shuffle, Shuffle):
            bad(f"shuffle={self.shuffle!r}: want a meshfeed.Shuffle or None")
        if self.num_epochs is not None and not _int_at_least(self.num_epochs, 1):
            bad(f"num_epochs={self.num_epochs!r}: want an int >= 1 or None (unbounded)")
        if not _int_at_least(self.prefetch, 1):
            bad(f"prefetch={self.prefetch!r}: want an int >= 1")
        if not isinstance(self.mask_key, str) or not self.mask_key:
            bad(f"mask_key={self.mask_key!r}: want a non-empty string")
        rt = self.recovery_timeout
        if isinstance(rt, bool) or not isinstance(rt, (int, float)) or not rt >= 0:
            bad(f"recovery_timeout={rt!r}: want a number of seconds >= 0")
        if self.server is not None and not callable(self.server) and (not isinstance(self.server, str) or not self.server):
            bad(f"server={self.server!r}: want 'unix:///path', 'host:port', a callable returning one, "
                "or None (start a local server)")
        pem = connect.check_options(bad, self.server, self.tls_root_certs, self.tls_server_name, self.token)
        sa = self.server_args
        if isinstance(sa, str) or not isinstance(sa, Sequence) or not all(isinstance(a, str) for a in sa):
            bad(f"server_args={sa!r}: want a sequence of strings")
        elif self.server is not None and sa:
            bad("server_args: only for a local server (server=None); "
                "pass flags to the running server where it was started")
        if self.transport not in TRANSPORTS:
            bad(f"transport={self.transport!r}: want one of {', '.join(TRANSPORTS)}")
        elif self.transport == "shm" and self.server is not None:
            bad("transport='shm': only for a local server (server=None); a server given by address is read over Flight")
        if self.binary is not None and not isinstance(self.binary, (str, os.PathLike)):
            bad(f"binary={self.binary!r}: want a path or None")
        cols = _wire_columns(self.columns, bad)
        if problems:
            head = "meshfeed.Loader: " + (f"{len(problems)} problems:\n  " if len(problems) > 1 else "")
            raise InvalidRequestError(head + "\n  ".join(problems))
        object.__setattr__(self, "datasets", tuple(datasets))
        object.__setattr__(self, "wire_columns", cols)
        object.__setattr__(self, "server_args", tuple(sa))
        object.__setattr__(self, "recovery_timeout", float(rt))
        object.__setattr__(self, "tls_root_certs", pem)

    @property
    def pad_mask(self) -> str | None:
        """The mask column's name with ``last_batch="pad"``, else None."""
        return self.mask_key if self.last_batch == "pad" else None

    def request(self, num_slices: int, slices: Sequence[int], start: tuple[int, int] = (0, 0),
                columns: Sequence[Mapping[str, Any]] | None = None) -> dict[str, Any]:
        """The ticket (docs/PROTOCOL.md) for this configuration: ``num_slices``
        and ``slices`` from the sharding's Layout, streaming from ``start``.
        ``columns`` replaces the configured column objects (the Loader's
        narrowing of 64-bit columns, a rendering of the same stream)."""
        req: dict[str, Any] = {"version": WIRE_VERSION, "datasets": list(self.datasets),
                               "global_batch_size": self.global_batch_size, "num_slices": num_slices,
                               "slices": list(slices), "last_batch": self.last_batch,
                               "epochs": self.num_epochs or 0, "start": {"epoch": start[0], "step": start[1]}}
        cols = self.wire_columns if columns is None else columns
        if cols is not None:
            req["columns"] = [dict(c) for c in cols]
        if self.shuffle is not None:
            req["seed"] = self.shuffle.seed
            req["shuffle"] = {"enabled": True, "window": self.shuffle.window}
        if self.pad_mask is not None:
            req["mask_column"] = self.pad_mask
        return req

    def fingerprint(self, num_slices: int, plan: Mapping[str, Any]) -> dict[str, Any]:
        """What a state must agree on to resume: the request's fields that
        define the stream (all but version, slices, start and epochs), and the
        server's plan of it (``num_rows``, ``steps_per_epoch``)."""
        req = self.request(num_slices, ())
        out = {k: v for k, v in req.items() if k not in _NOT_IDENTITY}
        out.update(num_rows=int(plan["num_rows"]), steps_per_epoch=int(plan["steps_per_epoch"]))
        return out
