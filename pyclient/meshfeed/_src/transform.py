"""The Loader's ``transform=`` stage: a user function from one step's host
arrays to new ones, run between receiving a step and placing it.

The prefetch thread hands each received step's process-local columns to
:class:`Transformer` (``submit``), keeps up to ``inflight`` steps in the
stage, and takes their results back in step order (``finish``), which
checks them and places them on the devices in one call, as the plain path
does. Where the function runs is a stage: :class:`ThreadStage` (a pool of
threads, for functions that let go of the GIL: NumPy, pyarrow compute) or
:class:`ProcessStage` (worker processes, ``transform_worker.py``, for
functions that hold it: Python loops).

What the function gets, per step: a dict of this process's rows of every
column (its slices, ``layout.slices``, concatenated in ascending order:
rows ``[k*b, (k+1)*b)`` are slice ``slices[k]``, where ``b`` is the rows a
step delivers per slice: ``ceil(b / pack_ratio)`` with a packed column,
layout.packed_layout; the outputs have as many rows), numeric and boolean
columns as read-only NumPy arrays, others (strings, lists) as pyarrow
arrays, the pad mask (``mask_key``) included; and a ``numpy.random.Generator``
seeded by ``SeedSequence([seed, epoch, step, jax.process_index()])``.
"""

from __future__ import annotations

import collections
import math
import mmap
import os
import pickle
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from collections.abc import Mapping as _AbcMapping
from typing import Any, Callable, Mapping

import jax
import numpy as np
import pyarrow as pa

from . import layout as _layout
from .errors import InvalidRequestError, MeshfeedError
from .transform_worker import ALIGN, Channel, aligned, rng_for, send_fd

WORKER_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "transform_worker.py")
THREADS = 2  # transform_workers=0: threads in the pool (and steps in the stage at once)
# Steps a worker process has at once (the stage: DEPTH per worker): the
# next is in its pipe while it runs one, so the prefetch thread takes a step
# back one step later than with one (2 steps' time instead of 1 for the
# function on 2 workers) and rarely waits for it.
DEPTH = 2
_STOP_POLL = 0.1  # seconds between looks at the stop flag while waiting for a result


class TransformError(MeshfeedError):
    """The ``transform=`` function failed on a step, or returned something
    that is not a step (the message names the step, the epoch and the key).
    ``__cause__`` is the function's own exception (from a worker process:
    the same exception where it pickles, its remote traceback as its
    ``__cause__``)."""


class RemoteTraceback(Exception):
    """A worker process's traceback, as text: the ``__cause__`` of the
    exception a transform raised there."""

    def __init__(self, tb: str):
        super().__init__(tb)
        self.tb = tb

    def __str__(self) -> str:
        return f'\n"""\n{self.tb}"""'


class RemoteError(Exception):
    """A worker's exception that could not be pickled back: its type's
    name and message."""


class _Stopped(Exception):
    """The prefetcher stops: abandon the step being waited for."""


def seed_entropy(seed: int, epoch: int, step: int, process: int) -> tuple[int, int, int, int]:
    """The entropy of a step's generator: ``SeedSequence([seed, epoch, step,
    process])`` seeds its PCG64 (transform_worker.rng_for)."""
    return (int(seed), int(epoch), int(step), int(process))


def _aligned_empty(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """An uninitialized array starting at an ALIGN-byte boundary (XLA's CPU
    client aliases such memory instead of copying it)."""
    n = math.prod(shape) * dtype.itemsize
    buf = np.empty(n + ALIGN, np.uint8)
    off = (-buf.ctypes.data) % ALIGN
    return np.ndarray(shape, dtype, buf, off)


_WIRE: dict[np.dtype, Any] = {}


def _wire_dtype(dt: np.dtype) -> Any:
    """A dtype as a step frame carries it: its string where that names it
    (20 us less to pickle, each way), else the dtype (bfloat16). Memoized:
    asking numpy each step cost 15 us a column."""
    w = _WIRE.get(dt)
    if w is None:
        w = _WIRE[dt] = dt.str if np.dtype(dt.str) == dt else dt
    return w


class _Lazy:
    """Text formatted only when used: an error message's step and place,
    which every step would otherwise format for nothing."""

    __slots__ = ("fn", "args")

    def __init__(self, fn: Callable[..., str], *args: Any):
        self.fn = fn
        self.args = args

    def __str__(self) -> str:
        return self.fn(*self.args)

    def __format__(self, spec: str) -> str:
        return format(str(self), spec)


def _while(where: Any) -> str:
    return f"while transforming {where}" if where else "while transforming a step"


class _Slices:
    """An input column a worker returned unchanged: the prefetch thread's
    own views of it (one per slice, or one of all), placed as they are;
    ``unaligned``, the devices whose rows of them do not start 64-byte
    aligned, where the Materializer counted them (layout.HostStep), else
    None (counted at placement)."""

    __slots__ = ("views", "dtype", "shape", "unaligned")

    def __init__(self, views: list[np.ndarray], unaligned: int | None = None):
        self.views = views
        self.dtype = views[0].dtype
        self.shape = (sum(map(len, views)), *views[0].shape[1:])
        self.unaligned = unaligned

    def __len__(self) -> int:
        return self.shape[0]


def _local(v: Any) -> Any:
    """A column's process-local array: per-slice views concatenated (a
    copy when there are several) into a 64-byte aligned array, so that a
    function returning it as it is has it placed without XLA copying the
    slices whose rows start aligned; read-only."""
    if not isinstance(v, list):
        return v
    if len(v) == 1:
        a = v[0]
    else:
        a = _aligned_empty((sum(map(len, v)), *v[0].shape[1:]), v[0].dtype)
        np.concatenate(v, out=a)
    a.flags.writeable = False
    return a


# -- stages ---------------------------------------------------------------------


class ThreadStage:
    """Runs the function on a pool of ``threads`` threads (named
    ``meshfeed-transform``)."""

    kind = "threads"

    def __init__(self, fn: Callable[..., Any], threads: int = THREADS):
        self.fn = fn
        self.inflight = threads
        self.pool = ThreadPoolExecutor(threads, thread_name_prefix="meshfeed-transform")

    def _run(self, host: Mapping[str, Any], entropy: tuple[int, ...]) -> tuple[Any, float, int]:
        copies = sum(1 for v in host.values() if isinstance(v, list) and len(v) > 1)
        batch = {k: _local(v) for k, v in host.items()}
        rng = rng_for(entropy)
        t = time.perf_counter()
        out = self.fn(batch, rng)
        return out, time.perf_counter() - t, copies

    def submit(self, host: Mapping[str, Any], entropy: tuple[int, ...]) -> Future:
        return self.pool.submit(self._run, host, entropy)

    def result(self, fut: Future, stop: threading.Event, where: Any) -> tuple[Any, float, int]:
        while True:
            if stop.is_set():
                raise _Stopped
            try:
                return fut.result(timeout=_STOP_POLL)
            except FutureTimeout:
                continue
            except Exception as e:  # noqa: BLE001 - the user's function failed
                raise TransformError(f"transform failed at {where}: {type(e).__name__}: {e}") from e

    @property
    def pids(self) -> list[int]:
        return []

    def wait_ready(self) -> None:
        pass

    def close(self, timeout: float = 10.0) -> None:
        threads = list(getattr(self.pool, "_threads", ()))
        self.pool.shutdown(wait=False, cancel_futures=True)
        for t in threads:
            if t is not threading.current_thread():
                t.join(timeout)


class _Segment:
    """A shared-memory segment: a memfd (an unlinked temporary file where
    there is none) of ``size`` bytes, mapped here; ``fd`` is sent to the
    worker once, then closed."""

    def __init__(self, size: int, write: bool):
        if hasattr(os, "memfd_create"):
            fd = os.memfd_create("meshfeed-transform", os.MFD_CLOEXEC)
        else:  # pragma: no cover - not Linux
            import tempfile
            f = tempfile.TemporaryFile()
            fd = os.dup(f.fileno())
            f.close()
        os.ftruncate(fd, size)
        self.size = size
        self.fd = fd
        self.mm = mmap.mmap(fd, size, flags=mmap.MAP_SHARED,
                            prot=mmap.PROT_READ | (mmap.PROT_WRITE if write else 0))

    def sent(self) -> None:
        os.close(self.fd)
        self.fd = -1

    def close(self) -> None:
        if self.fd >= 0:
            self.sent()
        try:
            self.mm.close()
        except BufferError:  # a view still exists: the mapping goes with it
            pass


class _Worker:
    """One worker process: a pipe each way for its step frames and replies
    (``ch``), a Unix socket for its first frame and its segments'
    descriptors, and its two segments."""

    def __init__(self, init: dict[str, Any]):
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        steps_r, steps_w = os.pipe()
        replies_r, replies_w = os.pipe()
        mine = (steps_r, replies_w)  # the worker's ends, closed here once it has them
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", "import runpy, sys; runpy.run_path(sys.argv[1], run_name='__main__')",
                 WORKER_FILE, str(theirs.fileno()), str(steps_r), str(replies_w)],
                pass_fds=[theirs.fileno(), *mine], stdin=subprocess.DEVNULL)
        except BaseException:
            ours.close()
            for fd in (steps_w, replies_r):
                os.close(fd)
            raise
        finally:
            theirs.close()
            for fd in mine:
                os.close(fd)
        os.set_blocking(replies_r, False)  # a reply is read without waiting first (Channel.ready)
        self.sock = ours
        self.ch = Channel(replies_r, steps_w)
        Channel(ours.fileno(), ours.fileno()).send(init)
        # Step k uses segments k % DEPTH: a step may be sent while the one
        # before is still in the worker.
        self.seg_in: list[_Segment | None] = [None] * DEPTH
        self.seg_out: list[_Segment | None] = [None] * DEPTH
        self.closed = False
        self.sent = 0  # steps sent
        self.got = 0  # replies read (the steps before `sent - got` are done)
        self.cols: list | None = None  # the column layout last sent (a step frame repeats it as None)
        # The steps sent and not yet answered, oldest first: (columns copied
        # in, the step's columns: an input it returns unchanged is placed
        # from them).
        self.waiting: collections.deque = collections.deque()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def recv(self, stop: threading.Event | None, what: Any) -> Any:
        """The worker's next frame, waiting (and looking at ``stop``)."""
        while not self.ch.ready(_STOP_POLL):
            if stop is not None and stop.is_set():
                raise _Stopped
            if self.proc.poll() is not None and not self.ch.ready(0):
                raise TransformError(f"transform worker process {self.pid} exited with status "
                                     f"{self.proc.returncode} {what}")
        try:
            return self.ch.recv()
        except (EOFError, OSError) as e:
            code = self.proc.wait(5) if self.proc.poll() is None else self.proc.returncode
            raise TransformError(f"transform worker process {self.pid} exited with status {code} {what}") from e

    def send_segment(self, kind: str, size: int, slot: int) -> None:
        seg = _Segment(size, write=kind == "in")
        send_fd(self.sock, seg.fd)  # the descriptor first: the frame tells the worker to take it
        self.ch.send((kind, size, slot))
        seg.sent()
        segs = self.seg_in if kind == "in" else self.seg_out
        old, segs[slot] = segs[slot], seg
        if old is not None:
            old.close()

    def close(self, timeout: float) -> None:
        if self.closed:
            return
        self.closed = True
        for fd in (self.ch.wfd, self.ch.rfd):  # the worker reads the end of its steps and exits
            try:
                os.close(fd)
            except OSError:
                pass
        try:
            self.sock.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for seg in (*self.seg_in, *self.seg_out):
            if seg is not None:
                seg.close()


def _remote_exception(msg: tuple) -> BaseException:
    _, blob, tname, text, tb = msg
    exc: BaseException | None = None
    if blob is not None:
        try:
            exc = pickle.loads(blob)
        except Exception:  # noqa: BLE001
            exc = None
    if not isinstance(exc, BaseException):
        exc = RemoteError(f"{tname}: {text}")
    exc.__cause__ = RemoteTraceback(tb)
    return exc


class ProcessStage:
    """Runs the function in ``n`` worker processes (transform_worker.py),
    step ``s`` of a stream on worker ``s mod n``: each worker has at most
    one step at a time, and results come back in step order.

    Columns go through shared memory: the prefetch thread copies a step's
    numeric columns into the worker's input segment (concatenating the
    slices on the way) and copies the function's numeric outputs out of its
    output segment into new 64-byte aligned arrays (which the placement may
    alias, and keep, on CPU devices); other values travel by pickle."""

    kind = "processes"

    def __init__(self, fn: Callable[..., Any], n: int, start_timeout: float = 120.0):
        try:
            blob = pickle.dumps(fn, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as e:  # noqa: BLE001 - pickle raises several types
            raise InvalidRequestError(
                f"meshfeed.Loader: transform={fn!r} cannot run in worker processes (transform_workers={n}): "
                f"it does not pickle ({type(e).__name__}: {e}); use a function defined at the top level of a "
                "module (or a functools.partial of one), or transform_workers=0 for threads") from e
        main = sys.modules.get("__main__")
        main_path = getattr(main, "__file__", None) if b"__main__" in blob else None
        init = {"fn": blob, "sys_path": list(sys.path), "main_path": main_path}
        self.inflight = n * DEPTH
        self.workers: list[_Worker] = []
        self._next = 0
        self._fn = fn
        self._start_timeout = start_timeout
        self._ready = False
        try:
            for _ in range(n):
                self.workers.append(_Worker(init))
        except BaseException:
            self.close()
            raise

    def wait_ready(self) -> None:
        """Waits until every worker loaded the function (they start
        together: their imports overlap; the Loader plans meanwhile).
        Raises TransformError when one could not."""
        if self._ready:
            return
        deadline = time.monotonic() + self._start_timeout
        for w in self.workers:
            while not w.ch.ready(_STOP_POLL):
                if w.proc.poll() is not None or time.monotonic() > deadline:
                    raise TransformError(f"transform worker process {w.pid} did not start "
                                         f"(status {w.proc.poll()})")
            msg = w.recv(None, "while loading the transform")
            if msg[0] == "error":
                raise TransformError(f"transform={self._fn!r}: worker process {w.pid} could not load it: "
                                     f"{msg[2]}: {msg[3]}") from _remote_exception(msg)
        self._ready = True

    @property
    def pids(self) -> list[int]:
        return [w.pid for w in self.workers]

    def submit(self, host: Mapping[str, Any], entropy: tuple[int, ...]) -> tuple[_Worker, int]:
        w = self.workers[self._next % len(self.workers)]
        self._next += 1
        while w.sent - w.got >= DEPTH:  # steps a stopped prefetcher left there: their replies first
            try:
                self._reply(w, None, "")
            except TransformError:
                if w.proc.poll() is not None:
                    raise
                # that step's own failure: it was abandoned, and so is its error
        cols, extra, need = [], {}, 0
        for k, v in host.items():
            if isinstance(v, list):
                shape = (sum(map(len, v)), *v[0].shape[1:])
                cols.append((k, _wire_dtype(v[0].dtype), shape, need))
                need += aligned(math.prod(shape) * v[0].dtype.itemsize)
            else:
                extra[k] = v
        try:
            return self._send_step(w, host, cols, extra, entropy, need)
        except OSError as e:  # the pipe: the worker is gone
            code = w.proc.wait(5) if w.proc.poll() is None else w.proc.returncode
            raise TransformError(f"transform worker process {w.pid} is gone (status {code})") from e

    def _send_step(self, w: _Worker, host: Mapping[str, Any], cols: list, extra: dict, entropy: tuple[int, ...],
                   need: int) -> tuple[_Worker, int]:
        seq = w.sent
        slot = seq % DEPTH
        seg = w.seg_in[slot]
        if seg is None or seg.size < need:
            w.send_segment("in", max(need, ALIGN, 2 * seg.size if seg else 0), slot)
            seg = w.seg_in[slot]
        assert seg is not None
        mm = seg.mm
        for (k, dtype, shape, off) in cols:
            v = host[k]
            dst = np.ndarray(shape, v[0].dtype, mm, off)
            if len(v) == 1:
                np.copyto(dst, v[0])
            else:
                np.concatenate(v, out=dst)
            del dst
        # The entropy of this worker's next step, if the epoch goes on: the
        # worker builds that generator while it waits (off the step's path).
        nxt = (*entropy[:2], entropy[2] + len(self.workers), *entropy[3:])
        # The columns' layout only when it changed (the worker keeps the last).
        same = cols == w.cols
        w.ch.send(("step", None if same else cols, extra, entropy, nxt, slot))
        if not same:
            w.cols = cols
        w.sent = seq + 1
        w.waiting.append((len(cols), host))
        return w, seq

    def _reply(self, w: _Worker, stop: threading.Event | None, where: Any) -> tuple[Any, float, int] | None:
        """Reads the reply to ``w``'s oldest step not yet answered (None
        for ``stop`` None: an abandoned step's, read and dropped)."""
        what = _Lazy(_while, where)
        slot = w.got % DEPTH
        while True:
            msg = w.recv(stop, what)
            if msg[0] == "grow":
                seg = w.seg_out[slot]
                w.send_segment("out", max(msg[1], ALIGN, 2 * seg.size if seg else 0), slot)
                continue
            break
        w.got += 1
        copies_in, host = w.waiting.popleft()
        if msg[0] == "error":
            exc = _remote_exception(msg)
            raise TransformError(f"transform failed at {where} in worker process {w.pid}: "
                                 f"{msg[2].rsplit('.', 1)[-1]}: {msg[3]}") from exc
        _, order, layout, rest, secs, same = msg
        if order is None or stop is None:
            return (rest, secs, 0) if stop is not None else None
        arrays: dict[str, Any] = {}
        seg = w.seg_out[slot]
        mm = seg.mm if seg is not None else None
        for k, dtype, shape, off in layout:
            dtype = np.dtype(dtype)
            a = _aligned_empty(shape, dtype)
            np.copyto(a, np.ndarray(shape, dtype, mm, off))
            arrays[k] = a
        ua = getattr(host, "unaligned", None) or {}
        for k, kin in same.items():  # inputs returned unchanged: the views they came from
            v = host[kin]
            arrays[k] = _Slices(v, ua.get(kin)) if isinstance(v, list) else v
        out = {k: arrays[k] if k in arrays else rest[k] for k in order}
        return out, secs, copies_in + len(layout)  # each column in, each array out

    def result(self, handle: tuple[_Worker, int], stop: threading.Event, where: Any) -> tuple[Any, float, int]:
        w, seq = handle
        while w.got < seq:  # steps a stopped prefetcher left there: their replies first
            try:
                self._reply(w, None, "")
            except TransformError:
                if w.proc.poll() is not None:
                    raise
        if w.got != seq:
            raise TransformError(f"transform worker process {w.pid}: the reply to {where} was taken already")
        got = self._reply(w, stop, where)
        assert got is not None
        return got

    def close(self, timeout: float = 10.0) -> None:
        for w in self.workers:
            w.close(timeout)


# -- the transformer ----------------------------------------------------------------


def _placeable(v: np.ndarray) -> bool:
    return v.dtype != object and (v.dtype == np.bool_ or jax.dtypes.issubdtype(v.dtype, np.number))


class Transformer:
    """A Loader's transform: the stage that runs it, the checks of its
    results and their placement. One per Loader (recovery keeps it: a new
    prefetcher submits to the same workers); ``close`` stops the stage."""

    def __init__(self, fn: Callable[..., Any], workers: int, seed: int, layout: _layout.Layout,
                 sharding: jax.sharding.Sharding, mask_key: str | None):
        self.layout = layout
        self.sharding = sharding
        self.mask_key = mask_key
        self.seed = seed
        self.process = jax.process_index()
        self.rows = len(layout.slices) * layout.b
        self.stage: ThreadStage | ProcessStage = ProcessStage(fn, workers) if workers > 0 else ThreadStage(fn)
        self.inflight = self.stage.inflight
        self.signature: dict[str, tuple] | None = None  # the first result's keys, dtypes and trailing shapes
        self._devs = np.bincount([k for _, k in layout.devices], minlength=len(layout.slices))
        self._offsets = np.arange(len(layout.slices), dtype=np.int64)
        self._narrows: dict[np.dtype, bool] = {}  # dtype: whether jax narrows it (x64 off)
        self._placed = False

    @property
    def pids(self) -> list[int]:
        """The worker processes' ids (none with threads)."""
        return self.stage.pids

    @property
    def mode(self) -> str:
        """``"threads"`` or ``"processes"``."""
        return self.stage.kind

    @property
    def workers(self) -> int:
        """The worker processes, or the threads (``inflight`` is the steps
        in the stage at once: DEPTH per worker process)."""
        return len(self.stage.pids) or self.stage.inflight

    def wait_ready(self) -> None:
        """Waits for the worker processes to have loaded the function."""
        self.stage.wait_ready()

    def submit(self, host: Mapping[str, Any], epoch: int, step: int) -> Any:
        """Starts the function on one step's columns (per-slice views or
        pyarrow arrays, as Materializer.host gives them)."""
        return self.stage.submit(host, seed_entropy(self.seed, epoch, step, self.process))

    def _where(self, epoch: int, step: int) -> str:
        L = self.layout
        return (f"epoch {epoch} step {step} (process {self.process}: {len(L.slices)} slice(s) of {L.b} rows, "
                f"{self.rows} rows)")

    def kept(self, host: Mapping[str, Any]) -> Mapping[str, Any]:
        """What of a submitted step's columns ``finish`` needs: all of them
        (threads read them; a worker may return some unchanged, which are
        then placed from these views; the pad mask may be added back)."""
        return host

    def finish(self, handle: Any, host: Mapping[str, Any], epoch: int, step: int,
               stop: threading.Event) -> tuple[dict[str, Any], float, int, int, float]:
        """The step's result, checked and placed: (batch, seconds in the
        function, host copies, unaligned transfers, seconds waited for the
        result). Raises TransformError naming the step and the key;
        _Stopped when ``stop`` is set."""
        where = _Lazy(self._where, epoch, step)
        t = time.perf_counter()
        out, secs, copies = self.stage.result(handle, stop, where)
        waited = time.perf_counter() - t
        out = self._check(out, host, where)
        batch, unaligned, narrowed = self._place(out)
        return batch, secs, copies + narrowed, unaligned, waited

    def _check(self, out: Any, host: Mapping[str, Any], where: Any) -> dict[str, Any]:
        # (a dict first: typing.Mapping's isinstance runs 4 Python functions)
        if type(out) is not dict and not isinstance(out, _AbcMapping):
            raise TransformError(f"transform returned {type(out).__name__} at {where}: want a dict of arrays")
        out = dict(out)
        mk = self.mask_key
        if mk is not None and mk not in out and mk in host:
            m = host[mk]  # the pad mask goes on unless the function returns its own
            out[mk] = _Slices(m, (getattr(host, "unaligned", None) or {}).get(mk)) if isinstance(m, list) else m
        sig: dict[str, tuple] = {}
        for k, v in out.items():
            if isinstance(v, (np.ndarray, _Slices)):
                sig[k] = (v.dtype, v.shape[1:])
            elif isinstance(v, (pa.Array, pa.ChunkedArray)):
                sig[k] = ("arrow", v.type)
            else:
                sig[k] = (type(v).__name__,)
            n = (v.shape[0] if len(v.shape) else None) if isinstance(v, (np.ndarray, _Slices)) \
                else len(v) if len(sig[k]) == 2 else None
            if self.signature is not None and n != self.rows:
                raise TransformError(f"transform output {k!r} at {where} has {n} rows, want {self.rows}")
        if self.signature is None:
            self._check_first(out, where)
            self.signature = sig
        elif sig != self.signature:
            self._mismatch(sig, where)
        return out

    def _check_first(self, out: Mapping[str, Any], where: Any) -> None:
        L = self.layout
        for k, v in out.items():
            if not isinstance(k, str) or not k:
                raise TransformError(f"transform output at {where}: key {k!r} is not a column name (a str)")
            if isinstance(v, _Slices):
                continue  # an input column: placeable, the step's rows
            if isinstance(v, np.ndarray):
                if not _placeable(v):
                    raise TransformError(f"transform output {k!r} at {where} is a {v.dtype} array: want a numeric "
                                         "or boolean dtype (or a pyarrow array, delivered as it is)")
                if v.ndim == 0 or len(v) != self.rows:
                    raise TransformError(
                        f"transform output {k!r} at {where} has shape {v.shape}: want {self.rows} rows first "
                        f"(the same leading dimension as the input)")
                shape = (L.B, *v.shape[1:])
                try:
                    got = tuple(self.sharding.shard_shape(shape))
                except Exception as e:  # noqa: BLE001 - jax raises several types
                    raise TransformError(f"transform output {k!r} at {where}: sharding {self.sharding} "
                                         f"cannot lay out {shape}: {e}") from e
                if got != (L.b, *v.shape[1:]):
                    raise TransformError(f"transform output {k!r} at {where} of global shape {shape}: sharding "
                                         f"{self.sharding} gives shards of {got} (only dimension 0 may be split)")
            elif isinstance(v, (pa.Array, pa.ChunkedArray)):
                if len(v) != self.rows:
                    raise TransformError(f"transform output {k!r} at {where} has {len(v)} rows, want {self.rows}")
            else:
                raise TransformError(f"transform output {k!r} at {where} is a {type(v).__name__}: want a NumPy "
                                     "array (placed on the devices) or a pyarrow array")

    def _mismatch(self, sig: dict[str, tuple], where: Any) -> None:
        first = self.signature or {}
        for k in first:
            if k not in sig:
                raise TransformError(f"transform output at {where} lacks key {k!r}, which the first step had "
                                     f"(keys {list(sig)}, first {list(first)})")
        for k, s in sig.items():
            if k not in first:
                raise TransformError(f"transform output at {where} has key {k!r}, which the first step did not "
                                     f"(keys {list(sig)}, first {list(first)})")
            if s != first[k]:
                raise TransformError(f"transform output {k!r} at {where} is {_sig_text(s)}, at the first step "
                                     f"{_sig_text(first[k])}: every step must keep its dtypes and shapes")

    def _place(self, out: dict[str, Any]) -> tuple[dict[str, Any], int, int]:
        """Every NumPy output onto the devices in one place_slices call
        (each slice's rows a view of the array), the others as they are;
        and the unaligned transfers and host copies (64-bit arrays jax
        narrows without x64) that makes."""
        L = self.layout
        b, n = L.b, len(L.slices)
        cols, names, unaligned, copies, direct = [], [], 0, 0, True
        for k, v in out.items():
            if isinstance(v, _Slices):
                vs = v.views
                if len(vs) != n:  # one view of all the slices (a Flight record)
                    vs = [vs[0][i * b:(i + 1) * b] for i in range(n)] if n > 1 else vs
                cols.append(((L.B, *v.shape[1:]), vs))
                names.append(k)
                if self._narrowed(v.dtype):
                    direct = False
                    copies += len(L.devices)
                if v.unaligned is not None:  # counted from the addresses the views were made from
                    unaligned += v.unaligned
                elif n > 1 or vs[0].ctypes.data % ALIGN:
                    addrs = np.array([x.ctypes.data for x in vs], dtype=np.int64)
                    unaligned += int(self._devs[addrs % ALIGN != 0].sum())
                continue
            if isinstance(v, np.ndarray):
                if not v.flags.c_contiguous:
                    v = np.ascontiguousarray(v)
                cols.append(((L.B, *v.shape[1:]), [v[i * b:(i + 1) * b] for i in range(n)] if n > 1 else [v]))
                names.append(k)
                if self._narrowed(v.dtype):
                    direct = False  # jax.device_put narrows it (a host copy per device)
                    copies += len(L.devices)
                # devices whose slice's rows do not start 64-byte aligned (XLA's CPU client copies those)
                starts = v.ctypes.data + self._offsets * (v[:1].nbytes * b)
                unaligned += int(self._devs[starts % ALIGN != 0].sum())
        first = not self._placed
        self._placed = True
        arrays = _layout.place_slices(self.sharding, L, cols, direct=direct, check=first)
        placed = dict(zip(names, arrays))
        return {k: placed.get(k, v) for k, v in out.items()}, unaligned, copies

    def _narrowed(self, dt: np.dtype) -> bool:
        """Whether jax narrows ``dt`` (64-bit without x64), memoized."""
        got = self._narrows.get(dt)
        if got is None:
            got = self._narrows[dt] = jax.dtypes.canonicalize_dtype(dt) != dt
        return got

    def close(self) -> None:
        """Stops the threads or worker processes (idempotent)."""
        self.stage.close()


def _sig_text(s: tuple) -> str:
    if len(s) == 2 and s[0] == "arrow":
        return f"a pyarrow array of {s[1]}"
    if len(s) == 2:
        return f"{s[0]} with trailing shape {tuple(s[1])}"
    return s[0]


def describe(fn: Callable[..., Any]) -> str:
    """``module:qualname`` of a function (for reports)."""
    f = getattr(fn, "func", fn)
    return f"{getattr(f, '__module__', '?')}:{getattr(f, '__qualname__', type(f).__name__)}"

