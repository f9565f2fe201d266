"""The counters a local ``meshfeed serve`` reports about its storage (its
``/debug/vars`` JSON, served on a Unix socket beside its Flight socket), of
which the Loader's ``stats()`` shows the disk cache's."""

from __future__ import annotations

import http.client
import json
import socket
from typing import Any

# The storage counters of the server's disk cache (``--cache-dir``) as
# ``/debug/vars`` names them, and the keys of ``Loader.stats()["cache"]``.
CACHE_FIELDS = (("cache_hits", "hits"), ("cache_misses", "misses"), ("cache_bytes_saved", "bytes_saved"),
                ("cache_evictions", "evictions"), ("cache_corrupt", "corrupt"),
                ("cache_write_errors", "write_errors"))


class _UnixHTTPConnection(http.client.HTTPConnection):
    """An HTTP connection over a Unix socket."""

    def __init__(self, path: str, timeout: float):
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        try:
            s.connect(self._path)
        except OSError:
            s.close()
            raise
        self.sock = s


def storage_stats(metrics_address: str, timeout: float = 2.0) -> dict[str, Any] | None:
    """The ``storage`` object of the server's ``/debug/vars`` at
    ``metrics_address`` (``unix:///path``), or None when the server cannot
    say (not up yet, gone, or no storage counters)."""
    path = metrics_address.removeprefix("unix://")
    conn = _UnixHTTPConnection(path, timeout)
    try:
        conn.request("GET", "/debug/vars")
        resp = conn.getresponse()
        if resp.status != 200:
            return None
        body = json.loads(resp.read())
    except (OSError, ValueError, http.client.HTTPException):
        return None
    finally:
        conn.close()
    st = body.get("storage") if isinstance(body, dict) else None
    return st if isinstance(st, dict) else None


def cache_stats(metrics_address: str) -> dict[str, int] | None:
    """The disk cache's counters for ``Loader.stats()["cache"]``: hits,
    misses, bytes_saved, evictions, corrupt, write_errors; None when the
    server cannot say."""
    st = storage_stats(metrics_address)
    if st is None:
        return None
    return {out: int(st.get(name, 0)) for name, out in CACHE_FIELDS}
