"""meshfeed.Loader: plan over GetFlightInfo, stream over DoGet, prefetch to device.

The parts live apart: the configuration and the wire request it derives in
config.py (LoaderConfig), the server and its connection (and their recovery)
in session.py, the stream-reading thread in prefetch.py (which also deletes
the steps the loop is done with), and the placement of a record on the
devices in layout.py. The Loader composes them and keeps the position, the
state and the counters."""

from __future__ import annotations

import array
import dataclasses
import json
import os
import time
import warnings
import weakref
from typing import Any, Callable, Iterator, Mapping, Sequence

import jax
import numpy as np

from .arrowtypes import masked_columns
from .config import Column, LastBatch, LoaderConfig, ServerOptions, Shuffle, Transport, tokenizer_mismatch
from .serverstats import cache_stats
from .elastic import resolve_switch
from .errors import InvalidRequestError, MeshfeedError, PlanError, StateMismatchError, recoverable
from .layout import Materializer, layout_of, narrowed_columns, packed_layout
from .mixture import Positions, check_fingerprints, resume_config
from .plan import steps_per_epoch
from .prefetch import END, TOTALS, Failure, Prefetcher
from .server import LocalServer
from .session import SHM_EXTRA_SLOTS, Session
from .transform import Transformer, describe

STATE_VERSION = 1
WAITS_KEPT = 1 << 16  # steps whose waits stats() takes percentiles of: the most recent (memory stays bounded)


def _pctl(xs: Sequence[float] | np.ndarray | array.array, q: float) -> float:
    return float(np.percentile(np.asarray(xs), q)) if len(xs) else 0.0


def _upgrade_fingerprint(fp: Mapping[str, Any]) -> Mapping[str, Any]:
    """A fingerprint written before LoaderConfig (flat ``seed``, ``window``
    and ``mask_key`` keys) in today's terms, so that such checkpoints resume."""
    if "window" not in fp and "mask_key" not in fp:
        return fp
    out = dict(fp)
    seed, window, mask = out.pop("seed", None), out.pop("window", None), out.pop("mask_key", None)
    if seed is not None or window is not None:
        out["seed"], out["shuffle"] = seed, {"enabled": True, "window": window}
    if mask is not None:
        out["mask_column"] = mask
    return out


def _server_options(server_options: ServerOptions | None, server: Any, binary: Any,
                    server_args: Any) -> ServerOptions | None:
    """``server_options`` with the deprecated ``binary=`` and ``server_args=``
    of the Loader folded in, each with a DeprecationWarning naming its new
    place. As before, ``binary`` is ignored when ``server`` names a server."""
    fields: dict[str, Any] = {}
    if binary is not None:
        warnings.warn("meshfeed.Loader(binary=...) is deprecated: pass "
                      "server_options=meshfeed.ServerOptions(binary=...)", DeprecationWarning, stacklevel=3)
        if server is None:
            fields["binary"] = binary
    if server_args is not None:
        warnings.warn("meshfeed.Loader(server_args=...) is deprecated: pass server_options=meshfeed.ServerOptions("
                      "read_ahead=..., memory_budget=..., extra_args=[...])", DeprecationWarning, stacklevel=3)
        if server is None or (not isinstance(server_args, Sequence) or len(server_args)):
            fields["extra_args"] = server_args  # a server given and flags too: refused (LoaderConfig)
    if not fields:
        return server_options
    if server_options is None:
        return ServerOptions(**fields)
    if not isinstance(server_options, ServerOptions):
        return server_options  # LoaderConfig names it
    default = ServerOptions()
    clash = [k for k in fields if getattr(server_options, k) != getattr(default, k)]
    if clash:
        old = {"binary": "binary", "extra_args": "server_args"}
        raise InvalidRequestError("meshfeed.Loader: " + "; ".join(
            f"{old[k]}= and server_options.{k} both given: pass server_options alone" for k in clash))
    return dataclasses.replace(server_options, **fields)


def _close_all(prefetcher_box: list, session_box: list, transform_box: list | None = None) -> None:
    """Stops the prefetcher, closes the session (connection and local
    server) and stops the transform's threads or worker processes. The
    lists are the Loader's own: recovery replaces the prefetcher, so the
    finalizer always stops the current one."""
    if prefetcher_box and prefetcher_box[0] is not None:
        prefetcher_box[0].stop()
    if session_box and session_box[0] is not None:
        session_box[0].close()
    if transform_box and transform_box[0] is not None:
        transform_box[0].close()


class Loader:
    """Streams global batches of a dataset as sharded ``jax.Array``s.

    Each step is a ``dict[str, jax.Array]`` of shape ``(global_batch_size, ...)``
    laid out as ``sharding`` (string and other non-numeric columns are
    ``pyarrow.Array``s holding this process's rows). Which row lands in which
    step is defined by the contract of docs/DESIGN.md: files sorted by URI, row
    groups in order (permuted per epoch with ``shuffle``), split into ``D``
    contiguous streams, ``D`` being the number of distinct batch slices of
    ``sharding``; slice ``d`` of step ``s`` is rows ``[s*b, (s+1)*b)`` of stream ``d``.

    A step comes out of ``next()`` on its devices (its transfers done). The
    loader keeps the step it returned last until the next ``next()``, then
    hands it to its prefetch thread, which deletes it once the loop has let
    go of it too: freeing its device buffers stays off the training thread.
    A step the loop keeps, or any array of it, stays valid.

    Args:
        data: dataset URI, glob, or a list of them (local paths, ``file://``,
            ``gs://``, ``s3://``, ``az://``/``abfs://``, or ``https://`` URLs of
            files: HTTP has no listing, so no globs or directories there), or a
            :class:`meshfeed.Mixture` of several datasets (then ``columns`` and
            ``shuffle`` are per :class:`meshfeed.Source`).
        global_batch_size: ``B``, rows per global step.
        sharding: layout of dimension 0 of every array (any ``jax.sharding.Sharding``).
        columns: None (all columns), a list of names, or ``{name: Column or None}``.
            Whether a column's shaping is valid is the server's to say: it is
            asked at construction, and its refusal raised (InvalidRequestError).
            With ``jax_enable_x64`` off (JAX's default) the server narrows
            64-bit columns before sending them, so that no host copy is made:
            int64 to int32 and uint64 to uint32 (a value that does not fit
            fails the stream with a PlanError naming the column), float64 to
            float32. Enable x64 to keep them 64-bit.
        last_batch: ``"drop"``, ``"pad"`` (adds a boolean mask ``mask_key``) or
            ``"raise"`` (PlanError at construction unless ``N % B == 0``).
        shuffle: a :class:`Shuffle`, or None for file order.
        num_epochs: epochs to stream, or None for unbounded.
        state: a dict from :meth:`state` to resume at; it must come from a loader
            with the same configuration (else StateMismatchError), except for the
            data-parallel degree with ``elastic=True``.
        elastic: allow ``state`` to come from a loader whose sharding had another
            data-parallel degree ``D`` (same mesh axes or not, same
            ``global_batch_size``): the rest of the saved epoch is delivered
            re-split over this loader's slices, every row not yet delivered
            exactly once, then the plain plan from the next epoch on (see
            docs/CONTRACT-elastic.md). Off by default, so that a changed
            sharding is not taken for the same run by mistake. With a
            :class:`meshfeed.Mixture`, each source's rows of the epochs it had
            begun that were not yet delivered are re-split over the new slices
            and the steps are recomputed (``steps_per_epoch``); a mixture
            changes its degree once (a state saved after the switch resumes
            with the new degree only). Combines with ``reweight``. With a
            packed column (``pack_ratio`` r), only a switch that keeps the
            packed batch's rows, ``D * ceil(B/D/r) == D' * ceil(B/D'/r)``, is
            allowed; another is refused here (InvalidRequestError naming the
            ratios that work).
        reweight: with ``data`` a :class:`meshfeed.Mixture`, resume ``state``
            although its mixture had other weights, or sources this one adds or
            drops: each source continues from its saved position and these
            weights apply from the saved step on (the steps are recomputed).
            Sources match by URIs, columns, rename, shuffle and filters; a
            tokenized column by its tokenizer's SHA-256, not its path.
            Without it a changed mixture is a StateMismatchError naming what
            changed.
        prefetch: steps staged on device ahead of the consumer (>= 1); None:
            2, or 4 with a ``transform`` (its stage's delays are covered).
        server: ``"unix:///path"`` or ``"host:port"`` of a running server; None
            starts a local one (stopped by :meth:`close`). Or a callable
            returning the current address, called again before every
            reconnect (e.g. a ``meshfeed.ray.Connection``, whose server may
            come back elsewhere); it may raise :class:`UnavailableError`
            while there is none, and recovery retries it.
        tls_root_certs: PEM bytes (or a file path) of the certificates that
            verify a TLS server (``server=`` only); ``host:port`` then means
            ``grpc+tls://host:port``.
        tls_server_name: the name the server's certificate is checked
            against, when it is not the address's host.
        token: bearer token sent with every call (``server=`` only).
        manifest: the dataset's manifest (``meshfeed manifest``): ``"auto"``
            (default) plans from ``_meshfeed_manifest.parquet`` in the
            dataset's directory when it is there, ``"off"`` reads every
            file's footer, anything else is the manifest's path or URI.
            ``stats()`` says which served (``manifest``) and how many store
            requests planning made (``plan_requests``).
        mask_key: name of the mask with ``last_batch="pad"``.
        filters: keep only the rows that match, in pyarrow.parquet's form
            (``read_table(filters=...)``): a list of ``(column, op, value)``
            tuples (all must hold), or a list of such lists (any list may
            hold); ops ``==`` (``=``), ``!=``, ``<``, ``<=``, ``>``, ``>=``,
            ``in`` and ``not in``, with pyarrow's meaning for nulls (a
            comparison with a null is false, ``!=`` included; ``('c', 'in',
            [None])`` keeps nulls, ``not in`` keeps them unless the list holds
            None). Values: None, bool, int, float, str, bytes,
            ``decimal.Decimal``, ``datetime.date``, ``datetime.datetime``
            (naive, or aware for a column with a time zone) and
            ``numpy.datetime64``. The rows delivered are the rows
            ``read_table(filters=...)`` returns, in dataset order before
            shuffling; ``N`` and steps per epoch count them, on every process,
            before the epoch (the server selects them when it plans: row groups
            their statistics rule out are never read). Filter columns need not
            be among ``columns``. A missing column, a value of the wrong type or
            an unknown op raise InvalidRequestError naming the column and the
            file. Part of the stream's identity: a state resumes only with the
            same filters.
        server_options: how the local server is started (``server=None``
            only): a :class:`ServerOptions` with its binary, read-ahead,
            memory budget and more ``meshfeed serve`` flags, e.g.
            ``ServerOptions(read_ahead=256 << 20, extra_args=["--map-cache",
            str(8 << 30)])``; None: the defaults. The server exits when this
            process ends, even by SIGKILL.
        binary: deprecated, use ``server_options=ServerOptions(binary=...)``.
        server_args: deprecated, use ``server_options=ServerOptions(...)``:
            its ``read_ahead`` and ``memory_budget`` for those flags,
            ``extra_args`` for the others.
        recovery_timeout: seconds the loader keeps trying to get its stream
            back when the server goes away mid-epoch (killed, restarted, or
            UNAVAILABLE): a local server (``server=None``) that died is
            restarted; a given ``server`` address is reconnected to, with
            backoff, until it answers again. The stream resumes at the first
            step not yet returned by ``next``, so the sequence of steps seen
            has no gap and no duplicate. The budget covers consecutive failed
            attempts without a step delivered in between; when it runs out
            the error is an :class:`UnavailableError`. 0 disables recovery.
        transport: how steps travel from the server: ``"auto"`` (default:
            shared memory from the local server this loader starts, falling
            back to Flight with a warning where shared memory cannot carry
            the columns; Flight to a ``server=`` address), ``"shm"`` (shared
            memory or an error) or ``"flight"``. Shared memory hands the
            step's buffers to jax without a copy: XLA's CPU client aliases
            them. ``stats()["transport"]`` says which one served.
        transform: a function ``fn(batch, rng) -> dict`` run on every step
            before it is placed, in the prefetch pipeline and in step order.
            ``batch`` holds this process's rows of the step (``P*b`` rows: its
            ``P`` distinct slices of ``b = B/D`` rows, concatenated in
            ascending slice order; with a packed column ``b`` is its packed
            rows, ``ceil(B/D / pack_ratio)``), numeric and boolean columns as read-only
            NumPy arrays, the others as pyarrow arrays, the pad mask
            (``mask_key``) included; ``rng`` is a ``numpy.random.Generator``
            seeded by ``numpy.random.SeedSequence([transform_seed, epoch,
            step, jax.process_index()])``, so a resumed run draws the same
            numbers. It returns a dict of arrays with the same leading
            dimension (keys, dtypes and shapes its own, the same at every
            step): NumPy arrays are placed as ``sharding`` (one call per
            step), pyarrow arrays delivered as they are; a pad mask it
            leaves out is added back. Its errors, and results that are not
            such a dict (checked fully at the first step, by keys, dtypes
            and shapes after), raise :class:`TransformError` from ``next``,
            naming the epoch, the step and the key.
        transform_workers: 0 (the default) runs ``transform`` on 2 threads
            (for functions that let go of the GIL: NumPy, pyarrow compute);
            ``N > 0`` in ``N`` worker processes (for functions that hold it),
            which need a picklable function (defined at the top level of a
            module) and cost a copy of the step in and of each new array out
            (shared memory; an input returned unchanged is not copied back).
            :meth:`close` stops them.
        transform_seed: the ``seed`` of the transform's generators; None:
            the shuffle's seed, or 0 without ``shuffle``. The transform is
            not part of the state's fingerprint (a function cannot be
            compared): resuming with another one is allowed.

    The arguments but ``state`` and ``elastic`` make a frozen
    :class:`LoaderConfig` (``loader.config``); :meth:`from_config` builds a
    loader from one. Bad arguments raise one InvalidRequestError listing
    every problem. Iterating yields the steps from the start (or ``state``) position through
    the last epoch, once; the loader is also a context manager.
    """

    def __init__(self, data: str | os.PathLike[str] | Sequence[str | os.PathLike[str]], *, global_batch_size: int,
                 sharding: jax.sharding.Sharding, columns: Sequence[str] | Mapping[str, Column | None] | None = None,
                 last_batch: LastBatch = "drop", shuffle: Shuffle | None = None, num_epochs: int | None = 1,
                 state: Mapping[str, Any] | None = None, prefetch: int | None = None,
                 server: str | Callable[[], str] | None = None, server_options: ServerOptions | None = None,
                 mask_key: str = "valid", recovery_timeout: float = 60.0, transport: Transport = "auto",
                 elastic: bool = False, tls_root_certs: bytes | str | os.PathLike[str] | None = None,
                 tls_server_name: str | None = None, token: str | None = None,
                 manifest: str | os.PathLike[str] = "auto",
                 transform: Callable[..., Any] | None = None, transform_workers: int = 0,
                 transform_seed: int | None = None,
                 binary: str | os.PathLike[str] | None = None, server_args: Sequence[str] | None = None,
                 filters: Sequence[Any] | None = None, reweight: bool = False):
        cfg = LoaderConfig(
            data=data, global_batch_size=global_batch_size, sharding=sharding, columns=columns,
            last_batch=last_batch, shuffle=shuffle, num_epochs=num_epochs, prefetch=prefetch, server=server,
            server_options=_server_options(server_options, server, binary, server_args), mask_key=mask_key,
            recovery_timeout=recovery_timeout, transport=transport, tls_root_certs=tls_root_certs,
            tls_server_name=tls_server_name, token=token, manifest=manifest, filters=filters,
            transform=transform, transform_workers=transform_workers, transform_seed=transform_seed)
        self._start(cfg, state, elastic, reweight)

    @classmethod
    def from_config(cls, config: LoaderConfig, *, state: Mapping[str, Any] | None = None,
                    elastic: bool = False, reweight: bool = False) -> "Loader":
        """A loader of ``config`` (a :class:`LoaderConfig`), resuming at
        ``state`` (see ``state`` and ``elastic`` above)."""
        if not isinstance(config, LoaderConfig):
            raise InvalidRequestError(f"config={config!r}: want a meshfeed.LoaderConfig")
        self = cls.__new__(cls)
        self._start(config, state, elastic, reweight)
        return self

    def _start(self, cfg: LoaderConfig, state: Mapping[str, Any] | None, elastic: bool,
               reweight: bool = False) -> None:
        self._box: list = [None]  # [prefetcher]: what the finalizer stops
        self._sbox: list = [None]  # [session]: what the finalizer closes
        self._tbox: list = [None]  # [transformer]: what the finalizer stops (transform.py)
        self._handed: Any = None  # the step returned last, until the next is asked for (prefetch.py)
        self._closed = False
        self._elastic_ok = bool(elastic)
        self._switch: dict[str, int] | None = None  # elastic switch named in tickets (elastic.py)
        self._recover_deadline: float | None = None
        self._reweight = bool(reweight)
        if reweight and cfg.mixture is None:
            raise InvalidRequestError("reweight=True: only for a loader of a meshfeed.Mixture")
        # A tokenized source's identity is its tokenizer's hash, which the
        # server's plan gives: such a mixture is reweighted once planned (_plan).
        self._reweight_planned = self._reweight and state is not None and bool(cfg.tokenizers())
        if cfg.mixture is not None and state is not None:
            # mixture.py: the saved weight history
            cfg = resume_config(cfg, state, self._reweight and not self._reweight_planned)
        self._cfg = cfg
        self._layout = layout_of(cfg.sharding, cfg.global_batch_size)
        # Packed columns deliver fewer rows (a mixture's sources pack alike, so its first's say).
        packing = cfg.wire_columns if cfg.mixture is None else cfg.mixture.sources[0]._columns
        self._rows = packed_layout(self._layout, packing)
        self._finalizer = weakref.finalize(self, _close_all, self._box, self._sbox, self._tbox)
        try:
            if cfg.transform is not None:  # workers start first: they load while the server plans
                # the rows a step delivers (packed: ceil(b / pack_ratio) a slice)
                self._tbox[0] = Transformer(cfg.transform, cfg.transform_workers, cfg.seed_of_transform,
                                            self._rows, cfg.sharding, cfg.pad_mask)
            self._session = self._sbox[0] = Session(cfg)
            self._session.connect()
            self._plan(state)
            if self._tbox[0] is not None:
                self._tbox[0].wait_ready()
        except BaseException:
            self.close()
            raise
        self._stats_init()

    # -- configuration ---------------------------------------------------

    def _request(self, start: tuple[int, int]) -> dict[str, Any]:
        req = self._cfg.request(self._layout.D, self._layout.slices, start, self._columns)
        sw = self._switch
        if sw is not None and self._cfg.mixture is not None:
            # A mixture's steps depend on the switch: every ticket names it,
            # a plan query too (from the switch's step).
            req["elastic"] = dict(sw)
            req["start"]["step"] = max(start[1], sw["step"])
        elif sw is not None and start[0] == sw["epoch"] and start[1] >= sw["step"]:
            req["elastic"] = dict(sw)  # a plan query at (0, 0) stays plain: same N and steps
        return req

    def _plan(self, state: Mapping[str, Any] | None) -> None:
        cfg = self._cfg
        self._columns = None  # the configured columns, until narrowed below
        schema, plan = self._session.plan(self._request((0, 0)))
        # Without jax_enable_x64, 64-bit columns are narrowed by the server
        # (a rendering of the same stream: the fingerprint does not change).
        narrow = narrowed_columns(schema, cfg.wire_columns, cfg.pad_mask)
        if narrow is not None:
            self._columns = narrow
            schema, again = self._session.plan(self._request((0, 0)))
            if (again["num_rows"], again["steps_per_epoch"]) != (plan["num_rows"], plan["steps_per_epoch"]):
                raise PlanError(f"the server plans {again} with 64-bit columns narrowed, {plan} without")
        if self._reweight_planned and state is not None:
            sums = [s.get("tokenizers") or {} for s in (plan.get("mixture") or {}).get("sources") or []]
            self._cfg = cfg = resume_config(cfg, state, True, sums)
            schema, plan = self._session.plan(self._request((0, 0)))
        self._plan_info = plan
        self._num_rows, self._spe = plan["num_rows"], plan["steps_per_epoch"]
        N, B = self._num_rows, cfg.global_batch_size
        mine = steps_per_epoch(N, B, cfg.last_batch) if cfg.mixture is None else self._spe  # a mixture's: the server's
        if self._spe != mine:
            raise PlanError(f"server plans {self._spe} steps per epoch for N={N} rows, B={B}, "
                            f"last_batch={cfg.last_batch}; the client computes {mine}")
        self._schema = schema
        self._mat = Materializer(schema, cfg.sharding, self._rows, cfg.pad_mask, masks=masked_columns(cfg.columns))
        self._pos = (0, 0)
        if state is not None:
            self._pos = self._check_state(state)
            if cfg.mixture is not None:
                self._replan_mixture(state)
            elif self._switch is not None and self._pos[0] == self._switch["epoch"]:
                # The server judges the switch now, not at the first step (with
                # packing: only one that keeps the packed batch's shape).
                self._session.plan(self._request(self._pos))

    def _replan_mixture(self, state: Mapping[str, Any]) -> None:
        """A mixture resumed across an elastic switch: its steps are the
        server's plan with the switch (docs/CONTRACT-elastic.md, "Mixtures");
        resumed under the switch it was saved under, they are the state's."""
        if self._switch is not None:
            _, plan = self._session.plan(self._request((0, 0)))
            self._plan_info, self._spe = plan, plan["steps_per_epoch"]
        theirs = state["fingerprint"].get("steps_per_epoch")
        same = state["fingerprint"].get("num_slices") == self._layout.D
        if same and not self._reweight and theirs != self._spe:
            raise StateMismatchError(f"state's mixture had {theirs} steps, the server plans {self._spe} for it now: "
                                     "the sources changed; the stream cannot resume")
        ep, st = self._pos
        if ep == 0 and not 0 <= st < self._spe:
            raise StateMismatchError(f"state position step {st} is outside the mixture's {self._spe} steps")

    def _check_plan(self, plan: Mapping[str, Any]) -> None:
        """After a reconnect: the server must plan what it planned before."""
        if plan["num_rows"] != self._num_rows or plan["steps_per_epoch"] != self._spe:
            raise PlanError(f"after reconnecting, the server at {self._session.address} plans N={plan['num_rows']} "
                            f"rows and {plan['steps_per_epoch']} steps per epoch; before it planned "
                            f"N={self._num_rows} and {self._spe}: the dataset changed, the stream cannot resume")

    def _fingerprint(self) -> dict[str, Any]:
        return self._cfg.fingerprint(self._layout.D, self._plan_info)

    def _check_state(self, state: Mapping[str, Any]) -> tuple[int, int]:
        if not isinstance(state, Mapping) or state.get("version") != STATE_VERSION:
            raise StateMismatchError(f"state {state!r}: want a dict from Loader.state() with version {STATE_VERSION}")
        mine, theirs = self._fingerprint(), state.get("fingerprint")
        if not isinstance(theirs, Mapping):
            raise StateMismatchError(f"state has no fingerprint: {state!r}")
        theirs = _upgrade_fingerprint(theirs)
        # Compare through JSON so a state that went through json.dump/load matches.
        mine_j = json.loads(json.dumps(mine))
        if (msg := tokenizer_mismatch(mine_j, theirs)) is not None:
            raise StateMismatchError(msg)
        if self._cfg.mixture is not None:
            mine_j, theirs = check_fingerprints(mine_j, theirs, self._reweight)
        try:
            ep, st = int(state["position"]["epoch"]), int(state["position"]["step"])
        except (KeyError, TypeError, ValueError) as e:
            raise StateMismatchError(f"state position {state.get('position')!r}: {e}") from e
        mix = self._cfg.mixture is not None
        self._switch = resolve_switch({**state, "fingerprint": theirs}, mine_j, (ep, st), self._elastic_ok, mix)
        if ep < 0 or not 0 <= st < (self._spe if not mix else 1 << 62):  # a mixture's: checked once replanned
            raise StateMismatchError(f"state position epoch {ep} step {st} is outside 0 <= step < {self._spe}")
        return ep, st

    def _stats_init(self) -> None:
        self._steps = 0
        # Sums over the steps received: those of the prefetchers before the
        # current one (recovery replaces it), plus the current one's totals
        # as of its last step (prefetch.TOTALS).
        self._totals_before = (0,) * len(TOTALS)
        self._totals = (0,) * len(TOTALS)
        # ms, a ring of the most recent steps' waits: array.array, whose item
        # assignment on next()'s path is C (a NumPy one costs a few us more)
        self._waits = array.array("d", bytes(8 * WAITS_KEPT))
        self._wait_sum = 0.0  # ms, over every step
        self._wait_max = 0.0
        self._t0: float | None = None

    # -- recovery ----------------------------------------------------------

    def _recover(self, cause: BaseException) -> None:
        """Gets a working server back after ``cause`` broke the stream: drops
        the prefetcher (and the steps it staged but did not hand out), then
        lets the session restart or reconnect and replan. The next
        ``__next__`` reopens the stream at ``self._pos``, the first step not
        yet returned. Raises UnavailableError when the recovery budget is spent."""
        pf, self._box[0] = self._box[0], None
        if pf is not None:
            pf.stop()
        self._totals_before = tuple(a + b for a, b in zip(self._totals_before, self._totals))
        self._totals = (0,) * len(TOTALS)
        if self._recover_deadline is None:
            self._recover_deadline = time.monotonic() + self._cfg.recovery_timeout
        self._session.recover(cause, self._recover_deadline, f"epoch {self._pos[0]} step {self._pos[1]}",
                              self._check_plan, self._request((0, 0)))

    # -- public surface --------------------------------------------------

    @property
    def config(self) -> LoaderConfig:
        """The configuration this loader reads with (frozen)."""
        return self._cfg

    @property
    def steps_per_epoch(self) -> int:
        """Global steps per epoch (the same on every process)."""
        return self._spe

    @property
    def num_rows(self) -> int:
        """N, the dataset's rows (per epoch)."""
        return self._num_rows

    @property
    def address(self) -> str:
        """The server's address (``unix:///...`` or ``host:port``); a restarted
        local server has a new one."""
        return self._session.address

    @property
    def server_pid(self) -> int | None:
        """The process id of the local server this loader started (the current
        one, after a restart), or None when it connects to ``server=``."""
        return self._server.pid if self._server is not None else None

    @property
    def _server(self) -> LocalServer | None:
        return self._session.server

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return self

    def _finished(self) -> bool:
        return self._cfg.num_epochs is not None and self._pos[0] >= self._cfg.num_epochs

    def __next__(self) -> dict[str, Any]:
        if self._closed:
            raise MeshfeedError("loader is closed")
        while True:
            try:
                return self._next_step()
            except StopIteration:
                self._hand_back(None)  # the loader keeps no step past the end
                raise
            except BaseException as e:  # noqa: BLE001 - recovered or re-raised
                if self._cfg.recovery_timeout <= 0 or not recoverable(e) or self._closed:
                    raise
                self._recover(e)

    def _next_step(self) -> dict[str, Any]:
        pf: Prefetcher | None = self._box[0]
        if pf is None:  # a stream to open (first, after a recovery)
            if self._session.client is None:
                raise MeshfeedError("loader has no connection (an earlier recovery failed)")
            if self._finished():
                raise StopIteration
            session, slots = self._session, self._cfg.staged + SHM_EXTRA_SLOTS
            tf = self._tbox[0]
            if tf is not None:
                slots += tf.inflight  # the steps in the transform stage hold their slots too
            pf = self._box[0] = Prefetcher(lambda t: session.open_stream(t, slots),
                                           json.dumps(self._request(self._pos)).encode(), self._mat,
                                           self._rows, self._pos, self._spe, self._cfg.staged, tf)
            if self._t0 is None:
                self._t0 = time.perf_counter()
        t = time.perf_counter()
        ta = jax.profiler.TraceAnnotation
        if ta.is_enabled():  # a profiler trace is on: the wait shows in it
            with ta("meshfeed.next"):
                item = pf.get()
        else:  # 10 us a step spared when none is
            item = pf.get()
        wait = time.perf_counter() - t
        if item is END:
            pf.queue.put_back(END)  # keep answering StopIteration
            raise StopIteration
        if isinstance(item, Failure):
            if recoverable(item.exc) and self._cfg.recovery_timeout > 0:
                raise item.exc  # __next__ recovers; a new prefetcher starts at self._pos
            pf.queue.put_back(item)
            raise item.exc
        (ep, st, self._totals), batch = item
        w = wait * 1e3
        self._waits[self._steps % len(self._waits)] = w
        self._wait_sum += w
        if w > self._wait_max:
            self._wait_max = w
        self._steps += 1
        self._pos = (ep + 1, 0) if st + 1 >= self._spe else (ep, st + 1)
        self._recover_deadline = None  # a step arrived: the next failure gets a fresh budget
        self._hand_back(batch)
        return batch

    def _hand_back(self, batch: dict[str, Any] | None) -> None:
        """Keeps ``batch`` (the step being returned) and hands the previous
        one to the prefetch thread, which deletes it there once the loop has
        dropped it too (prefetch.py)."""
        prev, self._handed = self._handed, batch
        pf = self._box[0]
        if prev is not None and pf is not None:
            pf.drop(prev)

    def state(self) -> dict[str, Any]:
        """A small JSON-serializable checkpoint: the position of the next step
        not yet returned, and the configuration's fingerprint. Pass it as
        ``state=`` to a new Loader to resume there."""
        out = {"version": STATE_VERSION, "position": {"epoch": self._pos[0], "step": self._pos[1]},
               "fingerprint": json.loads(json.dumps(self._fingerprint()))}
        if self._switch is not None and self._pos[0] == self._switch["epoch"]:
            out["elastic"] = dict(self._switch)  # inside the epoch of a switch
        if self._cfg.mixture is not None:  # each source's rows per slice so far (mixture.py), for the record
            if getattr(self, "_mix_pos", None) is None:
                sw = self._switch
                self._mix_pos = Positions(self._cfg.mixture, self._layout.b, None if sw is None else
                                          (self._cfg.global_batch_size // sw["from_slices"], sw["step"]))
            step = self._pos[1] if self._pos[0] == 0 else self._spe  # (1, 0): the one pass is over
            out["mixture"] = {"step": step, "positions": self._mix_pos.at(step)}
        return out

    def stats(self) -> dict[str, Any]:
        """Counters of this process's consumption so far.

        ``steps``, ``rows`` (real rows received), ``padded_rows``, ``bytes``
        (Arrow record bytes), ``wait_ms`` (per-step wait of the consumer: p50,
        p90 and p99 of the last 65,536 steps, max and mean of all), ``rows_per_s`` and ``bytes_per_s`` since the
        first step was requested, ``host_copies`` (copies meshfeed made: 0 on
        the standard path), ``mask_unpacks`` (mask bitmaps unpacked) and
        ``unaligned_transfers`` (per-device views not 64-byte aligned: XLA's
        CPU client copies those instead of aliasing them), ``recoveries``
        (times the stream was resumed after the server went away),
        ``transport`` (``"shm"`` or ``"flight"``: how the current stream travels),
        ``in_place_bytes`` (of ``bytes``, those the server decoded or gathered
        straight into shared memory and sent by reference: no copy between
        decoding and the ``jax.Array``). With a local server that has a
        disk cache (``ServerOptions(cache_dir=...)``), ``cache``: its
        counters since that server started: ``hits`` and ``misses`` (cache
        blocks served without, or fetched with, a storage request),
        ``bytes_saved`` (bytes not read from storage), ``evictions``,
        ``corrupt`` (entries found damaged and fetched again) and
        ``write_errors`` (blocks the disk could not take); None while the
        server cannot say; ``manifest`` (the
        dataset manifest the server planned from, ``""`` when it read the
        footers) and ``plan_requests`` (the store requests that planning
        made).

        ``transform`` (None without ``transform=``): ``function``
        (``module:qualname``), ``mode`` (``"threads"`` or ``"processes"``),
        ``workers``, ``seconds`` (in the function, over the steps received),
        ``ms_per_step`` (their mean), ``wait_seconds`` and
        ``wait_ms_per_step`` (how long the prefetch thread waited for the
        transform's results: where that is near ``ms_per_step`` divided by
        the workers and ``wait_ms`` is high, the transform is what the loop
        waits for). Its copies (the slices concatenated, the trips through
        worker processes' shared memory) count in ``host_copies``.
        """
        el = time.perf_counter() - self._t0 if self._t0 is not None else 0.0
        n = self._steps
        w = self._waits[:min(n, len(self._waits))]
        tot = dict(zip(TOTALS, (a + b for a, b in zip(self._totals_before, self._totals))))
        return {"steps": n, "rows": tot["rows"], "padded_rows": tot["padded_rows"], "bytes": tot["bytes"],
                "wait_ms": {"p50": _pctl(w, 50), "p90": _pctl(w, 90), "p99": _pctl(w, 99),
                            "max": self._wait_max, "mean": self._wait_sum / n if n else 0.0},
                "rows_per_s": tot["rows"] / el if el > 0 else 0.0,
                "bytes_per_s": tot["bytes"] / el if el > 0 else 0.0,
                "recoveries": self._session.recoveries, "transport": self._session.transport,
                "host_copies": tot["host_copies"], "mask_unpacks": tot["mask_unpacks"],
                "unaligned_transfers": tot["unaligned_transfers"], "in_place_bytes": tot["in_place_bytes"],
                "manifest": self._plan_info.get("manifest", ""),
                "plan_requests": int(self._plan_info.get("plan_requests", 0)),
                "transform": self._transform_stats(tot, n),
                **self._cache_stats()}

    def _cache_stats(self) -> dict[str, Any]:
        """``{"cache": counters}`` for stats() when the local server has a
        disk cache, else nothing."""
        srv = self._session.server
        if srv is None or srv.metrics_address is None:
            return {}
        return {"cache": cache_stats(srv.metrics_address)}

    def _transform_stats(self, tot: Mapping[str, Any], n: int) -> dict[str, Any] | None:
        tf, cfg = self._tbox[0], self._cfg
        if tf is None or cfg.transform is None:
            return None
        secs, wait = float(tot["transform_seconds"]), float(tot["transform_wait_seconds"])
        return {"function": describe(cfg.transform), "mode": tf.mode, "workers": tf.workers,
                "seconds": secs, "ms_per_step": 1e3 * secs / n if n else 0.0,
                "wait_seconds": wait, "wait_ms_per_step": 1e3 * wait / n if n else 0.0}

    def close(self) -> None:
        """Stops the prefetch thread, closes the connection and stops the local
        server, if this loader started one. Idempotent."""
        self._closed = True
        self._handed = None
        fin = getattr(self, "_finalizer", None)
        if fin is not None:
            fin()
        else:
            _close_all(self._box, self._sbox)

    def __enter__(self) -> "Loader":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
