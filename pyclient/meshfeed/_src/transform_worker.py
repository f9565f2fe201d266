"""A transform worker process: runs a Loader's ``transform=`` function on the
steps its parent sends, one at a time.

Started by transform.ProcessStage as ``python transform_worker.py FD`` (a
file run as a script, not a module of the package: the worker imports
numpy and the function's own modules, not meshfeed or jax), ``FD`` being
its end of a Unix socket pair. Arrays travel through two shared-memory
segments (memfds the parent creates and passes over the socket, so nothing
is left behind when either side dies, however it dies): the parent copies a
step's columns into the input segment, the worker writes the function's
arrays into the output segment. The socket carries only small pickled
frames (and the other values: pyarrow arrays, by pickle). The worker ends
when the socket closes (its parent closed it or died).

This file is also imported by the parent, for ``Channel`` and ``entropy``:
it may import nothing from meshfeed.
"""

from __future__ import annotations

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
    ``SeedSequence([seed, epoch, step, process_index])``."""
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(list(entropy))))


def shareable(v: Any) -> bool:
    """Whether ``v`` travels through a segment (a numeric or boolean NumPy
    array) rather than by pickle."""
    return isinstance(v, np.ndarray) and v.dtype != object and v.dtype.kind in "biufcV" \
        and not v.dtype.fields and v.dtype.itemsize > 0


class Channel:
    """Length-prefixed pickled frames over a Unix socket, with file
    descriptors passed alongside (SCM_RIGHTS)."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self._buf = bytearray()
        self.fds: list[int] = []  # received, not yet taken
        self._eof = False  # the other end closed the socket (its last bytes may still be in _buf)
        self._err: OSError | None = None  # a read's error, raised by the next recv

    def send(self, obj: Any, fds: list[int] | None = None) -> None:
        """Sends one frame (and ``fds`` with its first bytes)."""
        b = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
        data = _LEN.pack(len(b)) + b
        if fds:
            n = socket.send_fds(self.sock, [data], fds)
            data = data[n:]
        if data:
            self.sock.sendall(data)

    def ready(self, timeout: float) -> bool:
        """Whether a frame's first bytes (or the socket's end) are here
        within ``timeout`` seconds. Reads first without waiting: where the
        frame is already there, as a reply the parent asks for late usually
        is, that is one system call instead of a select and a read (and one
        less point where the thread lets go of the GIL)."""
        if self._buf or self._eof or self._err is not None:
            return True
        try:
            self._read(1 << 16, socket.MSG_DONTWAIT)
            return True
        except BlockingIOError:
            pass
        except OSError as e:  # raised where the frame is read (recv)
            self._err = e
            return True
        r, _, _ = select.select([self.sock], [], [], timeout)
        return bool(r)

    def _read(self, size: int, flags: int = 0) -> None:
        data, fds, _, _ = socket.recv_fds(self.sock, size, 8, flags)
        self.fds.extend(fds)
        if not data:
            self._eof = True
        self._buf += data

    def _fill(self, n: int) -> None:
        while len(self._buf) < n:
            if self._err is not None:
                e, self._err = self._err, None
                raise e
            if self._eof:
                raise EOFError("the other end closed the socket")
            self._read(max(1 << 16, n - len(self._buf)))

    def recv(self) -> Any:
        """The next frame (EOFError once the other end closed)."""
        self._fill(_LEN.size)
        (n,) = _LEN.unpack_from(self._buf)
        self._fill(_LEN.size + n)
        obj = pickle.loads(bytes(self._buf[_LEN.size:_LEN.size + n]))
        del self._buf[:_LEN.size + n]
        return obj

    def take_fd(self) -> int:
        """The oldest descriptor received and not yet taken."""
        if not self.fds:
            raise RuntimeError("meshfeed transform: a frame announced a descriptor that did not come")
        return self.fds.pop(0)


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


def serve(ch: Channel) -> None:
    """The worker's loop: load the function, then answer step frames until
    the socket closes."""
    try:
        fn = _load(ch.recv())
    except EOFError:
        return
    except BaseException as e:  # noqa: BLE001 - reported to the parent
        ch.send(_error(e))
        return
    ch.send(("ready", os.getpid()))
    seg_in: mmap.mmap | None = None
    seg_out: mmap.mmap | None = None
    ahead: tuple = ((), None)  # (entropy, its generator), built while waiting
    want: tuple | None = None  # the entropy of this worker's next step, as the parent expects it
    cols: list = []  # the input columns' layout: (key, dtype, shape, offset); a step frame's None repeats it
    typed: list | None = []  # cols with numpy dtypes (None: not yet made)
    while True:
        if want is not None:  # the reply is sent: the next step's generator, before waiting for it
            ahead, want = (want, rng_for(want)), None
        try:
            msg = ch.recv()
        except EOFError:
            return
        kind = msg[0]
        if kind == "in":  # a new input segment of msg[1] bytes
            seg_in = _map(ch.take_fd(), msg[1], False)
            continue
        if kind == "out":  # a new output segment of msg[1] bytes
            seg_out = _map(ch.take_fd(), msg[1], True)
            continue
        _, new_cols, extra, entropy, want = msg
        if new_cols is not None:
            cols, typed = new_cols, None
        try:
            if typed is None:
                typed = [(key, np.dtype(dtype), shape, off) for key, dtype, shape, off in cols]
            batch: dict[str, Any] = {}
            for key, dtype, shape, off in typed:
                batch[key] = a = np.ndarray(shape, dtype, seg_in, off)
                a.flags.writeable = False
            batch.update(extra)
            inputs = dict(batch)  # kept alive: their ids below stay theirs
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
        # Inputs returned as they are do not travel back: the parent has them.
        ids = {id(v): k for k, v in inputs.items()}
        same = {k: ids[id(v)] for k, v in out.items() if id(v) in ids}
        del inputs, ids
        arrays = {k: v for k, v in out.items() if k not in same and shareable(v)}
        need = sum(aligned(v.nbytes) for v in arrays.values())
        if need and (seg_out is None or len(seg_out) < need):
            ch.send(("grow", need))
            _, size = ch.recv()  # ("out", size): the parent's new segment
            seg_out = _map(ch.take_fd(), size, True)
        layout, off = [], 0
        for k, v in arrays.items():
            dst = np.ndarray(v.shape, v.dtype, seg_out, off)
            np.copyto(dst, v, casting="no")
            del dst
            layout.append((k, v.dtype.str if np.dtype(v.dtype.str) == v.dtype else v.dtype, v.shape, off))
            off += aligned(v.nbytes)
        rest = {k: v for k, v in out.items() if k not in arrays and k not in same}
        del out, arrays
        try:
            ch.send(("ok", order, layout, rest, secs, same))
        except Exception as e:  # noqa: BLE001 - an output value pickle refuses
            ch.send(_error(e))


def main(argv: list[str]) -> int:
    """``transform_worker.py FD`` (FD the last argument)."""
    import signal
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle; it closes the socket
    sock = socket.socket(fileno=int(argv[-1]))
    try:
        serve(Channel(sock))
    except (BrokenPipeError, ConnectionResetError, EOFError):
        pass
    finally:
        sock.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
