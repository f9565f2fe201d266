"""meshfeed.Loader over http:// URLs (a loopback range server started by the
test): the URLs pass through the client, its local server allows their
directory, and the batches equal those read from local disk."""

import email.utils
import http.server
import pathlib
import threading

import jax
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import meshfeed


class _RangeHandler(http.server.BaseHTTPRequestHandler):
    """Serves files of `root` with Range, ETag and Last-Modified, as a static
    file server does; counts the ranged GETs it answers."""

    root: pathlib.Path
    ranged = 0
    lock = threading.Lock()

    def do_HEAD(self) -> None:
        self._serve(head=True)

    def do_GET(self) -> None:
        self._serve(head=False)

    def _serve(self, head: bool) -> None:
        path = (self.root / self.path.lstrip("/")).resolve()
        if self.root not in path.parents or not path.is_file():
            self.send_error(404)
            return
        data, st = path.read_bytes(), path.stat()
        status, body, rng = 200, data, self.headers.get("Range")
        content_range = None
        if rng and rng.startswith("bytes="):
            first, _, last = rng[len("bytes="):].partition("-")
            start, end = int(first), min(int(last), len(data) - 1) if last else len(data) - 1
            if start >= len(data):
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{len(data)}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            status, body, content_range = 206, data[start:end + 1], f"bytes {start}-{end}/{len(data)}"
            with self.lock:
                type(self).ranged += 1
        self.send_response(status)
        self.send_header("ETag", f'"{st.st_mtime_ns:x}-{st.st_size:x}"')
        self.send_header("Last-Modified", email.utils.formatdate(st.st_mtime, usegmt=True))
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Content-Length", str(len(body)))
        if content_range:
            self.send_header("Content-Range", content_range)
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def web(dataset):
    handler = type("Handler", (_RangeHandler,), {"root": dataset.resolve(), "ranged": 0})
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}", handler
    srv.shutdown()
    srv.server_close()
    t.join()


def test_http_urls_read_like_local_files(dataset, glob, web):
    base, handler = web
    files = sorted(p.name for p in dataset.glob("*.parquet"))
    urls = [f"{base}/{name}" for name in files]
    sh = NamedSharding(jax.make_mesh((8,), ("data",)), P("data"))
    kw = dict(global_batch_size=64, sharding=sh, last_batch="pad", shuffle=meshfeed.Shuffle(seed=3, window=50))
    with meshfeed.Loader(glob, **kw) as ld:  # local server over the files
        want = [{k: np.asarray(v) for k, v in b.items()} for b in ld]
    with meshfeed.Loader(urls, **kw) as ld:  # local server allowed the URLs' directory
        got = [{k: np.asarray(v) for k, v in b.items()} for b in ld]
    assert len(got) == len(want) > 0
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.keys() == w.keys(), f"step {i}: columns {sorted(g)} != {sorted(w)}"
        for k in w:
            np.testing.assert_array_equal(g[k], w[k], err_msg=f"step {i} column {k}")
    assert handler.ranged > 0, "no ranged GET reached the HTTP server"


def test_http_glob_is_refused(web):
    base, _ = web
    sh = NamedSharding(jax.make_mesh((8,), ("data",)), P("data"))
    with pytest.raises(meshfeed.MeshfeedError, match="name each file"):
        meshfeed.Loader(f"{base}/*.parquet", global_batch_size=64, sharding=sh)


def test_local_server_killed_mid_epoch_over_http(glob, dataset, web):
    """SIGKILL of the loader's own server while it reads http:// URLs: the new
    server resumes at the first step the loop has not received, and the steps
    equal an uninterrupted run over the local files."""
    import os
    import signal

    base, _ = web
    urls = [f"{base}/{p.name}" for p in sorted(dataset.glob("*.parquet"))]
    sh = NamedSharding(jax.make_mesh((4, 2), ("data", "model")), P("data"))
    kw = dict(global_batch_size=64, sharding=sh, last_batch="pad", shuffle=meshfeed.Shuffle(seed=3, window=40),
              num_epochs=None, prefetch=3)
    steps, kill_at = 160, 5

    def take(ld, action=None):
        out = []
        for i, b in enumerate(ld):
            out.append((np.asarray(b["id"]).copy(), np.asarray(b["valid"]).copy()))
            if action is not None and i + 1 == kill_at:
                action()
            if len(out) == steps:
                return out
        return out

    with meshfeed.Loader(glob, **kw) as ld:
        want = take(ld)
    with meshfeed.Loader(urls, **kw) as ld:
        pid = ld.server_pid
        got = take(ld, action=lambda: os.kill(pid, signal.SIGKILL))
        stats = ld.stats()
        assert ld.server_pid != pid
    assert stats["recoveries"] >= 1, stats
    assert len(got) == len(want) == steps
    for s, ((gi, gm), (wi, wm)) in enumerate(zip(got, want)):
        np.testing.assert_array_equal(gm, wm, err_msg=f"step {s} mask")
        np.testing.assert_array_equal(gi, wi, err_msg=f"step {s} ids")
