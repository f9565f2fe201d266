"""A string column requested with ``Column(tokenizer=...)`` arrives as the ids
the reference ``tokenizers`` library gives, then shaped as a list column.

A text dataset is generated with ``meshfeed gen-text`` from the Python
standard library (mixed with other scripts, emoji and odd whitespace); the
tokenizer files are trained here with the library's own trainers
(testdata/tokenizer_families.py). Every delivered row is compared with
``tokenizers.Tokenizer.from_file(f).encode(text).ids``: per document
(truncated and padded to a length), without special tokens, and packed.
Resuming a state with another tokenizer is refused naming both hashes; bad
input fails with errors naming the file and column.

The corpus seed is MESHFEED_TEST_SEED (printed) or random.
"""

from __future__ import annotations

import collections
import functools
import hashlib
import os
import pathlib
import random
import shutil
import subprocess
import sys
import sysconfig

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import jax
import meshfeed
from meshfeed._src.server import LocalServer

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "testdata"))

import tokenizer_families as families  # noqa: E402
import transform_fns  # noqa: E402  (worker processes import it: NumPy only)

tokenizers = pytest.importorskip("tokenizers")

DOCS, B, L = 96, 16, 48


@pytest.fixture(scope="module")
def seed() -> int:
    s = int(os.environ.get("MESHFEED_TEST_SEED", random.randrange(1 << 32)))
    print(f"MESHFEED_TEST_SEED={s}")
    return s


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, binary, seed) -> tuple[str, list[str]]:
    """The text dataset (glob) and its documents by id."""
    out = tmp_path_factory.mktemp("text") / "ds"
    stdlib = sysconfig.get_paths()["stdlib"]
    subprocess.run([binary, "gen-text", "--out", str(out), "--source", stdlib, "--docs", str(DOCS), "--files", "2",
                    "--row-group-rows", "16", "--min-chars", "20", "--max-chars", "1500", "--seed", str(seed)],
                   check=True, capture_output=True)
    t = pq.read_table(out)
    texts = dict(zip(t.column("id").to_pylist(), t.column("text").to_pylist()))
    return str(out / "*.parquet"), [texts[i] for i in range(DOCS)]


@pytest.fixture(scope="module")
def trained(tmp_path_factory, corpus) -> dict[str, pathlib.Path]:
    """Tokenizer files trained on the corpus: byte-level BPE (GPT-2, no
    specials added), WordPiece (BERT: [CLS] ... [SEP]) and Llama 2's
    byte-fallback BPE (BOS)."""
    _, texts = corpus
    d = tmp_path_factory.mktemp("tokenizers")
    files = {}
    for name in ("gpt2", "bert", "llama2"):
        path = d / f"{name}.json"
        path.write_text(getattr(families, name)(texts), encoding="utf-8")
        files[name] = path
    return files


def sharding() -> NamedSharding:
    return NamedSharding(jax.make_mesh((8,), ("data",)), P("data"))


def sha256(path: pathlib.Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("special", [True, False], ids=["special", "no_special"])
@pytest.mark.parametrize("family", ["gpt2", "bert", "llama2"])
def test_every_row_matches_tokenizers(family, special, corpus, trained):
    glob, texts = corpus
    ref = tokenizers.Tokenizer.from_file(str(trained[family]))
    want = {i: e.ids for i, e in enumerate(ref.encode_batch(texts, add_special_tokens=special))}
    cols = {"id": meshfeed.Column(),
            "text": meshfeed.Column(tokenizer=trained[family], add_special_tokens=special, length=L,
                                    overflow="truncate", fill=-1)}
    seen = collections.Counter()
    with meshfeed.Loader(glob, global_batch_size=B, sharding=sharding(), columns=cols, last_batch="drop",
                         num_epochs=1, shuffle=meshfeed.Shuffle(seed=3, window=8)) as loader:
        for batch in loader:
            assert batch["text"].shape == (B, L) and batch["text"].dtype == np.int32
            ids, toks, lens = (np.asarray(batch[k]) for k in ("id", "text", "text_length"))
            for i, row, n in zip(ids.tolist(), toks, lens.tolist()):
                w = want[i][:L]
                assert n == len(w), (i, n, len(w))
                assert row[:n].tolist() == w, f"{family} id {i}: {row[:n].tolist()} != {w}"
                assert (row[n:] == -1).all()
                seen[i] += 1
    assert sorted(seen) == list(range(DOCS)) and set(seen.values()) == {1}
    assert any(len(w) > L for w in want.values()) and any(len(w) < L for w in want.values())


def test_packed_rows_match_tokenizers(corpus, trained):
    """Packed rows hold, over an epoch, each document's ids (truncated to the
    length) once, segments numbered from 1 and positions from 0 (two devices:
    slices of 16 documents packed into 8 rows, room for the longest)."""
    glob, texts = corpus
    ref = tokenizers.Tokenizer.from_file(str(trained["bert"]))
    PL, PB = 1024, 32
    want = sorted(tuple(e.ids[:PL]) for e in ref.encode_batch(texts))
    got = []
    two = NamedSharding(jax.sharding.Mesh(np.array(jax.devices()[:2]), ("data",)), P("data"))
    cols = {"text": meshfeed.Column(tokenizer=trained["bert"], length=PL, overflow="truncate", pack_ratio=2)}
    with meshfeed.Loader(glob, global_batch_size=PB, sharding=two, columns=cols, last_batch="drop",
                         num_epochs=1) as loader:
        for batch in loader:
            toks, segs, pos = (np.asarray(batch[k]) for k in ("text", "text_segment_ids", "text_positions"))
            assert toks.shape == (PB // 2, PL)
            for row, seg, p in zip(toks, segs, pos):
                for s in np.unique(seg[seg > 0]):
                    at = np.nonzero(seg == s)[0]
                    assert (p[at] == np.arange(len(at))).all()
                    got.append(tuple(row[at].tolist()))
    assert sorted(got) == want


@pytest.mark.parametrize("workers", [0, 2], ids=["threads", "processes"])
def test_packed_rows_through_a_transform(corpus, trained, workers):
    """A transform of a packed tokenized column gets the packed rows (8 a
    slice for 16 documents) and its outputs are placed as them: the packed
    step without a transform, plus one."""
    glob, _ = corpus
    PL, PB = 1024, 32
    two = NamedSharding(jax.sharding.Mesh(np.array(jax.devices()[:2]), ("data",)), P("data"))
    cols = {"text": meshfeed.Column(tokenizer=trained["bert"], length=PL, overflow="truncate", pack_ratio=2)}

    def steps(**kw):
        with meshfeed.Loader(glob, global_batch_size=PB, sharding=two, columns=cols, last_batch="drop",
                             num_epochs=1, **kw) as loader:
            return [{k: np.asarray(v) for k, v in b.items()} for b in loader]

    plain = steps()
    got = steps(transform=functools.partial(transform_fns.packed_tokens, key="text"), transform_workers=workers)
    assert len(got) == len(plain) > 0
    for s, (g, p) in enumerate(zip(got, plain)):
        assert g["text"].shape == p["text"].shape == (PB // 2, PL)
        np.testing.assert_array_equal(g["text"], p["text"] + 1, err_msg=f"step {s}")
        np.testing.assert_array_equal(g["text_segment_ids"], p["text_segment_ids"], err_msg=f"step {s}")
        np.testing.assert_array_equal(g["text_count"], (p["text_segment_ids"] > 0).sum(axis=1))


def test_resume_with_another_tokenizer_is_refused(corpus, trained, tmp_path):
    glob, _ = corpus

    def loader(tok, state=None):
        cols = {"text": meshfeed.Column(tokenizer=tok, length=L, overflow="truncate")}
        return meshfeed.Loader(glob, global_batch_size=B, sharding=sharding(), columns=cols, last_batch="drop",
                               state=state)

    with loader(trained["gpt2"]) as a:
        next(iter(a))
        saved = a.state()
        first = np.asarray(next(iter(a))["text"])
    # The same file elsewhere resumes: the hash is the identity, not the path.
    moved = tmp_path / "moved.json"
    shutil.copy(trained["gpt2"], moved)
    with loader(moved, state=saved) as b:
        np.testing.assert_array_equal(np.asarray(next(iter(b))["text"]), first)
    with pytest.raises(meshfeed.StateMismatchError) as e:
        loader(trained["bert"], state=saved).close()
    msg = str(e.value)
    assert sha256(trained["gpt2"]) in msg and sha256(trained["bert"]) in msg and "'text'" in msg, msg


def test_bad_input(corpus, trained, tmp_path, binary):
    glob, _ = corpus
    bad = tmp_path / "malformed.json"
    bad.write_text('{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": [["a", "zz"]]}}')
    unsupported = tmp_path / "unsupported.json"
    doc = trained["gpt2"].read_text(encoding="utf-8").replace('"normalizer":null', '"normalizer":{"type":"Precompiled"}', 1)
    assert '"Precompiled"' in doc
    unsupported.write_text(doc, encoding="utf-8")

    def open_with(column: str, tok) -> None:
        meshfeed.Loader(glob, global_batch_size=B, sharding=sharding(), last_batch="drop",
                        columns={column: meshfeed.Column(tokenizer=tok, length=L, overflow="truncate")}).close()

    with pytest.raises(meshfeed.InvalidRequestError, match=r'(?s)column "text".*malformed\.json.*model\.merges\[0\]'):
        open_with("text", bad)
    with pytest.raises(meshfeed.InvalidRequestError, match=r'(?s)column "text".*unsupported\.json.*normalizer.*Precompiled'):
        open_with("text", unsupported)
    with pytest.raises(meshfeed.InvalidRequestError, match=r'(?s)column "id" of .*part-00000\.parquet is int64, not a string'):
        open_with("id", trained["gpt2"])
    with pytest.raises(meshfeed.NotFoundError, match=r"(?s)missing\.json"):
        open_with("text", tmp_path / "missing.json")
    with pytest.raises(ValueError, match="add_special_tokens"):
        meshfeed.Column(add_special_tokens=False)
    # A server that is not allowed the tokenizer's directory refuses it.
    srv = LocalServer(binary, [str(pathlib.Path(glob).parent)])
    try:
        with pytest.raises(meshfeed.PermissionDeniedError, match=r"(?s)tokenizer .*gpt2\.json.* not under an allowed root"):
            meshfeed.Loader(glob, global_batch_size=B, sharding=sharding(), last_batch="drop", server=srv.address,
                            columns={"text": meshfeed.Column(tokenizer=trained["gpt2"], length=L)}).close()
    finally:
        srv.stop()


def test_invalid_utf8_names_file_row_and_byte(trained, tmp_path):
    """The reference cannot take invalid UTF-8 (pyarrow's to_pylist raises);
    meshfeed refuses the row, naming file, row group, row and byte."""
    docs = [f"document {i}".encode() for i in range(24)]
    docs[19] = b"caf\xc3 au lait"
    arr = pa.array(docs, pa.binary()).view(pa.string())
    with pytest.raises(UnicodeDecodeError):
        arr.to_pylist()
    path = tmp_path / "bad.parquet"
    pq.write_table(pa.table({"text": arr}), path, row_group_size=8)
    cols = {"text": meshfeed.Column(tokenizer=trained["gpt2"], length=L, overflow="truncate")}
    with meshfeed.Loader(str(path), global_batch_size=8, sharding=sharding(), columns=cols, last_batch="drop") as loader:
        with pytest.raises(meshfeed.PlanError, match=r"(?s)bad\.parquet row group 2 row 3 \(row 19 of the file\).*column \"text\" byte 3.*not valid UTF-8"):
            for _ in loader:
                pass


def test_unshaped_column_is_a_list_per_row(corpus, trained):
    """Without a length the ids arrive as a variable-length list per row (a
    pyarrow array in the batch)."""
    glob, texts = corpus
    ref = tokenizers.Tokenizer.from_file(str(trained["llama2"]))
    cols = {"id": meshfeed.Column(), "text": meshfeed.Column(tokenizer=trained["llama2"])}
    with meshfeed.Loader(glob, global_batch_size=B, sharding=sharding(), columns=cols, last_batch="drop",
                         num_epochs=1, transport="flight") as loader:
        batch = next(iter(loader))
        lists = batch["text"]
        assert isinstance(lists, (pa.Array, pa.ChunkedArray)), type(lists)
        for i, row in zip(np.asarray(batch["id"]).tolist(), lists.to_pylist()):
            assert row == ref.encode(texts[i]).ids


def test_mixture_sources_tokenize_and_resume_checks_the_hash(corpus, trained):
    """Each source of a mixture tokenizes with its own tokenizer; a state
    resumes only with the same tokenizers (the refusal names both hashes)."""
    glob, texts = corpus
    refs = {f: tokenizers.Tokenizer.from_file(str(trained[f])) for f in ("gpt2", "llama2")}

    def mixture(second: str) -> meshfeed.Mixture:
        srcs = [meshfeed.Source(glob, weight=1.0, filters=[("id", op, DOCS // 2)],
                                columns={"id": meshfeed.Column(),
                                         "text": meshfeed.Column(tokenizer=trained[f], length=L, overflow="truncate")})
                for op, f in (("<", "gpt2"), (">=", second))]
        return meshfeed.Mixture(srcs, stop="first_exhausted", source_column="source", seed=1)

    with meshfeed.Loader(mixture("llama2"), global_batch_size=B, sharding=sharding(), last_batch="drop") as loader:
        for step, batch in enumerate(loader):
            ids, toks, src = (np.asarray(batch[k]) for k in ("id", "text", "source"))
            for i, row, s in zip(ids.tolist(), toks, src.tolist()):
                want = refs["gpt2" if s == 0 else "llama2"].encode(texts[i]).ids[:L]
                assert row[:len(want)].tolist() == want, (i, s)
            if step == 1:
                saved = loader.state()
    with pytest.raises(meshfeed.StateMismatchError) as e:
        meshfeed.Loader(mixture("bert"), global_batch_size=B, sharding=sharding(), last_batch="drop",
                        state=saved).close()
    msg = str(e.value)
    assert sha256(trained["llama2"]) in msg and sha256(trained["bert"]) in msg, msg
    # It says what differs: that source's column's tokenizer (not a dump of its columns).
    assert "another tokenizer" in msg and "source 1 column 'text'" in msg and "reweight=True" in msg, msg
    assert sha256(trained["gpt2"]) not in msg, msg


def _two_sources(glob: str, toks: tuple, weights: tuple = (1.0, 1.0)) -> meshfeed.Mixture:
    """Two halves of the corpus, each its text tokenized with its own file."""
    srcs = [meshfeed.Source(glob, weight=w, filters=[("id", op, DOCS // 2)],
                            columns={"id": meshfeed.Column(),
                                     "text": meshfeed.Column(tokenizer=t, length=L, overflow="truncate")})
            for op, t, w in zip(("<", ">="), toks, weights)]
    return meshfeed.Mixture(srcs, stop="first_exhausted", source_column="source", seed=1)


@pytest.mark.parametrize("reweight", [False, True], ids=["plain", "reweight"])
def test_mixture_resumes_with_the_tokenizers_moved(corpus, trained, tmp_path, reweight):
    """A mixture's source is the same source with its tokenizer.json moved
    (the hash is its identity, as for a plain loader): the resumed run
    continues the saved one step for step, reweighted (same weights) too."""
    glob, _ = corpus
    toks = (trained["gpt2"], trained["llama2"])
    with meshfeed.Loader(_two_sources(glob, toks), global_batch_size=B, sharding=sharding(),
                         last_batch="drop") as a:
        it = iter(a)
        next(it)
        saved = a.state()
        rest = [{k: np.asarray(v) for k, v in b.items()} for b in it]
    moved = []
    for t in toks:
        moved.append(tmp_path / f"moved-{t.name}")
        shutil.copy(t, moved[-1])
    with meshfeed.Loader(_two_sources(glob, tuple(moved)), global_batch_size=B, sharding=sharding(),
                         last_batch="drop", state=saved, reweight=reweight) as b:
        again = [{k: np.asarray(v) for k, v in x.items()} for x in b]
    assert len(again) == len(rest) > 0
    for s, (x, y) in enumerate(zip(again, rest)):
        for k in y:
            np.testing.assert_array_equal(x[k], y[k], err_msg=f"step {s} key {k}")


def test_mixture_reweight_with_another_tokenizer_is_another_source(corpus, trained):
    """With reweight=True, a source whose tokenizer has another hash is not
    the saved source (a new one, weight 0 before): with every source's
    tokenizer changed none is, which is refused; with one changed, it
    resumes, that source's rows tokenized by its new tokenizer."""
    glob, texts = corpus
    toks = (trained["gpt2"], trained["llama2"])
    with meshfeed.Loader(_two_sources(glob, toks), global_batch_size=B, sharding=sharding(),
                         last_batch="drop") as a:
        it = iter(a)
        next(it)
        saved = a.state()
    with pytest.raises(meshfeed.StateMismatchError, match="none of this mixture's sources"):
        meshfeed.Loader(_two_sources(glob, (trained["bert"], trained["bert"])), global_batch_size=B,
                        sharding=sharding(), last_batch="drop", state=saved, reweight=True).close()
    # Only source 1 changed: its rows are another source's (tokenized by bert).
    ref = tokenizers.Tokenizer.from_file(str(trained["bert"]))
    with meshfeed.Loader(_two_sources(glob, (trained["gpt2"], trained["bert"])), global_batch_size=B,
                         sharding=sharding(), last_batch="drop", state=saved, reweight=True) as b:
        got = {k: np.asarray(v) for k, v in next(iter(b)).items()}
    assert (got["source"] == 1).any()
    for i, row, s in zip(got["id"].tolist(), got["text"], got["source"].tolist()):
        if s == 1:
            want = ref.encode(texts[i]).ids[:L]
            assert row[:len(want)].tolist() == want, i



def _packed_sources(glob: str, toks: tuple, pl: int, **col) -> meshfeed.Mixture:
    """Two halves of the corpus, each its text tokenized with its own file
    and packed (pack_ratio 2 unless col says otherwise)."""
    kw = {"overflow": "truncate", "pack_ratio": 2, **col}
    srcs = [meshfeed.Source(glob, weight=w, filters=[("id", op, DOCS // 2)], shuffle=meshfeed.Shuffle(seed=i, window=8),
                            columns={"text": meshfeed.Column(tokenizer=t, length=pl, **kw)})
            for i, (op, t, w) in enumerate(zip(("<", ">="), toks, (0.6, 0.4)))]
    return meshfeed.Mixture(srcs, stop="first_exhausted", source_column="source", seed=1)


def test_mixture_of_packed_tokenized_sources(corpus, trained):
    """A mixture of two tokenized sources (gpt2 and llama2 files) packed
    first-fit: every step's slices of 16 composed rows become 8 packed rows
    of PL tokens; each segment's ids are its document's ids by its source's
    tokenizer (``tokenizers``), positions count from 0, the per-token
    source column is constant over a segment and -1 on padding; no
    document comes twice, and every step holds B documents."""
    glob, texts = corpus
    refs = {0: tokenizers.Tokenizer.from_file(str(trained["gpt2"])),
            1: tokenizers.Tokenizer.from_file(str(trained["llama2"]))}
    PL, PB = 1024, 32
    want = {s: {tuple(e.ids[:PL]) for e in refs[s].encode_batch(texts[lo:hi])}
            for s, (lo, hi) in enumerate(((0, DOCS // 2), (DOCS // 2, DOCS)))}
    two = NamedSharding(jax.sharding.Mesh(np.array(jax.devices()[:2]), ("data",)), P("data"))
    got: collections.Counter = collections.Counter()
    steps = 0
    with meshfeed.Loader(_packed_sources(glob, (trained["gpt2"], trained["llama2"]), PL), global_batch_size=PB,
                         sharding=two, last_batch="drop") as loader:
        for batch in loader:
            steps += 1
            toks, segs, pos, src = (np.asarray(batch[k]) for k in ("text", "text_segment_ids", "text_positions", "source"))
            assert toks.shape == src.shape == (PB // 2, PL) and src.dtype == np.int32
            for row, seg, p, sr in zip(toks, segs, pos, src):
                assert (sr[seg == 0] == -1).all() and (row[seg == 0] == 0).all()
                for s in np.unique(seg[seg > 0]):
                    at = np.nonzero(seg == s)[0]
                    assert (p[at] == np.arange(len(at))).all()
                    (which,) = set(sr[at].tolist())
                    ids = tuple(row[at].tolist())
                    assert ids in want[which], f"source {which}: a segment that is no document's ids by its tokenizer"
                    got[(which, ids)] += 1
    assert steps > 0 and sum(got.values()) == steps * PB
    assert set(got.values()) == {1}
    assert {w for w, _ in got} == {0, 1}


def test_mixture_of_packed_sources_resumes(corpus, trained):
    """A packed mixture's state resumes step for step (the rows follow from
    the composition's source rows); an elastic resume whose packed batch
    would change shape (8 -> 2 devices, b 2 -> 8 at pack_ratio 3: 8 x 1
    rows, then 2 x 3) is refused when the Loader is built, naming both."""
    glob, _ = corpus
    toks = (trained["gpt2"], trained["llama2"])
    mix = _packed_sources(glob, toks, 2048)
    with meshfeed.Loader(mix, global_batch_size=16, sharding=sharding(), last_batch="drop") as a:
        it = iter(a)
        next(it)
        saved = a.state()
        rest = [{k: np.asarray(v) for k, v in b.items()} for b in it]
    with meshfeed.Loader(mix, global_batch_size=16, sharding=sharding(), last_batch="drop", state=saved) as b:
        again = [{k: np.asarray(v) for k, v in x.items()} for x in b]
    assert len(again) == len(rest) > 0
    for s, (x, y) in enumerate(zip(again, rest)):
        assert set(x) == {"text", "text_segment_ids", "text_positions", "source"}
        for k in y:
            np.testing.assert_array_equal(x[k], y[k], err_msg=f"step {s} key {k}")
    three = _packed_sources(glob, toks, 2048, pack_ratio=3)
    with meshfeed.Loader(three, global_batch_size=16, sharding=sharding(), last_batch="drop") as a:
        next(iter(a))
        saved = a.state()
    two = NamedSharding(jax.sharding.Mesh(np.array(jax.devices()[:2]), ("data",)), P("data"))
    with pytest.raises(meshfeed.InvalidRequestError, match=r"elastic switch from num_slices 8 to 2 with pack_ratio 3"):
        meshfeed.Loader(three, global_batch_size=16, sharding=two, last_batch="drop", state=saved,
                        elastic=True).close()


def test_mixture_packing_refusals(corpus, trained):
    """Sources that pack differently are refused naming both; concatenated
    packing is refused saying why and what to use."""
    glob, _ = corpus
    toks = (trained["gpt2"], trained["llama2"])
    m = _packed_sources(glob, toks, 256)
    m2 = _packed_sources(glob, toks, 512)
    srcs = [m.sources[0], m2.sources[1]]
    with pytest.raises(meshfeed.InvalidRequestError, match=r"mixture source 1 \(.*\) packs \"text\" \(length 512.* but source 0"):
        meshfeed.Loader(meshfeed.Mixture(srcs, stop="first_exhausted", seed=1), global_batch_size=B,
                        sharding=sharding(), last_batch="drop").close()
    concat = _packed_sources(glob, toks, 256, pack="concat", pack_ratio=0)
    with pytest.raises(meshfeed.InvalidRequestError, match=r"pack \"concat\" is not supported in a mixture.*use pack_ratio"):
        meshfeed.Loader(concat, global_batch_size=B, sharding=sharding(), last_batch="drop").close()


def test_bench_mixture_spec_takes_column_fields(corpus, trained, tmp_path, binary):
    """``bench --mixture SPEC.json``: a spec's column objects take Column's
    fields (tokenizer, add_special_tokens, length, overflow, pack_ratio), as
    a name-keyed object or a list of objects with names; the spec is the
    Mixture built in Python (same identities), the bench reads its steps of
    packed rows; an unknown field is refused naming it."""
    import json
    glob, _ = corpus
    spec = {"sources": [
        {"data": glob, "weight": 0.6, "filters": [["id", "<", DOCS // 2]], "shuffle": {"seed": 0, "window": 8},
         "columns": {"text": {"tokenizer": str(trained["gpt2"]), "length": 1024, "overflow": "truncate", "pack_ratio": 2}}},
        {"data": glob, "weight": 0.4, "filters": [["id", ">=", DOCS // 2]], "shuffle": {"seed": 1, "window": 8},
         "columns": [{"name": "text", "tokenizer": str(trained["llama2"]), "length": 1024, "overflow": "truncate",
                      "pack_ratio": 2}]}],
        "stop": "first_exhausted", "source_column": "source", "seed": 1}
    m = meshfeed._src.mixture.mixture_from_spec(spec)
    want = _packed_sources(glob, (trained["gpt2"], trained["llama2"]), 1024)
    assert [s.identity() for s in m.sources] == [s.identity() for s in want.sources]
    path = tmp_path / "mix.json"
    path.write_text(json.dumps(spec))
    out = tmp_path / "bench.json"
    env = dict(os.environ, MESHFEED_BIN=binary)
    r = subprocess.run([sys.executable, "-m", "meshfeed", "bench", "--mixture", str(path), "--global-batch-size", "64",
                        "--mesh", "data=8", "--json", str(out), "--no-progress"],
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    with meshfeed.Loader(m, global_batch_size=64, sharding=sharding(), last_batch="drop") as ld:
        steps = ld.steps_per_epoch
    assert json.loads(out.read_text())["steps"] == steps > 0
    spec["sources"][0]["columns"]["text"]["packratio"] = 2
    with pytest.raises(meshfeed.InvalidRequestError, match=r"sources\[0\] column 'text'.*pack_ratio"):
        meshfeed._src.mixture.mixture_from_spec(spec)
