"""filters=: the rows delivered are the rows pyarrow.parquet.read_table(filters=...)
returns, in dataset order, on files with and without statistics, with nulls,
NaN, dictionary-encoded strings, timestamps, dates and decimals; resume with a
filter is exact; bad filters fail at construction naming the column and file.

The reference is pyarrow itself, computed here on the same files."""

import datetime
import decimal
import os

import jax
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import meshfeed
from meshfeed._src.server import LocalServer

FILES, ROWS_PER_FILE, RG_ROWS = 3, 700, 100
SEED = int(os.environ.get("MESHFEED_TEST_SEED", "20261202"))


def _table(rng, lo, n):
    """n rows with ids lo.. and filter columns of every kind, nulls included."""
    ids = np.arange(lo, lo + n)

    def nulls(p=0.1):
        return rng.random(n) < p

    score = rng.random(n)
    score[rng.random(n) < 0.05] = np.nan
    base = datetime.datetime(2020, 1, 1)
    return pa.table({
        "id": pa.array(ids, pa.int64()),
        "bucket": pa.array(ids // 50, pa.int32()),  # sorted: row groups are pruned by statistics
        "score": pa.array(score, pa.float64(), mask=nulls()),
        "lang": pa.array(rng.choice(["de", "en", "fr", "ja"], n), mask=nulls()).dictionary_encode(),
        "name": pa.array([f"n{i % 37:02d}" for i in ids], mask=nulls()),
        "ts": pa.array([base + datetime.timedelta(hours=int(h)) for h in ids], pa.timestamp("us"), mask=nulls()),
        "tz": pa.array((ids * 3_600_000).astype("datetime64[ms]"), pa.timestamp("ms", tz="UTC")),
        "day": pa.array([datetime.date(2020, 1, 1) + datetime.timedelta(days=int(i % 400)) for i in ids], pa.date32()),
        "price": pa.array([decimal.Decimal(int(x)).scaleb(-2) for x in rng.integers(-5000, 5000, n)],
                          pa.decimal128(9, 2), mask=nulls()),
        "flag": pa.array(rng.random(n) < 0.3, mask=nulls(0.05)),
        "small": pa.array(rng.integers(0, 10, n), pa.uint8()),
        # two values per 100-row row group, v{k%5} and v{k%5+2}: min and max
        # span v{k%5+1}, which only the dictionary page rules out
        "region": pa.array([f"v{(i // RG_ROWS) % 5 + 2 * (i % 2)}" for i in ids]),
    })


@pytest.fixture(scope="module")
def datasets(tmp_path_factory):
    """Two copies of one dataset: with statistics, and without."""
    rng = np.random.default_rng(SEED)
    print(f"MESHFEED_TEST_SEED={SEED}")
    root = tmp_path_factory.mktemp("filters")
    tables = [_table(rng, i * ROWS_PER_FILE, ROWS_PER_FILE) for i in range(FILES)]
    out = {}
    for name, stats in (("stats", True), ("nostats", False)):
        d = root / name
        d.mkdir()
        for i, t in enumerate(tables):
            pq.write_table(t, d / f"part-{i}.parquet", row_group_size=RG_ROWS, write_statistics=stats)
        out[name] = d
    return root, out


@pytest.fixture(scope="module")
def fserver(datasets, binary):
    srv = LocalServer(binary, [str(datasets[0])])
    yield srv
    srv.stop()


def _replicated():
    return NamedSharding(jax.make_mesh((8,), ("data",)), P())


def _reference(d, filters, column="id"):
    files = sorted(d.glob("*.parquet"))
    return pa.concat_tables([pq.read_table(f, filters=filters) for f in files])[column].to_pylist()


def _delivered(d, fserver, filters, columns=("id",), **kw):
    """Every real row of one epoch, in order (one stream: D = 1)."""
    out = {c: [] for c in columns}
    with meshfeed.Loader(str(d / "*.parquet"), global_batch_size=16, sharding=_replicated(), server=fserver.address,
                         columns=columns if isinstance(columns, dict) else list(columns), last_batch="pad",
                         filters=filters, **kw) as ld:
        n = ld.num_rows
        columns = list(columns)
        for b in ld:
            m = np.asarray(b["valid"])
            for c in columns:
                v = b[c]
                vals = v.to_pylist() if isinstance(v, (pa.Array, pa.ChunkedArray)) else np.asarray(v).tolist()
                out[c] += [x for x, keep in zip(vals, m) if keep]
    assert n == len(out[columns[0]]), (n, len(out[columns[0]]))
    return out


D2020 = datetime.datetime(2020, 1, 1)
FILTERS = [
    [("bucket", ">=", 10), ("bucket", "<", 12)],
    [("bucket", "==", 3)],
    [("id", "in", [5, 77, 1400, 2099, 99999])],
    [("score", ">", 0.5)],
    [("score", "!=", 0.5)],
    [("score", "<=", 0.25)],
    [("score", "in", [float("nan")])],
    [("score", "not in", [float("nan"), None])],
    [("score", "in", [None])],
    [("score", "not in", [0.1])],
    [("lang", "==", "en")],
    [("lang", "in", ["de", "ja"])],
    [("lang", "not in", ["de"])],
    [("lang", "!=", "fr")],
    [("name", ">", "n30")],
    [("ts", ">=", D2020 + datetime.timedelta(hours=500)), ("ts", "<", np.datetime64("2020-03-01T00:00:00.000001"))],
    [("ts", "<", datetime.date(2020, 1, 5))],
    [("tz", ">", datetime.datetime(1970, 1, 20, 12, tzinfo=datetime.timezone.utc))],
    [("day", "==", datetime.date(2020, 2, 1))],
    [("day", "<", datetime.datetime(2020, 1, 3, 12))],
    [("price", ">", decimal.Decimal("10.50"))],
    [("price", "<=", -12.345)],
    [("price", "in", [decimal.Decimal(x).scaleb(-2) for x in range(-300, 300, 7)])],
    [("flag", "==", True)],
    [("flag", "!=", True)],
    [("small", "<", 2.5)],
    [("small", ">", -1)],
    [("region", "==", "v3")],
    [("region", "in", ["v1", "v6"])],
    [("region", "not in", ["v2"])],
    [[("bucket", "<", 2)], [("lang", "==", "ja"), ("score", ">", 0.9)]],
    [("id", "<", 0)],  # keeps nothing in some files, nothing at all overall: tested apart
]


@pytest.mark.parametrize("variant", ["stats", "nostats"])
def test_rows_equal_pyarrow(datasets, fserver, variant):
    d = datasets[1][variant]
    for filters in FILTERS[:-1]:
        want = _reference(d, filters)
        got = _delivered(d, fserver, filters)["id"]
        assert got == want, f"{variant}: filters {filters}: {len(got)} rows delivered, pyarrow keeps {len(want)}"


def test_filter_columns_are_not_delivered_and_strings_are_taken(datasets, fserver):
    d = datasets[1]["stats"]
    filters = [("score", ">", 0.3), ("lang", "!=", "fr")]
    got = _delivered(d, fserver, filters, columns=("id", "name"))
    assert got["id"] == _reference(d, filters)
    assert got["name"] == _reference(d, filters, "name")
    with meshfeed.Loader(str(d / "*.parquet"), global_batch_size=16, sharding=_replicated(), server=fserver.address,
                         columns=["id"], filters=filters) as ld:
        assert set(next(iter(ld))) == {"id"}


DELIVERED = [  # filters, the column also delivered, its fill (numeric columns with nulls)
    ([("id", ">=", 150), ("id", "<", 1250)], "id", None),  # the edges inside row groups
    ([("id", "in", [5, 77, 1400, 2099])], "id", None),
    ([("bucket", ">", 4), ("bucket", "<", 29)], "bucket", None),
    ([[("score", ">", 0.5)], [("id", "<", 150)]], "score", -1.0),  # nulls (filled as the stream reads) and NaN
    ([("lang", "in", ["de", "ja"])], "lang", None),  # dictionary-encoded
    ([[("name", ">", "n30")], [("id", "<", 120)]], "name", None),  # nulls
    ([("tz", ">", datetime.datetime(1970, 1, 20, 12, tzinfo=datetime.timezone.utc))], "tz", None),
    ([("day", "<", datetime.date(2020, 1, 9))], "day", None),
    ([("small", "<", 3)], "small", None),
]


def _reference_type(d, column):
    return pq.read_schema(sorted(d.glob("*.parquet"))[0]).field(column).type


def _same(got, want):
    """Equal lists, NaN equal to NaN."""
    return len(got) == len(want) and all(
        g == w or (isinstance(g, float) and isinstance(w, float) and g != g and w != w) for g, w in zip(got, want))


@pytest.mark.parametrize("variant", ["stats", "nostats"])
def test_delivered_filter_columns_equal_pyarrow(datasets, fserver, variant):
    """A filter column that is also delivered: the plan's read of it is the
    stream's (held for it, not read again), decoded the stream's way (its
    fill); its values and the ids are pyarrow's."""
    d = datasets[1][variant]
    for filters, col, fill in DELIVERED:
        columns = {"id": None} if col == "id" else {"id": None, col: meshfeed.Column(fill=fill) if fill is not None else None}
        got = _delivered(d, fserver, filters, columns=columns)
        for c in columns:
            want = _reference(d, filters, c)
            t = _reference_type(d, c)
            if pa.types.is_temporal(t):  # delivered as their integers
                want = pa.array(want, t).cast(pa.int32() if pa.types.is_date32(t) else pa.int64()).to_pylist()
            if c == col and fill is not None:
                want = [fill if w is None else w for w in want]
            assert _same(got[c], want), f"{variant}: filters {filters}: column {c}: {len(got[c])} rows, pyarrow {len(want)}"


def test_no_rows_kept_is_a_plan_error(datasets, fserver):
    d = datasets[1]["stats"]
    with pytest.raises(meshfeed.PlanError):
        meshfeed.Loader(str(d / "*.parquet"), global_batch_size=16, sharding=_replicated(), server=fserver.address,
                        filters=[("id", "<", 0)])


def _steps(ld, n=None):
    out = []
    for i, b in enumerate(ld):
        out.append((np.asarray(b["id"]).tolist(), np.asarray(b["valid"]).tolist()))
        if n is not None and i + 1 == n:
            break
    return out


def test_resume_with_a_filter_is_exact(datasets, fserver):
    d = datasets[1]["stats"]
    sh = NamedSharding(jax.make_mesh((8,), ("data",)), P("data"))
    filters = [[("score", ">=", 0.5)], [("lang", "==", "ja")]]
    kw = dict(global_batch_size=32, sharding=sh, server=fserver.address, columns=["id"], last_batch="pad",
              shuffle=meshfeed.Shuffle(seed=5, window=48), num_epochs=2, filters=filters)
    with meshfeed.Loader(str(d / "*.parquet"), **kw) as ld:
        spe = ld.steps_per_epoch
        full = _steps(ld)
    assert len(full) == 2 * spe
    first = sorted(i for ids, m in full[:spe] for i, k in zip(ids, m) if k)
    assert first == sorted(_reference(d, filters))
    k = spe + 3
    with meshfeed.Loader(str(d / "*.parquet"), **kw) as ld:
        _steps(ld, k)
        saved = ld.state()
    with meshfeed.Loader(str(d / "*.parquet"), state=saved, **kw) as ld:
        assert _steps(ld) == full[k:]
    other = dict(kw, filters=[("score", ">=", 0.6)])
    with pytest.raises(meshfeed.StateMismatchError):
        meshfeed.Loader(str(d / "*.parquet"), state=saved, **other)


@pytest.mark.parametrize("filters, words", [
    ([("nope", "==", 1)], ["nope", "part-0.parquet", "not found"]),
    ([("id", "==", "7")], ["id", "part-0.parquet", "string"]),
    ([("ts", ">", 5)], ["ts", "part-0.parquet", "timestamp"]),
    ([("tz", ">", datetime.datetime(2020, 1, 1))], ["tz", "part-0.parquet", "offset"]),
    ([("id", "~", 1)], ["id", "~", "unknown"]),
    ([("id", "in", 3)], ["id", "list"]),
    ([("id", "==", object())], ["id", "object"]),
    ([], ["empty"]),
])
def test_bad_filters_fail_at_construction(datasets, fserver, filters, words):
    d = datasets[1]["stats"]
    with pytest.raises(meshfeed.InvalidRequestError) as e:
        meshfeed.Loader(str(d / "*.parquet"), global_batch_size=16, sharding=_replicated(), server=fserver.address,
                        filters=filters)
    for w in words:
        assert w in str(e.value), f"{filters}: {w!r} not in {e.value}"


@pytest.mark.parametrize("filters, wire", [
    ([("bucket", "==", 3)], [["bucket", "==", 3]]),
    ([("ts", "<", datetime.datetime(2020, 1, 5))], [["ts", "<", {"timestamp": "2020-01-05T00:00:00"}]]),
    ([("tz", "<", datetime.datetime(1970, 1, 3, tzinfo=datetime.timezone.utc))],
     [["tz", "<", {"timestamp": "1970-01-03T00:00:00+00:00"}]]),
    ([("day", "<", datetime.date(2020, 1, 10))], [["day", "<", {"date": "2020-01-10"}]]),
    ([("price", ">", decimal.Decimal("49"))], [["price", ">", {"decimal": "49"}]]),
    ([("score", ">", 0.99)], [["score", ">", 0.99]]),
    ([[("name", "<", "a")], [("id", "==", 5)]], [[["name", "<", "a"]], [["id", "==", 5]]]),  # strings prune too
    ([("region", "==", "v3")], [["region", "==", "v3"]]),  # dictionary pages
])
def test_statistics_rule_row_groups_out(datasets, binary, filters, wire):
    """`meshfeed plan --filters` on pyarrow's files: with statistics, row groups
    of every column kind are ruled out from the footers alone; without, only
    dictionary pages rule any out (== and in); both plan the rows pyarrow
    keeps."""
    import json
    import subprocess

    def plan(d):
        out = subprocess.run([binary, "plan", "--json", "--data", str(d), "--columns", "id", "--global-batch-size", "1",
                              "--mesh", "data=1", "--batch-axes", "data", "--filters", json.dumps(wire)],
                             check=True, capture_output=True, text=True, timeout=60)
        return json.loads(out.stdout)

    with_stats, without = plan(datasets[1]["stats"]), plan(datasets[1]["nostats"])
    n = len(_reference(datasets[1]["stats"], filters))
    assert with_stats["num_rows"] == without["num_rows"] == n
    assert with_stats["filter_row_groups"]["pruned"] > 0, with_stats["filter_row_groups"]
    assert without["filter_row_groups"]["pruned"] == without["filter_row_groups"]["dictionary_pruned"]
    if wire[0][0] == "region":
        # v3 lies within the bounds of the row groups holding v2 and v4 only:
        # their dictionaries rule them out, with statistics or without
        assert with_stats["filter_row_groups"]["dictionary_pruned"] > 0, with_stats["filter_row_groups"]
        assert without["filter_row_groups"]["dictionary_pruned"] > 0, without["filter_row_groups"]
    elif isinstance(wire[0][0], str) and wire[0][1] not in ("==", "in"):
        assert without["filter_row_groups"]["pruned"] == 0, without["filter_row_groups"]


def test_elastic_resume_with_a_filter(datasets, fserver):
    """A state saved with D = 8 resumes with D = 2 (elastic=True): the kept
    rows of the epoch not yet delivered come once each, none lost."""
    d = datasets[1]["stats"]
    filters = [("score", "<", 0.4)]

    def sh(n):
        return NamedSharding(jax.make_mesh((n,), ("data",), devices=jax.devices()[:n]), P("data"))

    kw = dict(global_batch_size=32, server=fserver.address, columns=["id"], last_batch="pad",
              shuffle=meshfeed.Shuffle(seed=9, window=40), num_epochs=1, filters=filters)
    k = 5
    with meshfeed.Loader(str(d / "*.parquet"), sharding=sh(8), **kw) as ld:
        spe = ld.steps_per_epoch
        before = _steps(ld, k)
        saved = ld.state()
    with meshfeed.Loader(str(d / "*.parquet"), sharding=sh(2), state=saved, elastic=True, **kw) as ld:
        after = _steps(ld)
    assert len(before) + len(after) == spe
    ids = [i for ids, m in before + after for i, keep in zip(ids, m) if keep]
    assert sorted(ids) == sorted(_reference(d, filters))


def test_bloom_filters_rule_row_groups_out(tmp_path, binary):
    """A column written without a dictionary but with bloom filters: a value
    between a row group's min and max that it does not hold rules it out
    (ints and strings); the rows planned are pyarrow's."""
    import json
    import subprocess

    rng = np.random.default_rng(SEED)
    code = np.concatenate([rng.permutation(np.arange(g * 2000, (g + 1) * 2000, 2)) for g in range(4)])  # even only
    t = pa.table({"id": np.arange(len(code)), "code": code.astype(np.int64), "name": [f"k{c}" for c in code]})
    with pq.ParquetWriter(tmp_path / "a.parquet", t.schema, use_dictionary=False,
                          bloom_filter_options={"code": {"ndv": 1000, "fpp": 0.01},
                                                "name": {"ndv": 1000, "fpp": 0.01}}) as w:
        w.write_table(t, row_group_size=1000)
    for filters in ([[("code", "==", 2001)], [("id", "==", 5)]], [[("code", "in", [3, 2005, 4001])], [("id", "==", 5)]],
                    [[("name", "==", "k2001")], [("id", "==", 7)]]):
        wire = [[list(term) for term in conj] for conj in filters]
        out = subprocess.run([binary, "plan", "--json", "--data", str(tmp_path), "--columns", "id", "--global-batch-size",
                              "1", "--mesh", "data=1", "--batch-axes", "data", "--filters", json.dumps(wire)],
                             check=True, capture_output=True, text=True, timeout=60)
        rep = json.loads(out.stdout)
        assert rep["num_rows"] == pq.read_table(tmp_path / "a.parquet", filters=filters).num_rows
        assert rep["filter_row_groups"]["bloom_pruned"] > 0, (filters, rep["filter_row_groups"])


def test_edge_pages_of_a_sorted_range_equal_pyarrow(tmp_path, binary):
    """A fixed-size list in uncompressed 1 MiB v1 pages without a page index, and
    a filter on the sorted id whose range starts and ends inside pages: the
    pieces at the range's edges fetch of those pages only their headers, levels
    and their own rows' values; the rows delivered (ids and features) are
    pyarrow's, with one stream and with eight."""
    n = 200_000
    rng = np.random.default_rng(SEED)
    feats = rng.standard_normal((n, 8), dtype=np.float32)
    t = pa.table({"id": pa.array(np.arange(n), pa.int64()),
                  "features": pa.FixedSizeListArray.from_arrays(pa.array(feats.ravel()), 8)})
    path = tmp_path / "edges.parquet"
    pq.write_table(t, path, row_group_size=100_000, data_page_size=1 << 20, compression="none", use_dictionary=False,
                   write_page_index=False, data_page_version="1.0")
    srv = LocalServer(binary, [str(tmp_path)])
    try:
        for filters in ([("id", ">=", 51234), ("id", "<", 148765)], [("id", ">=", 99000), ("id", "<", 101500)],
                        [("id", ">", 7000), ("id", "<=", 9999)]):
            want = pq.read_table(path, filters=filters)
            want = dict(zip(want["id"].to_pylist(), want["features"].to_pylist()))
            for sharding in (_replicated(), NamedSharding(jax.make_mesh((8,), ("data",)), P("data"))):
                got = {}
                with meshfeed.Loader(str(path), global_batch_size=64, sharding=sharding, server=srv.address,
                                     columns=["id", "features"], last_batch="pad", filters=filters) as ld:
                    for b in ld:
                        m = np.asarray(b["valid"])
                        for i, f, keep in zip(np.asarray(b["id"]).tolist(), np.asarray(b["features"]).tolist(), m):
                            if keep:
                                assert i not in got, f"{filters}: id {i} delivered twice"
                                got[i] = f
                assert got == want, f"{filters} ({sharding}): {len(got)} rows delivered, pyarrow keeps {len(want)}"
    finally:
        srv.stop()
