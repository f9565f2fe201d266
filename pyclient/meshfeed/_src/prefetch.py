"""The prefetcher: a background thread that reads one DoGet stream, checks
each step's metadata against the position it expects, materializes the step
on device, waits until its arrays are there (a queued step is ready: the
consumer never waits for a transfer) and queues up to ``depth`` of them for
the consumer; and deletes the steps the consumer is done with. With a
transform (transform.py) a step goes through it between being received and
being placed: up to the stage's ``inflight`` steps are there at once, and
they come out, checked and placed, in step order.

Deleting a step is not free: each ``jax.Array`` frees one buffer per device
(24 for 3 columns on 8 devices), tens of microseconds in all. Done where the
training loop drops the previous batch (``batch = next(it)``), it is on the
critical path of every step. So the Loader keeps a reference to the step it
returned last and hands it over (``drop``) when the next step is asked for;
the loop drops its own reference right after (the assignment), before it
next lets go of the GIL. This thread, woken by that same ``next()`` (a slot
of its queue freed), gets the GIL once the loop lets go of it, and drops the
last reference here. Nothing is deleted early: a loop that still holds the
step, or any array of it, keeps it alive, and its own drop deletes it later
where it happens. No thread is woken for it, and a shared-memory slot goes
back no later than before: its release already waited for this thread's
next placement (jaxlib lets go of the host views it aliased there)."""

from __future__ import annotations

import collections
import json
import operator
import queue
import threading
from typing import Any, Callable

import jax

from .errors import MeshfeedError, from_flight
from .layout import Layout, Materializer
from .transform import Transformer, _Stopped

# Waits for a placed step's arrays (all the materializer's own jax.Arrays):
# jaxlib's batched wait, which jax.block_until_ready ends in after its
# Python-level tree flattening and leaf tests (private: feature-detected).
try:
    from jax._src.lib import xla_client as _xc
    _wait_arrays: Callable[[list], Any] = _xc.batched_block_until_ready
except (ImportError, AttributeError):  # pragma: no cover - another jax
    _wait_arrays = jax.block_until_ready

END = object()  # queued after the last step: the stream ended with OK
# What a step's totals sum, in order (see Prefetcher).
TOTALS = ("rows", "padded_rows", "bytes", "host_copies", "mask_unpacks", "unaligned_transfers", "in_place_bytes",
          "transform_seconds", "transform_wait_seconds")


class StepQueue:
    """The steps ready for the consumer, at most ``depth`` at once: a FIFO
    of items and one of free places, both ``queue.SimpleQueue`` (C: its
    ``get`` and ``put`` take no Python-level lock or condition). The
    consumer's ``get`` takes an item and gives its place back, waking the
    producer if it waits for one; the producer's ``put`` waits for a place.
    ``queue.Queue`` did the same with Python-level ``threading.Condition``s,
    whose locking and notify cost the training loop's ``next()`` about 20
    us a step right after its step (bench's data wait p50 at a 1 ms step,
    2-vCPU VM; ``test_prefetch_queue_calls`` counts the Python calls)."""

    def __init__(self, depth: int):
        self._items: queue.SimpleQueue = queue.SimpleQueue()
        self._free: queue.SimpleQueue = queue.SimpleQueue()
        for _ in range(max(depth, 1)):
            self._free.put(None)

    def put(self, item: Any, timeout: float) -> bool:
        """Queues ``item`` once a place is free; False if none was within
        ``timeout`` seconds (the item is not queued)."""
        try:
            self._free.get(timeout=timeout)
        except queue.Empty:
            return False
        self._items.put(item)
        return True

    def get(self, timeout: float) -> Any:
        """The oldest item, waiting at most ``timeout`` seconds
        (``queue.Empty`` then); its place is free again."""
        item = self._items.get(timeout=timeout)
        self._free.put(None)
        return item

    def put_back(self, item: Any) -> None:
        """Queues END or a Failure again for the consumer's next ``get``
        (nothing follows them, so no place is taken)."""
        self._items.put(item)

    def qsize(self) -> int:
        return self._items.qsize()

    def empty(self) -> bool:
        return self._items.empty()


class Failure:
    """Queued in place of a step: the stream (or materializing it) failed with ``exc``."""

    def __init__(self, exc: BaseException):
        self.exc = exc


class Prefetcher:
    """Reads the stream of ``ticket``, opened by ``open_stream(ticket)`` (a
    Flight DoGet reader or a shared-memory reader: both have ``read_chunk``
    and ``cancel``), on its own thread.

    ``queue`` holds ``(info, batch)`` per step, ``info`` being ``(epoch, step,
    totals)``, ``totals`` the sums over this prefetcher's steps up to this one
    (``TOTALS``: real rows, padded rows, record bytes, the materializer's
    counters, and the bytes shared memory sent by reference), then END or a
    Failure: the consumer keeps the last totals it received instead of adding
    up each step's. Holds no
    reference to the Loader, so that the Loader's finalizer can stop it."""

    def __init__(self, open_stream: Callable[[bytes], Any], ticket: bytes, materialize: Materializer,
                 layout: Layout, first: tuple[int, int], steps_per_epoch: int, depth: int,
                 transform: Transformer | None = None):
        self._open = open_stream
        self._tf = transform
        # Steps in the transform stage, oldest first: (epoch, step, host
        # columns, handle, totals of the step but the transform's).
        self._pending: collections.deque = collections.deque()
        self._ticket = ticket
        self._mat = materialize
        self._layout = layout
        self._expect = first
        self._spe = steps_per_epoch
        self.queue = StepQueue(depth)
        self._stop = threading.Event()
        self._reader = None
        # The shared-memory reader's flush (None over Flight): sends the
        # releases this thread's drops queued, before it may wait.
        self._flush: Callable[[], None] | None = None
        self._lock = threading.Lock()
        self._dropped: collections.deque = collections.deque()  # steps handed back by the consumer
        self._draining = True  # False once the thread no longer drains: drop() lets go at once
        self.thread = threading.Thread(target=self._run, name="meshfeed-prefetch", daemon=True)
        self.thread.start()

    def drop(self, step: Any) -> None:
        """Hands back a reference to a step the consumer is done with: this
        thread lets go of it (at once, on the caller's thread, once it has
        ended). No lock: the flag is read again after the append, so a step
        appended as the thread ends is drained by one side or the other."""
        if self._draining:
            self._dropped.append(step)
            if self._draining:
                return
            self._drain()

    def _drain(self) -> None:
        pop = self._dropped.popleft
        try:
            while True:
                pop()
        except IndexError:  # empty (another thread may drain at the same time)
            pass

    def _end_draining(self) -> None:
        self._draining = False
        self._drain()

    def _put(self, item: Any) -> bool:
        flush = self._flush
        while not self._stop.is_set():
            if flush is not None:
                flush()  # no release held back while this thread waits for the loop
            if not self.queue.put(item, timeout=0.05):
                self._drain()
                continue
            self._drain()
            return True
        return False

    def _run(self) -> None:
        try:
            self._stream()
        finally:
            self._end_draining()

    def _stream(self) -> None:
        try:
            reader = self._open(self._ticket)
            with self._lock:
                self._reader = reader
            self._flush = getattr(reader, "flush", None)
            if self._stop.is_set():
                reader.cancel()
                return
            L = self._layout
            want_slices = list(L.slices)
            totals: tuple = (0,) * len(TOTALS)
            while not self._stop.is_set():
                self._drain()
                try:
                    chunk = reader.read_chunk()
                except StopIteration:
                    break
                self._drain()
                meta = getattr(chunk, "meta", None)  # a shared-memory step's, parsed already
                if meta is None:
                    meta = json.loads(chunk.app_metadata.to_pybytes()) if chunk.app_metadata is not None else {}
                ep, st = meta.get("epoch"), meta.get("step")
                if (ep, st) != self._expect or meta.get("slices") != want_slices:
                    raise MeshfeedError(
                        f"server sent epoch {ep} step {st} slices {meta.get('slices')}, "
                        f"want epoch {self._expect[0]} step {self._expect[1]} slices {list(L.slices)}")
                # A shared-memory step goes as it is (its numeric columns are
                # viewed without records); a Flight chunk as its record.
                src = chunk if hasattr(chunk, "dense") else chunk.data
                tf = self._tf
                batch = self._mat(src) if tf is None else self._mat.host(src)
                real = int(sum(meta.get("real_rows") or [L.b] * len(L.slices)))
                nbytes = chunk.nbytes if hasattr(chunk, "nbytes") else chunk.data.nbytes
                c = self._mat.counts
                step = (real, len(L.slices) * L.b - real, nbytes, c["host_copies"], c["mask_unpacks"],
                        c["unaligned_transfers"] if tf is None else 0, getattr(chunk, "in_place", 0), 0.0, 0.0)
                at = self._expect  # (ep, st), checked above: ints
                nxt = st + 1
                self._expect = (ep + 1, 0) if nxt >= self._spe else (ep, nxt)
                if tf is not None:
                    # In the transform stage until `inflight` steps are there;
                    # then the oldest comes out, checked and placed.
                    handle = tf.submit(batch, *at)
                    self._pending.append((*at, tf.kept(batch), handle, step))
                    del batch, src, chunk
                    if len(self._pending) < tf.inflight:
                        continue
                    after = self._finish(totals)
                    if after is None:
                        return
                    totals = after
                    continue
                _wait_arrays([v for v in batch.values() if isinstance(v, jax.Array)])
                totals = tuple(map(operator.add, totals, step))  # no Python-level generator
                if not self._put(((ep, st, totals), batch)):
                    return
            while self._pending:
                after = self._finish(totals)
                if after is None:
                    return
                totals = after
            self._put(END)
        except _Stopped:
            return
        except BaseException as e:  # noqa: BLE001 - re-raised in the consumer
            if not self._stop.is_set():
                self._put(Failure(from_flight(e)))
        finally:
            self._pending.clear()

    def _finish(self, totals: tuple) -> tuple | None:
        """Takes the oldest step out of the transform stage (waiting for
        it), places it and queues it; the new totals, or None when the
        prefetcher stopped."""
        tf = self._tf
        assert tf is not None
        ep, st, host, handle, step = self._pending.popleft()
        if self._flush is not None:
            self._flush()  # before waiting for the transform
        batch, secs, copies, unaligned, waited = tf.finish(handle, host, ep, st, self._stop)
        del host
        jax.block_until_ready([v for v in batch.values() if isinstance(v, jax.Array)])
        step = step[:3] + (step[3] + copies, step[4], unaligned, step[6], secs, waited)
        totals = tuple(map(operator.add, totals, step))
        return totals if self._put(((ep, st, totals), batch)) else None

    def get(self) -> Any:
        """The next item (a step, END or a Failure), waiting for it."""
        while True:
            try:
                return self.queue.get(timeout=0.1)
            except queue.Empty:
                if not self.thread.is_alive() and self.queue.empty():
                    return Failure(MeshfeedError("prefetch thread ended without a result"))

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
