"""Per-column shaping requested through meshfeed.Column, applied by the server."""

import subprocess

import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import jax
import meshfeed
from meshfeed._src.server import LocalServer
from contract import expected_ids, features

ROWS, B, L = 512, 64, 6


@pytest.fixture(scope="module")
def tokens_server(tmp_path_factory, binary):
    """A dataset with variable-length tokens (8..12 per row) and its server."""
    out = tmp_path_factory.mktemp("tok") / "ds"
    subprocess.run([binary, "gen", "--out", str(out), "--rows", str(ROWS), "--files", "1",
                    "--row-group-rows", "128", "--features", "8", "--tokens", "2:12"],
                   check=True, capture_output=True)
    srv = LocalServer(binary, [str(out.parent)])
    yield srv, str(out / "*.parquet")
    srv.stop()


def test_bfloat16_and_fixed_length_tokens(tokens_server):
    srv, glob = tokens_server
    sharding = NamedSharding(jax.make_mesh((8,), ("data",)), P("data"))
    cols = {"id": meshfeed.Column(),
            "features": meshfeed.Column(dtype="bfloat16"),
            "tokens": meshfeed.Column(length=L, overflow="truncate", fill=-1)}
    with meshfeed.Loader(glob, global_batch_size=B, sharding=sharding, columns=cols,
                         last_batch="drop", server=srv.address) as loader:
        n = 0
        for step, batch in enumerate(loader):
            assert batch["features"].dtype == jnp.bfloat16
            assert batch["features"].shape == (B, 8)
            assert batch["tokens"].shape == (B, L)
            assert batch["tokens_length"].shape == (B,)
            assert batch["features"].sharding == sharding and batch["tokens"].sharding == sharding
            ids = np.asarray(batch["id"])
            np.testing.assert_array_equal(ids, expected_ids(ROWS, B, 8, step)[0])
            # bfloat16 is float32 rounded to nearest even: compare with ml_dtypes' rounding.
            want = np.stack([features(i, 8) for i in ids]).astype(np.float32).astype(ml_dtypes.bfloat16)
            np.testing.assert_array_equal(np.asarray(batch["features"]), want)
            lengths = np.asarray(batch["tokens_length"])
            toks = np.asarray(batch["tokens"])
            assert ((lengths >= 0) & (lengths <= L)).all() and (lengths == L).any() and (lengths < L).any()
            for row, k in zip(toks, lengths):
                assert (row[k:] == -1).all(), row
            n += 1
        assert n == ROWS // B
