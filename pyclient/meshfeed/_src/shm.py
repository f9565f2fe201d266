"""The same-host shared-memory wire (docs/PROTOCOL.md, "Shared memory").

A ``ShmReader`` connects to a server's shared-memory socket, sends the ticket,
maps the regions the server passes (memfds, received with SCM_RIGHTS) once,
and yields each step as a ``pyarrow.RecordBatch`` whose buffers are views of
them: no byte is copied on the client. A step's buffers lie in a slot of a
region (the server copied them there) or, with protocol version 2, in the
stream's arena (the server decoded or gathered them there and sends them by
reference). A slot is handed back to the server (a release frame) only when
every object made from the step (the record batch, NumPy views,
``jax.Array``s that alias them) is gone: the step's slot buffers hang off one
NumPy array of the slot, whose weak reference's callback sends the release, and its
arena buffers off one NumPy array of the arena, which keeps the slot's array
alive until it goes itself.

It reads like pyarrow's ``FlightStreamReader`` (``schema``, ``read_chunk()``
raising ``StopIteration`` at the end, ``cancel()``), so the client's
prefetcher drives either wire the same way.
"""

from __future__ import annotations

import base64
import json
import math
import mmap
import operator
import os
import socket
import struct
import threading
import weakref
from typing import Any

import numpy as np
import pyarrow as pa

from .errors import MeshfeedError, PlanError, UnavailableError, from_code

VERSION = 2
_HDR = struct.Struct("<I")
_MAX_FRAME = 64 << 20
_ACK = (lambda b: _HDR.pack(len(b)) + b)(b'{"ack": 1}')
_FIRST, _SECOND, _THIRD = operator.itemgetter(0), operator.itemgetter(1), operator.itemgetter(2)


class ShmIneligible(PlanError):
    """The server will not send this stream through shared memory (its
    error frame's reason is ``SHM_INELIGIBLE``): read it over Flight."""


class ShmChunk:
    """One step: its slices' buffers in a slot of a region (each buffer
    starting 64-byte aligned) and its metadata (the JSON of Flight's
    app_metadata, as bytes). ``data`` is one record batch per slice (views
    of the slot, built on first use); ``dense`` gives a column's values as
    numpy views without building them."""

    __slots__ = ("_hold", "_base", "_ahold", "_abase", "_bufs", "_schema", "_starts", "_data", "_addr",
                 "_aaddr", "rows", "slices", "meta", "nbytes", "in_place")

    def __init__(self, hold: np.ndarray, base: int, bufs: list[list[list[int]]], schema: pa.Schema,
                 starts: list[int], rows: int, meta: dict, nbytes: int,
                 ahold: np.ndarray | None = None, abase: int = 0, in_place: int = 0,
                 addr: int = 0, aaddr: int = 0):
        self._hold, self._base, self._bufs, self._schema = hold, base, bufs, schema
        self._ahold, self._abase = ahold, abase  # the arena's span of the step's buffers there
        self._starts = starts
        self.rows, self.slices = rows, len(bufs)  # rows per slice, slices
        self._data: list[pa.RecordBatch] | None = None
        # The slot's and the arena span's addresses (0: asked of the arrays
        # when dense needs them; the reader passes its mappings' own).
        self._addr, self._aaddr = addr, aaddr
        self.meta = meta  # epoch, step, slices, real_rows: what Flight's app_metadata holds, parsed
        self.nbytes = nbytes  # the step's buffer bytes (from the descriptor)
        self.in_place = in_place  # of which in the arena (not copied by the server)

    @property
    def app_metadata(self) -> pa.Buffer:
        """``meta`` as Flight's app_metadata would carry it (JSON bytes)."""
        return pa.py_buffer(json.dumps(self.meta).encode())

    def _view(self, b: list[int]) -> np.ndarray:
        """The bytes of a descriptor entry: [offset, length] in the slot,
        [offset, length, region] in the arena."""
        if len(b) == 3:
            return self._ahold[b[0] - self._abase:b[0] - self._abase + b[1]]
        return self._hold[b[0] - self._base:b[0] - self._base + b[1]]

    @property
    def data(self) -> list[pa.RecordBatch]:
        """One record batch per slice, every buffer a view of the slot or
        the arena."""
        if self._data is None:
            recs, view = [], self._view
            for slice_bufs in self._bufs:
                it = iter([None if b[1] == 0 else pa.py_buffer(view(b)) for b in slice_bufs])
                cols = [_array(f.type, self.rows, it) for f in self._schema]
                recs.append(pa.RecordBatch.from_arrays(cols, schema=self._schema))
            self._data = recs
        return self._data

    def dense(self, i: int, dtype: np.dtype, shape: tuple[int, ...]) -> tuple[list[np.ndarray], list[int]] | None:
        """Field i's values in each slice as numpy arrays of ``shape`` (views
        of the slot or the arena: they keep the slot from being released)
        and their addresses, or None when a slice of it has a validity bitmap
        (nulls may be there: use ``data``)."""
        j, k = self._starts[i], self._starts[i + 1] - 1  # validity buffers, then the values
        if not self._addr:  # ndarray.ctypes: 1-3 us each
            self._addr = self._hold.ctypes.data
            if self._ahold is not None:
                self._aaddr = self._ahold.ctypes.data
        out, addrs = [], []
        hold, base, addr = self._hold, self._base, self._addr
        ahold, abase, aaddr = self._ahold, self._abase, self._aaddr
        dtype = np.dtype(dtype)
        nbytes = math.prod(shape) * dtype.itemsize
        for slice_bufs in self._bufs:
            for b in slice_bufs[j:k]:
                if b[1]:
                    return None
            b = slice_bufs[k]
            if b[1] != nbytes:
                raise MeshfeedError(f"shared-memory step: column {self._schema[i].name!r} holds {b[1]} bytes in a "
                                    f"slice, want {nbytes} for {shape} of {dtype}: the server and this client "
                                    "disagree on the step's layout (report it with both versions)")
            # One constructor per view (not a slice, a view and a reshape):
            # its base is the slot's or the arena span's array, as before.
            if len(b) == 3:
                out.append(np.ndarray(shape, dtype, ahold, b[0] - abase))
                addrs.append(aaddr + b[0] - abase)
            else:
                out.append(np.ndarray(shape, dtype, hold, b[0] - base))
                addrs.append(addr + b[0] - base)
        return out, addrs

    def bits(self, i: int) -> list[np.ndarray] | None:
        """Boolean field i unpacked from each slice's bitmap (copies), or
        None when a slice of it has a validity bitmap."""
        j = self._starts[i]
        n, out = self.rows, []
        for slice_bufs in self._bufs:
            if slice_bufs[j][1]:
                return None
            out.append(np.unpackbits(self._view(slice_bufs[j + 1]), count=n, bitorder="little").view(np.bool_))
        return out


class _Region:
    """The client's mapping of a stream's region. The mapping closes itself
    when the last view of it is gone (the mmap object outlives the reader
    as long as a step's arrays do)."""

    def __init__(self, fd: int, size: int, slots: int, slot_bytes: int):
        try:
            self.mm = mmap.mmap(fd, size, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ)
        finally:
            os.close(fd)
        self.slots = slots
        self.slot_bytes = slot_bytes
        # The mapping's address, asked once (a step's views are at fixed
        # offsets from it; ndarray.ctypes costs 1-3 us a call).
        probe = np.frombuffer(memoryview(self.mm)[:1], dtype=np.uint8) if size else None
        self.addr = probe.ctypes.data if probe is not None else 0
        del probe

    def slot(self, k: int) -> np.ndarray:
        """A NumPy array over slot k. Views of it keep it (not the mapping's
        other slots) alive: NumPy stops collapsing a view's base at an array
        whose base is not an ndarray (here a memoryview)."""
        sb = self.slot_bytes
        return self.span(k * sb, (k + 1) * sb)

    def span(self, lo: int, hi: int) -> np.ndarray:
        """A NumPy array over bytes [lo, hi) of the mapping (see slot)."""
        return np.frombuffer(memoryview(self.mm)[lo:hi], dtype=np.uint8)


class ShmReader:
    """A stream over the shared-memory wire; see the module docstring.

    ``path`` is the server's shared-memory socket, ``ticket`` the request's
    JSON bytes (as for DoGet), ``slots`` the steps the server may send ahead
    of this reader (2..64) and the slots of each region. Steps the caller
    keeps beyond that do not stall the stream: the server adds a region.
    """

    def __init__(self, path: str, ticket: bytes, slots: int = 4, timeout: float = 60.0):
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.settimeout(timeout)
        try:
            self._sock.connect(path)
        except OSError:
            self._sock.close()
            raise
        self._sock.settimeout(None)
        self._buf = bytearray()
        self._fds: list[int] = []
        # Reentrant: a slot's finalizer (a release) can run inside _send itself,
        # when the garbage collector runs during it on the same thread.
        self._send_lock = threading.RLock()
        self._closed = False
        self._regions: dict[int, _Region] = {}
        self._arena: _Region | None = None
        self.released = 0  # slots handed back, sent or queued for the next frame (for tests)
        # What the reading thread owes the server, sent in one write with its
        # next frame (flush): the ack of the step it read last, and the
        # releases its own drops made (a step's last array deleted on that
        # thread, as the prefetch thread deletes the steps the loop is done
        # with). Releases made on other threads go at once. Counted: frames
        # and writes (test_shm.py: one write per step).
        self._owe_ack = False
        self._pending: list[bytes] = []
        self._reader_ident: int | None = None
        # The weak references whose callbacks release the steps' slots (see
        # _step): alive until they have run.
        self._live: dict[int, weakref.ref] = {}
        self.writes = 0
        self.in_place_bytes = 0  # step bytes read from the arena: the server copied none of them
        self._send({"version": VERSION, "ticket": json.loads(ticket), "slots": slots})
        first = self._frame()
        if "schema" not in first:
            raise MeshfeedError(f"shared-memory server sent {sorted(first)}, want the schema first")
        self.schema = pa.ipc.read_schema(pa.py_buffer(_b64(first["schema"])))
        # Field i's buffers in a slice's list are [starts[i], starts[i+1]).
        self._starts = [0]
        for f in self.schema:
            self._starts.append(self._starts[-1] + _nbuffers(f.type))

    # --- frames -----------------------------------------------------------

    def _send(self, obj: Any) -> None:
        b = json.dumps(obj).encode()
        self._send_raw(_HDR.pack(len(b)) + b)

    def _send_raw(self, frame: bytes) -> None:
        with self._send_lock:
            if self._closed:
                return
            self._sock.sendall(frame)
            self.writes += 1

    def flush(self, ack: bool = False) -> None:
        """Sends, in one write, the releases queued by the reading thread and
        the ack it owes (with ``ack``, or when releases go anyway). The
        prefetch thread calls it before it may wait for the loop (a release
        is never held back while its thread blocks); ``read_chunk`` calls it
        with ``ack`` first thing."""
        pending = self._pending
        if not pending and not (ack and self._owe_ack):
            return
        with self._send_lock:
            if self._closed:
                return
            # Taken under the lock; a finalizer running in this thread during
            # the write (the lock is reentrant) queues for the next flush.
            self._pending = []
            if self._owe_ack:
                self._owe_ack = False
                if pending:  # the ack rides in the first release's frame
                    pending[0] = _with_ack(pending[0])
                else:
                    pending = [_ACK]
            try:
                self._sock.sendall(b"".join(pending) if len(pending) > 1 else pending[0])
            except OSError:
                return  # the stream is gone; its frames are still readable
            self.writes += 1

    def _fill(self, n: int) -> None:
        while len(self._buf) < n:
            try:
                data, fds, _flags, _addr = socket.recv_fds(self._sock, 1 << 16, 4)
            except OSError as e:
                raise UnavailableError(f"meshfeed server's shared-memory stream broke: {e}", code="UNAVAILABLE") from e
            self._fds.extend(fds)
            if not data:
                raise UnavailableError("meshfeed server closed the shared-memory stream without an end frame "
                                       "(it stopped or was killed)", code="UNAVAILABLE")
            self._buf += data

    def _frame(self) -> dict:
        self._fill(_HDR.size)
        (n,) = _HDR.unpack_from(self._buf)
        if n > _MAX_FRAME:
            raise MeshfeedError(f"shared-memory frame of {n} bytes is over the limit of {_MAX_FRAME}")
        self._fill(_HDR.size + n)
        frame = json.loads(self._buf[_HDR.size:_HDR.size + n])  # a bytearray: one copy, not two
        del self._buf[:_HDR.size + n]
        if "error" in frame:
            e = frame["error"]
            if e.get("reason") == "SHM_INELIGIBLE":
                raise ShmIneligible(e.get("message", ""), code=e.get("code"), server_message=e.get("message"))
            raise from_code(e.get("code"), e.get("message", ""))
        return frame

    # --- the reader API ---------------------------------------------------

    def read_chunk(self) -> ShmChunk:
        """The next step; ``StopIteration`` after the last. The previous
        step's ack goes now, with the releases queued since (``flush``):
        one write a step."""
        if self._reader_ident is None:
            self._reader_ident = threading.get_ident()
        self.flush(True)
        while True:
            f = self._frame()
            if f.get("end"):
                raise StopIteration
            if "region" in f:
                r = f["region"]
                # Descriptors arrive in the order of their frames; one read
                # can bring those of several region frames.
                if not self._fds:
                    raise MeshfeedError("shared-memory region frame came without its descriptor")
                reg = _Region(self._fds.pop(0), r["bytes"], r["slots"], r["slot_bytes"])
                if r.get("arena"):
                    self._arena = reg
                self._regions[r["index"]] = reg
                continue
            if "step" in f:
                chunk = self._step(f["step"])
                self._owe_ack = True  # read: the next flush tells the server, which may send one more
                return chunk

    def _step(self, s: dict) -> ShmChunk:
        reg = self._regions.get(s["region"])
        if reg is None:
            raise MeshfeedError(f"shared-memory step in region {s['region']}, which the server never sent")
        slot = s["slot"]
        # Every buffer of the step is a view of `hold`; when the last one is
        # gone, the slot goes back to the server.
        hold = reg.slot(slot)
        # A weak reference with a callback (C), kept in _live until it runs,
        # rather than weakref.finalize (its registry and bookkeeping are
        # Python-level: two calls a step more, twice).
        live, release, region = self._live, self._release, s["region"]
        ref = weakref.ref(hold, lambda r: (live.pop(id(r), None), release(region, slot)))
        live[id(ref)] = ref  # by id: a weak reference to an array is unhashable
        base = slot * reg.slot_bytes
        bufs = s["buffers"]
        # Every buffer must lie in the slot or the arena, and each slice list
        # all the schema's. The slot's entries are checked one by one; the
        # arena's (most of a step's bytes) are gathered and checked in bulk
        # (C-level min, max and sums), one by one only to name a bad one.
        lo, hi, want, nbytes = base, base + reg.slot_bytes, self._starts[-1], 0
        arena, alo, ahi, in_place = self._arena, -1, 0, 0
        abufs: list[list[int]] = []
        to_arena = abufs.append
        for slice_bufs in bufs:
            if len(slice_bufs) != want:
                raise MeshfeedError(f"shared-memory step {s.get('step')}: {len(slice_bufs)} buffers in a slice, "
                                    f"want {want} for the schema")
            for b in slice_bufs:
                if len(b) != 2:
                    to_arena(b)
                    continue
                off, ln = b
                if ln:
                    if off < lo or off + ln > hi:
                        raise MeshfeedError(f"shared-memory step {s.get('step')}: buffer [{off}, {off + ln}) "
                                            f"outside its slot [{lo}, {hi})")
                    nbytes += ln
        if abufs:
            try:
                offs, lens = list(map(_FIRST, abufs)), list(map(_SECOND, abufs))
                alo, ahi = min(offs), max(map(operator.add, offs, lens))
                regs = set(map(_THIRD, abufs))  # one: the arena's
                ok = arena is not None and alo >= 0 and ahi <= len(arena.mm) and min(lens) >= 0 and \
                    set(map(len, abufs)) == {3} and len(regs) == 1 and self._regions.get(regs.pop()) is arena
            except (IndexError, TypeError):  # an entry of another shape: named below
                ok = False
            if not ok:
                for b in abufs:
                    if len(b) != 3 or arena is None or self._regions.get(b[2]) is not arena or b[0] < 0 \
                            or b[1] < 0 or b[0] + b[1] > len(arena.mm):
                        raise MeshfeedError(f"shared-memory step {s.get('step')}: buffer {b} outside the arena")
            in_place = sum(lens)
            nbytes += in_place
        ahold = None
        if alo >= 0:
            # The arena's views keep `hold` alive (the callback holds it
            # until they are gone), so the slot's release waits for every
            # view of the step, in either mapping.
            ahold = arena.span(alo, ahi)
            ref = weakref.ref(ahold, lambda r, _hold=hold: live.pop(id(r), None))
            live[id(ref)] = ref
            self.in_place_bytes += in_place
        meta = {k: s[k] for k in ("epoch", "step", "slices", "real_rows")}
        return ShmChunk(hold, base, bufs, self.schema, self._starts, s["rows"], meta, nbytes, ahold,
                        max(alo, 0), in_place, reg.addr + base if reg.addr else 0,
                        arena.addr + alo if ahold is not None and arena.addr else 0)

    def _release(self, region: int, slot: int) -> None:
        # Runs on whichever thread drops a step's last array: the frame is
        # formatted by hand (the same JSON as json.dumps would write). On the
        # reading thread it waits for that thread's next flush (before it
        # reads or may block); on another it goes at once.
        b = b'{"release": %d, "region": %d}' % (slot, region)
        frame = _HDR.pack(len(b)) + b
        if threading.get_ident() == self._reader_ident:
            self._pending.append(frame)
            self.released += 1
            return
        try:
            self._send_raw(frame)
            self.released += 1
        except OSError:
            pass  # the stream is gone; so is the server's region

    def cancel(self) -> None:
        """Ends the stream: the server stops and frees its side of the region."""
        with self._send_lock:
            if self._closed:
                return
            self._closed = True
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._sock.close()
        for fd in self._fds:
            os.close(fd)
        self._fds.clear()
        # The mappings live on only as long as steps made from them do.
        self._regions.clear()
        self._arena = None

    close = cancel


def _with_ack(frame: bytes) -> bytes:
    """A release frame that also acknowledges one step (the server reads
    both fields of one frame: its ack, then its release)."""
    b = frame[_HDR.size:-1] + b', "ack": 1}'
    return _HDR.pack(len(b)) + b


def _array(t: pa.DataType, n: int, bufs) -> pa.Array:
    """Rebuilds an array of type t and n rows from the buffers in IPC order."""
    if isinstance(t, pa.BaseExtensionType):
        return pa.ExtensionArray.from_storage(t, _array(t.storage_type, n, bufs))
    validity = next(bufs)
    if pa.types.is_fixed_size_list(t):
        child = _array(t.value_type, n * t.list_size, bufs)
        return pa.Array.from_buffers(t, n, [validity], children=[child])
    return pa.Array.from_buffers(t, n, [validity, next(bufs)])


def _nbuffers(t: pa.DataType) -> int:
    """How many buffers _array takes for a column of type t."""
    if isinstance(t, pa.BaseExtensionType):
        return _nbuffers(t.storage_type)
    if pa.types.is_fixed_size_list(t):
        return 1 + _nbuffers(t.value_type)
    return 2


def _b64(s: str) -> bytes:
    return base64.b64decode(s)


def available() -> bool:
    """Whether this platform can receive a region (Linux: memfd and SCM_RIGHTS)."""
    return hasattr(socket, "recv_fds") and hasattr(os, "memfd_create")

