"""Ray tests (run with .venv-ray: `make ray-test`): 8 CPU devices and x64 in
this driver before jax initializes; the environment Ray workers get; a guard
that stops every meshfeed server a test left behind, and removes the sockets
of those Ray killed (Ray kills worker processes with SIGKILL, and with them
the servers their loaders started, or leaves those servers running)."""

import os
import pathlib
import signal
import subprocess
import sys
import time

os.environ["XLA_FLAGS"] = " ".join(
    [f for f in os.environ.get("XLA_FLAGS", "").split() if not f.startswith("--xla_force_host_platform_device_count")]
    + ["--xla_force_host_platform_device_count=8"])
os.environ["JAX_PLATFORMS"] = "cpu"
os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")  # quiet a Ray FutureWarning
# Ray's files (sessions, sockets, the "current cluster" file) in a private, short
# directory: never another Ray instance's, and socket paths within their limit.
import atexit  # noqa: E402
import shutil  # noqa: E402
import tempfile  # noqa: E402

RAY_TMPDIR = tempfile.mkdtemp(prefix="mf-ray-", dir="/tmp")
os.makedirs(os.path.join(RAY_TMPDIR, "ray"))
os.environ["RAY_TMPDIR"] = RAY_TMPDIR
atexit.register(shutil.rmtree, RAY_TMPDIR, True)
# Every Ray process binds and talks on loopback only: the node IP of every node is
# 127.0.0.1, and ray.init(address=127.0.0.1:PORT) is not "resolved" to the machine's
# own network address (what this flag turns off, outside Windows and macOS).
NODE_IP = "127.0.0.1"
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"

import jax  # noqa: E402
import pytest  # noqa: E402

jax.config.update("jax_enable_x64", True)

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT / "pyclient" / "tests"))  # contract.py
sys.path.insert(0, str(ROOT / "examples"))

from meshfeed._src.server import find_binary  # noqa: E402

# Ray's object store: the smallest Ray accepts is 75 MiB; these tests move no large objects.
OBJECT_STORE_BYTES = 80 << 20


@pytest.fixture(scope="session")
def binary():
    return find_binary()


def worker_env(binary: str, devices: int) -> dict:
    """Environment variables of every Ray worker (runtime_env): CPU devices
    per process, x64, the meshfeed binary, and imports of the examples and
    these tests' helpers (pickled by reference)."""
    return {"XLA_FLAGS": f"--xla_force_host_platform_device_count={devices}", "JAX_PLATFORMS": "cpu",
            "JAX_ENABLE_X64": "1", "MESHFEED_BIN": binary,
            "PYTHONPATH": os.pathsep.join([str(HERE), str(ROOT / "examples"), str(ROOT / "pyclient")]),
            "RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO": "0"}


def _servers_of(binary: str) -> set[int]:
    """Process ids of running `meshfeed serve` processes of this binary."""
    out = set()
    for p in pathlib.Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            argv = (p / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if len(argv) > 1 and argv[0] == binary.encode() and argv[1] == b"serve":
            out.add(int(p.name))
    return out


@pytest.fixture
def stop_leftover_servers(binary):
    """Yields; afterwards stops, by pid, each server of this binary started
    during the test and still running (SIGTERM: it drains and removes its
    sockets; SIGKILL if it has not gone 5 s later), then removes the sockets
    of local servers Ray killed together with their worker (SIGKILL: neither
    could remove them)."""
    from meshfeed._src.server import remove_stale_sockets, runtime_dir

    before = _servers_of(binary)
    yield
    for sig in (signal.SIGTERM, signal.SIGKILL):
        deadline = time.monotonic() + 5
        while (left := _servers_of(binary) - before) and time.monotonic() < deadline:
            time.sleep(0.2)  # servers whose loader closed them are on their way out
        for pid in left:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
    remove_stale_sockets(runtime_dir())


def gen(binary: str, out: pathlib.Path, rows: int, files: int, rg_rows: int, features: int) -> pathlib.Path:
    subprocess.run([binary, "gen", "--out", str(out), "--rows", str(rows), "--files", str(files),
                    "--row-group-rows", str(rg_rows), "--features", str(features)],
                   check=True, capture_output=True, timeout=60)
    return out
