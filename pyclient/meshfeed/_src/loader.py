"""meshfeed.Loader: plan over GetFlightInfo, stream over DoGet, prefetch to device."""

from __future__ import annotations

import json
import os
import queue
import threading
import time
import weakref
from typing import Any, Iterator, Mapping, Sequence

import jax
import numpy as np
import pyarrow.flight as flight

from .arrowtypes import masked_columns
from .config import Column, Shuffle
from .errors import (InvalidRequestError, MeshfeedError, PlanError, StateMismatchError, UnavailableError,
                     from_flight)
from .layout import Layout, Materializer, layout_of
from .server import LocalServer, allowed_root, find_binary

STATE_VERSION = 1
_LAST_BATCH = ("drop", "pad", "raise")
_END = object()


class _Failure:
    def __init__(self, exc: BaseException):
        self.exc = exc


def _location(server: str) -> str:
    if "://" in server and not server.startswith("unix://"):
        return server  # grpc+tcp://, grpc+tls://, grpc+unix://
    if server.startswith("unix://"):
        return "grpc+unix://" + server[len("unix://"):]
    return "grpc+tcp://" + server


def _normalize_uri(uri: str) -> str:
    if not isinstance(uri, str) or not uri:
        raise InvalidRequestError(f"data URI {uri!r}: want a non-empty string")
    if uri.startswith("gs://") or uri.startswith("file://"):
        return uri
    if "://" in uri:
        raise InvalidRequestError(f"data URI {uri!r}: want gs://bucket/path, file:///path or a local path")
    return os.path.abspath(os.path.expanduser(uri))


def _pctl(xs: Sequence[float], q: float) -> float:
    return float(np.percentile(np.asarray(xs), q)) if len(xs) else 0.0


class _Prefetcher:
    """Background thread: reads DoGet messages, materializes them on device,
    and queues up to ``depth`` steps. Holds no reference to the Loader."""

    def __init__(self, client: flight.FlightClient, ticket: bytes, materialize: Materializer,
                 layout: Layout, first: tuple[int, int], steps_per_epoch: int, depth: int):
        self._client = client
        self._ticket = ticket
        self._mat = materialize
        self._layout = layout
        self._expect = first
        self._spe = steps_per_epoch
        self.queue: queue.Queue = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._reader = None
        self._lock = threading.Lock()
        self.thread = threading.Thread(target=self._run, name="meshfeed-prefetch", daemon=True)
        self.thread.start()

    def _put(self, item: Any) -> bool:
        while not self._stop.is_set():
            try:
                self.queue.put(item, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def _run(self) -> None:
        try:
            reader = self._client.do_get(flight.Ticket(self._ticket))
            with self._lock:
                self._reader = reader
            if self._stop.is_set():
                reader.cancel()
                return
            L = self._layout
            while not self._stop.is_set():
                try:
                    chunk = reader.read_chunk()
                except StopIteration:
                    break
                meta = json.loads(chunk.app_metadata.to_pybytes()) if chunk.app_metadata is not None else {}
                ep, st = meta.get("epoch"), meta.get("step")
                if (ep, st) != self._expect or meta.get("slices") != list(L.slices):
                    raise MeshfeedError(
                        f"server sent epoch {ep} step {st} slices {meta.get('slices')}, "
                        f"want epoch {self._expect[0]} step {self._expect[1]} slices {list(L.slices)}")
                batch = self._mat(chunk.data)
                real = meta.get("real_rows") or [L.b] * len(L.slices)
                info = (ep, st, int(sum(real)), len(L.slices) * L.b - int(sum(real)), chunk.data.nbytes,
                        dict(self._mat.counts))
                nxt = st + 1
                self._expect = (ep + 1, 0) if nxt >= self._spe else (ep, nxt)
                if not self._put((info, batch)):
                    return
            self._put(_END)
        except BaseException as e:  # noqa: BLE001 - re-raised in the consumer
            if not self._stop.is_set():
                self._put(_Failure(from_flight(e)))

    def stop(self, timeout: float = 10.0) -> None:
        """Stops the thread: cancels the stream and waits for the thread to end."""
        self._stop.set()
        with self._lock:
            reader = self._reader
        if reader is not None:
            try:
                reader.cancel()
            except Exception:  # noqa: BLE001
                pass
        if self.thread is not threading.current_thread():
            self.thread.join(timeout)


def _close_all(prefetcher_box: list, res: list) -> None:
    """Stops the prefetcher, closes the client res[0] and stops the local
    server res[1] (if any). The lists are the Loader's own: recovery replaces
    their entries, so the finalizer always closes the current ones."""
    if prefetcher_box and prefetcher_box[0] is not None:
        prefetcher_box[0].stop()
    client, server = res
    if client is not None:
        try:
            client.close()
        except Exception:  # noqa: BLE001
            pass
    if server is not None:
        server.stop()


def _recoverable(exc: BaseException) -> bool:
    """Whether a stream error means the server (or its storage) went away for
    now: UNAVAILABLE or DEADLINE_EXCEEDED, a broken connection (a killed server
    ends the call with UNAVAILABLE, or with INTERNAL/CANCELLED and a message
    about the closed connection)."""
    if isinstance(exc, UnavailableError) or isinstance(exc, (ConnectionError, flight.FlightUnavailableError)):
        return True
    if isinstance(exc, MeshfeedError) and exc.code in ("INTERNAL", "CANCELLED", None) and exc.__cause__ is not None:
        msg = str(exc).lower()
        return any(w in msg for w in ("socket closed", "connection reset", "broken pipe", "rst_stream",
                                      "connection refused", "failed to connect", "goaway", "eof"))
    return False


class Loader:
    """Streams global batches of a dataset as sharded ``jax.Array``s.

    Each step is a ``dict[str, jax.Array]`` of shape ``(global_batch_size, ...)``
    laid out as ``sharding`` (string and other non-numeric columns are
    ``pyarrow.Array``s holding this process's rows). Which row lands in which
    step is defined by the contract of docs/DESIGN.md: files sorted by URI, row
    groups in order (permuted per epoch with ``shuffle``), split into ``D``
    contiguous streams, ``D`` being the number of distinct batch slices of
    ``sharding``; slice ``d`` of step ``s`` is rows ``[s*b, (s+1)*b)`` of stream ``d``.

    Args:
        data: dataset URI, glob, or a list of them (local paths, ``file://`` or ``gs://``).
        global_batch_size: ``B``, rows per global step.
        sharding: layout of dimension 0 of every array (any ``jax.sharding.Sharding``).
        columns: None (all columns), a list of names, or ``{name: Column or None}``.
        last_batch: ``"drop"``, ``"pad"`` (adds a boolean mask ``mask_key``) or
            ``"raise"`` (PlanError at construction unless ``N % B == 0``).
        shuffle: a :class:`Shuffle`, or None for file order.
        num_epochs: epochs to stream, or None for unbounded.
        state: a dict from :meth:`state` to resume at; it must come from a loader
            with the same configuration (else StateMismatchError).
        prefetch: steps staged on device ahead of the consumer (>= 1).
        server: ``"unix:///path"`` or ``"host:port"`` of a running server; None
            starts a local one (stopped by :meth:`close`).
        mask_key: name of the mask with ``last_batch="pad"``.
        binary: path of the meshfeed binary (searched first).
        server_args: extra ``meshfeed serve`` flags for the local server
            (``server=None`` only), e.g. ``["--map-cache", str(8 << 30)]`` to
            keep local files mapped between epochs (see ``meshfeed serve -h``).
        recovery_timeout: seconds the loader keeps trying to get its stream
            back when the server goes away mid-epoch (killed, restarted, or
            UNAVAILABLE): a local server (``server=None``) that died is
            restarted; a given ``server`` address is reconnected to, with
            backoff, until it answers again. The stream resumes at the first
            step not yet returned by ``next``, so the sequence of steps seen
            has no gap and no duplicate. The budget covers consecutive failed
            attempts without a step delivered in between; when it runs out
            the error is an :class:`UnavailableError`. 0 disables recovery.

    Iterating yields the steps from the start (or ``state``) position through
    the last epoch, once; the loader is also a context manager.
    """

    def __init__(self, data: str | Sequence[str], *, global_batch_size: int,
                 sharding: jax.sharding.Sharding, columns: Sequence[str] | Mapping[str, Column | None] | None = None,
                 last_batch: str = "drop", shuffle: Shuffle | None = None, num_epochs: int | None = 1,
                 state: Mapping[str, Any] | None = None, prefetch: int = 2, server: str | None = None,
                 mask_key: str = "valid", binary: str | os.PathLike | None = None,
                 recovery_timeout: float = 60.0, server_args: Sequence[str] = ()):
        self._box: list = [None]
        self._res: list = [None, None]  # [client, local server]: what the finalizer closes
        self._closed = False
        self._server: LocalServer | None = None
        self._client = None
        self._recoveries = 0
        self._recover_deadline: float | None = None
        uris = [data] if isinstance(data, str) else list(data)
        if not uris:
            raise InvalidRequestError("data: name at least one dataset URI")
        self._uris = [_normalize_uri(u) for u in uris]
        if isinstance(global_batch_size, bool) or not isinstance(global_batch_size, int) or global_batch_size <= 0:
            raise InvalidRequestError(f"global_batch_size={global_batch_size!r}: want an int > 0")
        if not isinstance(sharding, jax.sharding.Sharding):
            raise InvalidRequestError(f"sharding={sharding!r}: want a jax.sharding.Sharding")
        if last_batch not in _LAST_BATCH:
            raise InvalidRequestError(f"last_batch={last_batch!r}: want one of {', '.join(_LAST_BATCH)}")
        if shuffle is not None and not isinstance(shuffle, Shuffle):
            raise InvalidRequestError(f"shuffle={shuffle!r}: want a meshfeed.Shuffle or None")
        if num_epochs is not None and (isinstance(num_epochs, bool) or not isinstance(num_epochs, int) or num_epochs < 1):
            raise InvalidRequestError(f"num_epochs={num_epochs!r}: want an int >= 1 or None (unbounded)")
        if isinstance(prefetch, bool) or not isinstance(prefetch, int) or prefetch < 1:
            raise InvalidRequestError(f"prefetch={prefetch!r}: want an int >= 1")
        if not isinstance(mask_key, str) or not mask_key:
            raise InvalidRequestError(f"mask_key={mask_key!r}: want a non-empty string")
        if isinstance(recovery_timeout, bool) or not isinstance(recovery_timeout, (int, float)) or recovery_timeout < 0:
            raise InvalidRequestError(f"recovery_timeout={recovery_timeout!r}: want a number of seconds >= 0")
        self._recovery_timeout = float(recovery_timeout)
        if isinstance(server_args, str) or not all(isinstance(a, str) for a in server_args):
            raise InvalidRequestError(f"server_args={server_args!r}: want a sequence of strings")
        if server is not None and server_args:
            raise InvalidRequestError("server_args: only for a local server (server=None); "
                                      "pass flags to the running server where it was started")
        self._server_args = tuple(server_args)
        self._columns = self._wire_columns(columns)
        self._masks = masked_columns(columns)  # Column(mask=True): filled by the client (arrowtypes)
        self._B = global_batch_size
        self._sharding = sharding
        self._last_batch = last_batch
        self._shuffle = shuffle
        self._num_epochs = num_epochs
        self._prefetch = prefetch
        self._mask_key = mask_key
        self._layout = layout_of(sharding, global_batch_size)

        self._binary = None
        if server is None:
            self._roots = [allowed_root(u) for u in self._uris]
            self._binary = find_binary(binary)
            self._server = LocalServer(self._binary, self._roots, extra_args=self._server_args)
            server = self._server.address
        self._address = server
        self._res[1] = self._server
        self._finalizer = weakref.finalize(self, _close_all, self._box, self._res)
        try:
            self._client = self._connect(server)
            self._plan(state)
        except BaseException:
            self.close()
            raise
        self._stats_init()

    def _connect(self, address: str) -> flight.FlightClient:
        client = flight.FlightClient(_location(address), generic_options=[("grpc.max_receive_message_length", -1)])
        self._res[0] = client
        return client

    # -- recovery ----------------------------------------------------------

    def _recover(self, cause: BaseException) -> None:
        """Gets a working server back after ``cause`` broke the stream: drops
        the prefetcher (and the steps it staged but did not hand out),
        restarts the local server if it died, reconnects, and checks that the
        server plans the same dataset. The next ``__next__`` reopens the
        stream at ``self._pos``, the first step not yet returned. Raises
        UnavailableError when the recovery budget is spent."""
        pf = self._box[0]
        self._box[0] = None
        if pf is not None:
            pf.stop()
        now = time.monotonic()
        if self._recover_deadline is None:
            self._recover_deadline = now + self._recovery_timeout
        wait, attempts, last = 0.05, 0, cause
        while True:
            attempts += 1
            try:
                self._reconnect()
                self._recoveries += 1
                return
            except PlanError:
                raise
            except BaseException as e:  # noqa: BLE001 - retried below, re-raised when the budget is spent
                e = from_flight(e)
                if not (_recoverable(e) or isinstance(e, MeshfeedError)):
                    raise
                last = e
            if time.monotonic() + wait > self._recover_deadline:
                raise UnavailableError(
                    f"meshfeed server at {self._address} did not come back within recovery_timeout="
                    f"{self._recovery_timeout:g}s ({attempts} attempts; the stream broke at epoch {self._pos[0]} "
                    f"step {self._pos[1]} with: {cause}); last error: {last}", code="UNAVAILABLE") from cause
            time.sleep(wait)
            wait = min(wait * 2, 2.0)

    def _reconnect(self) -> None:
        old = self._client
        self._client = None
        self._res[0] = None
        if old is not None:
            try:
                old.close()
            except Exception:  # noqa: BLE001
                pass
        if self._server is not None and not self._server.alive():
            self._server.stop()
            self._server = self._res[1] = None
            self._server = LocalServer(self._binary, self._roots, extra_args=self._server_args)
            self._res[1] = self._server
            self._address = self._server.address
        client = self._connect(self._address)
        info = client.get_flight_info(flight.FlightDescriptor.for_command(json.dumps(self._request((0, 0))).encode()))
        plan = json.loads(info.app_metadata)
        if int(plan["num_rows"]) != self._num_rows or int(plan["steps_per_epoch"]) != self._spe:
            raise PlanError(f"after reconnecting, the server at {self._address} plans N={plan['num_rows']} rows "
                            f"and {plan['steps_per_epoch']} steps per epoch; before it planned N={self._num_rows} "
                            f"and {self._spe}: the dataset changed, the stream cannot resume")
        self._client = client

    # -- configuration ---------------------------------------------------

    @staticmethod
    def _wire_columns(columns: Any) -> list[dict[str, Any]] | None:
        if columns is None:
            return None
        if isinstance(columns, str):
            raise InvalidRequestError(f"columns={columns!r}: want a list of names or a dict, not a string")
        out = []
        if isinstance(columns, Mapping):
            for name, col in columns.items():
                if col is not None and not isinstance(col, Column):
                    raise InvalidRequestError(f"columns[{name!r}]={col!r}: want a meshfeed.Column or None")
                out.append((col or Column()).to_wire(name))
        else:
            for name in columns:
                if not isinstance(name, str) or not name:
                    raise InvalidRequestError(f"columns: {name!r} is not a column name")
                out.append({"name": name})
        if not out:
            raise InvalidRequestError("columns: empty; pass None for all columns")
        names = [c["name"] for c in out]
        if len(set(names)) != len(names):
            raise InvalidRequestError(f"columns: duplicate names in {names}")
        return out

    def _request(self, start: tuple[int, int]) -> dict[str, Any]:
        L = self._layout
        req: dict[str, Any] = {"version": 1, "datasets": self._uris, "global_batch_size": self._B,
                               "num_slices": L.D, "slices": list(L.slices), "last_batch": self._last_batch,
                               "epochs": self._num_epochs or 0, "start": {"epoch": start[0], "step": start[1]}}
        if self._columns is not None:
            req["columns"] = self._columns
        if self._shuffle is not None:
            req["seed"] = self._shuffle.seed
            req["shuffle"] = {"enabled": True, "window": self._shuffle.window}
        if self._last_batch == "pad":
            req["mask_column"] = self._mask_key
        return req

    def _fingerprint(self) -> dict[str, Any]:
        return {"datasets": list(self._uris), "columns": self._columns, "global_batch_size": self._B,
                "num_slices": self._layout.D, "seed": self._shuffle.seed if self._shuffle else None,
                "window": self._shuffle.window if self._shuffle else None, "last_batch": self._last_batch,
                "mask_key": self._mask_key if self._last_batch == "pad" else None,
                "num_rows": self._num_rows, "steps_per_epoch": self._spe}

    def _plan(self, state: Mapping[str, Any] | None) -> None:
        req = self._request((0, 0))
        try:
            info = self._client.get_flight_info(flight.FlightDescriptor.for_command(json.dumps(req).encode()))
        except Exception as e:  # noqa: BLE001
            raise from_flight(e) from e
        try:
            plan = json.loads(info.app_metadata)
            self._num_rows = int(plan["num_rows"])
            self._spe = int(plan["steps_per_epoch"])
        except (ValueError, KeyError, TypeError) as e:
            raise MeshfeedError(f"server's FlightInfo app_metadata {info.app_metadata!r}: {e}") from e
        N, B = self._num_rows, self._B
        mine = {"drop": N // B, "pad": -(-N // B), "raise": N // B}[self._last_batch]
        if self._spe != mine:
            raise PlanError(f"server plans {self._spe} steps per epoch for N={N} rows, B={B}, "
                            f"last_batch={self._last_batch}; the client computes {mine}")
        self._schema = info.schema
        self._mat = Materializer(info.schema, self._sharding, self._layout,
                                 self._mask_key if self._last_batch == "pad" else None, masks=self._masks)
        self._pos = (0, 0)
        if state is not None:
            self._pos = self._check_state(state)

    def _check_state(self, state: Mapping[str, Any]) -> tuple[int, int]:
        if not isinstance(state, Mapping) or state.get("version") != STATE_VERSION:
            raise StateMismatchError(f"state {state!r}: want a dict from Loader.state() with version {STATE_VERSION}")
        mine, theirs = self._fingerprint(), state.get("fingerprint")
        if not isinstance(theirs, Mapping):
            raise StateMismatchError(f"state has no fingerprint: {state!r}")
        # Compare through JSON so a state that went through json.dump/load matches.
        mine_j = json.loads(json.dumps(mine))
        diffs = [f"{k}: state has {theirs.get(k)!r}, this loader has {mine_j.get(k)!r}"
                 for k in sorted(set(mine_j) | set(theirs)) if theirs.get(k) != mine_j.get(k)]
        if diffs:
            raise StateMismatchError("state comes from another configuration:\n  " + "\n  ".join(diffs))
        try:
            ep, st = int(state["position"]["epoch"]), int(state["position"]["step"])
        except (KeyError, TypeError, ValueError) as e:
            raise StateMismatchError(f"state position {state.get('position')!r}: {e}") from e
        if ep < 0 or not 0 <= st < self._spe:
            raise StateMismatchError(f"state position epoch {ep} step {st} is outside 0 <= step < {self._spe}")
        return ep, st

    def _stats_init(self) -> None:
        self._steps = 0
        self._rows = 0
        self._padded = 0
        self._bytes = 0
        self._waits: list[float] = []
        self._counts = {"host_copies": 0, "mask_unpacks": 0, "unaligned_transfers": 0}
        self._t0: float | None = None

    # -- public surface --------------------------------------------------

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
        return self._address

    @property
    def server_pid(self) -> int | None:
        """The process id of the local server this loader started (the current
        one, after a restart), or None when it connects to ``server=``."""
        return self._server.pid if self._server is not None else None

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return self

    def _finished(self) -> bool:
        return self._num_epochs is not None and self._pos[0] >= self._num_epochs

    def __next__(self) -> dict[str, Any]:
        if self._closed:
            raise MeshfeedError("loader is closed")
        while True:
            try:
                return self._next_step()
            except BaseException as e:  # noqa: BLE001 - recovered or re-raised
                if self._recovery_timeout <= 0 or not _recoverable(e) or self._closed:
                    raise
                self._recover(e)

    def _next_step(self) -> dict[str, Any]:
        if self._client is None:
            raise MeshfeedError("loader has no connection (an earlier recovery failed)")
        if self._box[0] is None:
            if self._finished():
                raise StopIteration
            self._box[0] = _Prefetcher(self._client, json.dumps(self._request(self._pos)).encode(), self._mat,
                                       self._layout, self._pos, self._spe, self._prefetch)
        pf: _Prefetcher = self._box[0]
        if self._t0 is None:
            self._t0 = time.perf_counter()
        with jax.profiler.TraceAnnotation("meshfeed.next"):
            t = time.perf_counter()
            while True:
                try:
                    item = pf.queue.get(timeout=0.1)
                    break
                except queue.Empty:
                    if not pf.thread.is_alive() and pf.queue.empty():
                        item = _Failure(MeshfeedError("prefetch thread ended without a result"))
                        break
            wait = time.perf_counter() - t
        if item is _END:
            pf.queue.put(_END)  # keep answering StopIteration
            raise StopIteration
        if isinstance(item, _Failure):
            if _recoverable(item.exc) and self._recovery_timeout > 0:
                raise item.exc  # __next__ recovers; a new prefetcher starts at self._pos
            pf.queue.put(item)
            raise item.exc
        (ep, st, real, padded, nbytes, counts), batch = item
        for k, v in counts.items():
            self._counts[k] += v
        self._waits.append(wait * 1e3)
        self._steps += 1
        self._rows += real
        self._padded += padded
        self._bytes += nbytes
        self._pos = (ep + 1, 0) if st + 1 >= self._spe else (ep, st + 1)
        self._recover_deadline = None  # a step arrived: the next failure gets a fresh budget
        return batch

    def state(self) -> dict[str, Any]:
        """A small JSON-serializable checkpoint: the position of the next step
        not yet returned, and the configuration's fingerprint. Pass it as
        ``state=`` to a new Loader to resume there."""
        return {"version": STATE_VERSION, "position": {"epoch": self._pos[0], "step": self._pos[1]},
                "fingerprint": json.loads(json.dumps(self._fingerprint()))}

    def stats(self) -> dict[str, Any]:
        """Counters of this process's consumption so far.

        ``steps``, ``rows`` (real rows received), ``padded_rows``, ``bytes``
        (Arrow record bytes), ``wait_ms`` (per-step wait of the consumer: p50,
        p90, p99, max, mean), ``rows_per_s`` and ``bytes_per_s`` since the
        first step was requested, ``host_copies`` (copies meshfeed made: 0 on
        the standard path), ``mask_unpacks`` (mask bitmaps unpacked) and
        ``unaligned_transfers`` (per-device views not 64-byte aligned: XLA's
        CPU client copies those instead of aliasing them), ``recoveries``
        (times the stream was resumed after the server went away).
        """
        el = time.perf_counter() - self._t0 if self._t0 is not None else 0.0
        w = self._waits
        return {"steps": self._steps, "rows": self._rows, "padded_rows": self._padded, "bytes": self._bytes,
                "wait_ms": {"p50": _pctl(w, 50), "p90": _pctl(w, 90), "p99": _pctl(w, 99),
                            "max": max(w, default=0.0), "mean": float(np.mean(w)) if w else 0.0},
                "rows_per_s": self._rows / el if el > 0 else 0.0,
                "bytes_per_s": self._bytes / el if el > 0 else 0.0,
                "recoveries": self._recoveries, **self._counts}

    def close(self) -> None:
        """Stops the prefetch thread, closes the connection and stops the local
        server, if this loader started one. Idempotent."""
        self._closed = True
        fin = getattr(self, "_finalizer", None)
        if fin is not None:
            fin()
        else:
            _close_all(self._box, self._res)

    def __enter__(self) -> "Loader":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
