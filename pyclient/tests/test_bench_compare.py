"""Smoke test of the comparison harness (benchmarks/compare.py, `make
bench-compare`) on a tiny tokens dataset: meshfeed and the plain loop, each in
both loops, deliver every row exactly once (row count and checksums against the
files), and the tables carry their columns. Ray and Grain live in .venv-bench
and are not run here."""

import json
import os
import pathlib
import random
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import compare  # noqa: E402

COLUMNS = ("rows/s", "GB/s", "CPU s per GB", "peak memory", "time to first batch", "first batch included")


def test_compare_smoke(tmp_path, binary):
    md = tmp_path / "BENCHMARKS.md"
    md.write_text("# B\n\n" + compare.SECTION + "\n\nold table\n\n" + compare.NOTES + "\n\nkept by hand\n\n"
                  "## Later section\n\nstays\n")
    out = tmp_path / "compare.json"
    rows, batch = 1024, 128
    env = dict(os.environ, MESHFEED_BIN=binary, PYTHONPATH=str(ROOT / "pyclient"))
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "compare.py"), "--workloads", "tokens",
                        "--loaders", "meshfeed,plain", "--loops", "free,wait", "--repeats", "1",
                        "--rows", str(rows), "--batch", str(batch), "--files", "2", "--row-group-rows", "256",
                        "--window", "128", "--max-seconds", "0", "--no-utilization", "--cache", str(tmp_path),
                        "--binary", binary, "--json", str(out), "--write", str(md)],
                       capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, f"compare.py failed ({r.returncode}):\n{r.stdout}\n{r.stderr[-4000:]}"
    rep = json.loads(out.read_text())
    want = rep["expected"]["tokens"]
    assert want["rows"] == rows
    got = {(x["loop"], x["loader"]): x for x in rep["results"]}
    assert set(got) == {(loop, n) for loop in ("free", "wait") for n in ("meshfeed", "plain")}, sorted(got)
    for key, x in got.items():
        assert "error" not in x, f"{key}: {x.get('error')}"
        assert x["check"] == "ok", f"{key}: {x['check']}"
        assert x["rows"] == rows and x["checksum"] == want["checksum"] and not x["partial"], key
        # id int64 + tokens int32 [B, 2048] + tokens_length int32, every step.
        assert x["bytes"] == (rows // batch) * batch * (8 + 4 * compare.TOKENS_LEN + 4), key
        assert x["cpu_seconds_per_gb"] > 0 and x["peak_memory_bytes"] > 0 and x["time_to_first_batch_s"] > 0
        # From the start: every row over the time to first batch plus the streaming after it.
        assert x["rows_per_second_with_first"] == pytest.approx(rows / (x["seconds"] + x["time_to_first_batch_s"]))
    # Some rows are longer than 2,048 tokens: the checksum covers truncation.
    assert want["checksum"][2] < rows * (128 + 4096) // 2
    for text in (r.stdout, md.read_text()):
        for col in COLUMNS:
            assert col in compare.TABLE_HEAD and col in text, col
        assert text.count(compare.TABLE_HEAD) == 2  # one table per loop
    text = md.read_text()
    # Shuffle memory is compared at equal rows held: meshfeed's 8 windows hold 128 rows.
    assert "holds 128 rows for shuffling" in text and "8 per-stream windows of 16 rows" in text
    assert "old table" not in text and "kept by hand" in text and "## Later section\n\nstays" in text


def test_check_catches_a_duplicate_and_a_gap():
    want = {"rows": 1000, "checksum": [10, 20, 30, 40], "features_sum": 1.5}
    ok = {"rows": 1000, "checksum": [10, 20, 30, 40], "features_sum": 1.5}
    assert compare.check(ok, want) == "ok"
    assert compare.check(dict(ok, rows=1100), want) != "ok"          # a step twice
    assert compare.check(dict(ok, checksum=[10, 20, 31, 40]), want) != "ok"  # another row instead
    assert compare.check(dict(ok, features_sum=1.6), want) != "ok"
    assert compare.check(dict(ok, partial=True, rows=500), want).startswith("partial")


def test_pad_tokens_against_a_row_loop():
    seed = int(os.environ.get("MESHFEED_SEED", random.randrange(1 << 30)))
    print(f"MESHFEED_SEED={seed}")
    rng = np.random.default_rng(seed)
    lists = [rng.integers(-5, 5, rng.integers(0, 12)).astype(np.int32).tolist() for _ in range(40)]
    arr = pa.array(lists, type=pa.list_(pa.int32())).slice(3, 30)  # a slice: offsets not from 0
    tok, lens = compare.pad_tokens(arr, 6)
    for i, row in enumerate(lists[3:33]):
        want = (row + [0] * 6)[:6]
        assert tok[i].tolist() == want and lens[i] == min(len(row), 6), (seed, i)


def test_bench_length_flag():
    """compare.py's utilization runs shape tokens with `meshfeed bench --length`."""
    import pytest

    from meshfeed._src.bench import parse_args
    a = parse_args(["d", "--columns", "id,tokens", "--length", "tokens=2048"])
    assert a.lengths == {"tokens": 2048}
    for bad in (["--length", "tokens=2048"], ["--columns", "id", "--length", "tokens=2048"],
                ["--columns", "tokens", "--length", "tokens=0"], ["--columns", "tokens", "--length", "tokens"]):
        with pytest.raises(SystemExit):
            parse_args(["d", *bad])


def test_utilization_reports_the_median_run():
    """compare.py reports the run of median utilization, with the spread of
    every run and the failed ones counted, not the first or the best."""
    runs = [{"utilization": 0.91, "n": 0}, {"error": "boom"}, {"utilization": 0.97, "n": 2},
            {"utilization": 0.95, "n": 3}]
    m = compare.median_run(runs)
    assert m["n"] == 3 and m["utilization_runs"] == [0.91, 0.95, 0.97] and m["failed_runs"] == 1
    assert compare._util_spread(m) == " (median of 3 runs: 91.00-97.00%, 1 failed)"
    assert compare.median_run([{"utilization": 0.5}, {"utilization": 0.6}])["utilization"] == 0.5  # lower middle
    assert "error" in compare.median_run([{"error": "x"}])


# -- the text workload (benchmarks/compare_text.py) ------------------------------

import compare_text  # noqa: E402


def _row_model(docs: list[list[int]], eod: int, rows: int, length: int) -> list[tuple]:
    """Concatenate-then-split by a loop over tokens: the steps of `rows` rows
    of `length` (tokens, segment ids, positions), the last padded."""
    stream = [(t, d) for d, ids in enumerate(docs) for t in ids + [eod]]
    out, n = [], rows * length
    for s0 in range(0, len(stream), n):
        tok, seg, pos = (np.zeros((rows, length), np.int32) for _ in range(3))
        for r in range(rows):
            piece, prev_doc, p = 0, None, 0
            for c in range(length):
                i = s0 + r * length + c
                if i >= len(stream):
                    break
                t, d = stream[i]
                if d != prev_doc:
                    piece, prev_doc, p = piece + 1, d, 0
                tok[r, c], seg[r, c], pos[r, c] = t, piece, p
                p += 1
        out.append((tok, seg, pos))
    return out


def test_concat_split_against_a_row_model():
    seed = int(os.environ.get("MESHFEED_SEED", random.randrange(1 << 30)))
    print(f"MESHFEED_SEED={seed}")
    rng = np.random.default_rng(seed)
    eod, rows, length = 7, 2, 16
    docs = [rng.integers(8, 100, rng.integers(0, 40)).tolist() for _ in range(60)]
    pack = compare_text.ConcatSplit(rows, length)
    got, i = [], 0
    while i < len(docs):  # documents arrive in batches of any size
        k = int(rng.integers(0, 9))
        flat = np.asarray([t for ids in docs[i:i + k] for t in ids + [eod]], np.int32)
        got += list(pack.add(flat, np.asarray([len(ids) + 1 for ids in docs[i:i + k]], np.int64)))
        i += k
    got += list(pack.finish())
    want = _row_model(docs, eod, rows, length)
    assert len(got) == len(want), seed
    for g, w in zip(got, want):
        for a, b in zip(g, w):
            assert a.dtype == np.int32 and np.array_equal(a, b), (seed, a, b)


def _text_acc(steps, eod):
    import jax
    import jax.numpy as jnp
    jax.config.update("jax_enable_x64", True)
    acc = compare_text.make_acc(jax, jnp, eod)
    ints = jnp.zeros((len(compare_text.CHECKSUM),), jnp.int64)
    for tok, seg, pos in steps:
        ints = acc(ints, dict(zip(compare_text.KEYS, (tok, seg, pos))))
    return [int(x) for x in np.asarray(ints)]


def test_text_checksum_counts_tokens_and_catches_a_bad_layout():
    """The text checksum sums what the model says, and a layout a loader got
    wrong (a position, a segment id, padding, a piece not after the
    end-of-text token) is counted as a violation, not passed."""
    eod, rows, length = 3, 2, 8
    docs = [[10, 11, 12], [20] * 9, [], [30, 31]]
    steps = _row_model(docs, eod, rows, length)
    flat = [t for d in docs for t in d + [eod]]
    assert _text_acc(steps, eod) == [len(flat), sum(flat), sum(t * t for t in flat), len(docs),
                                      -(-len(flat) // length), 0]

    def broken(k: int, fix) -> list:
        out = [tuple(a.copy() for a in s) for s in steps]
        fix(*out[k])
        return out

    def pos_off(tok, seg, pos):
        pos[0, 5] += 1

    def seg_skip(tok, seg, pos):
        seg[0, 4:] += (seg[0, 4:] > 0)

    def pad_nonzero(tok, seg, pos):
        tok[1, 7] = 5  # a padding token (the last row's end) that is not zero

    def no_eod(tok, seg, pos):
        tok[0, 3] = 99  # the end-of-text token before the second document

    for name, k, fix in (("position", 0, pos_off), ("segment", 0, seg_skip), ("padding", 1, pad_nonzero),
                         ("end-of-text", 0, no_eod)):
        assert _text_acc(broken(k, fix), eod)[5] > 0, name


def test_write_section_keeps_the_workloads_not_run(tmp_path):
    """A run of some workloads (`--workloads text`) replaces their
    subsections and the section's head, keeps the other workloads' and the
    hand-written notes."""
    md = tmp_path / "BENCHMARKS.md"
    md.write_text(f"# B\n\n{compare.SECTION}\n\nold head\n\n### Workload: tabular\n\nold tabular\n\n"
                  f"### Workload: text\n\nold text\n\n{compare.NOTES}\n\nby hand\n\n## Later\n\nstays\n")
    compare.write_section(str(md), f"{compare.SECTION}\n\nnew head\n\n### Workload: images\n\nnew images\n\n"
                                    "### Workload: text\n\nnew text\n")
    text = md.read_text()
    for kept in ("new head", "old tabular", "new images", "new text", "by hand", "## Later\n\nstays"):
        assert kept in text, kept
    for gone in ("old head", "old text"):
        assert gone not in text, gone
    order = [text.index(x) for x in ("new head", "old tabular", "new images", "new text", "by hand", "## Later")]
    assert order == sorted(order), text


TEXT_SMOKE_LOADERS = ("meshfeed", "plain")


def test_compare_text_smoke(tmp_path, binary):
    """The text workload on a tiny corpus: every loader runnable here (Ray
    and Grain live in .venv-bench) delivers the epoch the `tokenizers` model
    says, in both loops, and the report carries its table and targets."""
    md = tmp_path / "BENCHMARKS.md"
    out = tmp_path / "compare.json"
    env = dict(os.environ, MESHFEED_BIN=binary, PYTHONPATH=str(ROOT / "pyclient"))
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "compare.py"), "--workloads", "text",
                        "--loaders", ",".join(TEXT_SMOKE_LOADERS), "--loops", "free,wait", "--repeats", "1",
                        "--rows", "60", "--batch", "8", "--files", "2", "--row-group-rows", "20", "--max-seconds", "0",
                        "--no-utilization", "--cache", str(tmp_path), "--binary", binary, "--json", str(out),
                        "--write", str(md)], capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, f"compare.py failed ({r.returncode}):\n{r.stdout}\n{r.stderr[-4000:]}"
    rep = json.loads(out.read_text())
    want = rep["expected"]["text"]
    assert want["docs"] == 60 and want["checksum"][3] >= 60 and want["checksum"][5] == 0
    assert want["packed_rows"] == -(-want["tokens"] // compare_text.LENGTH)
    got = {(x["loop"], x["loader"]): x for x in rep["results"]}
    assert set(got) == {(loop, n) for loop in ("free", "wait") for n in TEXT_SMOKE_LOADERS}, sorted(got)
    for key, x in got.items():
        assert x["check"] == "ok" and x["checksum"] == want["checksum"] and x["tokens"] == want["tokens"], key
        assert x["tokens_per_second"] > 0 and x["cpu_seconds_per_mtok"] > 0, key
    text = md.read_text()
    assert text.count(compare_text.TABLE_HEAD) == 2 and "### Workload: text" in text
    assert "tokens/s over the epoch, meshfeed >= 2x the best baseline" in text
    assert rep["plan"]["text"]["index"].get("error") is None  # meshfeed index over the corpus
    assert "meshfeed plans its steps from the token-count index" in text


def test_bench_tokenizer_and_pack_flags():
    """compare.py's text utilization runs tokenize and pack through `meshfeed
    bench --tokenizer NAME=PATH --pack NAME=concat`."""
    from meshfeed import Column
    from meshfeed._src.bench import column_options, parse_args
    a = parse_args(["d", "--columns", "text,id", "--length", "text=2048", "--tokenizer", "text=/t.json",
                    "--pack", "text=concat"])
    assert column_options(a) == {"text": Column(tokenizer="/t.json", length=2048, pack="concat"), "id": None}
    a = parse_args(["d", "--columns", "text", "--tokenizer", "text=/t.json"])
    assert column_options(a) == {"text": Column(tokenizer="/t.json")}
    a = parse_args(["d", "--columns", "tokens", "--length", "tokens=8"])
    assert column_options(a) == {"tokens": Column(length=8, overflow="truncate")}
    assert column_options(parse_args(["d", "--columns", "a,b"])) == ["a", "b"]
    for bad in (["--tokenizer", "text=/t.json"], ["--columns", "id", "--tokenizer", "text=/t.json"],
                ["--columns", "text", "--tokenizer", "text"], ["--columns", "text", "--tokenizer", "text=/t",
                                                               "--pack", "text=concat"],
                ["--columns", "text", "--length", "text=8", "--pack", "text=concat"]):
        with pytest.raises(SystemExit):
            parse_args(["d", *bad])
