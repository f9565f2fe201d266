"""The dataset manifest: `meshfeed manifest` writes a Parquet file that
pyarrow reads, whose facts agree with pyarrow's reading of the footers, and
the Loader plans from it (stats() says so)."""

import json
import subprocess

import jax
import pytest
import numpy as np
import pyarrow.parquet as pq
from jax.sharding import NamedSharding, PartitionSpec as P

import meshfeed


def _manifest(binary, dataset, tmp_path):
    """A copy of the session's dataset with its manifest beside it."""
    ds = tmp_path / "ds"
    ds.mkdir()
    for f in sorted(dataset.glob("*.parquet")):
        (ds / f.name).write_bytes(f.read_bytes())
    subprocess.run([binary, "manifest", str(ds)], check=True, capture_output=True)
    return ds, ds / "_meshfeed_manifest.parquet"


def test_pyarrow_reads_the_manifest(binary, dataset, tmp_path):
    ds, path = _manifest(binary, dataset, tmp_path)
    table = pq.read_table(path)
    meta = pq.read_metadata(path).metadata
    assert meta[b"meshfeed.manifest.version"] == b"1"
    schemas = json.loads(meta[b"meshfeed.manifest.schemas"])
    rows = table.to_pylist()
    files = sorted(f.name for f in ds.glob("part-*.parquet"))
    assert [r["uri"] for r in rows] == files  # relative to the manifest's directory
    assert len(schemas) == 1 and all(r["schema"] == 0 for r in rows)
    for r in rows:
        md = pq.read_metadata(ds / r["uri"])
        assert r["rows"] == md.num_rows
        assert r["size"] == (ds / r["uri"]).stat().st_size
        assert r["format"] == "parquet"
        assert [c["name"] for c in r["columns"]] == md.schema.to_arrow_schema().names
        assert len(r["row_groups"]) == md.num_row_groups
        for i, rg in enumerate(r["row_groups"]):
            assert rg["rows"] == md.row_group(i).num_rows
            chunks = [c for col in rg["columns"] for c in col["chunks"]]
            assert len(chunks) == md.num_columns
            for j, c in enumerate(chunks):
                cc = md.row_group(i).column(j)
                start = cc.dictionary_page_offset if cc.has_dictionary_page else cc.data_page_offset
                assert (c["offset"], c["length"]) == (start, cc.total_compressed_size)
                if cc.is_stats_set and cc.statistics.has_null_count:
                    assert c["null_count"] == cc.statistics.null_count
                if cc.is_stats_set and cc.statistics.has_min_max and cc.physical_type == "INT64":
                    assert int.from_bytes(c["min"], "little", signed=True) == cc.statistics.min
                    assert int.from_bytes(c["max"], "little", signed=True) == cc.statistics.max


def test_loader_plans_from_the_manifest(binary, dataset, tmp_path):
    ds, path = _manifest(binary, dataset, tmp_path)
    mesh = jax.make_mesh((8,), ("data",))
    kw = dict(global_batch_size=80, sharding=NamedSharding(mesh, P("data")), columns=["id"],
              server_options=meshfeed.ServerOptions(binary=binary))
    with meshfeed.Loader(str(ds), **kw) as a, meshfeed.Loader(str(ds), manifest="off", **kw) as b:
        assert a.stats()["manifest"] == str(path)
        assert a.stats()["plan_requests"] <= 2
        assert b.stats()["manifest"] == "" and b.stats()["plan_requests"] > 2
        for x, y in zip(a, b, strict=True):
            np.testing.assert_array_equal(np.asarray(x["id"]), np.asarray(y["id"]))


def test_manifest_config_in_the_ticket():
    sh = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    kw = dict(data="/d/*.parquet", global_batch_size=8, sharding=sh)
    auto = meshfeed.LoaderConfig(**kw)
    assert auto.manifest == "auto" and "manifest" not in auto.request(1, [0])  # the server's default
    off = meshfeed.LoaderConfig(manifest="off", **kw)
    assert off.request(1, [0])["manifest"] == "off"
    named = meshfeed.LoaderConfig(manifest="/d/_meshfeed_manifest.parquet", **kw)
    assert named.request(1, [0])["manifest"] == "/d/_meshfeed_manifest.parquet"
    # which manifest plans does not change the stream: states stay interchangeable
    plan = {"num_rows": 100, "steps_per_epoch": 12}
    assert auto.fingerprint(1, plan) == off.fingerprint(1, plan) == named.fingerprint(1, plan)
    with pytest.raises(meshfeed.InvalidRequestError, match="manifest="):
        meshfeed.LoaderConfig(manifest=3, **kw)


def _uvarints(buf: bytes):
    """The unsigned LEB128 varints of buf, in order."""
    out, v, shift = [], 0, 0
    for b in buf:
        v |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            out.append(v)
            v, shift = 0, 0
    assert shift == 0, "truncated varint"
    return out


def _kept_rows(value: bytes):
    """The kept row numbers of each row group of a stored selection
    (filter-selection/v1: row groups; per row group rows, runs, then each
    run as gap from the previous run's end and length)."""
    vals = iter(_uvarints(value))
    groups = []
    for _ in range(next(vals)):
        rows, runs, prev, kept = next(vals), next(vals), 0, []
        for _ in range(runs):
            lo = prev + next(vals)
            hi = lo + next(vals)
            assert hi <= rows
            kept.extend(range(lo, hi))
            prev = hi
        groups.append(kept)
    assert next(vals, None) is None
    return groups


def test_manifest_stores_filter_selections(binary, dataset, tmp_path):
    """manifest --filters stores, per file, exactly the rows
    pyarrow.parquet.read_table(filters=...) keeps, readable with pyarrow."""
    ds = tmp_path / "ds"
    ds.mkdir()
    for f in sorted(dataset.glob("*.parquet")):
        (ds / f.name).write_bytes(f.read_bytes())
    filters = [("label", "<", 100)]
    subprocess.run([binary, "manifest", "--filters", json.dumps([list(t) for t in filters]), str(ds)],
                   check=True, capture_output=True)
    rows = pq.read_table(ds / "_meshfeed_manifest.parquet").to_pylist()
    assert rows
    for r in rows:
        facts = [f for f in r["facts"] if f["kind"] == "filter-selection/v1"]
        assert len(facts) == 1 and "label" in facts[0]["key"]
        groups = _kept_rows(facts[0]["value"])
        md = pq.read_metadata(ds / r["uri"])
        assert len(groups) == md.num_row_groups
        offsets = np.cumsum([0] + [md.row_group(i).num_rows for i in range(md.num_row_groups)])
        stored = [int(offsets[i]) + k for i, g in enumerate(groups) for k in g]
        ids = pq.read_table(ds / r["uri"], columns=["id"])["id"].to_pylist()
        want = pq.read_table(ds / r["uri"], columns=["id"], filters=filters)["id"].to_pylist()
        assert [ids[k] for k in stored] == want
