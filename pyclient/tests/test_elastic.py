"""Elastic resume from Python: a state saved under data-parallel degree D
resumes under D' (docs/CONTRACT-elastic.md). Across the switch, the epoch's
rows are delivered exactly once; from the next epoch on the loader delivers
what a fresh loader with D' delivers."""

import json

import jax
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import meshfeed
from conftest import ROWS

B = 96  # a multiple of 8, 4 and 2; 1000 rows: 11 steps with pad (last one padded), 10 with drop


def _sharding(D):
    """A sharding of the 8 CPU devices whose batch dimension is split D ways."""
    mesh = jax.make_mesh((D, 8 // D), ("data", "model"))
    return NamedSharding(mesh, P("data"))


def _real_ids(batch, policy):
    ids = np.asarray(batch["id"])
    return ids[np.asarray(batch["valid"])] if policy == "pad" else ids


def _kw(server, policy):
    return dict(global_batch_size=B, last_batch=policy, shuffle=meshfeed.Shuffle(seed=3, window=50),
                num_epochs=2, server=server.address, columns=["id"])


@pytest.mark.parametrize("policy", ["pad", "drop"])
@pytest.mark.parametrize("old,new", [(8, 2), (8, 4), (4, 8)])
def test_elastic_resume_changes_D(server, glob, policy, old, new):
    kw = _kw(server, policy)
    with meshfeed.Loader(glob, sharding=_sharding(old), **kw) as ld:
        spe = ld.steps_per_epoch
        full_old = [_real_ids(b, policy) for b in ld]
    epoch0 = np.concatenate(full_old[:spe])
    assert len(np.unique(epoch0)) == len(epoch0) == (ROWS if policy == "pad" else spe * B)
    with meshfeed.Loader(glob, sharding=_sharding(new), **kw) as ld:
        fresh_new = [np.asarray(b["id"]) for b in ld]

    k = 4
    with meshfeed.Loader(glob, sharding=_sharding(old), **kw) as ld:
        it = iter(ld)
        before = [_real_ids(next(it), policy) for _ in range(k)]
        saved = json.loads(json.dumps(ld.state()))
    assert saved["position"] == {"epoch": 0, "step": k} and "elastic" not in saved

    with pytest.raises(meshfeed.StateMismatchError, match="elastic=True"):
        meshfeed.Loader(glob, sharding=_sharding(new), state=saved, **kw)

    with meshfeed.Loader(glob, sharding=_sharding(new), state=saved, elastic=True, **kw) as ld:
        it = iter(ld)
        rest = [next(it) for _ in range(2)]
        mid = json.loads(json.dumps(ld.state()))  # inside the remainder epoch
        rest += list(it)
    assert len(rest) == (spe - k) + spe, "the epoch keeps its steps; then one whole epoch"
    across = np.concatenate(before + [_real_ids(b, policy) for b in rest[:spe - k]])
    np.testing.assert_array_equal(np.sort(across), np.sort(epoch0))  # exactly once, none lost
    for got, want in zip(rest[spe - k:], fresh_new[spe:]):
        np.testing.assert_array_equal(np.asarray(got["id"]), want)  # epoch 1: the plain plan with D'

    # A state saved inside the remainder epoch carries the switch and resumes
    # it with D'; with yet another D it is refused until the epoch ends.
    assert mid["position"] == {"epoch": 0, "step": k + 2}
    assert mid["elastic"] == {"from_slices": old, "epoch": 0, "step": k}
    with meshfeed.Loader(glob, sharding=_sharding(new), state=mid, **kw) as ld:
        tail = list(ld)
    assert len(tail) == len(rest) - 2
    for got, want in zip(tail, rest[2:]):
        np.testing.assert_array_equal(np.asarray(got["id"]), np.asarray(want["id"]))
    other = 2 if new != 2 else 4
    with pytest.raises(meshfeed.StateMismatchError, match="inside the epoch of an elastic switch"):
        meshfeed.Loader(glob, sharding=_sharding(other), state=mid, elastic=True, **kw)


def test_elastic_at_an_epoch_boundary_is_the_plain_plan(server, glob):
    kw = _kw(server, "pad")
    with meshfeed.Loader(glob, sharding=_sharding(8), **kw) as ld:
        for _ in range(ld.steps_per_epoch):
            next(ld)
        saved = ld.state()
    assert saved["position"] == {"epoch": 1, "step": 0}
    with meshfeed.Loader(glob, sharding=_sharding(2), state=saved, elastic=True, **kw) as ld:
        got = [np.asarray(b["id"]) for b in ld]
        assert "elastic" not in ld.state()
    with meshfeed.Loader(glob, sharding=_sharding(2), **kw) as ld:
        want = [np.asarray(b["id"]) for b in ld][ld.steps_per_epoch:]
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


def test_elastic_remainder_survives_a_server_restart(binary, tmp_path):
    """The loader's own server is killed inside the remainder epoch: the loader
    starts another and resumes the remainder where it stopped (its tickets
    still name the switch), so the epoch's rows still arrive exactly once.
    Rows of 64 KiB make each step 6 MiB, more than gRPC buffers ahead, so the
    kill breaks the stream inside the remainder."""
    import os
    import signal
    import subprocess

    out = tmp_path / "wide"
    subprocess.run([binary, "gen", "--out", str(out), "--rows", str(ROWS), "--files", "2",
                    "--row-group-rows", "100", "--features", "16384"], check=True, capture_output=True)
    glob = str(out / "*.parquet")
    kw = dict(global_batch_size=B, last_batch="pad", shuffle=meshfeed.Shuffle(seed=3, window=50),
              num_epochs=1, prefetch=1)
    k = 3
    with meshfeed.Loader(glob, sharding=_sharding(8), **kw) as ld:
        it = iter(ld)
        before = [_real_ids(next(it), "pad") for _ in range(k)]
        saved = ld.state()
    with meshfeed.Loader(glob, sharding=_sharding(2), state=saved, elastic=True, **kw) as ld:
        it = iter(ld)
        rest = [_real_ids(next(it), "pad")]
        pid = ld.server_pid
        os.kill(pid, signal.SIGKILL)
        rest += [_real_ids(b, "pad") for b in it]
        assert ld.server_pid != pid and ld.stats()["recoveries"] >= 1
    ids = np.concatenate(before + rest)
    np.testing.assert_array_equal(np.sort(ids), np.arange(ROWS))
