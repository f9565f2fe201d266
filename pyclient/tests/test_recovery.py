"""The server killed mid-epoch, and the training process restarted from
Loader.state(): the sequence of steps the loop sees equals an uninterrupted run."""

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

import jax
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import meshfeed
from meshfeed._src.server import LocalServer, runtime_dir

B = 64
STEPS = 480  # 30 epochs of 16 steps (1000 rows, pad): more than gRPC buffers ahead
KILL_AT = 5


def _sharding():
    return NamedSharding(jax.make_mesh((4, 2), ("data", "model")), P("data"))


def _kwargs(**kw):
    return dict(global_batch_size=B, sharding=_sharding(), last_batch="pad",
                shuffle=meshfeed.Shuffle(seed=3, window=40), **kw)


def _ids(batch):
    return np.asarray(batch["id"]).copy(), np.asarray(batch["valid"]).copy()


def _take(ld, n, at=None, action=None):
    out = []
    for i, batch in enumerate(ld):
        out.append(_ids(batch))
        if at is not None and i + 1 == at:
            action()
        if len(out) == n:
            break
    return out


@pytest.fixture(scope="module")
def reference(server, dataset):
    """The first STEPS steps of an unbounded, uninterrupted run."""
    with meshfeed.Loader(str(dataset / "*.parquet"), server=server.address, num_epochs=None, **_kwargs()) as ld:
        return _take(ld, STEPS)


def _same(got, want):
    assert len(got) == len(want), f"{len(got)} steps, want {len(want)}"
    for s, ((gi, gm), (wi, wm)) in enumerate(zip(got, want)):
        np.testing.assert_array_equal(gm, wm, err_msg=f"step {s} mask")
        np.testing.assert_array_equal(gi[gm], wi[wm], err_msg=f"step {s} ids")
    seen = np.concatenate([i[m] for i, m in got[:16]])
    assert len(seen) == len(set(seen.tolist())), "a row was delivered twice in the first epoch"


def test_local_server_killed_mid_epoch(glob, reference):
    """SIGKILL of the loader's own server: it restarts one and resumes at the
    first step the loop has not received (staged steps are dropped)."""
    with meshfeed.Loader(glob, num_epochs=None, prefetch=3, **_kwargs()) as ld:
        pid = ld.server_pid
        assert isinstance(pid, int)
        got = _take(ld, STEPS, at=KILL_AT, action=lambda: os.kill(pid, signal.SIGKILL))
        stats = ld.stats()
        new_pid = ld.server_pid
    _same(got, reference)
    assert stats["recoveries"] >= 1, stats
    assert new_pid != pid
    # The counters cover every step received, before the kill and after it.
    assert stats["steps"] == STEPS, stats
    assert stats["rows"] == sum(int(m.sum()) for _, m in got), stats
    assert stats["rows"] + stats["padded_rows"] == STEPS * B, stats


@pytest.fixture
def sock_dir():
    """A directory for a server's Unix socket, short enough for its path
    (not tmp_path), removed afterwards with what a killed server left."""
    d = tempfile.mkdtemp(prefix="mf-")
    yield d
    shutil.rmtree(d, ignore_errors=True)


def test_remote_server_comes_back(binary, dataset, glob, reference, sock_dir):
    """server="unix://..." killed, then started again at the same address a
    second later: the loader reconnects with backoff and resumes."""
    sock = os.path.join(sock_dir, "s.sock")
    servers = [LocalServer(binary, [str(dataset.parent)], socket=sock)]

    def kill_and_restart():
        os.kill(servers[0].pid, signal.SIGKILL)

        def later():
            time.sleep(1.0)
            servers.append(LocalServer(binary, [str(dataset.parent)], socket=sock))
        threading.Thread(target=later, daemon=True).start()

    try:
        with meshfeed.Loader(glob, server="unix://" + sock, num_epochs=None, recovery_timeout=30, **_kwargs()) as ld:
            assert ld.server_pid is None
            got = _take(ld, STEPS, at=KILL_AT, action=kill_and_restart)
            stats = ld.stats()
    finally:
        deadline = time.monotonic() + 30
        while len(servers) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        for s in servers:
            s.stop()
    _same(got, reference)
    assert stats["recoveries"] >= 1, stats
    assert len(servers) == 2


def test_server_never_comes_back(binary, dataset, glob, sock_dir):
    """A given server that stays dead ends the loop with UnavailableError
    once recovery_timeout is spent, never a hang."""
    srv = LocalServer(binary, [str(dataset.parent)], socket=os.path.join(sock_dir, "s.sock"))
    try:
        with meshfeed.Loader(glob, server=srv.address, num_epochs=None, recovery_timeout=1.0, **_kwargs()) as ld:
            it = iter(ld)
            next(it)
            os.kill(srv.pid, signal.SIGKILL)
            t0 = time.monotonic()
            with pytest.raises(meshfeed.UnavailableError, match="recovery_timeout=1s"):
                for _ in range(10_000):
                    next(it)
            assert time.monotonic() - t0 < 10
    finally:
        srv.stop()


def test_restart_from_state_at_random_step(server, glob):
    """The training process restarted from state() saved at a random step:
    the continuation equals the uninterrupted run (seed printed; rerun with
    MESHFEED_SEED)."""
    seed = int(os.environ.get("MESHFEED_SEED") or random.randrange(1 << 30))
    print(f"seed {seed} (rerun with MESHFEED_SEED={seed})")
    rng = random.Random(seed)
    with meshfeed.Loader(glob, server=server.address, num_epochs=2, **_kwargs()) as ld:
        full = _take(ld, 10_000)
    assert len(full) == 2 * ld.steps_per_epoch
    for _ in range(3):
        k = rng.randrange(1, len(full))
        with meshfeed.Loader(glob, server=server.address, num_epochs=2, **_kwargs()) as ld:
            head = _take(ld, k)
            saved = ld.state()
        with meshfeed.Loader(glob, server=server.address, num_epochs=2, state=saved, **_kwargs()) as ld:
            tail = _take(ld, 10_000)
        _same(head + tail, full)


# A training process: a Loader (its local server, shared memory from it, a
# stream open), then it waits to be killed.
CHILD = """
import json, sys, time
import jax, meshfeed
ld = meshfeed.Loader(sys.argv[1], global_batch_size=100, num_epochs=None,
                     sharding=jax.sharding.SingleDeviceSharding(jax.devices()[0]))
it = iter(ld)
next(it)
srv = ld._server
print(json.dumps({"pid": srv.pid, "address": srv.address, "shm": srv.shm_address,
                  "transport": ld.stats()["transport"]}), flush=True)
time.sleep(600)
"""


def _running(pid):
    """Whether process ``pid`` runs (a zombie waiting to be reaped does not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
    except OSError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _wait_until(cond, timeout, what):
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"{what} within {timeout}s"
        time.sleep(0.05)


def test_local_server_dies_with_a_killed_process(glob):
    """The process that made a Loader is killed with SIGKILL mid-stream: its
    local server exits by itself (it watches its parent), and leaves
    nothing behind: no process, no socket file, no shared memory."""
    shm_before = set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    child = subprocess.Popen([sys.executable, "-c", CHILD, glob], stdout=subprocess.PIPE, text=True, env=env)
    try:
        line = child.stdout.readline()
        assert line, f"the child exited ({child.wait()}) before starting its loader"
        info = json.loads(line)
        sockets = [info["address"][len("unix://"):], info["shm"][len("unix://"):]]
        assert info["transport"] == "shm" and all(os.path.exists(p) for p in sockets), info
        assert _running(info["pid"])
    finally:
        child.kill()
        child.wait()
        child.stdout.close()
    try:
        _wait_until(lambda: not _running(info["pid"]), 15,
                    f"server {info['pid']} still runs after its parent was killed")
    finally:
        if _running(info["pid"]):
            os.kill(info["pid"], signal.SIGKILL)  # no server left behind by a failure
    _wait_until(lambda: not any(os.path.exists(p) for p in sockets), 5, f"sockets {sockets} left")
    left = [f for f in os.listdir(runtime_dir()) if f.startswith(f"{child.pid}-")]
    assert not left, f"files of the killed process left in {runtime_dir()}: {left}"
    shm_after = set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()
    assert not {f for f in shm_after - shm_before if "meshfeed" in f}, shm_after - shm_before


def test_sockets_of_a_server_killed_with_its_process_go_at_the_next_start(binary, dataset, glob):
    """The training process and its local server both killed with SIGKILL
    (as Ray kills a worker's child processes): neither can remove the
    server's sockets, so the next local server started removes them. The
    sockets of a process that lives, and a socket something listens on,
    are kept."""
    import socket

    child = subprocess.Popen([sys.executable, "-c", CHILD, glob], stdout=subprocess.PIPE, text=True,
                             env=dict(os.environ, JAX_PLATFORMS="cpu"))
    try:
        line = child.stdout.readline()
        assert line, f"the child exited ({child.wait()}) before starting its loader"
        info = json.loads(line)
        os.kill(info["pid"], signal.SIGKILL)  # the server first: it cannot see its parent go
    finally:
        child.kill()
        child.wait()
        child.stdout.close()
    _wait_until(lambda: not _running(info["pid"]), 15, f"server {info['pid']} still runs after SIGKILL")
    stale = [info["address"][len("unix://"):], info["shm"][len("unix://"):]]
    assert all(os.path.exists(p) for p in stale), stale  # what Ray leaves behind

    d = runtime_dir()
    mine = os.path.join(d, f"{os.getpid()}-0123abcd.sock")  # this process lives
    listening = os.path.join(d, f"{child.pid}-4567abcd.sock")  # its starter is gone, but it accepts
    socks = []
    for path, listen in ((mine, False), (listening, True)):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind(path)
        if listen:
            s.listen(1)
        socks.append(s)
    try:
        srv = LocalServer(binary, [str(dataset.parent)])
        srv.stop()
        assert not [p for p in stale if os.path.exists(p)], "the killed server's sockets were left"
        assert os.path.exists(mine) and os.path.exists(listening)
    finally:
        for s, path in zip(socks, (mine, listening)):
            s.close()
            os.unlink(path)


def test_local_server_outlives_the_thread_that_started_it(glob):
    """The server watches its parent process, not the thread that started
    it (Linux's parent-death signal would fire when that thread ends): a
    Loader made in a thread that has ended reads on, with the same server."""
    made = []
    t = threading.Thread(target=lambda: made.append(meshfeed.Loader(
        glob, global_batch_size=100, num_epochs=3, sharding=jax.sharding.SingleDeviceSharding(jax.devices()[0]))))
    t.start()
    t.join()
    with made[0] as ld:
        pid = ld.server_pid
        n = sum(1 for _ in ld)
        assert n == 3 * ld.steps_per_epoch and ld.stats()["recoveries"] == 0 and ld.server_pid == pid
