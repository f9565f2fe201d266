"""The local server's disk cache (ServerOptions(cache_dir=...)) over a
dataset on a fake GCS server: the second epoch is served from the cache,
with the same batches, and Loader.stats() reports it."""

import os
import subprocess

import jax
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import meshfeed
from conftest import ROWS
from meshfeed._src.bench import FakeGCS

B = 40  # 25 steps per epoch


@pytest.fixture
def fake_gcs(dataset, binary, monkeypatch):
    """The dataset served as gs:// objects by the fakegcs helper (built
    beside the meshfeed binary when missing), with STORAGE_EMULATOR_HOST
    set for the servers the test starts."""
    helper = os.path.join(os.path.dirname(binary), "fakegcs")
    if not os.access(helper, os.X_OK):
        root = os.path.dirname(os.path.dirname(os.path.abspath(binary)))
        subprocess.run(["go", "build", "-o", helper, "./benchmarks/fakegcs"], cwd=root, check=True)
    fake = FakeGCS([str(dataset)], helper)
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", fake.url)
    yield fake
    fake.stop()


def read_epochs(uri, options, epochs):
    """The ids of every step of each epoch, and the loader's stats after each."""
    sh = NamedSharding(jax.make_mesh((8,), ("data",)), P("data"))
    out, stats = [], []
    with meshfeed.Loader(uri, global_batch_size=B, sharding=sh, num_epochs=epochs, columns=["id", "features"],
                         server_options=options) as ld:
        steps = ld.steps_per_epoch
        epoch = []
        for batch in ld:
            epoch.append((np.asarray(batch["id"]), np.asarray(batch["features"])))
            if len(epoch) == steps:
                out.append(epoch)
                stats.append(ld.stats())
                epoch = []
    return out, stats


def test_second_epoch_from_the_cache(fake_gcs, tmp_path):
    uri = fake_gcs.uris[0]
    want, plain = read_epochs(uri, meshfeed.ServerOptions(), 2)
    assert "cache" not in plain[-1]
    cache = tmp_path / "cache"
    opts = meshfeed.ServerOptions(cache_dir=cache, cache_size=64 << 20)
    # Two epochs through a cold cache, then two more by a new server over
    # the same directory (as after a restart, or in the next run).
    for run in ("cold", "warm"):
        got, stats = read_epochs(uri, opts, 2)
        assert len(got) == len(want) == 2
        for e in range(2):
            assert len(got[e]) == ROWS // B
            for s, ((gi, gf), (wi, wf)) in enumerate(zip(got[e], want[e])):
                np.testing.assert_array_equal(gi, wi, err_msg=f"{run} cache: epoch {e} step {s} ids")
                np.testing.assert_array_equal(gf, wf, err_msg=f"{run} cache: epoch {e} step {s} features")
        st = stats[-1]["cache"]
        entries = len(list(cache.rglob("*.mfc")))
        print(f"{run} cache, after two epochs: {st}; {entries} entries on disk")
        assert st["hits"] > 0 and st["bytes_saved"] > 0, (run, st)
        assert st["corrupt"] == 0 and st["write_errors"] == 0 and st["evictions"] == 0, (run, st)
        if run == "cold":
            # Each block fetched once over both epochs: the second read nothing.
            assert st["misses"] == entries > 0, (st, entries)
        else:
            assert st["misses"] == 0, st


def test_cache_options_are_checked():
    with pytest.raises(meshfeed.InvalidRequestError) as e:
        meshfeed.ServerOptions(cache_size=1 << 30)
    assert "without cache_dir" in str(e.value)
    with pytest.raises(meshfeed.InvalidRequestError) as e:
        meshfeed.ServerOptions(cache_dir="/tmp/c", cache_size=0)
    assert "cache_size=0" in str(e.value)
