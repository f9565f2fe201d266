"""Elastic resume of a packed token column (``Column(length=, pack_ratio=)``):
a state saved on 4 data devices resumes on 8 (docs/CONTRACT-elastic.md,
"Packing"). The packed global batch keeps its shape across the switch, every
sequence of the epoch arrives once, each new slice holds its source rows packed
first-fit; a ratio that would change the packed shape is refused when the
Loader is built."""

import json

import jax
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import meshfeed

B, L, R = 64, 64, 4  # tokens_server: 2..12 tokens a row; 16 rows (b on 4 slices) into 4 packed rows, 8 into 2


def _sharding(D):
    """The 8 CPU devices with the batch dimension split D ways."""
    return NamedSharding(jax.make_mesh((D, 8 // D), ("data", "model")), P("data"))


def _kw(srv, ratio=R):
    return dict(global_batch_size=B, last_batch="drop", shuffle=meshfeed.Shuffle(seed=5, window=40), num_epochs=1,
                server=srv.address, columns={"tokens": meshfeed.Column(length=L, pack_ratio=ratio)})


def _sequences(batch):
    """The sequences of a packed batch, row by row, segment by segment."""
    toks, segs, pos = (np.asarray(batch[k]) for k in ("tokens", "tokens_segment_ids", "tokens_positions"))
    out = []
    for row, seg, p in zip(toks, segs, pos):
        for s in range(1, int(seg.max(initial=0)) + 1):
            at = np.nonzero(seg == s)[0]
            assert (p[at] == np.arange(len(at))).all() and (np.diff(at) == 1).all()
            out.append(tuple(row[at].tolist()))
        assert (row[seg == 0] == 0).all() and (p[seg == 0] == 0).all()
    return out


def _first_fit(seqs, rows):
    """Packs seqs first-fit in order into ``rows`` rows of L (shape.Pack's rule)."""
    toks, segs, pos = (np.zeros((rows, L), np.int32) for _ in range(3))
    used, n = [0] * rows, [0] * rows
    for s in seqs:
        r = next(i for i in range(rows) if L - used[i] >= len(s))
        n[r] += 1
        toks[r, used[r]:used[r] + len(s)], segs[r, used[r]:used[r] + len(s)] = s, n[r]
        pos[r, used[r]:used[r] + len(s)] = np.arange(len(s))
        used[r] += len(s)
    return toks, segs, pos


def test_packed_elastic_resume_4_to_8(tokens_server):
    srv, glob = tokens_server
    kw = _kw(srv)
    with meshfeed.Loader(glob, sharding=_sharding(4), **kw) as ld:
        spe = ld.steps_per_epoch
        epoch = [s for b in ld for s in _sequences(b)]
    assert len(epoch) == spe * B
    k = 3
    with meshfeed.Loader(glob, sharding=_sharding(4), **kw) as ld:
        it = iter(ld)
        before = [next(it) for _ in range(k)]
        saved = json.loads(json.dumps(ld.state()))
    with meshfeed.Loader(glob, sharding=_sharding(8), state=saved, elastic=True, **kw) as ld:
        rest = list(ld)
    assert len(rest) == spe - k
    shape = (4 * -(-(B // 4) // R), L)  # 4 x ceil(16/4) = 8 x ceil(8/4) = 16 packed rows
    for b in before + rest:
        assert b["tokens"].shape == b["tokens_segment_ids"].shape == b["tokens_positions"].shape == shape
    assert rest[0]["tokens"].sharding == _sharding(8)
    across = [s for b in before + rest for s in _sequences(b)]
    assert sorted(across) == sorted(epoch)  # every sequence of the epoch once
    # Each new slice holds its source rows packed first-fit: the same run and
    # resume unpacked give each slice's rows in order; packing them gives the batch.
    unpacked = dict(kw, columns={"tokens": meshfeed.Column(length=L)})
    with meshfeed.Loader(glob, sharding=_sharding(4), **unpacked) as ld:
        it = iter(ld)
        for _ in range(k):
            next(it)
        saved_plain = ld.state()
    with meshfeed.Loader(glob, sharding=_sharding(8), state=saved_plain, elastic=True, **unpacked) as ld:
        plain = list(ld)
    assert len(plain) == len(rest)
    b2, p2 = B // 8, -(-(B // 8) // R)
    for got, want in zip(rest, plain):
        toks, lens = np.asarray(want["tokens"]), np.asarray(want["tokens_length"])
        for d in range(8):
            seqs = [toks[i, :lens[i]].tolist() for i in range(d * b2, (d + 1) * b2)]
            wt, ws, wp = _first_fit(seqs, p2)
            rows = slice(d * p2, (d + 1) * p2)
            np.testing.assert_array_equal(np.asarray(got["tokens"])[rows], wt)
            np.testing.assert_array_equal(np.asarray(got["tokens_segment_ids"])[rows], ws)
            np.testing.assert_array_equal(np.asarray(got["tokens_positions"])[rows], wp)


def test_packed_elastic_shape_change_refused(tokens_server):
    srv, glob = tokens_server
    kw = _kw(srv, ratio=6)  # 4 x ceil(16/6) = 12 packed rows, 8 x ceil(8/6) = 16
    with meshfeed.Loader(glob, sharding=_sharding(4), **kw) as ld:
        it = iter(ld)
        next(it)
        saved = ld.state()
    with pytest.raises(meshfeed.InvalidRequestError) as e:
        meshfeed.Loader(glob, sharding=_sharding(8), state=saved, elastic=True, **kw).close()
    msg = e.value.server_message
    for want in ("num_slices 4 to 8", "pack_ratio 6", "12 rows", "16 rows", "largest is 8"):
        assert want in msg, f"{want!r} not in {msg!r}"
