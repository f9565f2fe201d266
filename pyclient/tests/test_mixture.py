"""meshfeed.Mixture against a real server: three generated datasets mixed by
weight. Expected values come from the files (pyarrow) and the contract's
bound (every slice's rows of each source within one row of its quota,
cumulatively), not from the client."""

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

SIZES = (300, 500, 170)  # rows of the three sources
B, D = 64, 8
b = B // D


@pytest.fixture(scope="module")
def sources(tmp_path_factory, binary):
    root = tmp_path_factory.mktemp("mix")
    out = []
    for i, rows in enumerate(SIZES):
        d = root / f"s{i}"
        subprocess.run([binary, "gen", "--out", str(d), "--rows", str(rows), "--files", str(i + 1),
                        "--row-group-rows", str(20 + 15 * i), "--features", "4", "--seed", str(i + 1)],
                       check=True, capture_output=True)
        out.append(str(d / "*.parquet"))
    return out


@pytest.fixture(scope="module")
def mix_server(sources, binary):
    from meshfeed._src.server import LocalServer
    srv = LocalServer(binary, [os.path.dirname(os.path.dirname(sources[0]))])
    yield srv
    srv.stop()


def _sharding():
    return NamedSharding(jax.make_mesh((D,), ("data",)), P("data"))


def _mixture(sources, weights, stop="first_exhausted", **kw):
    srcs = [meshfeed.Source(s, weight=w, columns=["id", "label"], rename={"label": "y"},
                            shuffle=meshfeed.Shuffle(seed=i, window=16) if i != 1 else None)
            for i, (s, w) in enumerate(zip(sources, weights))]
    return meshfeed.Mixture(srcs, stop=stop, source_column="source", seed=3, **kw)


_LABELS: dict = {}


def _labels(glob):
    """id -> label of a source, read with pyarrow."""
    if glob not in _LABELS:
        t = pq.read_table(os.path.dirname(glob), columns=["id", "label"])
        _LABELS[glob] = dict(zip(t["id"].to_pylist(), t["label"].to_pylist()))
    return _LABELS[glob]


def _rows(batch, sources):
    """Per slice: (source, id) of every real row, each row checked whole
    (its label is its own, read with pyarrow)."""
    src = np.asarray(batch["source"]).reshape(D, b)
    ids = np.asarray(batch["id"]).reshape(D, b)
    y = np.asarray(batch["y"]).reshape(D, b)
    valid = np.asarray(batch["valid"]).reshape(D, b) if "valid" in batch else np.ones((D, b), bool)
    for s_, i_, y_, v_ in zip(src.ravel(), ids.ravel(), y.ravel(), valid.ravel()):
        if v_:
            assert y_ == _labels(sources[s_])[int(i_)], (s_, i_, y_)
        else:
            assert s_ == -1
    return [[(int(s_), int(i_)) for s_, i_, v_ in zip(src[d], ids[d], valid[d]) if v_] for d in range(D)]


def _check_bound(steps, weights, first=0):
    """Cumulative counts per slice and source within one row of the quota
    from step ``first`` on."""
    w = np.asarray(weights, float) / sum(weights)
    cum = np.zeros((D, len(weights)))
    for k, st in enumerate(steps[first:], 1):
        for d in range(D):
            for s_, _ in st[d]:
                cum[d, s_] += 1
        if k < len(steps) - first:  # the last step may be padded
            assert np.all(np.abs(cum - k * b * w) < 1), (first + k, cum, k * b * w)


def test_mixture_proportions_and_rows(mix_server, sources):
    weights = [0.5, 0.3, 0.2]
    with meshfeed.Loader(_mixture(sources, weights), global_batch_size=B, sharding=_sharding(),
                         server=mix_server.address, last_batch="pad") as ld:
        steps_known = ld.steps_per_epoch
        steps = [_rows(batch, sources) for batch in ld]
    assert len(steps) == steps_known > 0
    _check_bound(steps, weights)
    seen = {}
    for st in steps:
        for sl in st:
            for r in sl:
                seen[r] = seen.get(r, 0) + 1
    assert max(seen.values()) == 1, "a row of a source repeats within its first epoch"
    for i, glob in enumerate(sources):
        ids = set(pq.read_table(os.path.dirname(glob), columns=["id"])["id"].to_pylist())
        got = {r[1] for r in seen if r[0] == i}
        assert got <= ids
    # first_exhausted: the source that ran out delivered all its rows.
    exhausted = [i for i in range(3) if sum(1 for r in seen if r[0] == i) == SIZES[i]]
    assert exhausted, "first_exhausted ended before any source finished"


def test_mixture_placed_slices_are_pyarrows(sources):
    """A mixture the server places as it decodes (fixed-width columns, no
    shuffle window, nothing padded; DESIGN "Slices placed"), read over the
    shared-memory wire: every row whole (label and features) as pyarrow
    reads it, within one row of the quotas, each source's first epoch
    delivered once, and a resume at a random step equal to the run."""
    seed = int(os.environ.get("MESHFEED_TEST_SEED", random.randrange(1 << 30)))
    print(f"MESHFEED_TEST_SEED={seed}")
    weights = [0.5, 0.3, 0.2]
    srcs = [meshfeed.Source(s, weight=w, columns=["id", "label", "features"],
                            shuffle=meshfeed.Shuffle(seed=i) if i != 1 else None)
            for i, (s, w) in enumerate(zip(sources, weights))]
    mix = meshfeed.Mixture(srcs, stop="all_exhausted", source_column="source", seed=5)
    # The Loader's own server: shared memory, where the server places.
    kw = dict(global_batch_size=B, sharding=_sharding(), last_batch="drop")
    tables = [pq.read_table(os.path.dirname(g), columns=["id", "label", "features"]) for g in sources]
    want = [{i: (y, f) for i, y, f in zip(t["id"].to_pylist(), t["label"].to_pylist(), t["features"].to_pylist())}
            for t in tables]

    def rows(batch):
        src = np.asarray(batch["source"]).reshape(D, b)
        ids = np.asarray(batch["id"]).reshape(D, b)
        y = np.asarray(batch["label"]).reshape(D, b)
        f = np.asarray(batch["features"]).reshape(D, b, -1)
        out = []
        for d in range(D):
            for r in range(b):
                s_, i_ = int(src[d, r]), int(ids[d, r])
                wy, wf = want[s_][i_]
                assert y[d, r] == wy and np.array_equal(f[d, r], np.asarray(wf, f.dtype)), (s_, i_)
            out.append([(int(s_), int(i_)) for s_, i_ in zip(src[d], ids[d])])
        return out

    with meshfeed.Loader(mix, **kw) as ld:
        full = [rows(batch) for batch in ld]
        assert ld.stats()["transport"] == "shm"
    assert len(full) > 0
    _check_bound(full, weights)
    for i, n in enumerate(SIZES):
        first = set()
        for d in range(D):
            seq = [r for st in full for r in st[d] if r[0] == i][:n // D]
            assert len(set(seq)) == len(seq), f"source {i} repeats a row within its first epoch on slice {d}"
            first |= set(seq)
        assert len(first) == n // D * D
    k = random.Random(seed).randrange(1, len(full))
    with meshfeed.Loader(mix, **kw) as ld:
        it = iter(ld)
        for _ in range(k):
            next(it)
        state = ld.state()
    with meshfeed.Loader(mix, state=state, **kw) as ld:
        assert [rows(batch) for batch in ld] == full[k:]


def test_mixture_resume_and_reweight(mix_server, sources):
    seed = int(os.environ.get("MESHFEED_TEST_SEED", random.randrange(1 << 30)))
    print(f"MESHFEED_TEST_SEED={seed}")
    rnd = random.Random(seed)
    weights = [0.5, 0.3, 0.2]
    mix = _mixture(sources, weights, stop=30)
    kw = dict(global_batch_size=B, sharding=_sharding(), server=mix_server.address)
    with meshfeed.Loader(mix, **kw) as ld:
        full = [_rows(batch, sources) for batch in ld]
    k = rnd.randrange(1, len(full))
    with meshfeed.Loader(mix, **kw) as ld:
        it = iter(ld)
        for _ in range(k):
            next(it)
        state = ld.state()
    # The state's positions are the rows per slice each source delivered.
    for d in range(D):
        assert state["mixture"]["positions"] == [sum(1 for st in full[:k] for r in st[d] if r[0] == i)
                                                 for i in range(3)], (state["mixture"], d)
    with meshfeed.Loader(mix, state=state, **kw) as ld:
        assert [_rows(batch, sources) for batch in ld] == full[k:]
    # Changed weights without reweight: refused, naming the weight.
    new = [0.1, 0.1, 0.8]
    with pytest.raises(meshfeed.StateMismatchError, match="weight"):
        meshfeed.Loader(_mixture(sources, new, stop=30), state=state, **kw)
    with meshfeed.Loader(_mixture(sources, new, stop=30), state=state, reweight=True, **kw) as ld:
        after = [_rows(batch, sources) for batch in ld]
        end = ld.state()["mixture"]["positions"]
    assert end == [sum(1 for st in full[:k] + after for r in st[0] if r[0] == i) for i in range(3)]
    assert len(after) == 30 - k
    _check_bound(after, new)
    before = {r for st in full[:k] for sl in st for r in sl}
    for d in range(D):
        for i in range(3):
            fresh = SIZES[i] // D - sum(1 for st in full[:k] for r in st[d] if r[0] == i)
            rows = [r for st in after for r in st[d] if r[0] == i][:max(fresh, 0)]
            assert not set(rows) & before, f"reweighted run replays rows of source {i} on slice {d}"


def test_mixture_bad_input(mix_server, sources, tmp_path):
    kw = dict(global_batch_size=B, sharding=_sharding(), server=mix_server.address)
    with pytest.raises(meshfeed.InvalidRequestError, match="weight=-1"):
        meshfeed.Source(sources[0], weight=-1)
    with pytest.raises(meshfeed.InvalidRequestError, match="weight=nan"):
        meshfeed.Source(sources[0], weight=float("nan"))
    with pytest.raises(meshfeed.InvalidRequestError, match="every source's weight is 0"):
        _mixture(sources, [0, 0, 0])
    with pytest.raises(meshfeed.InvalidRequestError, match="per meshfeed.Source"):
        meshfeed.Loader(_mixture(sources, [1, 1, 1]), columns=["id"], **kw)
    missing = os.path.join(os.path.dirname(os.path.dirname(sources[0])), "nothing", "*.parquet")
    with pytest.raises(meshfeed.NotFoundError, match="source 1"):
        meshfeed.Loader(_mixture([sources[0], missing, sources[2]], [1, 1, 1]), **kw)
    bad = _mixture(sources, [1, 1, 1])
    srcs = list(bad.sources)
    srcs[2] = meshfeed.Source(sources[2], columns=["id", "label"])  # not renamed
    with pytest.raises(meshfeed.InvalidRequestError, match=r"source 2 .*source 0"):
        meshfeed.Loader(meshfeed.Mixture(srcs, source_column="source"), **kw)


def _spec_file(tmp_path, sources, stop="first_exhausted"):
    import json
    spec = {"sources": [{"data": s, "weight": w, "columns": ["id", "label"]}
                        for s, w in zip(sources, (0.5, 0.3, 0.2))],
            "stop": stop, "source_column": "source"}
    path = tmp_path / "mix.json"
    path.write_text(json.dumps(spec))
    return path


def test_bench_takes_a_mixture(tmp_path, binary, sources):
    import json
    import sys
    out = tmp_path / "bench.json"
    env = dict(os.environ, MESHFEED_BIN=binary)
    r = subprocess.run([sys.executable, "-m", "meshfeed", "bench", "--mixture", str(_spec_file(tmp_path, sources)),
                        "--global-batch-size", str(B), "--mesh", f"data={D}", "--json", str(out), "--no-progress"],
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    rep = json.loads(out.read_text())
    with meshfeed.Loader(meshfeed._src.mixture.mixture_from_spec(json.loads(_spec_file(tmp_path, sources).read_text())),
                         global_batch_size=B, sharding=_sharding()) as ld:
        steps = ld.steps_per_epoch
    assert rep["steps"] == steps and rep["total_rows"] == steps * B


def test_batch_inference_refuses_a_mixture(tmp_path, binary, sources):
    import pathlib
    import sys
    script = pathlib.Path(__file__).resolve().parents[2] / "examples" / "batch_inference.py"
    env = dict(os.environ, MESHFEED_BIN=binary)
    r = subprocess.run([sys.executable, str(script), "--data", str(_spec_file(tmp_path, sources)),
                        "--out", str(tmp_path / "p.parquet"), "--batch-size", "64"],
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode != 0 and "reads one dataset" in r.stderr, r.stderr


def _seq(steps, i, d):
    """The ids of source ``i``'s rows on slice ``d``, in delivery order."""
    return [r[1] for st in steps for r in st[d] if r[0] == i]


def test_mixture_reweight_removing_a_source_continues_the_others(mix_server, sources):
    """Resuming with reweight=True without source 1: sources 0 and 2 go on,
    on every slice, with exactly the rows after those delivered before the
    resume (the uninterrupted run's next rows), none skipped or replayed;
    the state after the resume walks on from there. Then source 1 comes back
    as a new source (from its start), the others again continuing."""
    seed = int(os.environ.get("MESHFEED_TEST_SEED", random.randrange(1 << 30)))
    print(f"MESHFEED_TEST_SEED={seed}")
    rnd = random.Random(seed)

    def mix(keep, weights, stop=30):
        srcs = [meshfeed.Source(sources[i], weight=w, columns=["id", "label"], rename={"label": "y"},
                                shuffle=meshfeed.Shuffle(seed=i, window=16) if i != 1 else None)
                for i, w in zip(keep, weights)]
        return meshfeed.Mixture(srcs, stop=stop, source_column="source", seed=3)

    kw = dict(global_batch_size=B, sharding=_sharding(), server=mix_server.address)
    full_mix = mix([0, 1, 2], [0.5, 0.3, 0.2])
    with meshfeed.Loader(full_mix, **kw) as ld:
        full = [_rows(batch, sources) for batch in ld]
    k = rnd.randrange(1, 20)
    with meshfeed.Loader(full_mix, **kw) as ld:
        it = iter(ld)
        for _ in range(k):
            next(it)
        state = ld.state()
    srcs2 = [sources[0], sources[2]]
    with meshfeed.Loader(mix([0, 2], [0.6, 0.4]), state=state, reweight=True, **kw) as ld:
        it = iter(ld)
        after = [_rows(next(it), srcs2) for _ in range(5)]
        state2 = ld.state()
    assert len(after) == 5
    for new_i, old_i in enumerate([0, 2]):
        for d in range(D):
            got, want = _seq(after, new_i, d), _seq(full[k:], old_i, d)
            n = min(len(got), len(want))
            assert n > 0 and got[:n] == want[:n], (
                f"seed {seed} k {k}: source {old_i} slice {d} does not continue from its saved position: "
                f"delivered before {_seq(full[:k], old_i, d)[-3:]}, then {got[:n]}, want {want[:n]}")
    assert state2["mixture"]["positions"] == [
        state["mixture"]["positions"][old_i] + len(_seq(after, new_i, 0)) for new_i, old_i in enumerate([0, 2])]
    # Source 1 back (a new source: from its start), reweighting again.
    with meshfeed.Loader(mix([2, 0, 1], [0.3, 0.3, 0.4]), state=state2, reweight=True, **kw) as ld:
        it = iter(ld)
        again = [_rows(next(it), [sources[2], sources[0], sources[1]]) for _ in range(3)]
    with meshfeed.Loader(mix([1], [1.0]), **kw) as ld:
        only1 = [_rows(batch, [sources[1]]) for batch in ld]
    for new_i, old_i in enumerate([2, 0]):
        for d in range(D):
            got = _seq(again, new_i, d)
            want = _seq(full[k:], old_i, d)[len(_seq(after, 1 - new_i, d)):]
            n = min(len(got), len(want))
            assert n > 0 and got[:n] == want[:n], (seed, k, old_i, d, got, want)
    for d in range(D):
        got = _seq(again, 2, d)
        assert got == _seq(only1, 0, d)[:len(got)], (seed, k, d)
