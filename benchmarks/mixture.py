#!/usr/bin/env python3
"""A three-source mixture against one dataset of the same files, end to end.

The target (issue 26): a three-source mixture against one dataset of the
same total rows and bytes, same mesh and batch, in one invocation: rows/s
within 5% and peak memory within 10% (the sources' read-ahead shares one
budget).

Three sources of the tabular workload's rows (``meshfeed gen``: id int64,
label int32, features float32[64], snappy or --compression) are written
once under --cache.
Then `python -m meshfeed bench` runs, alternating, --repeats times each:

- "single": one dataset of the three sources' files (its URIs concatenated);
- "mixture": the three as sources of weight 1:1:1 (``--mixture SPEC.json``),
  ``stop`` the single dataset's steps per epoch: the same rows and bytes.

Both read every column the same way, on the same 8-device CPU mesh
(``data=8``), global batch --batch, in file order (or both with the same
--shuffle-window per source and per dataset), with a free loop (no
simulated step) or --step-ms. The table gives each case's medians (min-max)
of rows/s (the steps after the first, as the bench report counts them),
peak RSS (client + server), CPU ms per step of the client and of the
server, time to first batch; and the medians of the pairs' ratios (each
mixture run over the single run next to it), against the targets.
Needs bin/meshfeed (`make build`).

    python benchmarks/mixture.py --repeats 5
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _gen(a: argparse.Namespace) -> list[str]:
    """Writes the three sources (once; --if-absent) and returns their
    directories."""
    dirs = []
    for i in range(3):
        d = os.path.join(a.cache, f"bench-mixture-{a.rows}-{a.compression}-{i}" if a.compression != "snappy"
                         else f"bench-mixture-{a.rows}-{i}")
        cmd = [a.binary, "gen", "--out", d, "--rows", str(a.rows), "--files", "2",
               "--row-group-rows", str(a.row_group_rows), "--features", "64", "--compression", a.compression,
               "--seed", str(i + 1), "--if-absent"]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode:
            raise SystemExit(f"{' '.join(cmd)} failed:\n{r.stdout}\n{r.stderr}")
        dirs.append(d)
    return dirs


def _bench(a: argparse.Namespace, data: list[str], extra: list[str]) -> dict:
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "r.json")
        cmd = [sys.executable, "-m", "meshfeed", "bench", *data, "--global-batch-size", str(a.batch),
               "--mesh", "data=8", "--x64", "--binary", a.binary,
               "--json", out, "--no-progress", *extra]
        if a.step_ms > 0:
            cmd += ["--step", a.step, "--step-ms", str(a.step_ms)]
        env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=8")
        r = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if r.returncode:
            raise SystemExit(f"{' '.join(cmd)} failed:\n{r.stdout}\n{r.stderr}")
        with open(out) as f:
            rep = json.load(f)
        return rep


def _med(xs: list[float], fmt: str) -> str:
    return f"{fmt.format(statistics.median(xs))} ({fmt.format(min(xs))}-{fmt.format(max(xs))})"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=int, default=5, help="runs of each case, alternated (default 5)")
    p.add_argument("--rows", type=int, default=400_000, help="rows per source (default 400,000)")
    p.add_argument("--row-group-rows", type=int, default=65_536)
    p.add_argument("--compression", default="snappy", choices=("snappy", "zstd", "none"),
                   help="the sources' codec (default snappy, pyarrow's)")
    p.add_argument("--batch", type=int, default=2048, help="global batch (default 2048)")
    p.add_argument("--shuffle-window", type=int, default=0,
                   help="rows per shuffle window, the same for the dataset and each source (default 0: file order)")
    p.add_argument("--step", choices=("compute", "sleep"), default="sleep")
    p.add_argument("--step-ms", type=float, default=0.0, help="a simulated step (default: none, the free loop)")
    p.add_argument("--cache", default=str(ROOT / ".cache"), help="where the sources are written")
    p.add_argument("--binary", default=str(ROOT / "bin" / "meshfeed"))
    p.add_argument("--json", default=None, help="also write every run's report here")
    a = p.parse_args()
    if not os.path.exists(a.binary):
        raise SystemExit(f"{a.binary}: not found (make build)")
    dirs = _gen(a)
    cols = ["id", "label", "features"]
    single_extra = ["--columns", ",".join(cols), "--epochs", "1"]
    if a.shuffle_window:
        single_extra += ["--shuffle-window", str(a.shuffle_window), "--seed", "1"]
    # The single dataset's steps per epoch (last batch dropped) fix the
    # mixture's stop: the same rows.
    steps = (3 * a.rows) // a.batch
    sources = []
    for i, d in enumerate(dirs):
        s: dict = {"data": d, "weight": 1, "columns": cols}
        if a.shuffle_window:
            s["shuffle"] = {"seed": i + 1, "window": a.shuffle_window}
        sources.append(s)
    with tempfile.TemporaryDirectory() as tmp:
        spec = os.path.join(tmp, "mixture.json")
        with open(spec, "w") as f:
            json.dump({"sources": sources, "stop": steps}, f)
        cases = {"single": (dirs, single_extra), "mixture": ([], ["--mixture", spec])}
        runs: dict[str, list[dict]] = {"single": [], "mixture": []}
        print(f"3 sources of {a.rows:,} rows (id, label, features[64], {a.compression}, 2 files, row groups of "
              f"{a.row_group_rows:,}); B={a.batch}, mesh data=8, {steps} steps "
              f"({'shuffle window ' + str(a.shuffle_window) if a.shuffle_window else 'file order'}, "
              f"{'free loop' if a.step_ms <= 0 else f'{a.step} step {a.step_ms} ms'}); "
              f"{a.repeats} runs of each case, alternated", flush=True)
        for r in range(a.repeats):
            order = ("single", "mixture") if r % 2 == 0 else ("mixture", "single")  # each goes first half the time
            for c in order:
                data, extra = cases[c]
                rep = _bench(a, data, extra)
                if rep["steps"] != steps:
                    raise SystemExit(f"{c}: {rep['steps']} steps, want {steps}")
                runs[c].append(rep)
                print(f"  run {r + 1} {c}: {rep['rows_per_second']:,.0f} rows/s, peak RSS "
                      f"{rep['peak_rss_bytes'] / 2**20:,.0f} MiB", flush=True)
    print("\n| case | rows/s | peak RSS, client + server (MiB) | client / server (MiB) | client CPU ms/step "
          "| server CPU ms/step | time to first batch (s) |\n|---|---|---|---|---|---|---|")
    for c in ("single", "mixture"):
        rs = runs[c]
        print(f"| {c} | {_med([x['rows_per_second'] for x in rs], '{:,.0f}')} "
              f"| {_med([x['peak_rss_bytes'] / 2**20 for x in rs], '{:,.0f}')} "
              f"| {statistics.median(x['peak_rss_client_bytes'] / 2**20 for x in rs):,.0f} / "
              f"{statistics.median(x['peak_rss_server_bytes'] / 2**20 for x in rs):,.0f} "
              f"| {_med([x['cpu_ms_per_step']['process'] for x in rs], '{:.2f}')} "
              f"| {_med([x['cpu_ms_per_step']['server'] for x in rs], '{:.2f}')} "
              f"| {_med([x['time_to_first_batch_s'] for x in rs], '{:.2f}')} |")
    pair = list(zip(runs["single"], runs["mixture"]))
    rates = [m["rows_per_second"] / s["rows_per_second"] - 1 for s, m in pair]
    rate = statistics.median(rates)
    peak = statistics.median(m["peak_rss_bytes"] / s["peak_rss_bytes"] for s, m in pair) - 1
    srv = statistics.median(m["cpu_ms_per_step"]["server"] / s["cpu_ms_per_step"]["server"] for s, m in pair) - 1
    # The pairs' spread is printed beside the median: on two cores a free
    # loop's rows/s moves by tens of percent from run to run (BENCHMARKS.md).
    print(f"\nmixture against single, medians of {len(pair)} pairs' ratios: rows/s {100 * rate:+.1f}% "
          f"(pairs {100 * min(rates):+.1f}% to {100 * max(rates):+.1f}%; target: within 5%, "
          f"{'met' if rate >= -0.05 else 'missed'}), peak RSS {100 * peak:+.1f}% "
          f"(target: within 10%, {'met' if peak <= 0.10 else 'missed'}); server CPU per step {100 * srv:+.1f}%")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(runs, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
