"""A transform worker process: runs a Loader's ``transform=`` function on the
steps its parent sends, one at a time.

Started by transform.ProcessStage as ``python transform_worker.py SOCK STEPS
REPLIES`` (a file run as a script, not a module of the package: the worker
imports numpy and the function's own modules, not meshfeed or jax): its end
of a Unix socket pair, the read end of a pipe of step frames and the write
end of a pipe of replies. Arrays travel through two shared-memory segments
(memfds the parent creates and passes over the socket, so nothing is left
behind when either side dies, however it dies): the parent copies a step's
columns into the input segment, the worker writes the function's arrays
into the output segment. The pipes carry only small pickled frames (and
the other values: pyarrow arrays, by pickle): one write and one read a
step on each side. The worker ends when its step pipe ends (its parent
closed it or died).

This file is also imported by the parent, for ``Channel`` and ``entropy``:
it may import nothing from meshfeed.
"""

from __future__ import annotations

import collections
import gc
import mmap
import os
import pickle
import select
import socket
import struct
import sys
import time
import traceback
from typing import Any

import numpy as np

ALIGN = 64  # every array in a segment starts at a multiple of this many bytes
_LEN = struct.Struct("<Q")


def aligned(n: int) -> int:
    """``n`` rounded up to a multiple of ALIGN."""
    return -(-n // ALIGN) * ALIGN


def rng_for(entropy: tuple[int, ...]) -> np.random.Generator:
    """The generator a step's transform gets: numpy's PCG64 seeded by
    ``SeedSequence([seed, epoch, step, process_index])``. Where every value
    fits in 32 bits the entropy goes in as a uint32 array, the words the
    list becomes inside SeedSequence (so the same state, and the same
    children from ``spawn``), for half the time (8 against 18 us here:
    numpy turns a list's ints into arrays one by one); its ``entropy``
    attribute is then that array."""
    if all(0 <= v < _WORD for v in entropy):
        return np.random.Generator(np.random.PCG64(np.random.SeedSequence(np.array(entropy, np.uint32))))
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(list(entropy))))


_WORD = 1 << 32


def shareable(v: Any) -> bool:
    """Whether ``v`` travels through a segment (a numeric or boolean NumPy
    array) rather than by pickle."""
    return isinstance(v, np.ndarray) and v.dtype != object and v.dtype.kind in "biufcV" \
        and not v.dtype.fields and v.dtype.itemsize > 0


class Channel:
    """Length-prefixed pickled frames, read from file descriptor ``rfd``
    and written to ``wfd`` (a pipe's ends, or one socket's twice).

    A worker's steps and replies go over a pipe each way: on the 2-vCPU
    machine of BENCHMARKS.md a pipe's write and read cost the two sides
    about 30 us less a step than a Unix socket's (no socket buffers to
    allocate and free, no socket state locks to contend for), and a pipe
    still ends (EOF) when the other side exits, however it exits. File
    descriptors (the segments) go over a Unix socket beside it
    (``send_fd``/``recv_fd``)."""

    def __init__(self, rfd: int, wfd: int):
        self.rfd = rfd
        self.wfd = wfd
        self._buf = bytearray()
        self._eof = False  # the other end closed (its last bytes may still be in _buf)
        self._err: OSError | None = None  # a read's error, raised by the next recv

    def send(self, obj: Any) -> None:
        """Sends one frame."""
        b = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
        data = memoryview(_LEN.pack(len(b)) + b)
        while data:
            data = data[os.write(self.wfd, data):]

    def ready(self, timeout: float) -> bool:
        """Whether a frame's first bytes (or the end) are here within
        ``timeout`` seconds. Reads first without waiting (``rfd`` is
        non-blocking there): where the frame is already there, as a reply
        the parent asks for late usually is, that is one system call
        instead of a select and a read (and one less point where the
        thread lets go of the GIL)."""
        if self._buf or self._eof or self._err is not None:
            return True
        try:
            self._read(1 << 16)
            return True
        except BlockingIOError:
            pass
        except OSError as e:  # raised where the frame is read (recv)
            self._err = e
            return True
        r, _, _ = select.select([self.rfd], [], [], timeout)
        return bool(r)

    def _read(self, size: int) -> None:
        data = os.read(self.rfd, size)
        if not data:
            self._eof = True
        self._buf += data

    def _fill(self, n: int) -> None:
        while len(self._buf) < n:
            if self._err is not None:
                e, self._err = self._err, None
                raise e
            if self._eof:
                raise EOFError("the other end closed")
            try:
                self._read(max(1 << 16, n - len(self._buf)))
            except BlockingIOError:  # a non-blocking end: the rest of the frame is on its way
                select.select([self.rfd], [], [])

    def recv(self) -> Any:
        """The next frame (EOFError once the other end closed)."""
        self._fill(_LEN.size)
        (n,) = _LEN.unpack_from(self._buf)
        self._fill(_LEN.size + n)
        obj = pickle.loads(bytes(self._buf[_LEN.size:_LEN.size + n]))
        del self._buf[:_LEN.size + n]
        return obj


def send_fd(sock: socket.socket, fd: int) -> None:
    """Passes ``fd`` over a Unix socket (SCM_RIGHTS, with one byte)."""
    socket.send_fds(sock, [b"f"], [fd])


def recv_fd(sock: socket.socket) -> int:
    """The next descriptor ``send_fd`` passed (waiting for it)."""
    data, fds, _, _ = socket.recv_fds(sock, 1, 1)
    if not data or not fds:
        raise EOFError("meshfeed transform: the socket ended before an announced descriptor came")
    return fds[0]


def _map(fd: int, size: int, write: bool) -> mmap.mmap:
    try:
        return mmap.mmap(fd, size, flags=mmap.MAP_SHARED,
                         prot=mmap.PROT_READ | (mmap.PROT_WRITE if write else 0))
    finally:
        os.close(fd)


def _error(exc: BaseException) -> tuple:
    """The reply for an exception: the exception pickled where it can be,
    its type and message, and the formatted traceback."""
    try:
        blob = pickle.dumps(exc, protocol=pickle.HIGHEST_PROTOCOL)
        pickle.loads(blob)
    except Exception:  # noqa: BLE001 - the text below still says what happened
        blob = None
    return ("error", blob, f"{type(exc).__module__}.{type(exc).__qualname__}", str(exc),
            "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))


def _load(init: dict) -> Any:
    """The transform function, after the parent's sys.path (and, for a
    function of the parent's main script, that script, loaded as
    multiprocessing's spawn does)."""
    sys.path[:] = [p for p in init["sys_path"] if isinstance(p, str)]
    if init.get("main_path"):
        from multiprocessing import spawn
        spawn.prepare({"init_main_from_path": init["main_path"]})
    return pickle.loads(init["fn"])


def serve(init: Channel, ch: Channel, sock: socket.socket) -> None:
    """The worker's loop: load the function (``init``: the socket's first
    frame), then answer the step frames of ``ch`` (a pipe each way) until
    the parent closes it; segments' descriptors come over ``sock``."""
    try:
        fn = _load(init.recv())
    except EOFError:
        return
    except BaseException as e:  # noqa: BLE001 - reported to the parent
        ch.send(_error(e))
        return
    # What is loaded now (numpy, the function's modules) stays: the
    # collector's full passes, which a step's garbage sets off now and
    # then, no longer walk it.
    gc.freeze()
    ch.send(("ready", os.getpid()))
    # Step k's segments are k % len(...): the parent sends a step while the
    # one before may still be here (transform.DEPTH), never one whose
    # segments a step not yet answered uses.
    seg_in: list[mmap.mmap | None] = [None, None]
    seg_out: list[mmap.mmap | None] = [None, None]
    early: collections.deque = collections.deque()  # step frames read while waiting for an output segment
    ahead: tuple = ((), None)  # (entropy, its generator), built while waiting
    want: tuple | None = None  # the entropy of this worker's next step, as the parent expects it
    cols: list = []  # the input columns' layout: (key, dtype, shape, offset); a step frame's None repeats it
    typed: list | None = []  # cols with numpy dtypes (None: not yet made)
    while True:
        if want is not None and not early:  # the reply is sent: the next step's generator, before waiting
            ahead, want = (want, rng_for(want)), None
        try:
            msg = early.popleft() if early else ch.recv()
        except EOFError:
            return
        kind = msg[0]
        if kind == "in":  # a new input segment of msg[1] bytes for steps msg[2]
            seg_in[msg[2]] = _map(recv_fd(sock), msg[1], False)
            continue
        if kind == "out":  # a new output segment of msg[1] bytes for steps msg[2]
            seg_out[msg[2]] = _map(recv_fd(sock), msg[1], True)
            continue
        _, new_cols, extra, entropy, want, slot = msg
        if new_cols is not None:
            cols, typed = new_cols, None
        try:
            if typed is None:
                typed = [(key, np.dtype(dtype), shape, off) for key, dtype, shape, off in cols]
            batch: dict[str, Any] = {}
            ids: dict[int, str] = {}  # the inputs' ids (kept alive by `inputs`: the ids stay theirs)
            for key, dtype, shape, off in typed:
                batch[key] = a = np.ndarray(shape, dtype, seg_in[slot], off)
                a.flags.writeable = False
                ids[id(a)] = key
            for key, v in extra.items():
                batch[key] = v
                ids[id(v)] = key
            inputs = list(batch.values())
            rng = ahead[1] if ahead[0] == entropy else rng_for(entropy)
            ahead = ((), None)
            t = time.perf_counter()
            out = fn(batch, rng)
            secs = time.perf_counter() - t
            del batch
        except BaseException as e:  # noqa: BLE001 - reported to the parent
            ch.send(_error(e))
            continue
        if not isinstance(out, dict):
            ch.send(("ok", None, [], out, secs, {}))  # the parent names what is wrong
            continue
        order = list(out)
        # Inputs returned as they are do not travel back (the parent has
        # them); NumPy arrays go through the output segment; the rest by pickle.
        same: dict[str, str] = {}
        arrays: dict[str, np.ndarray] = {}
        rest: dict[str, Any] = {}
        need = 0
        for k, v in out.items():
            kin = ids.get(id(v))
            if kin is not None:
                same[k] = kin
            elif shareable(v):
                arrays[k] = v
                need += aligned(v.nbytes)
            else:
                rest[k] = v
        del inputs, ids
        out_seg = seg_out[slot]
        if need and (out_seg is None or len(out_seg) < need):
            ch.send(("grow", need))
            while True:  # the parent's new segment, ("out", size, slot), after what it sent before
                m = ch.recv()
                if m[0] == "step":
                    early.append(m)
                    continue
                seg = _map(recv_fd(sock), m[1], m[0] == "out")  # descriptors come in the frames' order
                if m[0] == "in":
                    seg_in[m[2]] = seg  # the next step's (never this one's)
                    continue
                seg_out[m[2]] = out_seg = seg
                break
        layout, off = [], 0
        for k, v in arrays.items():
            dst = np.ndarray(v.shape, v.dtype, out_seg, off)
            np.copyto(dst, v, casting="no")
            del dst
            layout.append((k, v.dtype.str if np.dtype(v.dtype.str) == v.dtype else v.dtype, v.shape, off))
            off += aligned(v.nbytes)
        del out, arrays
        try:
            ch.send(("ok", order, layout, rest, secs, same))
        except Exception as e:  # noqa: BLE001 - an output value pickle refuses
            ch.send(_error(e))


def batch_scheduling() -> bool:
    """Puts this process under Linux's SCHED_BATCH policy (no privilege
    needed): a worker woken by its next step then does not preempt the
    thread that woke it (the parent's prefetch thread, which goes on to
    place the previous step), and otherwise gets its fair share as before.
    False where the policy does not exist or is refused."""
    try:
        os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
        return True
    except (AttributeError, OSError):
        return False


def main(argv: list[str]) -> int:
    """``transform_worker.py SOCK STEPS REPLIES`` (the last three
    arguments): the socket's descriptor (the first frame, then segments'
    descriptors), the read end of the steps' pipe and the write end of
    the replies'."""
    import signal
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle; it closes the pipe
    sfd, rfd, wfd = (int(x) for x in argv[-3:])
    batch_scheduling()
    sock = socket.socket(fileno=sfd)
    try:
        serve(Channel(sfd, sfd), Channel(rfd, wfd), sock)
    except (BrokenPipeError, ConnectionResetError, EOFError):
        pass
    finally:
        sock.close()
        for fd in (rfd, wfd):
            try:
                os.close(fd)
            except OSError:
                pass
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
