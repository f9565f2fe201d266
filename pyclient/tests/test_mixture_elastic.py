"""Elastic resume of a meshfeed.Mixture from Python (docs/CONTRACT-elastic.md,
"Mixtures"): a state saved on a mesh of 4 data devices resumes on 8. The
expected rows come from the uninterrupted run on 4 devices (each old slice's
rows of each source, in order) and the contract's rule (the rows of a
source's first epoch not yet delivered, old slice after old slice, split into
8 contiguous parts), checked against the files with pyarrow."""

import json
import os
import random

import jax
import numpy as np
import pyarrow.parquet as pq
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import meshfeed
from test_mixture import SIZES, _labels, mix_server, sources  # noqa: F401 (fixtures)

B = 64


def _sharding(d):
    """The 8 CPU devices, the batch split d ways."""
    return NamedSharding(jax.make_mesh((d, 8 // d), ("data", "model")), P("data"))


def _mixture(srcs, weights, stop="all_exhausted"):
    return meshfeed.Mixture([meshfeed.Source(s, weight=w, columns=["id", "label"], rename={"label": "y"},
                                             shuffle=meshfeed.Shuffle(seed=i, window=16) if i != 1 else None)
                             for i, (s, w) in enumerate(zip(srcs, weights))],
                            stop=stop, source_column="source", seed=3)


def _rows(batch, srcs, d):
    """Per slice of d: (source, id) of every real row, labels checked against the files."""
    b = B // d
    src = np.asarray(batch["source"]).reshape(d, b)
    ids = np.asarray(batch["id"]).reshape(d, b)
    y = np.asarray(batch["y"]).reshape(d, b)
    valid = np.asarray(batch["valid"]).reshape(d, b) if "valid" in batch else np.ones((d, b), bool)
    out = []
    for k in range(d):
        row = []
        for s_, i_, y_, v_ in zip(src[k], ids[k], y[k], valid[k]):
            if v_:
                assert y_ == _labels(srcs[s_])[int(i_)], (s_, i_, y_)
                row.append((int(s_), int(i_)))
        out.append(row)
    return out


def _stream_lens(n, d):
    return [n // d + (1 if k < n % d else 0) for k in range(d)]


def test_mixture_elastic_4_to_8(mix_server, sources):  # noqa: F811
    seed = int(os.environ.get("MESHFEED_TEST_SEED", random.randrange(1 << 30)))
    print(f"MESHFEED_TEST_SEED={seed}")
    rnd = random.Random(seed)
    weights = [0.5, 0.3, 0.2]
    mix = _mixture(sources, weights)
    kw = dict(global_batch_size=B, server=mix_server.address)
    with meshfeed.Loader(mix, sharding=_sharding(4), **kw) as ld:
        full4 = [_rows(b, sources, 4) for b in ld]
    # Each old slice's rows of each source, in order: its first epoch's stream.
    seq = [[[r for st in full4 for r in st[d] if r[0] == i] for d in range(4)] for i in range(3)]
    k = rnd.randrange(1, 10)  # every old slice still inside every source's first epoch
    with meshfeed.Loader(mix, sharding=_sharding(4), **kw) as ld:
        it = iter(ld)
        before = [_rows(next(it), sources, 4) for _ in range(k)]
        state = json.loads(json.dumps(ld.state()))
    pos = state["mixture"]["positions"]
    for i in range(3):
        assert all(pos[i] == sum(1 for st in before for r in st[d] if r[0] == i) for d in range(4))
        assert pos[i] < min(_stream_lens(SIZES[i], 4))

    with pytest.raises(meshfeed.StateMismatchError, match="elastic=True"):
        meshfeed.Loader(mix, sharding=_sharding(8), state=state, **kw)
    with meshfeed.Loader(mix, sharding=_sharding(8), state=state, elastic=True, **kw) as ld:
        steps = ld.steps_per_epoch
        it = iter(ld)
        after = [_rows(next(it), sources, 8) for _ in range(2)]
        mid = json.loads(json.dumps(ld.state()))
        after += [_rows(b, sources, 8) for b in it]
    assert len(after) == steps - k > 0
    assert mid["elastic"] == {"from_slices": 4, "epoch": 0, "step": k}
    # The state's positions after the switch: rows per old slice up to k, plus
    # rows per new slice since (every slice alike).
    for i in range(3):
        assert all(mid["mixture"]["positions"][i] == pos[i] + sum(1 for st in after[:2] for r in st[d] if r[0] == i)
                   for d in range(8)), (i, mid["mixture"])

    for i in range(3):
        # The contract: the rest of each old slice's first epoch, slice after
        # slice, split into 8 contiguous parts; new slice d' reads part d'.
        rem = [r for d in range(4) for r in seq[i][d][pos[i]:_stream_lens(SIZES[i], 4)[d]]]
        assert len(rem) == SIZES[i] - 4 * pos[i]
        lens = _stream_lens(len(rem), 8)
        at = 0
        for d in range(8):
            got = [r for st in after for r in st[d] if r[0] == i]
            part = rem[at:at + lens[d]]
            at += lens[d]
            assert got[:len(part)] == part, f"source {i} slice {d}: {got[:len(part)]} != {part}"
        # Every row of the first epoch once across the switch (all_exhausted).
        first = [r for st in before for sl in st for r in sl if r[0] == i] + rem
        ids = set(pq.read_table(os.path.dirname(sources[i]), columns=["id"])["id"].to_pylist())
        assert sorted(x for _, x in first) == sorted(ids)
    # Proportions from the switch on: per new slice, within one row of the quota.
    w = np.asarray(weights) / sum(weights)
    cum = np.zeros((8, 3))
    for j, st in enumerate(after, 1):
        for d in range(8):
            for s_, _ in st[d]:
                cum[d, s_] += 1
        assert np.all(np.abs(cum - j * (B // 8) * w) < 1), (k + j, cum)

    # Resumed inside the run after the switch, with the same 8: the suffix.
    with meshfeed.Loader(mix, sharding=_sharding(8), state=mid, **kw) as ld:
        assert [_rows(b, sources, 8) for b in ld] == after[2:]
    # Another degree again: refused (a mixture changes its degree once).
    with pytest.raises(meshfeed.StateMismatchError, match="once"):
        meshfeed.Loader(mix, sharding=_sharding(2), state=mid, elastic=True, **kw)


def test_mixture_elastic_with_reweight(mix_server, sources):  # noqa: F811
    mix = _mixture(sources, [0.5, 0.3, 0.2], stop=30)
    kw = dict(global_batch_size=B, server=mix_server.address)
    k = 5
    with meshfeed.Loader(mix, sharding=_sharding(4), **kw) as ld:
        it = iter(ld)
        before = [_rows(next(it), sources, 4) for _ in range(k)]
        state = ld.state()
    new = [0.1, 0.1, 0.8]
    with meshfeed.Loader(_mixture(sources, new, stop=30), sharding=_sharding(8), state=state,
                         elastic=True, reweight=True, **kw) as ld:
        after = [_rows(b, sources, 8) for b in ld]
    assert len(after) == 30 - k
    w = np.asarray(new) / sum(new)
    cum = np.zeros((8, 3))
    for j, st in enumerate(after, 1):
        for d in range(8):
            for s_, _ in st[d]:
                cum[d, s_] += 1
        assert np.all(np.abs(cum - j * (B // 8) * w) < 1), (k + j, cum)
    # Nothing replayed: each source's rows on each new slice, as long as its
    # remainder lasts, are rows it had not delivered before the switch.
    seen = {r for st in before for sl in st for r in sl}
    for i in range(3):
        lens = _stream_lens(SIZES[i] - 4 * state["mixture"]["positions"][i], 8)
        for d in range(8):
            fresh = [r for st in after for r in st[d] if r[0] == i][:lens[d]]
            assert fresh and not set(fresh) & seen, (i, d)


def test_mixture_reweight_after_the_switch_removing_a_source(mix_server, sources):  # noqa: F811
    """4 -> 8 devices at step k1, then at k2 > k1 a reweight without source
    1: sources 0 and 2 go on, on every new slice, with exactly the rows the
    uninterrupted run (switched at k1, not reweighted) delivers after k2.
    The ticket carries the positions at the switch (the client walks the
    saved mixture for them): the server needs them for the remainders, and
    cannot recompute them without source 1."""
    seed = int(os.environ.get("MESHFEED_TEST_SEED", random.randrange(1 << 30)))
    print(f"MESHFEED_TEST_SEED={seed}")
    rnd = random.Random(seed)

    def mix(keep, weights):
        return meshfeed.Mixture([meshfeed.Source(sources[i], weight=w, columns=["id", "label"], rename={"label": "y"},
                                                 shuffle=meshfeed.Shuffle(seed=i, window=16) if i != 1 else None)
                                 for i, w in zip(keep, weights)], stop=30, source_column="source", seed=3)

    kw = dict(global_batch_size=B, server=mix_server.address)
    full = mix([0, 1, 2], [0.5, 0.3, 0.2])
    k1 = rnd.randrange(1, 8)
    with meshfeed.Loader(full, sharding=_sharding(4), **kw) as ld:
        it = iter(ld)
        for _ in range(k1):
            next(it)
        state = json.loads(json.dumps(ld.state()))
    with meshfeed.Loader(full, sharding=_sharding(8), state=state, elastic=True, **kw) as ld:
        run = [_rows(b, sources, 8) for b in ld]
    k2 = k1 + rnd.randrange(1, 6)
    with meshfeed.Loader(full, sharding=_sharding(8), state=state, elastic=True, **kw) as ld:
        it = iter(ld)
        for _ in range(k2 - k1):
            next(it)
        mid = json.loads(json.dumps(ld.state()))
    assert mid["elastic"]["step"] == k1
    with meshfeed.Loader(mix([0, 2], [0.7, 0.3]), sharding=_sharding(8), state=mid, reweight=True, **kw) as ld:
        after = [_rows(b, [sources[0], sources[2]], 8) for b in ld]
    assert len(after) == 30 - k2
    for j, i in enumerate([0, 2]):
        for d in range(8):
            got = [r[1] for st in after for r in st[d] if r[0] == j]
            want = [r[1] for st in run[k2 - k1:] for r in st[d] if r[0] == i]
            n = min(len(got), len(want))
            assert n > 0 and got[:n] == want[:n], (seed, k1, k2, i, d, got[:n], want[:n])
