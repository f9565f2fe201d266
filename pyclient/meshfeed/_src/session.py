"""The Loader's side of the server: the local server it started (if any),
the Flight connection, planning a request, and getting both back after the
server went away (restart or reconnect, with backoff, within a budget)."""

from __future__ import annotations

import json
import time
import warnings
from typing import Any, Callable

import pyarrow as pa
import pyarrow.flight as flight

from . import connect, shm
from .config import LoaderConfig
from .errors import MeshfeedError, PlanError, UnavailableError, from_flight, recoverable
from .server import LocalServer, allowed_root, find_binary, local_gc_limit

# Steps in flight on the shared-memory wire: the one being filled, the
# prefetched ones, and the ones the training loop still holds.
SHM_EXTRA_SLOTS = 3


class Session:
    """The server a Loader reads from and its connection.

    With ``cfg.server`` None it starts a local server allowed to read the
    datasets' roots (and restarts it when it died); else it connects to the
    given address. Holds no reference to the Loader, so that the Loader's
    finalizer can close it."""

    def __init__(self, cfg: LoaderConfig):
        self._cfg = cfg
        self.server: LocalServer | None = None
        self.client: flight.FlightClient | None = None
        self.recoveries = 0
        # "shm" or "flight": how the next stream travels; "auto" falls back
        # to Flight (with a warning) when shared memory is refused.
        self.transport = "flight" if cfg.transport == "flight" or cfg.server is not None else "shm"
        self.fallback: str | None = None  # why shared memory was given up, if it was
        self._binary: str | None = None
        self._roots: list[str] = []
        # server= a callable: asked for the address now and before every reconnect.
        self._server_fn: Callable[[], str] | None = None if isinstance(cfg.server, str) else cfg.server
        if self._server_fn is not None:
            self.address = connect.resolve(self._server_fn)
        elif cfg.server is None:
            self._roots = [allowed_root(u) for u in [*cfg.datasets, *cfg.tokenizers()]]
            self._binary = find_binary(cfg.local_server.binary)
            self.server = self._start()
            self.address = self.server.address
        else:
            assert isinstance(cfg.server, str)  # LoaderConfig: a string, a callable or None
            self.address = cfg.server

    def _start(self) -> LocalServer:
        assert self._binary is not None
        opts = self._cfg.local_server
        return LocalServer(self._binary, self._roots, read_ahead=opts.read_ahead, memory_budget=opts.memory_budget,
                           gc_limit=local_gc_limit(opts.read_ahead),
                           extra_args=opts.extra_args, shm=self.transport == "shm" and shm.available(),
                           cache_dir=opts.cache_dir, cache_size=opts.cache_size)

    def open_stream(self, ticket: bytes, slots: int) -> Any:
        """Opens the stream of ``ticket`` on this session's transport: a
        :class:`shm.ShmReader` from the local server's shared-memory socket,
        or a Flight DoGet reader. With ``transport="auto"``, a stream that
        shared memory refuses (a column that is not fixed-width, or a
        platform without memfd) goes over Flight from then on, with a
        warning; ``stats()["transport"]`` says which one served."""
        if self.transport == "shm":
            srv = self.server
            why = None
            if not shm.available():
                why = "this platform has no memfd or SCM_RIGHTS"
            elif srv is None or srv.shm_address is None:
                why = "the server offers no shared-memory socket"
            else:
                try:
                    return shm.ShmReader(srv.shm_address[len("unix://"):], ticket, slots=slots)
                except shm.ShmIneligible as e:
                    why = str(e)
            if self._cfg.transport == "shm":
                raise MeshfeedError(f"transport='shm': {why}", code="FAILED_PRECONDITION")
            self.transport, self.fallback = "flight", why
            warnings.warn(f"meshfeed: reading over Flight instead of shared memory: {why}", RuntimeWarning,
                          stacklevel=2)
        assert self.client is not None
        return self.client.do_get(flight.Ticket(ticket))

    def connect(self) -> flight.FlightClient:
        """Opens (or reopens) the connection to ``address``."""
        self._close_client()
        pem = self._cfg.tls_root_certs
        assert pem is None or isinstance(pem, bytes)  # LoaderConfig reads a path's file
        self.client = connect.client(self.address, tls_root_certs=pem,
                                     tls_server_name=self._cfg.tls_server_name, token=self._cfg.token)
        return self.client

    def plan(self, request: dict[str, Any]) -> tuple[pa.Schema, dict[str, Any]]:
        """GetFlightInfo of ``request``: the schema of its records and the
        plan (``num_rows``, ``steps_per_epoch``, ...). The server's refusal
        (any validation of the request) is raised as meshfeed's typed error."""
        assert self.client is not None
        try:
            info = self.client.get_flight_info(flight.FlightDescriptor.for_command(json.dumps(request).encode()))
        except Exception as e:  # noqa: BLE001
            raise from_flight(e) from e
        try:
            plan = json.loads(info.app_metadata)
            plan["num_rows"], plan["steps_per_epoch"] = int(plan["num_rows"]), int(plan["steps_per_epoch"])
        except (ValueError, KeyError, TypeError) as e:
            raise MeshfeedError(f"server's FlightInfo app_metadata {info.app_metadata!r}: {e}") from e
        return info.schema, plan

    def recover(self, cause: BaseException, deadline: float, where: str,
                check: Callable[[dict[str, Any]], None], request: dict[str, Any]) -> None:
        """Gets a working server back after ``cause`` broke the stream at
        ``where``: restarts the local server if it died, reconnects, and
        replans ``request``, which ``check`` compares with the first plan
        (raising PlanError if the dataset changed). Retries with backoff
        until ``deadline`` (time.monotonic), then raises UnavailableError."""
        wait, attempts, last = 0.05, 0, cause
        while True:
            attempts += 1
            try:
                self._reconnect()
                _, plan = self.plan(request)
                check(plan)
                self.recoveries += 1
                return
            except PlanError:
                self._close_client()
                raise
            except BaseException as e:  # noqa: BLE001 - retried below, re-raised when the budget is spent
                e = from_flight(e)
                if not (recoverable(e) or isinstance(e, MeshfeedError)):
                    self._close_client()
                    raise
                last = e
            if time.monotonic() + wait > deadline:
                self._close_client()
                raise UnavailableError(
                    f"meshfeed server at {self.address} did not come back within recovery_timeout="
                    f"{self._cfg.recovery_timeout:g}s ({attempts} attempts; the stream broke at {where} "
                    f"with: {cause}); last error: {last}", code="UNAVAILABLE") from cause
            time.sleep(wait)
            wait = min(wait * 2, 2.0)

    def _reconnect(self) -> None:
        self._close_client()
        if self.server is not None and not self.server.alive():
            self.server.stop()
            self.server = None
            self.server = self._start()
            self.address = self.server.address
        if self._server_fn is not None:
            self.address = connect.resolve(self._server_fn)
        self.connect()

    def _close_client(self) -> None:
        client, self.client = self.client, None
        if client is not None:
            try:
                client.close()
            except Exception:  # noqa: BLE001
                pass

    def close(self) -> None:
        """Closes the connection and stops the local server, if any. Idempotent."""
        self._close_client()
        if self.server is not None:
            self.server.stop()
