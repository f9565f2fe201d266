"""Loader(server=callable): the callable names the server again before every
reconnect, so a server that comes back at another address is found there;
and the connection options (TLS, token) are refused where they cannot work.
TLS and tokens against a real server: pyclient/tests_ray/test_ray_servers.py."""

import os
import signal

import pytest

import meshfeed
from meshfeed._src import connect
from meshfeed._src.server import LocalServer
from test_recovery import KILL_AT, STEPS, _kwargs, _same, _take, reference  # noqa: F401  (reference: a fixture)


def test_server_callable_asked_again_after_a_failure(binary, dataset, glob, reference):  # noqa: F811
    """The server is killed mid-epoch and another starts at a new address:
    only the callable knows it; the loader asks it and resumes exactly."""
    servers = [LocalServer(binary, [str(dataset.parent)])]
    asked = []

    def where():
        asked.append(servers[-1].address)
        return servers[-1].address

    def kill_and_move():
        os.kill(servers[-1].pid, signal.SIGKILL)
        servers.append(LocalServer(binary, [str(dataset.parent)]))  # another socket, another address

    try:
        with meshfeed.Loader(glob, server=where, num_epochs=None, recovery_timeout=30, **_kwargs()) as ld:
            assert ld.address == servers[0].address
            got = _take(ld, STEPS, at=KILL_AT, action=kill_and_move)
            stats, final = ld.stats(), ld.address
    finally:
        for s in servers:
            s.stop()
    _same(got, reference)
    assert stats["recoveries"] >= 1, stats
    assert servers[0].address != servers[1].address and final == servers[1].address
    assert asked[0] == servers[0].address and asked[-1] == servers[1].address


def test_server_callable_must_return_an_address(glob):
    with pytest.raises(meshfeed.InvalidRequestError, match="returned None"):
        meshfeed.Loader(glob, server=lambda: None, **_kwargs())


@pytest.mark.parametrize("kw, msg", [
    ({"token": "t"}, "for a given server="),
    ({"tls_root_certs": b"pem"}, "for a given server="),
    ({"server": "127.0.0.1:1", "tls_server_name": "x"}, "tls_server_name needs tls_root_certs"),
    ({"server": "127.0.0.1:1", "token": "two\nlines"}, "one-line"),
    ({"server": 42}, "a callable returning one"),
    ({"server": "127.0.0.1:1", "tls_root_certs": "/nonexistent/ca.pem"}, "/nonexistent/ca.pem"),
])
def test_connection_options_refused(glob, kw, msg):
    with pytest.raises(meshfeed.InvalidRequestError, match=msg):
        meshfeed.Loader(glob, **kw, **_kwargs())


def test_location():
    assert connect.location("127.0.0.1:5", tls=False) == "grpc+tcp://127.0.0.1:5"
    assert connect.location("10.0.0.1:5", tls=True) == "grpc+tls://10.0.0.1:5"
    assert connect.location("unix:///s.sock", tls=False) == "grpc+unix:///s.sock"
    assert connect.location("grpc+tls://h:1", tls=False) == "grpc+tls://h:1"
