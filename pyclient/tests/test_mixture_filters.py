"""meshfeed.Source(filters=...) against a real server: a two-source mixture
with a filter on one source. Expected rows come from
pyarrow.parquet.read_table(filters=...), not from the client."""

import os
import random
import subprocess

import jax
import numpy as np
import pyarrow.parquet as pq
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import meshfeed

SIZES = (300, 200)  # rows of the two sources
B, D = 32, 8
b = B // D
FILTER = [("label", "<", 400)]  # on source 0, a column it does not deliver


@pytest.fixture(scope="module")
def sources(tmp_path_factory, binary):
    root = tmp_path_factory.mktemp("mixf")
    out = []
    for i, rows in enumerate(SIZES):
        d = root / f"s{i}"
        subprocess.run([binary, "gen", "--out", str(d), "--rows", str(rows), "--files", str(i + 1),
                        "--row-group-rows", str(25 + 10 * i), "--features", "4", "--seed", str(i + 1)],
                       check=True, capture_output=True)
        out.append(str(d / "*.parquet"))
    return out


@pytest.fixture(scope="module")
def server(sources, binary):
    from meshfeed._src.server import LocalServer
    srv = LocalServer(binary, [os.path.dirname(os.path.dirname(sources[0]))])
    yield srv
    srv.stop()


def _kw(server):
    return dict(global_batch_size=B, sharding=NamedSharding(jax.make_mesh((D,), ("data",)), P("data")),
                server=server.address)


def _mixture(sources, stop="all_exhausted", filters=FILTER, weights=(0.6, 0.4)):
    srcs = [meshfeed.Source(sources[0], weight=weights[0], columns=["id"], filters=filters,
                            shuffle=meshfeed.Shuffle(seed=1, window=8)),
            meshfeed.Source(sources[1], weight=weights[1], columns=["id"])]
    return meshfeed.Mixture(srcs, stop=stop, source_column="source", seed=5)


def _rows(batch):
    """Per slice: (source, id) of every real row."""
    src = np.asarray(batch["source"]).reshape(D, b)
    ids = np.asarray(batch["id"]).reshape(D, b)
    valid = np.asarray(batch["valid"]).reshape(D, b) if "valid" in batch else np.ones((D, b), bool)
    return [[(int(s_), int(i_)) for s_, i_, v_ in zip(src[d], ids[d], valid[d]) if v_] for d in range(D)]


def _ids(glob, filters=None):
    return set(pq.read_table(os.path.dirname(glob), columns=["id"], filters=filters)["id"].to_pylist())


def test_source_filter_rows_are_pyarrows(server, sources):
    kept = _ids(sources[0], FILTER)
    assert 0 < len(kept) < SIZES[0]
    for stop in ("first_exhausted", "all_exhausted"):
        with meshfeed.Loader(_mixture(sources, stop=stop), last_batch="pad", **_kw(server)) as ld:
            steps = [_rows(batch) for batch in ld]
            assert len(steps) == ld.steps_per_epoch > 0
        delivered = [[r[1] for st in steps for sl in st for r in sl if r[0] == i] for i in range(2)]
        assert set(delivered[0]) <= kept, "source 0 delivered a row its filter does not keep"
        assert set(delivered[1]) <= _ids(sources[1])
        if stop == "first_exhausted":
            # Within the first source epoch, no row twice; the source that
            # ran out delivered every row it has (source 0: every kept row).
            assert all(len(set(x)) == len(x) for x in delivered), "a row repeats within its first source epoch"
            assert set(delivered[0]) == kept or set(delivered[1]) == _ids(sources[1])
        else:
            # Every source delivered its whole first epoch: its rows as a set.
            assert set(delivered[0]) == kept
            assert set(delivered[1]) == _ids(sources[1])


def test_source_filter_resume(server, sources):
    seed = int(os.environ.get("MESHFEED_TEST_SEED", random.randrange(1 << 30)))
    print(f"MESHFEED_TEST_SEED={seed}")
    mix = _mixture(sources, stop=15)
    with meshfeed.Loader(mix, **_kw(server)) as ld:
        full = [_rows(batch) for batch in ld]
    k = random.Random(seed).randrange(1, len(full))
    with meshfeed.Loader(mix, **_kw(server)) as ld:
        it = iter(ld)
        for _ in range(k):
            next(it)
        state = ld.state()
    with meshfeed.Loader(mix, state=state, **_kw(server)) as ld:
        assert [_rows(batch) for batch in ld] == full[k:]
    # Another filter is another source: refused, naming the filter.
    with pytest.raises(meshfeed.StateMismatchError, match="source 0 filters"):
        meshfeed.Loader(_mixture(sources, stop=15, filters=[("label", "<", 500)]), state=state, **_kw(server))
    # With reweight=True it resumes as another source: from the saved step
    # on, that source's rows are those the new filter keeps.
    other = [("label", ">=", 500)]
    with meshfeed.Loader(_mixture(sources, stop=15, filters=other), state=state, reweight=True, **_kw(server)) as ld:
        after = [_rows(batch) for batch in ld]
    assert len(after) == len(full) - k
    got = {r[1] for st in after for sl in st for r in sl if r[0] == 0}
    assert got and got <= _ids(sources[0], other)


def test_source_filter_bad_input(server, sources):
    with pytest.raises(meshfeed.InvalidRequestError, match="meshfeed.Source: .*op '~' is unknown"):
        meshfeed.Source(sources[0], filters=[("label", "~", 3)])
    with pytest.raises(meshfeed.InvalidRequestError, match="meshfeed.Source: filters"):
        meshfeed.Source(sources[0], filters="label < 3")
    with pytest.raises(meshfeed.InvalidRequestError, match=r"Source\(filters=\)|meshfeed.Source its own filters"):
        meshfeed.Loader(_mixture(sources), filters=[("id", ">", 3)], **_kw(server))
    with pytest.raises(meshfeed.InvalidRequestError, match=r"source 0 .*\"lang\".*\.parquet"):
        meshfeed.Loader(_mixture(sources, filters=[("lang", "==", "en")]), **_kw(server))
    with pytest.raises(meshfeed.MeshfeedError, match="source 0 .*keep no rows"):
        meshfeed.Loader(_mixture(sources, filters=[("id", ">", 10_000)]), **_kw(server))
    spec = meshfeed._src.mixture.mixture_from_spec(
        {"sources": [{"data": sources[0], "filters": [["label", "<", 400]]}, {"data": sources[1]}]})
    assert spec.sources[0].identity()["filters"] == [[{"column": "label", "op": "<", "value": 400}]]
