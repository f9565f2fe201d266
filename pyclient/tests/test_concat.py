"""Concatenate-then-split packing (``Column(pack="concat")``) through the Loader,
against a numpy model of the contract built from the ``tokenizers`` library's
ids: documents in file order, each followed by the end-of-document token, cut
into rows of L tokens, the rows split into D streams; resume mid-document."""

import json
import pathlib
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import jax
import meshfeed
from meshfeed._src.server import LocalServer

tokenizers = pytest.importorskip("tokenizers")
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "testdata"))
import tokenizer_families  # noqa: E402

L, B, D = 48, 16, 8
WORDS = ("the quick brown fox jumps over a lazy dog while seven zebras quietly "
         "vex the jovial klutz; ünïcödé façade naïve 東京 😀 ").split()


def _docs(n: int, seed: int) -> list[str]:
    """Documents of 0 to 120 words, a few very long ones (several rows each)."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        k = int(rng.integers(0, 40)) if i % 9 else int(rng.integers(80, 160))
        out.append(" ".join(rng.choice(WORDS, size=k)))
    return out


@pytest.fixture(scope="module")
def text_data(tmp_path_factory, binary):
    """Two Parquet files of 61 and 52 documents in row groups of 13, a
    byte-level BPE tokenizer trained on them (with <|endoftext|>), and a
    server allowed to read both."""
    root = tmp_path_factory.mktemp("concat")
    docs = _docs(113, 7)
    pq.write_table(pa.table({"text": docs[:61]}), root / "a.parquet", row_group_size=13)
    pq.write_table(pa.table({"text": docs[61:]}), root / "b.parquet", row_group_size=13)
    tok_path = root / "tokenizer.json"
    tok_path.write_text(tokenizer_families.gpt2(docs))
    srv = LocalServer(binary, [str(root)])
    yield srv, str(root / "*.parquet"), str(tok_path), docs
    srv.stop()


def model(docs: list[str], tok_path: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The epoch's packed rows (tokens, segment ids, positions), each [R, L]."""
    tok = tokenizers.Tokenizer.from_file(tok_path)
    eod = tok.token_to_id("<|endoftext|>")
    seq, doc = [], []
    for i, enc in enumerate(tok.encode_batch(docs)):
        seq += enc.ids + [eod]
        doc += [i] * (len(enc.ids) + 1)
    r = -(-len(seq) // L)
    toks = np.zeros(r * L, np.int32)
    toks[:len(seq)] = seq
    docs_of = np.full(r * L, -1)
    docs_of[:len(doc)] = doc
    toks, docs_of = toks.reshape(r, L), docs_of.reshape(r, L)
    # A segment starts at each row's first token and wherever the document changes.
    start = np.ones_like(docs_of, bool)
    start[:, 1:] = docs_of[:, 1:] != docs_of[:, :-1]
    real = docs_of >= 0
    seg = np.where(real, np.cumsum(start & real, axis=1), 0).astype(np.int32)
    idx = np.arange(L)[None, :].repeat(r, 0)
    first = np.maximum.accumulate(np.where(start, idx, 0), axis=1)
    pos = np.where(real, idx - first, 0).astype(np.int32)
    return toks, seg, pos


def global_step(rows: np.ndarray, step: int) -> np.ndarray:
    """Step ``step``'s global batch: slice d is packed rows [step*b, (step+1)*b)
    of stream d, the R rows split into D contiguous streams."""
    r, b = len(rows), B // D
    starts = [d * (r // D) + min(d, r % D) for d in range(D)]
    return np.concatenate([rows[s + step * b:s + (step + 1) * b] for s in starts])


def test_concat_against_model_and_resume_mid_document(text_data):
    srv, glob, tok_path, docs = text_data
    sharding = NamedSharding(jax.make_mesh((D,), ("data",)), P("data"))
    cols = {"text": meshfeed.Column(tokenizer=tok_path, length=L, pack="concat")}
    kw = dict(global_batch_size=B, sharding=sharding, columns=cols, last_batch="drop", server=srv.address, num_epochs=2)
    toks, seg, pos = model(docs, tok_path)
    steps = len(toks) // B
    with meshfeed.Loader(glob, **kw) as loader:
        got = [{k: np.asarray(v) for k, v in batch.items()} for batch in loader]
    assert len(got) == 2 * steps
    for i, batch in enumerate(got):
        s = i % steps
        np.testing.assert_array_equal(batch["text"], global_step(toks, s), err_msg=f"step {i} tokens")
        np.testing.assert_array_equal(batch["text_segment_ids"], global_step(seg, s), err_msg=f"step {i} segment ids")
        np.testing.assert_array_equal(batch["text_positions"], global_step(pos, s), err_msg=f"step {i} positions")
    # Resume at a step whose first row of stream 0 starts inside a document:
    # the row before it (stream 0 starts at row 0) does not end with <|endoftext|>.
    b = B // D
    eod = tokenizers.Tokenizer.from_file(tok_path).token_to_id("<|endoftext|>")
    k = next(s for s in range(1, steps) if toks[s * b - 1][-1] != eod)
    with meshfeed.Loader(glob, **kw) as loader:
        it = iter(loader)
        for _ in range(k):
            next(it)
        saved = json.loads(json.dumps(loader.state()))
    assert saved["position"] == {"epoch": 0, "step": k}
    with meshfeed.Loader(glob, state=saved, **kw) as loader:
        tail = [np.asarray(batch["text"]) for batch in loader]
    assert len(tail) == len(got) - k
    for i, t in enumerate(tail):
        np.testing.assert_array_equal(t, got[k + i]["text"], err_msg=f"resumed step {k + i}")


def test_concat_without_end_token_is_refused(text_data, tmp_path):
    srv, glob, tok_path, _ = text_data
    sharding = NamedSharding(jax.make_mesh((D,), ("data",)), P("data"))
    cols = {"text": meshfeed.Column(tokenizer=tok_path, length=L, pack="concat", eod_token="<nope>")}
    with pytest.raises(ValueError, match="eod_token"):
        meshfeed.Loader(glob, global_batch_size=B, sharding=sharding, columns=cols, last_batch="drop", server=srv.address)


def _rows(batch: dict) -> set[bytes]:
    """The packed rows of a batch (tokens, segment ids, positions), as keys."""
    parts = [np.asarray(batch[k]) for k in ("text", "text_segment_ids", "text_positions")]
    return {b"".join(p[i].tobytes() for p in parts) for i in range(len(parts[0]))}


@pytest.mark.parametrize("old,new", [(8, 2), (2, 4)])
def test_concat_elastic_resume(text_data, old, new):
    """A state saved under D resumes under D' (elastic=True): the epoch's
    packed rows are delivered once each across the switch, in the model's
    rows, and the next epoch is a fresh loader's with D'."""
    srv, glob, tok_path, docs = text_data

    def sharding(d):
        return NamedSharding(jax.make_mesh((d, 8 // d), ("data", "model")), P("data"))

    cols = {"text": meshfeed.Column(tokenizer=tok_path, length=L, pack="concat")}
    kw = dict(global_batch_size=B, columns=cols, last_batch="drop", server=srv.address, num_epochs=2)
    toks, seg, pos = model(docs, tok_path)
    steps = len(toks) // B
    want = set()
    for s in range(steps):  # the epoch under D = old: stream d is packed rows [starts[d], ...)
        r, b = len(toks), B // old
        for d in range(old):
            start = d * (r // old) + min(d, r % old) + s * b
            for i in range(start, start + b):
                want.add(toks[i].tobytes() + seg[i].tobytes() + pos[i].tobytes())
    k = steps // 2
    with meshfeed.Loader(glob, sharding=sharding(old), **kw) as ld:
        it = iter(ld)
        got = [_rows(next(it)) for _ in range(k)]
        saved = json.loads(json.dumps(ld.state()))
    with meshfeed.Loader(glob, sharding=sharding(new), state=saved, elastic=True, **kw) as ld:
        rest = [_rows(b) for b in ld]
    with meshfeed.Loader(glob, sharding=sharding(new), **kw) as ld:
        fresh = [_rows(b) for b in ld]
    assert len(rest) == 2 * steps - k
    epoch0 = got + rest[:steps - k]
    assert sum(len(r) for r in epoch0) == len(want) == steps * B
    assert set().union(*epoch0) == want
    assert rest[steps - k:] == fresh[steps:]
