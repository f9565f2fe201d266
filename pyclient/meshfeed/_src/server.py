"""Finding the meshfeed binary and running a local server process."""

from __future__ import annotations

import os
import pathlib
import re
import secrets
import selectors
import shutil
import signal
import socket as socketlib
import stat
import subprocess
import tempfile
import time
import weakref
from typing import Any, Sequence

from .errors import BinaryNotFoundError, MeshfeedError, UnavailableError

ENV_BIN = "MESHFEED_BIN"
BIN_NAME = "meshfeed"
_PKG_DIR = pathlib.Path(__file__).resolve().parent.parent  # .../meshfeed
READY_PREFIX = "meshfeed: listening on "
SHM_PREFIX = "meshfeed: shared memory on "


def bundled_binary() -> pathlib.Path:
    """Where a platform wheel carries the binary: ``meshfeed/_bin/meshfeed``
    inside this package (written by pyclient/setup.py; absent in a checkout)."""
    return _PKG_DIR / "_bin" / BIN_NAME


def _own_script(path: str) -> bool:
    """Whether ``path`` is this package's ``meshfeed`` console script, which
    runs find_binary itself: taking it for the server would loop."""
    try:
        with open(path, "rb") as f:
            head = f.read(1024)
    except OSError:
        return False
    return head.startswith(b"#!") and b"meshfeed.__main__" in head


def _on_path() -> str | None:
    """The first ``meshfeed`` on PATH that is not this package's console script."""
    for d in os.environ.get("PATH", os.defpath).split(os.pathsep):
        p = shutil.which(BIN_NAME, path=d or os.curdir)
        if p is not None and not _own_script(p):
            return p
    return None


# The Go module a source checkout's go.mod declares (the repository root).
GO_MODULE = "github.com/meshfeed/meshfeed"


def source_checkout() -> pathlib.Path | None:
    """The repository root when this package runs from a source checkout (an
    editable install, or ``pyclient`` on ``sys.path``): the package sits in
    ``<root>/pyclient/meshfeed`` beside ``pyclient/pyproject.toml``, and
    ``<root>/go.mod`` declares meshfeed's Go module. None for an installed
    wheel, whose package sits in site-packages."""
    pyclient = _PKG_DIR.parent
    root = pyclient.parent
    if pyclient.name != "pyclient" or not (pyclient / "pyproject.toml").is_file():
        return None
    try:
        head = (root / "go.mod").read_text(errors="replace")[:4096]
    except OSError:
        return None
    return root if any(line.strip() == f"module {GO_MODULE}" for line in head.splitlines()) else None


def checkout_binary() -> pathlib.Path | None:
    """Where ``make build`` writes the binary in the source checkout this
    package runs from (``<root>/bin/meshfeed``); None outside one."""
    root = source_checkout()
    return root / "bin" / BIN_NAME if root is not None else None


def _candidates(explicit: str | os.PathLike | None) -> list[tuple[str, str | None]]:
    """The places searched, in order: (description, path or None). Nothing
    here climbs out of the installed package, except to a source checkout's
    ``bin/`` when the package itself lies in that checkout."""
    checkout = checkout_binary()
    return [
        ("binary= argument", os.fspath(explicit) if explicit is not None else None),
        (f"${ENV_BIN}", os.environ.get(ENV_BIN) or None),
        ("bundled in the package", str(bundled_binary())),
        ("source checkout", str(checkout) if checkout is not None else None),
        ("PATH", _on_path()),
    ]


_NOT_SET = {
    "PATH": f"PATH: no {BIN_NAME} binary on PATH (the meshfeed console script does not count)",
    "source checkout": "source checkout: none (the package is installed, not run from a checkout)",
}


def find_binary(explicit: str | os.PathLike | None = None) -> str:
    """Returns the meshfeed binary, the first of: the explicit path
    (``ServerOptions(binary=)``), ``$MESHFEED_BIN``, the binary bundled in the
    installed wheel (``meshfeed/_bin/meshfeed``), ``bin/meshfeed`` of the
    source checkout this package runs from (an editable install: what
    ``make build`` wrote), then the first ``meshfeed`` on PATH (this
    package's console script does not count). Raises BinaryNotFoundError
    listing every place tried."""
    tried = []
    for what, path in _candidates(explicit):
        if path is None:
            tried.append(_NOT_SET.get(what, f"{what}: not set"))
            continue
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
        state = "not executable" if os.path.exists(path) else "does not exist"
        if what == "source checkout" and not os.path.exists(path):
            state += "; `make build` writes it"
        tried.append(f"{what}: {path} ({state})")
    raise BinaryNotFoundError(
        "meshfeed binary not found; tried, in order:\n  " + "\n  ".join(tried)
        + "\n(install a meshfeed platform wheel, which carries the binary; in a source checkout, "
        f"`make build`, or pass ServerOptions(binary=...) or set ${ENV_BIN})")


_GLOB_CHARS = set("*?[")


def allowed_root(uri: str) -> str:
    """The root a local server must allow for dataset ``uri``: ``gs://bucket``
    for GCS and ``s3://bucket`` for S3; for ``https://`` (or loopback
    ``http://``) the URL's directory (HTTP has no listing: each URI names a
    file); for a local path, the directories before the first glob
    component, or the parent directory of a plain file."""
    for scheme in ("gs://", "s3://"):
        if uri.startswith(scheme):
            return scheme + uri[len(scheme):].split("/", 1)[0]
    if uri.startswith(("https://", "http://")):
        head = uri.split("?", 1)[0].split("#", 1)[0]
        scheme, rest = head.split("://", 1)
        host, _, path = rest.partition("/")
        return f"{scheme}://{host}/{path.rpartition('/')[0]}".rstrip("/")
    path = uri[len("file://"):] if uri.startswith("file://") else uri
    parts = pathlib.PurePosixPath(path).parts
    kept: list[str] = []
    for p in parts:
        if _GLOB_CHARS & set(p):
            return str(pathlib.PurePosixPath(*kept)) if kept else "/"
        kept.append(p)
    full = pathlib.Path(path)
    return str(full if full.is_dir() else full.parent)


# A server's memory (see `meshfeed serve -h`): one account (--memory-budget)
# that every stream's read-ahead (--read-ahead), shuffle windows, readers and
# queued steps count against; a request whose stream cannot fit is refused at
# plan time with the numbers. The local server a Loader starts feeds that one
# Loader (LocalServer: two streams, as a reopen after a failure may overlap
# the old one), so its account is sized for one large stream (a 65,536-row
# shuffle window on 8 devices of 64-float rows needs about 580 MB), while the
# Go runtime's soft limit (GOMEMLIMIT, LOCAL_GC_LIMIT) stays what it was when
# the budget counted queued steps alone: the budget bounds, the runtime keeps
# RSS near what the stream holds. A server actor of meshfeed.ray
# (rayservers.py) on a CPU node feeds many remote clients (RAY_MAX_STREAMS
# streams), so it is given more read-ahead.
LOCAL_MEMORY_BUDGET = 2 << 30
"""Bytes a Loader's local server may hold in all (its memory account):
``ServerOptions(memory_budget=None)``."""
LOCAL_READ_AHEAD = 128 << 20
"""Bytes each stream of a Loader's local server reads ahead: ``ServerOptions(read_ahead=None)``."""
LOCAL_GC_LIMIT_BASE = 384 << 20
"""A Loader's local server's Go soft memory limit (GOMEMLIMIT) is this plus
its two streams' read-ahead: :func:`local_gc_limit`."""


def local_gc_limit(read_ahead: int | None) -> int:
    """The Go runtime's soft memory limit of a Loader's local server of this
    read-ahead (None: LOCAL_READ_AHEAD): LOCAL_GC_LIMIT_BASE plus two
    streams' read-ahead, the limit it had when its budget counted queued
    steps alone (256 MiB of steps plus 128 MiB for the program)."""
    return LOCAL_GC_LIMIT_BASE + 2 * (LOCAL_READ_AHEAD if read_ahead is None else read_ahead)


# A server actor's account holds about 32 streams at their full read-ahead
# (each stream reserves its read-ahead, at most its dataset's bytes); past
# that, a stream waits for room, for at most the idle timeout.
RAY_MEMORY_BUDGET = 8 << 30
RAY_READ_AHEAD = 256 << 20
RAY_MAX_STREAMS = 64


def runtime_dir() -> str:
    """This user's directory for the sockets of local servers:
    ``<tmp>/meshfeed-<uid>``, created with mode 0700 and checked on every use
    (a directory, not a link, owned by this user, no access for others), as
    tmux keeps its sockets. It holds no per-server directory: a server
    removes its sockets when it exits, so nothing of it is left even when
    the process that started it was killed; where both were killed (Ray
    kills a worker's child processes with SIGKILL), the next local server
    started removes them (:func:`remove_stale_sockets`)."""
    uid = os.getuid()
    d = os.path.join(tempfile.gettempdir(), f"meshfeed-{uid}")
    try:
        os.mkdir(d, 0o700)
    except FileExistsError:
        pass
    st = os.lstat(d)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != uid or st.st_mode & 0o077:
        raise MeshfeedError(f"{d}: not a private directory of this user (want a directory of uid {uid}, "
                            f"mode 0700; it is {stat.filemode(st.st_mode)} of uid {st.st_uid}): remove it, "
                            "or set TMPDIR elsewhere")
    return d


# A local server's sockets in runtime_dir(): <pid of the process that
# started it>-<hex>.sock (_new_socket), and .shm and .metrics beside it.
_SOCKET_NAME = re.compile(r"^(\d+)-[0-9a-f]+\.sock(?:\.shm|\.metrics)?$")


def _new_socket(d: str) -> str:
    """A new socket path in runtime_dir() ``d`` for a server this process
    starts (named as _SOCKET_NAME reads it)."""
    return os.path.join(d, f"{os.getpid()}-{secrets.token_hex(6)}.sock")


def remove_stale_sockets(d: str) -> list[str]:
    """Removes from ``d`` (:func:`runtime_dir`) the sockets of local servers
    that were killed together with the process that started them, which
    leaves them behind (neither can remove them), and returns their paths.

    A server's sockets are stale when the process named in them (the one
    that started the server) is gone and none of them accepts a connection;
    those of a live process, or of a server still listening, are kept (a
    server being started is always its starter's, which lives)."""
    groups: dict[str, list[str]] = {}
    for name in os.listdir(d):
        m = _SOCKET_NAME.match(name)
        if m is None or _alive(int(m.group(1))):
            continue
        path = os.path.join(d, name)
        try:
            if not stat.S_ISSOCK(os.lstat(path).st_mode):
                continue
        except OSError:
            continue
        groups.setdefault(name.split(".sock", 1)[0], []).append(path)
    removed = []
    for paths in groups.values():
        if any(_accepts(p) for p in paths):
            continue
        for p in paths:
            try:
                os.unlink(p)
                removed.append(p)
            except OSError:
                pass
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's: it exists
    return True


def _accepts(path: str) -> bool:
    """Whether something listens on Unix socket ``path`` (a refused or
    missing socket does not)."""
    with socketlib.socket(socketlib.AF_UNIX, socketlib.SOCK_STREAM) as s:
        s.settimeout(1.0)
        try:
            s.connect(path)
        except (ConnectionRefusedError, FileNotFoundError):
            return False
        except OSError:
            return True  # a listener of another kind, or a slow one: not ours to remove
        return True


class LocalServer:
    """A ``meshfeed serve`` process on a Unix socket of this user's
    :func:`runtime_dir`, stopped by stop(), on garbage collection, or at
    exit; it also exits by itself once the process that started it is gone,
    even killed with SIGKILL (``--parent-pid``)."""

    def __init__(self, binary: str, roots: Sequence[str], *, backend: str = "pipeline",
                 extra_args: Sequence[str] = (), start_timeout: float = 30.0, stop_timeout: float = 10.0,
                 socket: str | os.PathLike | None = None, shm: bool = False, address: str | None = None,
                 read_ahead: int | None = None, memory_budget: int | None = None,
                 gc_limit: int | None = None, cache_dir: str | os.PathLike | None = None,
                 cache_size: int | None = None):
        """Starts ``meshfeed serve`` allowed to read ``roots`` and waits until
        it accepts calls. ``read_ahead`` and ``memory_budget``: bytes
        (``--read-ahead``, ``--memory-budget``); None: LOCAL_READ_AHEAD and
        LOCAL_MEMORY_BUDGET. ``extra_args`` come after every other flag (a
        flag given again wins). ``socket``: the Unix socket path to listen on
        (default: a new one in :func:`runtime_dir`, removed when the server
        stops); a server restarted on the same path is reachable at the same
        address. ``shm``: also serve the shared-memory wire, on a socket
        beside it (``shm_address``; None when off).
        ``address``: ``host:port`` to listen on instead of a Unix socket
        (port 0: a free one). ``gc_limit``: the Go runtime's soft memory
        limit in bytes (GOMEMLIMIT; a GOMEMLIMIT in this environment wins);
        None: the server's own rule (``meshfeed serve -h``). ``cache_dir``,
        ``cache_size``: keep the bytes read from remote stores on local disk
        (``--cache-dir``, ``--cache-size``; None: no cache, the server's
        default size); with a cache and a Unix socket the server also serves
        its counters beside the socket (``metrics_address``).

        The server is told this process's id (``--parent-pid``) and exits,
        draining as on SIGTERM, within a fraction of a second of this
        process ending, however it ends: a training process killed with
        SIGKILL leaves no server, socket or shared memory behind. (Not
        Linux's PR_SET_PDEATHSIG through ``preexec_fn``: that is not safe in
        a threaded process, and it fires when the starting *thread* ends.)"""
        own: list[str] = []  # socket paths this object chose, removed by stop()
        if socket is None and (address is None or shm):
            d = runtime_dir()
            try:
                remove_stale_sockets(d)
            except OSError:
                pass  # a sweep that fails costs nothing but the files
            socket = _new_socket(d)
            own = [socket, socket + ".shm"]
        sock = os.fspath(socket) if socket is not None else ""
        listen = address if address is not None else "unix://" + sock
        self.shm_address: str | None = None
        # unix:// address of the server's /debug/vars (storage and cache
        # counters); None when off.
        self.metrics_address: str | None = None
        # A local server feeds one Loader: a few streams (a reopen after a
        # failure may overlap the old one), bounded memory (one account for
        # read-ahead, windows and queued steps; the runtime's soft limit below).
        args = [binary, "serve", "--addr", listen, "--backend", backend, "--drain-timeout", "2s",
                "--max-streams", "2",
                "--memory-budget", str(LOCAL_MEMORY_BUDGET if memory_budget is None else memory_budget),
                "--read-ahead", str(LOCAL_READ_AHEAD if read_ahead is None else read_ahead),
                "--parent-pid", str(os.getpid())]
        if shm:
            args += ["--shm", "unix://" + sock + ".shm"]
        for r in dict.fromkeys(roots):
            args += ["--allow", r]
        if cache_dir is not None:
            args += ["--cache-dir", os.fspath(cache_dir)]
            if cache_size is not None:
                args += ["--cache-size", str(cache_size)]
            if sock:
                self.metrics_address = "unix://" + sock + ".metrics"
                args += ["--metrics-addr", self.metrics_address]
                if own:
                    own.append(sock + ".metrics")
        args += list(extra_args)
        self.args = args
        # stderr goes to a file (a pipe nobody reads would block the server
        # once full), one with no name: nothing to remove, however this ends.
        self._err = tempfile.TemporaryFile(prefix="meshfeed-stderr-")
        env = None
        if gc_limit is not None and "GOMEMLIMIT" not in os.environ:
            env = dict(os.environ, GOMEMLIMIT=str(gc_limit))
        try:
            self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                         stderr=self._err, start_new_session=True, env=env)
        except OSError as e:
            self._err.close()
            raise MeshfeedError(f"cannot start {args!r}: {e}") from e
        self._finalizer = weakref.finalize(self, _stop, self.proc, own, self._err, stop_timeout)
        try:
            self.address = self._wait_ready(start_timeout)
        except BaseException:
            self._finalizer()
            raise

    @property
    def pid(self) -> int:
        """The server's process id."""
        return self.proc.pid

    def _stderr(self) -> str:
        """The last 8000 bytes the server wrote to stderr."""
        try:
            fd = self._err.fileno()
            size = os.fstat(fd).st_size
            return os.pread(fd, 8000, max(0, size - 8000)).decode("utf-8", "replace")
        except (OSError, ValueError):
            return ""

    def _wait_ready(self, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        assert self.proc.stdout is not None
        sel = selectors.DefaultSelector()
        sel.register(self.proc.stdout, selectors.EVENT_READ)
        buf = b""
        try:
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise UnavailableError(
                        f"meshfeed server did not report ready within {timeout:g}s: {self.args!r}\nstderr:\n{self._stderr()}")
                if not sel.select(min(left, 0.5)):
                    if self.proc.poll() is not None:
                        break
                    continue
                chunk = os.read(self.proc.stdout.fileno(), 4096)
                if not chunk:
                    break
                buf += chunk
                while b"\n" in buf:
                    raw, buf = buf.split(b"\n", 1)
                    line = raw.decode("utf-8", "replace")
                    if line.startswith(SHM_PREFIX):
                        self.shm_address = line[len(SHM_PREFIX):].strip()
                        continue
                    if line.startswith(READY_PREFIX):
                        return line[len(READY_PREFIX):].strip()
                    raise MeshfeedError(f"meshfeed server printed {line!r}, want {READY_PREFIX!r}...; "
                                        f"stderr:\n{self._stderr()}")
        finally:
            sel.close()
        rc = self.proc.wait(timeout=5)
        raise MeshfeedError(f"meshfeed server exited with status {rc} before it was ready: {self.args!r}\n"
                            f"stderr:\n{self._stderr()}")

    def alive(self) -> bool:
        """Whether the server process still runs."""
        return self.proc.poll() is None

    def stop(self) -> None:
        """Stops the server (SIGTERM, then SIGKILL after a timeout) and removes
        its temporary directory. Idempotent."""
        self._finalizer()


def _stop(proc: subprocess.Popen, own: list[str], err: Any, timeout: float) -> None:
    try:
        if proc.poll() is None:
            try:
                proc.send_signal(signal.SIGTERM)
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=timeout)
    except ProcessLookupError:
        pass
    finally:
        if proc.stdout is not None:
            proc.stdout.close()
        err.close()
        # A server that exits removes its sockets; one that was killed cannot.
        for path in own:
            try:
                os.unlink(path)
            except OSError:
                pass
