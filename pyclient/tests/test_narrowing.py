"""jax_enable_x64 off (JAX's default): 64-bit columns are narrowed by the
server before they leave it (int64 -> int32 with an overflow check, float64
-> float32), so the client makes no host copy for them."""

import warnings

import jax
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import meshfeed
from conftest import ROWS
from contract import expected_ids, label

BIG_AT = (1, 50)  # (file, row in file) of the value that does not fit int32
BIG = 1 << 40


@pytest.fixture
def x64_off():
    """JAX's default configuration, for this test only (the session runs with x64 on)."""
    jax.config.update("jax_enable_x64", False)
    try:
        yield
    finally:
        jax.config.update("jax_enable_x64", True)


@pytest.fixture(scope="module")
def wide(tmp_path_factory):
    """Two files of 500 rows: int64 id (row 50 of part-1 is 2**40), float64 x."""
    out = tmp_path_factory.mktemp("wide")
    for f in range(2):
        ids = np.arange(f * 500, f * 500 + 500, dtype=np.int64)
        x = np.arange(f * 500, f * 500 + 500, dtype=np.float64) / 3
        pq.write_table(pa.table({"id": ids, "x": x}), out / f"part-{f}.parquet", row_group_size=100)
    big = out / "big"
    big.mkdir()
    for f in range(2):
        ids = np.arange(f * 500, f * 500 + 500, dtype=np.int64)
        if f == BIG_AT[0]:
            ids[BIG_AT[1]] = BIG
        pq.write_table(pa.table({"id": ids}), big / f"part-{f}.parquet", row_group_size=100)
    return out


def _sh():
    return NamedSharding(jax.make_mesh((8,), ("data",)), P("data"))


@pytest.mark.parametrize("columns", [["id", "label", "features"], None], ids=["listed", "all"])
def test_x64_off_narrowed_by_the_server(server, glob, x64_off, columns):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "64-bit ... host copy" warning
        with meshfeed.Loader(glob, global_batch_size=64, sharding=_sh(), server=server.address, columns=columns,
                             last_batch="pad") as ld:
            req = ld._request((0, 0))
            n = 0
            for s, batch in enumerate(ld):
                assert batch["id"].dtype == np.int32, batch["id"].dtype
                ids, mask = expected_ids(ROWS, 64, 8, s)
                np.testing.assert_array_equal(np.asarray(batch["id"]), ids, err_msg=f"step {s}")
                np.testing.assert_array_equal(np.asarray(batch["label"])[mask], [label(i) for i in ids[mask]])
                n += 1
            stats = ld.stats()
    assert n == ld.steps_per_epoch
    assert stats["host_copies"] == 0 and stats["steps"] == n, stats
    assert {"name": "id", "dtype": "int32"} in req["columns"], req["columns"]


def test_x64_off_float64_becomes_float32(wide, x64_off):
    with meshfeed.Loader(str(wide / "*.parquet"), global_batch_size=200, sharding=_sh(), last_batch="raise") as ld:
        got = [(np.asarray(b["id"]), np.asarray(b["x"])) for b in ld]
        stats = ld.stats()
    ids = np.concatenate([i for i, _ in got])
    xs = np.concatenate([x for _, x in got])
    assert ids.dtype == np.int32 and xs.dtype == np.float32
    assert sorted(ids.tolist()) == list(range(1000))
    np.testing.assert_array_equal(xs, (ids.astype(np.float64) / 3).astype(np.float32))
    assert stats["host_copies"] == 0, stats


def test_x64_on_int64_stays_int64(server, glob):
    assert jax.config.jax_enable_x64
    with meshfeed.Loader(glob, global_batch_size=64, sharding=_sh(), server=server.address, columns=["id"]) as ld:
        req = ld._request((0, 0))
        batch = next(iter(ld))
        stats = ld.stats()
        saved = ld.state()
    assert req["columns"] == [{"name": "id"}]
    assert batch["id"].dtype == np.int64 and stats["host_copies"] == 0
    np.testing.assert_array_equal(np.asarray(batch["id"]), expected_ids(ROWS, 64, 8, 0)[0])
    # narrowing renders the same stream: a state taken with x64 on resumes with it off
    jax.config.update("jax_enable_x64", False)
    try:
        with meshfeed.Loader(glob, global_batch_size=64, sharding=_sh(), server=server.address, columns=["id"],
                             state=saved) as ld:
            b1 = next(iter(ld))
        np.testing.assert_array_equal(np.asarray(b1["id"]), expected_ids(ROWS, 64, 8, 1)[0])
    finally:
        jax.config.update("jax_enable_x64", True)


def _overflow(wide):
    with meshfeed.Loader(str(wide / "big" / "*.parquet"), global_batch_size=64, sharding=_sh()) as ld:
        with pytest.raises(meshfeed.PlanError) as e:
            for _ in ld:
                pass
        pos = ld.state()["position"]
    return e.value, pos


def test_x64_off_overflow_fails_loudly_naming_the_column(wide, x64_off):
    """A value that does not fit int32 is an error naming the column and the
    value, at the step that holds it (not a silently wrapped id)."""
    err, pos = _overflow(wide)
    assert err.code == "FAILED_PRECONDITION"
    for want in ['column "id"', str(BIG), "int32", "step 6"]:
        assert want in err.server_message, f"{want!r} not in {err.server_message!r}"
    assert pos == {"epoch": 0, "step": 6}  # steps before it were delivered


def test_x64_off_overflow_names_file_and_row(wide, x64_off):
    err, _ = _overflow(wide)
    assert f"part-{BIG_AT[0]}.parquet" in err.server_message and f"row {BIG_AT[1]}" in err.server_message
