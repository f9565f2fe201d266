"""The JAX client's rules for Parquet types (docs/TYPES.md): arrays for what has a
JAX dtype (float16, timestamps as int64 of their unit, bool), one key per struct
leaf, pyarrow arrays for what has none (strings, decimals, maps), and nulls
refused early: at construction from the footers' null counts, at the first step
holding one where the writer recorded none."""

import datetime
import decimal

import jax
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import meshfeed
from meshfeed._src.server import LocalServer

N = 64


def table(with_nulls):
    rng = np.random.default_rng(5)
    f16 = rng.standard_normal(N).astype(np.float16)
    ts = rng.integers(0, 10**15, N)
    maybe = [None if with_nulls and i % 9 == 4 else int(i) for i in range(N)]
    return pa.table({
        "f16": pa.array(f16),
        "ts": pa.array(ts, pa.timestamp("us", tz="UTC")),
        "day": pa.array(rng.integers(0, 20000, N).astype(np.int32), pa.date32()),
        "flag": pa.array(rng.random(N) < 0.5),
        "st": pa.array([{"a": i, "b": {"c": float(i) / 2}} for i in range(N)],
                       pa.struct([("a", pa.int32()), ("b", pa.struct([("c", pa.float64())]))])),
        "name": pa.array([f"n{i}" for i in range(N)]),
        "price": pa.array([decimal.Decimal(i).scaleb(-2) for i in range(N)], pa.decimal128(9, 2)),
        "maybe": pa.array(maybe, pa.int64()),
    })


@pytest.fixture(scope="module")
def files(tmp_path_factory, binary):
    root = tmp_path_factory.mktemp("types")
    for name, nulls, stats in (("clean", False, True), ("nulls", True, True), ("nostats", True, False)):
        (root / name).mkdir()
        pq.write_table(table(nulls), root / name / "f.parquet", row_group_size=32, write_statistics=stats)
    srv = LocalServer(binary, [str(root)])
    yield root, srv
    srv.stop()


def loader(root, srv, name, **kw):
    sh = NamedSharding(jax.make_mesh((8,), ("data",)), P("data"))
    return meshfeed.Loader(str(root / name / "f.parquet"), global_batch_size=16, sharding=sh,
                           server=srv.address, **kw)


def test_types_become_arrays_or_pyarrow(files):
    root, srv = files
    want = table(False)
    got = {}
    with loader(root, srv, "clean") as ld:
        for batch in ld:
            for k, v in batch.items():
                got.setdefault(k, []).append(v)
    assert sorted(got) == sorted(["f16", "ts", "day", "flag", "st.a", "st.b.c", "name", "price", "maybe"])
    cat = {k: (np.concatenate([np.asarray(x) for x in v]) if isinstance(v[0], jax.Array) else pa.concat_arrays(v))
           for k, v in got.items()}
    # Rows arrive in the contract's order (streams per slice): sort by st.a, the row index.
    order = np.argsort(cat["st.a"])
    cat = {k: (v[order] if isinstance(v, np.ndarray) else v.take(pa.array(order))) for k, v in cat.items()}
    assert cat["f16"].dtype == np.float16 and np.array_equal(cat["f16"], want["f16"].to_numpy())
    assert cat["ts"].dtype == np.int64 and np.array_equal(cat["ts"], want["ts"].cast(pa.int64()).to_numpy())
    assert cat["day"].dtype == np.int32 and np.array_equal(cat["day"], want["day"].cast(pa.int32()).to_numpy())
    assert cat["flag"].dtype == np.bool_ and np.array_equal(cat["flag"], want["flag"].to_numpy(zero_copy_only=False))
    assert np.array_equal(cat["st.a"], np.arange(N, dtype=np.int32))
    assert np.array_equal(cat["st.b.c"], np.arange(N) / 2)
    assert isinstance(cat["name"], pa.Array) and cat["name"].to_pylist() == want["name"].to_pylist()
    assert cat["price"].type == pa.decimal128(9, 2) and cat["price"].to_pylist() == want["price"].to_pylist()


def test_nulls_without_fill_refused_at_construction(files):
    root, srv = files
    with pytest.raises(meshfeed.InvalidRequestError, match=r"'maybe' \(7 nulls\).*fill"):
        loader(root, srv, "nulls")
    # With a fill the server writes it where the nulls were.
    with loader(root, srv, "nulls", columns={"maybe": meshfeed.Column(fill=-1), "st": None}) as ld:
        got, rows = [], []
        for b in ld:
            got.append(np.asarray(b["maybe"]))
            rows.append(np.asarray(b["st.a"]))
    got, rows = np.concatenate(got), np.concatenate(rows)
    assert np.array_equal(got, np.where(rows % 9 == 4, -1, rows))
    # Strings keep their nulls as pyarrow arrays do; other columns are not affected.
    with loader(root, srv, "nulls", columns=["name", "f16"]) as ld:
        assert len(list(ld)) == N // 16


def test_nulls_without_counts_refused_at_the_step(files):
    root, srv = files
    with loader(root, srv, "nostats", columns=["maybe"]) as ld:
        it = iter(ld)
        with pytest.raises(meshfeed.MeshfeedError, match=r"'maybe'.*nulls in this step.*no null counts.*fill"):
            for _ in range(N // 16):
                next(it)


def test_decimal_on_request_as_float32(files):
    """Decimals have no JAX dtype: a pyarrow array, or on request float32 with the scale applied in Go."""
    root, srv = files
    with loader(root, srv, "clean", columns={"price": meshfeed.Column(dtype="float32"), "st": None}) as ld:
        got, rows = [], []
        for b in ld:
            assert isinstance(b["price"], jax.Array) and b["price"].dtype == np.float32
            got.append(np.asarray(b["price"]))
            rows.append(np.asarray(b["st.a"]))
    got, rows = np.concatenate(got), np.concatenate(rows)
    assert np.array_equal(got, (rows / 100).astype(np.float32))


@pytest.fixture
def x64_off():
    """JAX's default configuration, for this test only (the session runs with x64 on)."""
    jax.config.update("jax_enable_x64", False)
    try:
        yield
    finally:
        jax.config.update("jax_enable_x64", True)


def test_decimal_on_request_as_float64(files):
    """With x64 on, a decimal becomes float64 on request: the float64 nearest
    to each value, the scale applied in Go (0.07 is 0.07, not 7 * 0.01)."""
    root, srv = files
    assert jax.config.jax_enable_x64
    with loader(root, srv, "clean", columns={"price": meshfeed.Column(dtype="float64"), "st": None}) as ld:
        got, rows = [], []
        for b in ld:
            assert isinstance(b["price"], jax.Array) and b["price"].dtype == np.float64
            got.append(np.asarray(b["price"]))
            rows.append(np.asarray(b["st.a"]))
    got, rows = np.concatenate(got), np.concatenate(rows)
    want = np.array([float(decimal.Decimal(int(r)).scaleb(-2)) for r in rows])
    assert np.array_equal(got, want) and not np.array_equal(want, rows * 0.01)


def test_decimal_as_float64_needs_x64(files, x64_off):
    root, srv = files
    with pytest.raises(meshfeed.InvalidRequestError, match=r"\['price'\].*float64.*jax_enable_x64.*float32"):
        loader(root, srv, "clean", columns={"price": meshfeed.Column(dtype="float64"), "st": None})


def test_mask_on_request(files):
    """Column(mask=True): the nulls become the fill and <name>_valid says where they were."""
    root, srv = files
    with loader(root, srv, "nulls", columns={"maybe": meshfeed.Column(fill=7, mask=True), "st": None}) as ld:
        got, valid, rows = [], [], []
        for b in ld:
            assert b["maybe_valid"].dtype == np.bool_ and b["maybe_valid"].shape == b["maybe"].shape
            got.append(np.asarray(b["maybe"]))
            valid.append(np.asarray(b["maybe_valid"]))
            rows.append(np.asarray(b["st.a"]))
    got, valid, rows = np.concatenate(got), np.concatenate(valid), np.concatenate(rows)
    nulls = rows % 9 == 4
    assert np.array_equal(valid, ~nulls)
    assert np.array_equal(got, np.where(nulls, 7, rows))
    with pytest.raises(ValueError, match="mask"):
        meshfeed.Column(mask=1)


# Lists of numbers with null elements ([[1, None, 3]]). pyarrow records each
# chunk's definition level histogram, so the footers tell null elements and
# null lists (nulls) from empty lists (no nulls; the statistics' null count
# counts all three).
LISTS = {
    "nullelem": [[1, None, 3], [4], [5, 6], [None]],
    "nulllist": [[1], None, [2], [3]],
    "empty": [[1, 2], [], [3], [4]],
}


@pytest.fixture(scope="module")
def list_files(tmp_path_factory, binary):
    root = tmp_path_factory.mktemp("lists")
    for name, rows in LISTS.items():
        (root / name).mkdir()
        pq.write_table(pa.table({"l": pa.array(rows * 4, pa.list_(pa.int32())), "i": pa.array(range(16), pa.int32())}),
                       root / name / "f.parquet", row_group_size=8)
    srv = LocalServer(binary, [str(root)])
    yield root, srv
    srv.stop()


def read_all(ld):
    out = {}
    for b in ld:
        for k, v in b.items():
            out.setdefault(k, []).append(v)
    order = np.argsort(np.concatenate([np.asarray(x) for x in out.pop("i")]))
    return {k: (np.concatenate([np.asarray(x) for x in v])[order] if isinstance(v[0], jax.Array)
                else pa.concat_arrays(v).take(pa.array(order))) for k, v in out.items()}


@pytest.mark.parametrize("name", ["nullelem", "nulllist"])
def test_list_nulls_without_fill_refused_at_construction(list_files, name):
    """A list made arrays (a length) with null elements or null lists and no
    fill: refused when the Loader is built, with the footers' count."""
    root, srv = list_files
    want = sum(r is None for r in LISTS[name]) + sum(x is None for r in LISTS[name] if r for x in r)
    with pytest.raises(meshfeed.InvalidRequestError, match=rf"'l' \({want * 4} nulls\).*fill"):
        loader(root, srv, name, columns={"l": meshfeed.Column(length=4), "i": None})


def test_list_null_elements_with_fill(list_files):
    """With a fill, null elements become the fill (and pad the rest of the row)."""
    root, srv = list_files
    with loader(root, srv, "nullelem", columns={"l": meshfeed.Column(length=4, fill=-1), "i": None}) as ld:
        got = read_all(ld)
    want = [[-1 if x is None else x for x in r] + [-1] * (4 - len(r)) for r in LISTS["nullelem"] * 4]
    assert got["l"].dtype == np.int32 and got["l"].tolist() == want
    assert got["l_length"].tolist() == [len(r) for r in LISTS["nullelem"] * 4]


def test_list_empty_lists_are_no_nulls(list_files):
    """Empty lists are no nulls: a list with a length and no fill is served (padded with zeros)."""
    root, srv = list_files
    with loader(root, srv, "empty", columns={"l": meshfeed.Column(length=4), "i": None}) as ld:
        got = read_all(ld)
    assert got["l"].tolist() == [r + [0] * (4 - len(r)) for r in LISTS["empty"] * 4]


@pytest.mark.parametrize("name", sorted(LISTS))
def test_list_without_length_is_pyarrow(list_files, name):
    """Without a length a list arrives as pyarrow reads it, nulls and all."""
    root, srv = list_files
    with loader(root, srv, name, columns={"l": None, "i": None}) as ld:
        got = read_all(ld)
    assert got["l"].to_pylist() == pq.read_table(root / name / "f.parquet").column("l").to_pylist()
