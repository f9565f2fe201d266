#!/usr/bin/env python3
"""meshfeed beside the loaders a JAX user would otherwise pick: one dataset,
one mesh, one global batch, one table.

    make bench-compare          # or: .venv-bench/bin/python benchmarks/compare.py

On the same generated dataset (2,000,000 rows of id int64, label int32,
features fixed_size_list<float32>[64], snappy, 4 files), the same 8-device CPU
mesh (batch split over "data") and the same global batch, each loader streams
one epoch, every row once, into sharded jax.Arrays:

  meshfeed            meshfeed.Loader, file order, and with a shuffle window
  plain loop          pyarrow.parquet iter_batches -> jax.make_array_from_process_local_data
  Ray Data            ray.data.read_parquet(...).iter_jax_batches(...) (local Ray)
  Grain               grain.experimental.ParquetIterDataset -> batch -> device_put

Each loader runs in its own process (its own memory and jax); the harness
samples that process tree (the loader's helpers included: the meshfeed server,
Ray's raylet and workers, Grain's worker processes) for peak memory and CPU
time, checks the row count and a checksum of what was delivered against the
files (read directly with pyarrow), and prints one table. Then meshfeed runs
once more through ``python -m meshfeed bench`` with a simulated step sized to
80% of meshfeed's measured maximum rate, to report accelerator utilization.
--write appends (or replaces) the section "## Comparison with other loaders"
of BENCHMARKS.md with the table, the machine, the versions and the commands.
"""

from __future__ import annotations

import argparse
import importlib.metadata as md
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "pyclient"))

from meshfeed._src import bench_proc  # noqa: E402  (imports jax; starts no backend)

SECTION = "## Comparison with other loaders"
# A hand-written subsection of SECTION that a rewrite keeps.
NOTES = "### Where the time goes"
LOADERS = ("meshfeed", "meshfeed-shuffle", "plain", "ray", "ray-shuffle", "grain", "grain-shuffle")
LABELS = {
    "meshfeed": "meshfeed (file order)",
    "meshfeed-shuffle": "meshfeed (shuffle window)",
    "plain": "plain loop: pyarrow iter_batches (no shuffle)",
    "ray": "Ray Data iter_jax_batches (file order)",
    "ray-shuffle": "Ray Data iter_jax_batches (shuffled)",
    "grain": "Grain ParquetIterDataset (file order)",
    "grain-shuffle": "Grain ParquetIterDataset (window shuffle)",
}
COLUMNS = ["id", "label", "features"]


# -- the child: one loader, one epoch ------------------------------------------

def _child(args: argparse.Namespace) -> None:
    os.environ["JAX_PLATFORMS"] = "cpu"
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip()
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import NamedSharding, PartitionSpec as P

    jax.config.update("jax_enable_x64", True)
    mesh = jax.make_mesh((8,), ("data",), axis_types=(jax.sharding.AxisType.Auto,))
    sharding = NamedSharding(mesh, P("data"))
    files = sorted(os.path.join(args.data, f) for f in os.listdir(args.data) if f.endswith(".parquet"))
    B, W, name = args.batch, args.window, args.child

    @jax.jit
    def acc(ints, flt, idc, label, feat):
        idc = idc.astype(jnp.int64)
        s = jnp.stack([jnp.sum(idc), jnp.sum(idc * idc), jnp.sum(label.astype(jnp.int64))])
        return ints + s, flt + jnp.sum(feat.astype(jnp.float64))

    setup = None
    if name.startswith("ray"):
        import ray
        ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False,
                 object_store_memory=1 << 30)
        setup = ray

    def mark(what: str) -> None:
        print(f"compare: {what}", flush=True)

    mark("start")
    t0 = time.perf_counter()
    if name.startswith("meshfeed"):
        import meshfeed
        shuffle = meshfeed.Shuffle(seed=0, window=W) if name.endswith("shuffle") else None
        loader = meshfeed.Loader(args.data, global_batch_size=B, sharding=sharding, columns=COLUMNS,
                                 last_batch="raise", shuffle=shuffle, prefetch=2)
        it = iter(loader)
    elif name == "plain":
        import pyarrow as pa
        import pyarrow.parquet as pq

        def gen():
            buf, have = [], 0
            for f in files:
                for rb in pq.ParquetFile(f).iter_batches(batch_size=B, columns=COLUMNS):
                    buf.append(rb)
                    have += rb.num_rows
                    while have >= B:
                        t = pa.Table.from_batches(buf).combine_chunks()
                        step, rest = t.slice(0, B), t.slice(B)
                        buf, have = rest.to_batches(), rest.num_rows
                        yield {"id": step.column("id").to_numpy(),
                               "label": step.column("label").to_numpy(),
                               "features": step.column("features").combine_chunks().flatten()
                               .to_numpy().reshape(B, -1)}

        def it_plain():
            for host in gen():
                yield {k: jax.make_array_from_process_local_data(sharding, v) for k, v in host.items()}
        it = it_plain()
    elif name.startswith("ray"):
        ds = setup.data.read_parquet(files, columns=COLUMNS)
        kw = {}
        if name.endswith("shuffle"):
            ds = ds.randomize_block_order(seed=0)
            kw = {"local_shuffle_buffer_size": W, "local_shuffle_seed": 0}
        from ray.data.collate_fn import ArrowBatchCollateFn

        class Collate(ArrowBatchCollateFn):
            # Ray turns fixed_size_list<float32>[64] into an object array,
            # which jax rejects; this reshapes it to (rows, 64).
            def __call__(self, t):
                return {"id": t.column("id").to_numpy(), "label": t.column("label").to_numpy(),
                        "features": t.column("features").combine_chunks().flatten().to_numpy()
                        .reshape(t.num_rows, -1)}

        it = iter(ds.iter_jax_batches(batch_size=B, drop_last=True, prefetch_batches=2, collate_fn=Collate(),
                                      **kw))
    elif name.startswith("grain"):
        import grain
        ds = grain.experimental.ParquetIterDataset(files)
        if name.endswith("shuffle"):
            ds = grain.experimental.WindowShuffleIterDataset(ds, window_size=W, seed=0)
        ds = ds.map(lambda r: {k: r[k] for k in COLUMNS}).batch(B, drop_remainder=True)
        if args.grain_workers > 0:
            ds = ds.mp_prefetch(grain.MultiprocessingOptions(num_workers=args.grain_workers))
        ds = grain.experimental.device_put(ds, sharding)
        it = iter(ds)
    else:
        raise SystemExit(f"unknown loader {name!r}")

    ints = jnp.zeros((3,), jnp.int64)
    flt = jnp.zeros((), jnp.float64)
    steps = nbytes = 0
    ttfb = t1 = None
    for batch in it:
        ints, flt = acc(ints, flt, batch["id"], batch["label"], batch["features"])
        if ttfb is None:
            jax.block_until_ready(batch)
            t1 = time.perf_counter()
            ttfb = t1 - t0
            nbytes_step = sum(int(batch[k].nbytes) for k in COLUMNS)
        steps += 1
        nbytes += nbytes_step
    ints, flt = jax.block_until_ready((ints, flt))
    t2 = time.perf_counter()
    mark("end")
    if name.startswith("meshfeed"):
        loader.close()
    if setup is not None:
        setup.shutdown()
    rows = steps * B
    out = {"loader": name, "steps": steps, "rows": rows, "bytes": nbytes, "time_to_first_batch_s": ttfb,
           "seconds": t2 - t1, "rows_per_second": (rows - B) / (t2 - t1), "bytes_per_second":
           (nbytes - nbytes_step) / (t2 - t1), "checksum": [int(x) for x in np.asarray(ints)],
           "features_sum": float(flt)}
    with open(args.result, "w") as f:
        json.dump(out, f)


# -- the parent ---------------------------------------------------------------------

def _expected(data: str) -> dict:
    """Rows and checksums of the files, read directly with pyarrow and numpy."""
    import numpy as np
    import pyarrow.parquet as pq
    ints = np.zeros(3, np.int64)
    flt, rows = 0.0, 0
    for f in sorted(x for x in os.listdir(data) if x.endswith(".parquet")):
        t = pq.read_table(os.path.join(data, f), columns=COLUMNS)
        idc = t.column("id").to_numpy().astype(np.int64)
        with np.errstate(over="ignore"):
            ints += np.array([idc.sum(), (idc * idc).sum(), t.column("label").to_numpy().astype(np.int64).sum()])
        flt += float(t.column("features").combine_chunks().flatten().to_numpy().astype(np.float64).sum())
        rows += t.num_rows
    return {"rows": rows, "checksum": [int(x) for x in ints], "features_sum": flt}


def _run_child(name: str, a: argparse.Namespace) -> dict:
    fd, res = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    cmd = [sys.executable, os.path.abspath(__file__), "--child", name, "--data", a.data, "--batch", str(a.batch),
           "--window", str(a.window), "--grain-workers", str(a.grain_workers), "--result", res]
    env = dict(os.environ, MESHFEED_BIN=a.binary)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=env)
    sampler = bench_proc.TreeSampler(proc.pid, interval=0.1).start()
    cpu_start = cpu_end = None
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if line.startswith("compare: start"):
            sampler.sample()
            cpu_start = sampler.cpu_seconds()
        elif line.startswith("compare: end"):
            sampler.sample()
            cpu_end = sampler.cpu_seconds()
    rc = proc.wait()
    sampler.stop()
    if rc != 0 or cpu_end is None:
        return {"loader": name, "error": f"exit status {rc}; output: {''.join(lines)[-2000:]}"}
    with open(res) as f:
        out = json.load(f)
    os.unlink(res)
    out["cpu_seconds"] = cpu_end - cpu_start
    out["peak_memory_bytes"] = sampler.peak_bytes
    out["cpu_seconds_per_gb"] = out["cpu_seconds"] / (out["bytes"] / 1e9)
    return out


def _utilization(a: argparse.Namespace, rate: float, kind: str) -> dict:
    step_ms = 1e3 * a.batch / (0.8 * rate)
    fd, res = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    cmd = [sys.executable, "-m", "meshfeed", "bench", a.data, "--global-batch-size", str(a.batch), "--mesh", "data=8",
           "--columns", ",".join(COLUMNS), "--shuffle-window", str(a.window), "--epochs", "1", "--x64",
           "--step", kind, "--step-ms", f"{step_ms:.3f}", "--json", res, "--no-progress"]
    env = dict(os.environ, MESHFEED_BIN=a.binary, PYTHONPATH=os.path.join(ROOT, "pyclient"))
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        return {"error": r.stderr[-2000:], "command": cmd}
    with open(res) as f:
        out = json.load(f)
    os.unlink(res)
    out["command"] = "python -m meshfeed bench " + " ".join(cmd[4:-3])
    return out


def _machine() -> str:
    model = ""
    try:
        with open("/proc/cpuinfo") as f:
            model = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")), "")
    except OSError:
        pass
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    load = os.getloadavg()
    return (f"{os.cpu_count()} vCPUs ({model}), {mem:.0f} GiB RAM, {platform.system()} {platform.release()}, "
            f"Python {platform.python_version()}; load average {load[0]:.1f} at the start of the run")


def _versions() -> str:
    out = []
    for p in ("jax", "jaxlib", "pyarrow", "numpy", "ray", "grain", "matplotlib"):
        try:
            out.append(f"{p} {md.version(p)}")
        except md.PackageNotFoundError:
            out.append(f"{p} (not installed)")
    try:
        out.append(subprocess.run(["go", "version"], capture_output=True, text=True).stdout.split()[2])
    except (OSError, IndexError):
        pass
    return ", ".join(out)


def _fmt_table(results: list[dict], base: dict | None) -> str:
    head = ("| loader | rows/s | GB/s | time to first batch | peak memory (all processes) | "
            "CPU s per GB | rows/s vs meshfeed | memory vs meshfeed |")
    lines = [head, "|" + "---|" * 8]
    for r in results:
        if "error" in r:
            lines.append(f"| {LABELS[r['loader']]} | failed: {r['error'].splitlines()[0][:80] if r['error'] else ''} "
                         "| | | | | | |")
            continue
        ratio = f"{r['rows_per_second'] / base['rows_per_second']:.2f}x" if base else ""
        mem = f"{r['peak_memory_bytes'] / base['peak_memory_bytes']:.2f}x" if base else ""
        lines.append(f"| {LABELS[r['loader']]} | {r['rows_per_second']:,.0f} | {r['bytes_per_second'] / 1e9:.3f} | "
                     f"{r['time_to_first_batch_s']:.2f} s | {r['peak_memory_bytes'] / 2**20:,.0f} MiB | "
                     f"{r['cpu_seconds_per_gb']:.1f} | {ratio} | {mem} |")
    return "\n".join(lines)


def _check(r: dict, want: dict) -> str:
    if "error" in r:
        return "did not run"
    bad = []
    if r["rows"] != want["rows"]:
        bad.append(f"rows {r['rows']:,}, want {want['rows']:,}")
    if r["checksum"] != want["checksum"]:
        bad.append(f"checksum {r['checksum']}, want {want['checksum']}")
    if abs(r["features_sum"] - want["features_sum"]) > 1e-9 * max(1.0, abs(want["features_sum"])):
        bad.append(f"features sum {r['features_sum']!r}, want {want['features_sum']!r}")
    return "; ".join(bad) or "ok"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--data", default=os.path.join(ROOT, ".cache", "bench-compare"), help="dataset directory")
    ap.add_argument("--rows", type=int, default=2_000_000, help="rows to generate")
    ap.add_argument("--files", type=int, default=4, help="files to generate")
    ap.add_argument("--batch", type=int, default=2000, help="global batch size (divides --rows: every row once)")
    ap.add_argument("--window", type=int, default=65536, help="shuffle window / buffer in rows")
    ap.add_argument("--grain-workers", type=int, default=0, help="Grain mp_prefetch workers (0: in-process)")
    ap.add_argument("--loaders", default=",".join(LOADERS), help="comma-separated subset of " + ",".join(LOADERS))
    ap.add_argument("--binary", default=os.path.join(ROOT, "bin", "meshfeed"), help="meshfeed binary")
    ap.add_argument("--write", default=None, metavar="BENCHMARKS.md", help="write the section into this file")
    ap.add_argument("--json", default=None, help="write all results as JSON")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--result", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        _child(a)
        return 0
    if a.rows % a.batch or a.batch % 8:
        ap.error(f"--batch {a.batch} must divide --rows {a.rows} and be a multiple of 8 (the mesh)")
    names = [n.strip() for n in a.loaders.split(",") if n.strip()]
    for n in names:
        if n not in LOADERS:
            ap.error(f"--loaders: unknown {n!r}")
    machine = _machine()
    gen = [a.binary, "gen", "--out", a.data, "--rows", str(a.rows), "--files", str(a.files), "--row-group-rows",
           "65536", "--features", "64", "--compression", "snappy", "--if-absent"]
    subprocess.run(gen, check=True, stdout=subprocess.DEVNULL)
    want = _expected(a.data)
    if want["rows"] != a.rows:
        raise SystemExit(f"{a.data} holds {want['rows']} rows, want {a.rows}: remove it and rerun")
    results = []
    for n in names:
        print(f"compare: {LABELS[n]} ...", file=sys.stderr, flush=True)
        r = _run_child(n, a)
        r["check"] = _check(r, want)
        results.append(r)
        print(f"compare:   {r.get('rows_per_second', 0):,.0f} rows/s, check {r['check']}"
              + (f"\n{r['error']}" if "error" in r else ""), file=sys.stderr, flush=True)
    byname = {r["loader"]: r for r in results if "error" not in r}
    util = {}
    ref = byname.get("meshfeed-shuffle") or byname.get("meshfeed")
    if ref:
        for kind in ("sleep", "compute"):
            print(f"compare: utilization, {kind} step at 80% of meshfeed's rate ...", file=sys.stderr, flush=True)
            util[kind] = _utilization(a, ref["rows_per_second"], kind)
    report = render(a, results, byname, util, machine, gen)
    print(report)
    if a.json:
        os.makedirs(os.path.dirname(os.path.abspath(a.json)), exist_ok=True)
        with open(a.json, "w") as f:
            json.dump({"results": results, "utilization": util, "expected": want}, f, indent=2)
    if a.write:
        write_section(a.write, report)
    failed = [r["loader"] for r in results if r["check"] != "ok"]
    return 1 if failed else 0


def render(a, results, byname, util, machine, gen) -> str:
    """The BENCHMARKS.md section."""
    out = [SECTION, ""]
    out.append(f"Measured by `make bench-compare` (`benchmarks/compare.py`) on {machine}. Versions: {_versions()}.")
    out.append("")
    out.append(f"Dataset: `{' '.join(os.path.relpath(x, ROOT) if x.startswith(ROOT) else x for x in gen)}`: "
               f"{a.rows:,} rows of `id` int64, `label` int32, `features` fixed_size_list<float32>[64], snappy, "
               f"{a.files} files, row groups of 65,536 rows (page cache warm). Every loader streams one epoch "
               f"into sharded `jax.Array`s on an 8-device CPU mesh (`P(\"data\")`), global batch {a.batch:,} "
               f"(every row exactly once), shuffle window/buffer {a.window:,} rows where shuffled. rows/s and "
               "GB/s count the steps after the first (time to first batch is its own column); peak memory is "
               "the peak of the summed PSS of the loader's whole process tree (the training process, the "
               "meshfeed server, Ray's raylet/GCS/workers, Grain's workers), sampled 10 times a second; CPU "
               "seconds are the tree's, from the start of the pipeline to the end of the epoch. Ratios are to "
               "meshfeed (shuffle window) for every row.")
    out.append("")
    base = byname.get("meshfeed-shuffle") or byname.get("meshfeed")
    out.append(_fmt_table(results, base))
    out.append("")
    out.append("Rows and checksums (row count; sum of id, of id², of label; sum of features) against the files "
               "read directly with pyarrow: " + "; ".join(f"{r['loader']} {r['check']}" for r in results) + ".")
    out.append("")
    for kind, u in util.items():
        if "error" in u:
            out.append(f"- utilization with a {kind} step: the run failed: `{u['error'].strip().splitlines()[-1]}`")
            continue
        out.append(f"- `{u['command']}` (a {kind} step of {u['step_ms']:.2f} ms = 80% of meshfeed's maximum "
                   f"rate above): utilization **{100 * u['utilization']:.2f}%**, data wait per step p50 "
                   f"{u['wait_p50_ms']:.3f} ms, p99 {u['wait_p99_ms']:.3f} ms; {u['rows_per_second']:,.0f} rows/s; "
                   f"peak RSS client {u['peak_rss_client_bytes'] / 2**20:,.0f} MiB + server "
                   f"{u['peak_rss_server_bytes'] / 2**20:,.0f} MiB.")
    out.append("")
    out.append("Against the issue's targets (computed from the figures above by compare.py):")
    out.extend(targets(byname, util))
    out.append("")
    return "\n".join(out)


def targets(byname: dict, util: dict) -> list[str]:
    """One line per target: met, or missed and by how much."""
    m = byname.get("meshfeed-shuffle")
    if m is None:
        return ["- meshfeed (shuffle window) did not run: no target can be judged."]
    lines = []
    for other, want in (("ray-shuffle", 3.0), ("grain-shuffle", 2.0), ("plain", 1.0)):
        o = byname.get(other)
        if o is None:
            lines.append(f"- rows/s >= {want:g}x {LABELS[other]}: not measured (it did not run).")
            continue
        got = m["rows_per_second"] / o["rows_per_second"]
        verdict = "**met**" if got >= want else f"**missed** by {100 * (1 - got / want):.0f}%"
        lines.append(f"- rows/s >= {want:g}x {LABELS[other]}: {got:.2f}x, {verdict}.")
    for kind, u in util.items():
        if "error" in u:
            continue
        verdict = "**met**" if u["utilization"] >= 0.99 else \
            f"**missed** by {100 * (0.99 - u['utilization']):.2f} points"
        lines.append(f"- utilization >= 99% with a {kind} step at 80% of the maximum rate: "
                     f"{100 * u['utilization']:.2f}%, {verdict}.")
    for other in ("plain", "ray-shuffle", "grain-shuffle"):
        o = byname.get(other)
        if o is None:
            continue
        ok = m["peak_memory_bytes"] < o["peak_memory_bytes"]
        lines.append(f"- peak memory below {LABELS[other]}: {m['peak_memory_bytes'] / 2**20:,.0f} MiB vs "
                     f"{o['peak_memory_bytes'] / 2**20:,.0f} MiB, "
                     + ("**met**." if ok else f"**missed** by {(m['peak_memory_bytes'] - o['peak_memory_bytes']) / 2**20:,.0f} MiB."))
    return lines


def write_section(path: str, section: str) -> None:
    """Replaces the section in path (from its heading to the next "## "
    heading or the end), keeping its NOTES subsection, or appends it."""
    text = open(path).read() if os.path.exists(path) else ""
    i = text.find(SECTION)
    if i < 0:
        text = text.rstrip("\n") + "\n\n" + section
    else:
        j = text.find("\n## ", i + len(SECTION))
        old = text[i:j + 1] if j >= 0 else text[i:]
        k = old.find(NOTES)
        if k >= 0:  # keep the hand-written notes
            section = section.rstrip("\n") + "\n\n" + old[k:].rstrip("\n") + "\n"
        text = text[:i] + section + (("\n" + text[j + 1:]) if j >= 0 else "")
    with open(path, "w") as f:
        f.write(text.rstrip("\n") + "\n")


if __name__ == "__main__":
    sys.exit(main())
