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
