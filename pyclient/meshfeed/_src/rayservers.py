"""meshfeed servers as Ray actors (meshfeed.ray): disaggregated loading.

Ray is imported inside the functions that need it, never at import time, so
that ``import meshfeed`` works without Ray.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import secrets
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from .errors import InvalidRequestError, MeshfeedError, UnavailableError
from .server import RAY_MAX_STREAMS, RAY_MEMORY_BUDGET, RAY_READ_AHEAD, LocalServer, find_binary

SERVER_NAME = "meshfeed-server"
"""The name generated certificates are issued to; clients check it
(``tls_server_name``) instead of the node's IP, which is not known when the
certificate is made and changes when a server comes back on another node."""

# A server on a CPU node feeds many clients: more streams and memory than the
# one a Loader starts for itself (server.py says both, side by side; see
# `meshfeed serve -h`).
DEFAULT_SERVER_ARGS = ("--max-streams", str(RAY_MAX_STREAMS), "--memory-budget", str(RAY_MEMORY_BUDGET),
                       "--read-ahead", str(RAY_READ_AHEAD), "--drain-timeout", "5s")


@dataclass(frozen=True)
class TLS:
    """A server certificate chain and key (PEM) and the name clients verify.

    Clients use ``cert_pem`` as their root certificates, so it must be the
    self-signed certificate itself or end in the CA that issued it (pass
    ``ca_pem`` then).
    """

    cert_pem: bytes
    key_pem: bytes
    server_name: str = SERVER_NAME
    ca_pem: bytes | None = None

    @property
    def root_pem(self) -> bytes:
        """What clients verify the servers with."""
        return self.ca_pem if self.ca_pem is not None else self.cert_pem

    @classmethod
    def generate(cls, server_name: str = SERVER_NAME, days: int = 30) -> "TLS":
        """A fresh self-signed certificate (ECDSA P-256) for ``server_name``
        and 127.0.0.1, valid ``days`` days. Needs the ``cryptography`` package."""
        try:
            from cryptography import x509
            from cryptography.hazmat.primitives import hashes, serialization
            from cryptography.hazmat.primitives.asymmetric import ec
            from cryptography.x509.oid import NameOID
        except ImportError as e:
            raise MeshfeedError("TLS.generate needs the cryptography package (pip install cryptography), "
                                f"or pass TLS.from_files(cert, key, server_name): {e}") from e
        key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, server_name)])
        now = datetime.datetime.now(datetime.timezone.utc)
        cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
                .serial_number(x509.random_serial_number())
                .not_valid_before(now - datetime.timedelta(minutes=5))
                .not_valid_after(now + datetime.timedelta(days=days))
                .add_extension(x509.SubjectAlternativeName(
                    [x509.DNSName(server_name), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
                .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                .sign(key, hashes.SHA256()))
        return cls(cert_pem=cert.public_bytes(serialization.Encoding.PEM),
                   key_pem=key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                             serialization.NoEncryption()),
                   server_name=server_name)

    @classmethod
    def from_files(cls, cert: str | os.PathLike, key: str | os.PathLike, server_name: str,
                   ca: str | os.PathLike | None = None) -> "TLS":
        """A certificate chain and key an operator issued (e.g. cert-manager),
        for ``server_name``; ``ca``: the CA clients should trust, when the
        chain does not end in it."""
        def read(p: str | os.PathLike) -> bytes:
            with open(p, "rb") as f:
                return f.read()
        return cls(cert_pem=read(cert), key_pem=read(key), server_name=server_name,
                   ca_pem=read(ca) if ca is not None else None)


class ServerProcess:
    """The body of one server actor: ``meshfeed serve`` on this node's IP
    with TLS and a token, ending with the actor (``--parent-pid``); if the
    server process ends by itself, the actor exits so that Ray restarts it.
    Used through :func:`start_servers`; public for ``ray.remote`` options of
    one's own."""

    def __init__(self, allow: Sequence[str], port: int, tls: TLS, token: str, server_args: Sequence[str],
                 binary: str | None, host: str | None, start_timeout: float):
        import ray.util

        self._host = host or ray.util.get_node_ip_address()
        # The server reads its certificate, key and token once, as it starts
        # (before it reports ready), so they stay on disk only until then:
        # an actor killed by Ray (SIGKILL: no code of it runs) leaves no key
        # or token behind, and a restarted actor writes them again.
        tmp = tempfile.mkdtemp(prefix="meshfeed-actor-")
        try:
            paths = {}
            for name, data in (("cert.pem", tls.cert_pem), ("key.pem", tls.key_pem), ("token", token.encode())):
                paths[name] = os.path.join(tmp, name)
                fd = os.open(paths[name], os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
            self._server = LocalServer(find_binary(binary), list(allow), address=f"{self._host}:{port}",
                                       start_timeout=start_timeout,
                                       extra_args=[*DEFAULT_SERVER_ARGS, "--tls-cert", paths["cert.pem"],
                                                   "--tls-key", paths["key.pem"], "--token-file", paths["token"],
                                                   *server_args])
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        self._stopping = False
        threading.Thread(target=self._watch, name="meshfeed-server-watch", daemon=True).start()

    def _watch(self) -> None:
        self._server.proc.wait()
        if not self._stopping:
            os._exit(1)  # the server died: end the actor, Ray restarts it (max_restarts)

    def address(self) -> str:
        """``host:port`` the server listens on."""
        return self._server.address

    def pid(self) -> int:
        """The server process's id (on this actor's node)."""
        return self._server.pid

    def node_id(self) -> str:
        """The Ray node this actor runs on."""
        import ray

        return ray.get_runtime_context().get_node_id()

    def stop(self) -> None:
        """Stops the server (it drains first)."""
        self._stopping = True
        self._server.stop()


class Connection:
    """Where server ``index`` of a :class:`ServerGroup` is now: a callable
    for ``Loader(server=...)``, which calls it again before every reconnect.
    Picklable (it holds a Ray actor handle), so it travels to Ray workers
    inside a train loop's config. Raises :class:`meshfeed.UnavailableError`
    while the actor is down or restarting, which the Loader's recovery
    retries until its ``recovery_timeout``."""

    def __init__(self, actor: Any, index: int, timeout: float = 10.0):
        self.actor, self.index, self.timeout = actor, index, timeout

    def __call__(self) -> str:
        import ray

        try:
            return ray.get(self.actor.address.remote(), timeout=self.timeout)
        except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError,
                ray.exceptions.ActorUnavailableError) as e:
            raise UnavailableError(f"meshfeed server actor {self.index} is not reachable now: {e}",
                                   code="UNAVAILABLE") from e

    def __repr__(self) -> str:
        return f"meshfeed.ray.Connection(server {self.index})"


class ServerGroup:
    """Servers started by :func:`start_servers`: their actors, addresses and
    the Loader arguments that reach them. A context manager: leaving it
    stops the servers."""

    def __init__(self, actors: list, tls: TLS, token: str):
        self.actors = actors
        self.tls = tls
        self._token = token

    def __len__(self) -> int:
        return len(self.actors)

    def addresses(self) -> list[str]:
        """The current ``host:port`` of every server."""
        import ray

        return ray.get([a.address.remote() for a in self.actors])

    def connection(self, i: int) -> Connection:
        """The :class:`Connection` of server ``i % len(self)``."""
        i %= len(self.actors)
        return Connection(self.actors[i], i)

    def loader_kwargs(self, i: int) -> dict[str, Any]:
        """``meshfeed.Loader`` keyword arguments for client ``i`` (e.g. the
        world rank): server ``i % len(self)``, the root certificate, the
        name to verify and the token. Clients are spread round-robin."""
        return {"server": self.connection(i), "tls_root_certs": self.tls.root_pem,
                "tls_server_name": self.tls.server_name, "token": self._token}

    @property
    def token(self) -> str:
        """The bearer token every call to these servers must carry."""
        return self._token

    def stop(self) -> None:
        """Stops every server and ends its actor. Idempotent."""
        import ray

        actors, self.actors = self.actors, []
        for a in actors:
            try:
                ray.get(a.stop.remote(), timeout=30)
            except Exception:  # noqa: BLE001 - the actor may be gone already; it is killed below
                pass
            ray.kill(a, no_restart=True)

    def __enter__(self) -> "ServerGroup":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def start_servers(num_servers: int, allow: Sequence[str], *, resources: Mapping[str, float] | None = None,
                  num_cpus: float = 1, port: int = 0, tls: TLS | None = None, token: str | None = None,
                  max_restarts: int = -1, server_args: Sequence[str] = (), binary: str | None = None,
                  host: str | None = None, start_timeout: float = 60.0,
                  scheduling_strategy: Any = "SPREAD") -> ServerGroup:
    """Starts ``num_servers`` meshfeed servers as Ray actors and waits until
    each accepts calls.

    Each actor runs the meshfeed binary (``binary``, ``$MESHFEED_BIN``, the
    one bundled in the package, or PATH, on the actor's node) as
    ``meshfeed serve --addr NODE_IP:PORT --allow ROOT... --tls-cert
    --tls-key --token-file``, and needs ``num_cpus`` CPUs and ``resources``
    (e.g. ``{"meshfeed_server": 1}``, a custom resource of the CPU nodes meant
    for loading) of its node; the default ``SPREAD`` strategy puts them on
    different nodes where it can.

    Args:
        num_servers: actors to start.
        allow: the dataset roots the servers may read (``--allow``).
        resources: Ray resources each actor needs, beside ``num_cpus``.
        port: the port each listens on (0: a free one, chosen again when
            an actor restarts; clients find it through :class:`Connection`).
        tls: the certificate and key; default :meth:`TLS.generate` (a
            self-signed certificate, needs ``cryptography``).
        token: the bearer token; default 32 random bytes, URL-safe base64.
        max_restarts: how often Ray restarts a dead actor (-1: always).
        server_args: more ``meshfeed serve`` flags (they override
            :data:`DEFAULT_SERVER_ARGS`).
        host: the address to listen on (default: the node's IP as Ray sees it).
        start_timeout: seconds each server may take to report ready.
        scheduling_strategy: passed to the actors' ``.options``.

    Returns a :class:`ServerGroup`; hand ``group.loader_kwargs(rank)`` to
    each training worker (e.g. in ``train_loop_config``).
    """
    import ray

    if isinstance(num_servers, bool) or not isinstance(num_servers, int) or num_servers < 1:
        raise InvalidRequestError(f"num_servers={num_servers!r}: want an int >= 1")
    if isinstance(allow, str) or not allow:
        raise InvalidRequestError(f"allow={allow!r}: want a non-empty list of roots")
    tls = tls if tls is not None else TLS.generate()
    token = token if token is not None else secrets.token_urlsafe(32)
    remote = ray.remote(ServerProcess).options(
        num_cpus=num_cpus, resources=dict(resources or {}), max_restarts=max_restarts, max_task_retries=-1,
        scheduling_strategy=scheduling_strategy)
    actors = [remote.remote(list(allow), port, tls, token, list(server_args), binary, host, start_timeout)
              for _ in range(num_servers)]
    group = ServerGroup(actors, tls, token)
    try:
        deadline = time.monotonic() + start_timeout + 60  # scheduling, worker start-up, then the server's own start
        ray.get([a.address.remote() for a in actors], timeout=max(1.0, deadline - time.monotonic()))
    except BaseException:
        group.stop()
        raise
    return group
