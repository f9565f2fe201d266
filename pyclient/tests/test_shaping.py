"""Per-column shaping requested through meshfeed.Column, applied by the server."""

import threading

import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import jax
import meshfeed
from conftest import TOKEN_ROWS
from contract import expected_ids, features

ROWS, B, L = TOKEN_ROWS, 64, 6  # tokens_server (conftest.py)


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


# Moved from test_units.py::test_config_validation when the client stopped
# keeping its own copy of the server's shaping rules: the same inputs are
# still refused as ValueError (InvalidRequestError is one), now by the server,
# at Loader construction, with the server's message naming the column.
@pytest.mark.parametrize("col,msg", [
    (meshfeed.Column(dtype="float8"), 'dtype "float8" is unknown'),
    (meshfeed.Column(dtype="float64"), 'float64 needs decimal or float64 values, not int32'),
    (meshfeed.Column(dtype="int64"), 'dtype "int64" is unknown'),
    (meshfeed.Column(dtype="bool"), 'dtype "bool" is unknown'),
    (meshfeed.Column(length=-2), "length -2 is negative"),
    (meshfeed.Column(length=L, fill="zero"), 'fill "zero" is neither a number'),
    (meshfeed.Column(length=L, overflow="wrap"), 'overflow "wrap" is unknown'),
    (meshfeed.Column(pack_ratio=1.0), "PackRatio 1 needs a Length"),
    (meshfeed.Column(length=L, pack_ratio=0.5), "PackRatio 0.5 must be 0"),
])
def test_server_judges_column_shaping(tokens_server, col, msg):
    srv, glob = tokens_server
    sharding = NamedSharding(jax.make_mesh((8,), ("data",)), P("data"))
    with pytest.raises(ValueError, match="tokens") as e:
        meshfeed.Loader(glob, global_batch_size=B, sharding=sharding, columns={"tokens": col}, server=srv.address)
    assert isinstance(e.value, meshfeed.InvalidRequestError) and e.value.code == "INVALID_ARGUMENT", repr(e.value)
    assert msg in e.value.server_message, f"{msg!r} not in {e.value.server_message!r}"
    assert not [t for t in threading.enumerate() if t.name == "meshfeed-prefetch"]  # refused before streaming
    # the server keeps serving: the same column unshaped plans fine
    with meshfeed.Loader(glob, global_batch_size=B, sharding=sharding, columns=["tokens", "id"],
                         server=srv.address) as ld:
        assert ld.steps_per_epoch == ROWS // B
