"""Test setup: 8 CPU devices and x64 before jax initializes; a generated
dataset and one shared pipeline server for the session."""

import os

# Must happen before jax creates its backend: any inherited device count is replaced.
os.environ["XLA_FLAGS"] = " ".join(
    [f for f in os.environ.get("XLA_FLAGS", "").split() if not f.startswith("--xla_force_host_platform_device_count")]
    + ["--xla_force_host_platform_device_count=8"])
os.environ["JAX_PLATFORMS"] = "cpu"

import pathlib  # noqa: E402
import subprocess  # noqa: E402

import jax  # noqa: E402
import pytest  # noqa: E402

jax.config.update("jax_enable_x64", True)  # int64 ids stay int64 (no narrowing copy)

from meshfeed._src.server import LocalServer, find_binary  # noqa: E402

ROWS, FILES, RG_ROWS, FEATURES, IMAGE = 1000, 2, 100, 8, (2, 3, 2)


@pytest.fixture(scope="session")
def binary():
    return find_binary()


@pytest.fixture(scope="session")
def dataset(tmp_path_factory, binary):
    """1000 rows in 2 files of 5 row groups each: id, label, features[8], image 2x3x2."""
    out = tmp_path_factory.mktemp("data") / "ds"
    subprocess.run([binary, "gen", "--out", str(out), "--rows", str(ROWS), "--files", str(FILES),
                    "--row-group-rows", str(RG_ROWS), "--features", str(FEATURES),
                    "--image", "x".join(map(str, IMAGE))], check=True, capture_output=True)
    return out


@pytest.fixture(scope="session")
def server(dataset, binary):
    """A pipeline server allowed to read only the dataset's parent directory."""
    srv = LocalServer(binary, [str(dataset.parent)])
    yield srv
    srv.stop()


@pytest.fixture
def glob(dataset):
    return str(dataset / "*.parquet")


TOKEN_ROWS = 512


@pytest.fixture(scope="module")
def tokens_server(tmp_path_factory, binary):
    """512 rows in one file of 4 row groups with variable-length tokens (2..12
    per row), features[8] and id, and a server for it: (server, glob)."""
    out = tmp_path_factory.mktemp("tok") / "ds"
    subprocess.run([binary, "gen", "--out", str(out), "--rows", str(TOKEN_ROWS), "--files", "1",
                    "--row-group-rows", "128", "--features", "8", "--tokens", "2:12"],
                   check=True, capture_output=True)
    srv = LocalServer(binary, [str(out.parent)])
    yield srv, str(out / "*.parquet")
    srv.stop()


def pytest_report_header(config):
    return f"meshfeed binary: {find_binary()}; jax devices: {len(jax.devices())}"


@pytest.fixture(autouse=True)
def _no_leaked_threads():
    yield
    import threading
    left = [t.name for t in threading.enumerate() if t.name == "meshfeed-prefetch" and t.is_alive()]
    assert not left, f"prefetch threads left running: {left}"


ROOT = pathlib.Path(__file__).resolve().parents[2]
