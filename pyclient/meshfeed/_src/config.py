"""The configuration: the public, frozen, keyword-only dataclasses a Loader is
built from (Shuffle, Column, ServerOptions and LoaderConfig, which holds them
all) and the literal types of its choices (LastBatch, Transport). The wire
request and the state fingerprint derive from a LoaderConfig.

No ``from __future__ import annotations`` here: the public classes print as
``meshfeed.X``, so ``typing.get_type_hints`` would evaluate string annotations
in the ``meshfeed`` namespace; evaluated ones need nothing evaluated."""

import dataclasses
import math
import os
from typing import Any, Callable, Literal, Mapping, Sequence, get_args

import jax

from . import connect
from .errors import InvalidRequestError
from .filters import wire_filters

_MAX_U64 = (1 << 64) - 1


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _int_at_least(v: Any, lo: int) -> bool:
    return _is_int(v) and v >= lo


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
        tokenizer: path or URI (``gs://``, ``s3://``, ``az://``, ``https://``)
            of a ``tokenizer.json`` (the Hugging Face ``tokenizers`` format):
            the column, a string or large_string, arrives as each row's token
            ids (int32), exactly ``tokenizers.Tokenizer.from_file(f).encode(text).ids``,
            and ``length``, ``overflow``, ``fill`` and ``pack_ratio`` shape them
            as a list column. The server reads the file (under its roots).
            The file's SHA-256 is part of the Loader's state: a state resumes
            only with the same tokenizer.
        add_special_tokens: whether the tokenizer's post-processor adds its
            special tokens (BOS, ``[CLS]`` ... ``[SEP]``), as ``encode``'s
            ``add_special_tokens``; only with ``tokenizer``.
        pack: ``"concat"`` joins the column's documents, each followed by the
            end-of-document token, and cuts them into rows of exactly
            ``length`` tokens (adds ``<name>_segment_ids`` and
            ``<name>_positions``; docs/DESIGN.md, "Concatenated packing").
            Needs ``tokenizer`` and ``length``; the column is then the only one.
        eod_token: with ``pack="concat"``, the end-of-document token as the
            tokenizer spells it; None takes the first of ``<|endoftext|>``,
            ``<|end_of_text|>``, ``</s>``, ``<eos>``, ``[SEP]`` it has.
    """

    dtype: str | None = None
    length: int = 0
    fill: float | int | str | None = None
    overflow: str | None = None
    pack_ratio: float = 0
    mask: bool = False
    tokenizer: str | os.PathLike[str] | None = None
    add_special_tokens: bool = True
    pack: str | None = None
    eod_token: str | None = None

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
        if self.tokenizer is not None:
            uri, problem = _normalize_uri(self.tokenizer)
            if problem or uri is None:
                bad("tokenizer", "want the path or URI of a tokenizer.json, or None")
            else:
                object.__setattr__(self, "tokenizer", uri)
        if not isinstance(self.add_special_tokens, bool):
            bad("add_special_tokens", "want True or False")
        elif not self.add_special_tokens and self.tokenizer is None:
            bad("add_special_tokens", "only with a tokenizer")
        for f in ("pack", "eod_token"):
            v = getattr(self, f)
            if v is not None and (not isinstance(v, str) or not v):
                bad(f, "want a non-empty string or None")
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
        if self.tokenizer is not None:
            out["tokenizer"] = self.tokenizer
            if not self.add_special_tokens:
                out["add_special_tokens"] = False
        if self.pack is not None:
            out["pack"] = self.pack
        if self.eod_token is not None:
            out["eod_token"] = self.eod_token
        return out


LastBatch = Literal["drop", "pad", "raise"]
"""What a Loader does with the rows after the last full step of an epoch:
``"drop"`` them, ``"pad"`` a last step (with a boolean mask, ``mask_key``), or
``"raise"`` a PlanError at construction unless the steps divide the rows."""

Transport = Literal["auto", "shm", "flight"]
"""How steps travel from the server: ``"auto"`` (shared memory from a local
server, falling back to Flight with a warning; Flight to a ``server=``
address), ``"shm"`` (shared memory or an error), ``"flight"`` (always Flight)."""

LAST_BATCH: tuple[str, ...] = get_args(LastBatch)
TRANSPORTS: tuple[str, ...] = get_args(Transport)

# Request fields that say which rows this process takes or where it starts, not
# which stream it reads: a state taken by one process (or at one position, or
# with another number of epochs) resumes on any other. Every other field of the
# request is the stream's identity (LoaderConfig.fingerprint).
_NOT_IDENTITY = ("version", "slices", "start", "epochs", "manifest")  # a manifest plans the same steps
WIRE_VERSION = 1


def hashed_columns(cols: Sequence[Mapping[str, Any]], sums: Mapping[str, str]) -> list[dict[str, Any]]:
    """Wire columns with each tokenizer named by its SHA-256 (``sums``:
    column name to hash, as GetFlightInfo reports them) instead of its path:
    a column's identity in a fingerprint or a mixture source's."""
    out = []
    for c in cols:
        c = dict(c)
        if c.pop("tokenizer", None) is not None:
            c["tokenizer_sha256"] = sums.get(c["name"], "")
        out.append(c)
    return out


def _tokenizer_identity(fp: dict[str, Any], plan: Mapping[str, Any]) -> None:
    """In a fingerprint, each tokenized column names its tokenizer by the
    file's SHA-256 as the server read it (GetFlightInfo's ``tokenizers``),
    not by path: the same file moved resumes, another file is refused."""
    rename = hashed_columns
    if "columns" in fp:
        fp["columns"] = rename(fp["columns"], plan.get("tokenizers") or {})
    mix = fp.get("mixture")
    if mix is not None:
        infos = (plan.get("mixture") or {}).get("sources") or []
        mix = dict(mix)
        mix["sources"] = [dict(s, columns=rename(s["columns"], (infos[i] if i < len(infos) else {}).get("tokenizers") or {}))
                          if "columns" in s else s for i, s in enumerate(mix["sources"])]
        fp["mixture"] = mix


def tokenizer_mismatch(mine: Mapping[str, Any], theirs: Mapping[str, Any]) -> str | None:
    """A message naming both hashes when a state's fingerprint and this
    loader's differ in a column's tokenizer, else None."""
    lines = []
    for a, b in zip(theirs.get("columns") or [], mine.get("columns") or []):
        if isinstance(a, Mapping) and isinstance(b, Mapping) and a.get("name") == b.get("name") \
                and a.get("tokenizer_sha256") != b.get("tokenizer_sha256"):
            lines.append(f"column {b.get('name')!r}: the state was saved with tokenizer sha256 "
                         f"{a.get('tokenizer_sha256')}, this loader's tokenizer has sha256 {b.get('tokenizer_sha256')}")
    if not lines:
        return None
    return ("state comes from another tokenizer:\n  " + "\n  ".join(lines) +
            "\nresume with the tokenizer.json the state was saved with (its ids differ from this one's)")


def _problems(owner: str, problems: list[str]) -> str:
    head = f"{owner}: " + (f"{len(problems)} problems:\n  " if len(problems) > 1 else "")
    return head + "\n  ".join(problems)


@dataclasses.dataclass(frozen=True, kw_only=True)
class ServerOptions:
    """How a Loader starts its local ``meshfeed serve`` (``server=None`` only;
    see ``meshfeed serve -h``). Every field is optional.

    Args:
        binary: path of the meshfeed binary; None searches ``$MESHFEED_BIN``,
            the binary bundled in the wheel, a source checkout's ``bin/``, then
            ``PATH`` (BinaryNotFoundError lists every place tried).
        read_ahead: bytes of row groups each stream reads ahead, compressed
            plus decoded (``--read-ahead``); None: :data:`LOCAL_READ_AHEAD`
            (128 MiB); 0: one whole row group per slice at a time.
        memory_budget: bytes the server may hold in all, its streams'
            read-ahead, shuffle windows and queued steps (``--memory-budget``);
            None: :data:`LOCAL_MEMORY_BUDGET`
            (2 GiB); 0: unbounded.
        cache_dir: a directory where the server keeps the bytes it reads from
            remote stores (``gs://``), so that later epochs, and servers
            started again after a failure or in the next run, read them from
            local disk (``--cache-dir``; created if needed); None: no cache.
            Local files are not cached. ``Loader.stats()["cache"]`` reports
            its hits, misses and bytes saved.
        cache_size: bytes the cache may hold, least recently used blocks
            removed beyond it (``--cache-size``); None: the server's default
            (10 GiB). Only with ``cache_dir``.
        extra_args: more ``meshfeed serve`` flags, after those above (a flag
            given again wins), e.g. ``("--map-cache", str(8 << 30))`` to keep
            local files mapped between epochs, or ``("--allow", DIR)``.

    Bad values raise one InvalidRequestError (a ValueError) naming each.
    """

    binary: str | os.PathLike[str] | None = None
    read_ahead: int | None = None
    memory_budget: int | None = None
    cache_dir: str | os.PathLike[str] | None = None
    cache_size: int | None = None
    extra_args: Sequence[str] = ()

    def __post_init__(self) -> None:
        problems: list[str] = []
        if self.binary is not None and not isinstance(self.binary, (str, os.PathLike)):
            problems.append(f"binary={self.binary!r}: want a path or None")
        for name in ("read_ahead", "memory_budget"):
            v = getattr(self, name)
            if v is not None and not _int_at_least(v, 0):
                problems.append(f"{name}={v!r}: want an int of bytes >= 0, or None for the default")
        if self.cache_dir is not None and (not isinstance(self.cache_dir, (str, os.PathLike)) or not os.fspath(self.cache_dir)):
            problems.append(f"cache_dir={self.cache_dir!r}: want a directory path or None")
        if self.cache_size is not None and not _int_at_least(self.cache_size, 1):
            problems.append(f"cache_size={self.cache_size!r}: want an int of bytes > 0, or None for the default")
        elif self.cache_size is not None and self.cache_dir is None:
            problems.append(f"cache_size={self.cache_size!r}: without cache_dir there is no cache to size")
        ea = self.extra_args
        if isinstance(ea, str) or not isinstance(ea, Sequence) or not all(isinstance(a, str) for a in ea):
            problems.append(f"extra_args={ea!r}: want a sequence of strings")
        if problems:
            raise InvalidRequestError(_problems("meshfeed.ServerOptions", problems))
        object.__setattr__(self, "extra_args", tuple(ea))


# URI schemes the server reads (objstore's stores); http:// is served only
# from loopback hosts, which the server checks.
_REMOTE_PREFIXES = ("gs://", "s3://", "https://", "http://")


def _normalize_uri(uri: Any) -> tuple[str | None, str | None]:
    """(normalized URI, None) or (None, problem)."""
    if isinstance(uri, os.PathLike):
        uri = os.fspath(uri)
    if not isinstance(uri, str) or not uri:
        return None, f"data URI {uri!r}: want a non-empty string"
    if uri.startswith(_REMOTE_PREFIXES) or uri.startswith("file://"):
        return uri, None
    if "://" in uri:
        return None, (f"data URI {uri!r}: want gs://bucket/path, s3://bucket/path, "
                      "https://host/path/file, file:///path or a local path")
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


def _check_transform(cfg: Any, bad: Callable[[str], None]) -> None:
    """The transform fields' problems (their meaning: meshfeed.Loader)."""
    if cfg.transform is not None and not callable(cfg.transform):
        bad(f"transform={cfg.transform!r}: want a function fn(batch, rng) -> dict, or None")
    if not _int_at_least(cfg.transform_workers, 0):
        bad(f"transform_workers={cfg.transform_workers!r}: want an int >= 0 (0: threads)")
    elif cfg.transform_workers and cfg.transform is None:
        bad(f"transform_workers={cfg.transform_workers}: no transform= to run")
    ts = cfg.transform_seed
    if ts is not None and (not _is_int(ts) or not 0 <= ts <= _MAX_U64):
        bad(f"transform_seed={ts!r}: want an int in [0, 2**64) or None")


@dataclasses.dataclass(frozen=True, kw_only=True)
class LoaderConfig:
    """What a :class:`meshfeed.Loader` reads and how: its arguments (bar
    ``state`` and ``elastic``, which say where to resume), typed, frozen and
    checked once. ``__post_init__`` reports every problem at once (one
    InvalidRequestError naming each bad value). ``Loader.config`` is the
    loader's; :meth:`Loader.from_config` builds a loader from one.

    ``datasets`` and ``wire_columns`` are derived (absolute paths, the
    request's column objects); ``tls_root_certs`` given as a path holds the
    file's PEM bytes. The wire request (:meth:`request`) and the state
    fingerprint (:meth:`fingerprint`) both derive from it; which value the
    server accepts for a column's shaping is the server's to say (the Loader
    asks it at construction).

    The fields are the Loader's arguments of the same names (see
    :class:`meshfeed.Loader`); ``server_options`` (a :class:`ServerOptions`)
    applies to the local server only (``server=None``). ``transform``,
    ``transform_workers`` and ``transform_seed`` are not part of the
    fingerprint: a state resumes under a changed transform (a function
    cannot be compared; fixing one and resuming is legitimate).
    """

    data: str | os.PathLike[str] | Sequence[str | os.PathLike[str]]
    global_batch_size: int
    sharding: jax.sharding.Sharding
    columns: Sequence[str] | Mapping[str, Column | None] | None = None
    last_batch: LastBatch = "drop"
    shuffle: Shuffle | None = None
    num_epochs: int | None = 1
    prefetch: int | None = None
    server: str | Callable[[], str] | None = None
    server_options: ServerOptions | None = None
    mask_key: str = "valid"
    recovery_timeout: float = 60.0
    transport: Transport = "auto"
    tls_root_certs: bytes | str | os.PathLike[str] | None = None
    tls_server_name: str | None = None
    token: str | None = None
    manifest: str | os.PathLike[str] = "auto"
    filters: Sequence[Any] | None = None
    transform: Callable[..., Any] | None = None
    transform_workers: int = 0
    transform_seed: int | None = None
    datasets: tuple[str, ...] = dataclasses.field(init=False)
    wire_columns: tuple[dict[str, Any], ...] | None = dataclasses.field(init=False)
    wire_filters: tuple[tuple[dict[str, Any], ...], ...] | None = dataclasses.field(init=False)
    mixture: Any = dataclasses.field(init=False, repr=False)  # data when it is a meshfeed.Mixture (mixture.py)

    def __post_init__(self) -> None:
        problems: list[str] = []
        bad = problems.append
        from .mixture import Mixture
        mixture = self.data if isinstance(self.data, Mixture) else None
        uris = [self.data] if isinstance(self.data, (str, os.PathLike)) else list(self.data) \
            if isinstance(self.data, Sequence) else None
        datasets: list[str] = []
        if mixture is not None:
            uris = [u for src in mixture.sources for u in src._datasets]  # the local server's roots
            if self.columns is not None or self.shuffle is not None:
                bad("data is a meshfeed.Mixture: give columns and shuffle per meshfeed.Source, not to the Loader")
            if self.filters is not None:
                bad("filters with a meshfeed.Mixture: give each meshfeed.Source its own filters=, on its own "
                    "column names (sources name their columns apart, see rename)")
            if self.num_epochs != 1:
                bad(f"num_epochs={self.num_epochs!r}: a meshfeed.Mixture is one pass (its stop sets the steps): "
                    "use num_epochs=1 and stop=<steps> for a longer run")
        elif uris is None:
            bad(f"data={self.data!r}: want a dataset URI or a list of them")
        elif not uris:
            bad("data: name at least one dataset URI")
        object.__setattr__(self, "mixture", mixture)
        for u in uris or ():
            norm, problem = _normalize_uri(u)
            if problem or norm is None:
                bad(problem or f"data URI {u!r}")
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
        if self.prefetch is not None and not _int_at_least(self.prefetch, 1):
            bad(f"prefetch={self.prefetch!r}: want an int >= 1, or None (2; 4 with a transform)")
        if not isinstance(self.mask_key, str) or not self.mask_key:
            bad(f"mask_key={self.mask_key!r}: want a non-empty string")
        rt = self.recovery_timeout
        if isinstance(rt, bool) or not isinstance(rt, (int, float)) or not rt >= 0:
            bad(f"recovery_timeout={rt!r}: want a number of seconds >= 0")
        if self.server is not None and not callable(self.server) and (not isinstance(self.server, str) or not self.server):
            bad(f"server={self.server!r}: want 'unix:///path', 'host:port', a callable returning one, "
                "or None (start a local server)")
        pem = connect.check_options(bad, self.server, self.tls_root_certs, self.tls_server_name, self.token)
        if self.server_options is not None and not isinstance(self.server_options, ServerOptions):
            bad(f"server_options={self.server_options!r}: want a meshfeed.ServerOptions or None")
        elif self.server_options is not None and self.server is not None:
            bad("server_options: only for a local server (server=None); "
                "pass flags to the running server where it was started")
        if self.transport not in TRANSPORTS:
            bad(f"transport={self.transport!r}: want one of {', '.join(TRANSPORTS)}")
        elif self.transport == "shm" and self.server is not None:
            bad("transport='shm': only for a local server (server=None); a server given by address is read over Flight")
        manifest = self.manifest
        if manifest not in ("auto", "off"):
            manifest, problem = _normalize_uri(self.manifest)
            if problem or manifest is None:
                bad(f"manifest={self.manifest!r}: want 'auto', 'off' or the manifest's URI ({problem})")
        _check_transform(self, bad)
        cols = _wire_columns(self.columns, bad)
        filt = wire_filters(self.filters, bad)
        if problems:
            raise InvalidRequestError(_problems("meshfeed.Loader", problems))
        object.__setattr__(self, "datasets", tuple(datasets))
        object.__setattr__(self, "wire_columns", cols)
        object.__setattr__(self, "manifest", manifest)
        object.__setattr__(self, "wire_filters", filt)
        object.__setattr__(self, "recovery_timeout", float(rt))
        object.__setattr__(self, "tls_root_certs", pem)

    @property
    def seed_of_transform(self) -> int:
        """The seed of the transform's generators: ``transform_seed``, else
        the shuffle's seed, else 0."""
        if self.transform_seed is not None:
            return self.transform_seed
        return self.shuffle.seed if self.shuffle is not None else 0

    @property
    def local_server(self) -> ServerOptions:
        """The local server's options (``server_options`` or the defaults)."""
        return self.server_options if self.server_options is not None else ServerOptions()

    @property
    def staged(self) -> int:
        """Steps staged on device ahead of the loop: ``prefetch``, or by
        default 2, and 4 with a transform. A transform's stage hands steps
        back late when its function or its workers are not scheduled in
        time (BENCHMARKS.md, "Transforms"): two more steps on device cover
        such a delay where the loop would otherwise wait for it."""
        if self.prefetch is not None:
            return self.prefetch
        return 2 if self.transform is None else 4

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
        if self.mixture is not None:
            del req["datasets"]
            req.pop("columns", None)
            req["seed"] = self.mixture.seed
            sc = self.mixture.source_column
            outs = None if columns is None else [(c["name"], c.get("dtype")) for c in columns if c["name"] != sc]
            req["mixture"] = self.mixture.to_wire(outs)
        if self.manifest != "auto":
            req["manifest"] = self.manifest
        if self.wire_filters is not None:
            req["filters"] = [[dict(t) for t in conj] for conj in self.wire_filters]
        return req

    def tokenizers(self) -> list[str]:
        """The tokenizer paths and URIs of the columns (a local server must
        be allowed to read them)."""
        req = self.request(1, [0])
        cols = list(req.get("columns") or [])
        for s in (req.get("mixture") or {}).get("sources", []):
            cols.extend(s.get("columns") or [])
        return [c["tokenizer"] for c in cols if isinstance(c, Mapping) and "tokenizer" in c]

    def fingerprint(self, num_slices: int, plan: Mapping[str, Any]) -> dict[str, Any]:
        """What a state must agree on to resume: the request's fields that
        define the stream (all but version, slices, start and epochs), and the
        server's plan of it (``num_rows``, ``steps_per_epoch``)."""
        req = self.request(num_slices, ())
        out = {k: v for k, v in req.items() if k not in _NOT_IDENTITY}
        out.update(num_rows=int(plan["num_rows"]), steps_per_epoch=int(plan["steps_per_epoch"]))
        _tokenizer_identity(out, plan)
        return out
