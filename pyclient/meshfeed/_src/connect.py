"""Building the Flight client of a Loader: location, TLS, bearer token.

Kept apart from the session (session.py), which only asks for "a client for
this address"; docs/PROTOCOL.md ("Connecting") says what a server expects.
"""

from __future__ import annotations

import os
from typing import Any, Callable

import pyarrow.flight as flight

from .errors import InvalidRequestError


def location(server: str, tls: bool) -> str:
    """The Flight location of ``server``: ``unix:///path`` becomes
    ``grpc+unix://``; ``host:port`` becomes ``grpc+tls://`` with TLS, else
    ``grpc+tcp://``; a location with a scheme is kept."""
    if "://" in server and not server.startswith("unix://"):
        return server  # grpc+tcp://, grpc+tls://, grpc+unix://
    if server.startswith("unix://"):
        return "grpc+unix://" + server[len("unix://"):]
    return ("grpc+tls://" if tls else "grpc+tcp://") + server


class _BearerFactory(flight.ClientMiddlewareFactory):
    """Adds ``authorization: Bearer <token>`` to every call."""

    def __init__(self, token: str):
        self._headers = {"authorization": ["Bearer " + token]}

    def start_call(self, info: Any) -> flight.ClientMiddleware:
        return _Bearer(self._headers)


class _Bearer(flight.ClientMiddleware):
    def __init__(self, headers: dict):
        self._headers = headers

    def sending_headers(self) -> dict:
        return self._headers


def check_options(bad: Callable[[str], None], server: Any, tls_root_certs: Any, tls_server_name: Any,
                  token: Any) -> bytes | None:
    """Reports (``bad(problem)``) connection options that cannot work
    together; returns the root certificates as PEM bytes (read from the
    file when given a path), or None."""
    remote = tls_root_certs is not None or tls_server_name is not None or token is not None
    if server is None and remote:
        bad("tls_root_certs, tls_server_name and token are for a given server= "
            "(the local server listens on a private Unix socket)")
    if tls_server_name is not None and (tls_root_certs is None or not isinstance(tls_server_name, str)):
        bad("tls_server_name needs tls_root_certs" if tls_root_certs is None
            else f"tls_server_name={tls_server_name!r}: want a string")
    if token is not None and (not isinstance(token, str) or not token or "\n" in token):
        bad("token: want a non-empty one-line string")
    if tls_root_certs is None or isinstance(tls_root_certs, bytes):
        return tls_root_certs
    if isinstance(tls_root_certs, (str, os.PathLike)):
        try:
            with open(tls_root_certs, "rb") as f:
                return f.read()
        except OSError as e:
            bad(f"tls_root_certs={tls_root_certs!r}: {e}")
            return None
    bad(f"tls_root_certs={tls_root_certs!r}: want PEM bytes or a file path")
    return None


def client(address: str, *, tls_root_certs: bytes | None = None, tls_server_name: str | None = None,
           token: str | None = None) -> flight.FlightClient:
    """A Flight client for ``address`` that accepts messages of any size,
    verifies the server against ``tls_root_certs`` (by ``tls_server_name``
    when given, else by the address's host) and sends ``token``."""
    kw: dict[str, Any] = {"generic_options": [("grpc.max_receive_message_length", -1)]}
    if tls_root_certs is not None:
        kw["tls_root_certs"] = tls_root_certs
        if tls_server_name is not None:
            kw["override_hostname"] = tls_server_name
    if token is not None:
        kw["middleware"] = [_BearerFactory(token)]
    return flight.FlightClient(location(address, tls_root_certs is not None), **kw)


def resolve(server: "str | Callable[[], str]") -> str:
    """The address ``server`` names now (calls it when it is a callable)."""
    if isinstance(server, str):
        return server
    addr = server()
    if not isinstance(addr, str) or not addr:
        raise InvalidRequestError(f"server callable {server!r} returned {addr!r}, want an address string")
    return addr
