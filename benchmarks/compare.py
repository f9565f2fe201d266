#!/usr/bin/env python3
"""meshfeed beside the loaders a JAX user would otherwise pick: four
workloads, one mesh, one table per workload and loop.

    make bench-compare          # or: .venv-bench/bin/python benchmarks/compare.py

Workloads (each a generated dataset, snappy, page cache warm; sizes in WORKLOADS):

  tabular   id int64, label int32, features fixed_size_list<float32>[64]; B=2,000
  tokens    id int64, tokens list<int32> of 128..4,096 made length 2,048
            (truncated, zero-padded, plus an int32 tokens_length); B=256
  images    id int64, image fixed_shape_tensor<uint8>[128,128,3]; B=256
  text      text string (documents of 100..20,000 characters) tokenized with a
            trained GPT-2-family tokenizer.json and packed by
            concatenate-then-split into int32 [B, 2048] rows with segment ids
            and positions; B=64 (compare_text.py says how each loader does it)

Loaders, each streaming one epoch (every row once) into sharded jax.Arrays on
an 8-device CPU mesh (batch split over "data"):

  meshfeed            meshfeed.Loader, file order, and with a shuffle window
                      (tokens shaped by the server: Column(length=2048))
  plain loop          pyarrow.parquet iter_batches -> numpy (padding tokens,
                      viewing images) -> jax.make_array_from_process_local_data
  Ray Data            ray.data.read_parquet(...).iter_jax_batches(collate_fn=the
                      same numpy), file order and shuffled (local Ray)
  Grain               grain.experimental.ParquetIterDataset -> map (per row) ->
                      batch -> device_put, file order and window-shuffled

Two loops: "free" consumes steps as fast as they come (a jitted checksum per
step, dispatched asynchronously, at most FREE_IN_FLIGHT of them in flight: an
unbounded queue of dispatches once aborted XLA's CPU collectives, and a
training loop that logs its loss bounds it too); "wait" blocks on that
checksum every step, as a loop that reads its loss does.

Each (workload, loop, loader) runs in its own process; the harness samples that
process tree (the meshfeed server, Ray's raylet and workers, Grain's workers
included) for peak memory (summed PSS; summed RSS kept in the JSON) and CPU
time, checks the row count and checksums of what was delivered against the
files (read directly with pyarrow), and prints the tables. Loaders in
--repeat-loaders run --repeats times, alternating with the others; the tables
show medians. Then meshfeed runs through ``python -m meshfeed bench`` with a
simulated step sized to 80% of its measured free-loop rate, per workload (for
text its rate over the epoch, first batch included, the text target's measure), to
report utilization (--util-repeats runs of each step, alternating; the median
run is shown with the spread). --write replaces, in the section "## Comparison with other
loaders" of BENCHMARKS.md, the subsections of the workloads run (keeping the
others and its hand-written "### Where the time goes").
"""

from __future__ import annotations

import argparse
import collections
import importlib.metadata as md
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "pyclient"))

from meshfeed._src import bench_proc  # noqa: E402  (imports no jax)

import compare_text  # noqa: E402  (the text workload; imports no jax)

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
# The text workload's loaders (no shuffle: concatenate-then-split in file order).
TEXT_LOADERS = tuple(compare_text.LABELS)
TEXT_LABELS = compare_text.LABELS
LOOPS = ("free", "wait")
FREE_IN_FLIGHT = 8  # the free loop blocks on the checksum of the step this many steps back
LOOP_LABELS = {"free": f"loop consuming steps freely (at most {FREE_IN_FLIGHT} checksums in flight)",
               "wait": "loop waiting for each step (block_until_ready on its result)"}
TOKENS_LEN = 2048
IMAGE_SHAPE = (128, 128, 3)
DEVICES = 8  # the CPU mesh every loader feeds


def meshfeed_window(w: int) -> int:
    """meshfeed's per-stream shuffle window holding w rows in all: a shuffled
    Loader keeps one window per device stream (DEVICES of them), where Ray's
    local shuffle buffer and Grain's window hold w rows in all. Shuffle memory
    is compared at equal rows held."""
    return max(w // DEVICES, 1)

# Each workload: its dataset (meshfeed gen flags), the columns read, the
# arrays delivered to jax (what GB/s counts), the global batch, the shuffle
# window/buffer in rows. Sizes: a few seconds of streaming for the fastest loader
# on a loaded 2-core machine, so that the whole comparison takes ~20 min; --scale
# multiplies them.
WORKLOADS = {
    "tabular": {"rows": 2_000_000, "batch": 2000, "files": 4, "row_group_rows": 65536, "window": 65536,
                "gen": ["--features", "64"], "columns": ["id", "label", "features"],
                "keys": ["id", "label", "features"],
                "what": "`id` int64, `label` int32, `features` fixed_size_list<float32>[64]"},
    "tokens": {"rows": 65_536, "batch": 256, "files": 4, "row_group_rows": 8192, "window": 4096,
               "gen": ["--features", "0", "--tokens", "128:4096"], "columns": ["id", "tokens"],
               "keys": ["id", "tokens", "tokens_length"],
               "what": f"`id` int64, `tokens` list<int32> of 128 to 4,096 tokens, delivered as int32 "
                       f"[B, {TOKENS_LEN}] (truncated, zero-padded) + int32 `tokens_length`"},
    "images": {"rows": 10_240, "batch": 256, "files": 4, "row_group_rows": 1024, "window": 1024,
               "gen": ["--features", "0", "--image", "x".join(map(str, IMAGE_SHAPE))], "columns": ["id", "image"],
               "keys": ["id", "image"],
               "what": "`id` int64, `image` fixed_shape_tensor<uint8>[128,128,3]"},
    # rows: documents (about 3.3 KB of UTF-8 each); batch: packed rows of 2,048
    # tokens. Every loader must finish its epoch to be checked: no time cap
    # below max_seconds.
    "text": {"rows": 8_000, "batch": 64, "files": 4, "row_group_rows": 500, "window": 0, "max_seconds": 300.0,
             "gen": [], "columns": ["text"], "keys": list(compare_text.KEYS),
             "what": "`text` string, documents of 100 to 20,000 characters (`meshfeed gen-text` over the Python "
                     "standard library)"},
}
# Every loader a target compares against runs --repeats times, so that every
# ratio the targets check is of two medians (Ray's shuffled rate moved from
# 290k to 572k rows/s between single runs on tabular).
REPEAT_LOADERS = ("meshfeed", "meshfeed-shuffle", "plain", "ray-shuffle")


def loaders_of(workload: str, loaders: list[str]) -> list[str]:
    """The loaders of --loaders that run workload (text has no shuffled ones)."""
    return [n for n in loaders if workload != "text" or n in TEXT_LOADERS]


def label(workload: str, loader: str) -> str:
    return TEXT_LABELS[loader] if workload == "text" else LABELS[loader]


# -- what every loader turns a record batch into (numpy, as a user would) -------

def pad_tokens(col, length: int = TOKENS_LEN):
    """A pyarrow list<int32> array as (int32 [n, length] truncated and
    zero-padded, int32 lengths), vectorized numpy."""
    import numpy as np
    offs = col.offsets.to_numpy().astype(np.int64)
    vals = col.values.to_numpy()
    lens = np.minimum(np.diff(offs), length)
    pos = np.arange(length)
    mask = pos < lens[:, None]
    out = np.zeros((len(lens), length), np.int32)
    out[mask] = vals[(offs[:-1, None] + pos)[mask]]
    return out, lens.astype(np.int32)


def host_arrays(workload: str, t) -> dict:
    """The numpy arrays of one batch (a pyarrow Table or RecordBatch)."""
    import pyarrow as pa
    cols = {n: t.column(n) for n in t.column_names}
    cols = {n: (c.combine_chunks() if isinstance(c, pa.ChunkedArray) else c) for n, c in cols.items()}
    out = {"id": cols["id"].to_numpy()}
    if workload == "tabular":
        out["label"] = cols["label"].to_numpy()
        out["features"] = cols["features"].flatten().to_numpy().reshape(len(t), -1)
    elif workload == "tokens":
        out["tokens"], out["tokens_length"] = pad_tokens(cols["tokens"])
    else:
        img = cols["image"]
        if hasattr(img, "to_numpy_ndarray"):
            out["image"] = img.to_numpy_ndarray()
        else:  # a tensor type pyarrow does not know: its flat storage
            storage = img.storage if hasattr(img, "storage") else img
            out["image"] = storage.flatten().to_numpy().reshape((len(t),) + IMAGE_SHAPE)
    return out


def grain_row(workload: str, r: dict) -> dict:
    """One Grain row (a dict of numpy values) as the arrays of one row."""
    import numpy as np
    if workload == "tabular":
        return {"id": r["id"], "label": r["label"], "features": r["features"]}
    if workload == "tokens":
        tok = np.asarray(r["tokens"])[:TOKENS_LEN]
        out = np.zeros(TOKENS_LEN, np.int32)
        out[:len(tok)] = tok
        return {"id": r["id"], "tokens": out, "tokens_length": np.int32(len(tok))}
    return {"id": r["id"], "image": np.asarray(r["image"]).reshape(IMAGE_SHAPE)}


# -- the child: one loader, one loop, one epoch --------------------------------

def _child(args: argparse.Namespace) -> None:
    os.environ["JAX_PLATFORMS"] = "cpu"
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip()
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import NamedSharding, PartitionSpec as P

    jax.config.update("jax_enable_x64", True)
    mesh = jax.make_mesh((DEVICES,), ("data",), axis_types=(jax.sharding.AxisType.Auto,))
    sharding = NamedSharding(mesh, P("data"))
    files = sorted(os.path.join(args.data, f) for f in os.listdir(args.data) if f.endswith(".parquet"))
    B, W, name, wl = args.batch, args.window, args.child, args.workload
    spec = WORKLOADS[wl]
    keys, columns = spec["keys"], spec["columns"]

    @jax.jit
    def acc(ints, flt, b):
        idc = b["id"].astype(jnp.int64)
        if wl == "tabular":
            s2, s3 = jnp.sum(b["label"].astype(jnp.int64)), jnp.int64(0)
            flt = flt + jnp.sum(b["features"].astype(jnp.float64))
        elif wl == "tokens":
            s2, s3 = jnp.sum(b["tokens_length"].astype(jnp.int64)), jnp.sum(b["tokens"].astype(jnp.int64))
        else:
            s2, s3 = jnp.sum(b["image"].astype(jnp.int64)), jnp.int64(0)
        return ints + jnp.stack([jnp.sum(idc), jnp.sum(idc * idc), s2, s3]), flt

    n_ints = 4
    if wl == "text":
        info = json.loads(args.text_info)
        acc_text = compare_text.make_acc(jax, jnp, info["eod"])
        n_ints = len(compare_text.CHECKSUM)

        def acc(ints, flt, b):  # noqa: F811  (text's own checksum)
            return acc_text(ints, b), flt

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
    loader = None
    if wl == "text":
        it, loader = compare_text.loader_iter(name, args.data, B, sharding, info, args.grain_workers, setup)
    elif name.startswith("meshfeed"):
        import meshfeed
        shuffle = meshfeed.Shuffle(seed=0, window=meshfeed_window(W)) if name.endswith("shuffle") else None
        cols = {"id": None, "tokens": meshfeed.Column(length=TOKENS_LEN, overflow="truncate")} \
            if wl == "tokens" else columns
        loader = meshfeed.Loader(args.data, global_batch_size=B, sharding=sharding, columns=cols,
                                 last_batch="raise", shuffle=shuffle, prefetch=2)
        it = iter(loader)
    elif name == "plain":
        import pyarrow as pa
        import pyarrow.parquet as pq

        def it_plain():
            buf = []
            for f in files:
                for rb in pq.ParquetFile(f).iter_batches(batch_size=B, columns=columns):
                    if not buf and rb.num_rows == B:
                        step = rb
                    else:  # a batch cut at a file boundary: gather B rows
                        buf.append(rb)
                        t = pa.Table.from_batches(buf)
                        if t.num_rows < B:
                            continue
                        step, rest = t.slice(0, B), t.slice(B)
                        buf = rest.to_batches() if rest.num_rows else []
                    yield {k: jax.make_array_from_process_local_data(sharding, v)
                           for k, v in host_arrays(wl, step).items()}
        it = it_plain()
    elif name.startswith("ray"):
        ds = setup.data.read_parquet(files, columns=columns)
        kw = {}
        if name.endswith("shuffle"):
            ds = ds.randomize_block_order(seed=0)
            kw = {"local_shuffle_buffer_size": W, "local_shuffle_seed": 0}
        from ray.data.collate_fn import ArrowBatchCollateFn

        class Collate(ArrowBatchCollateFn):
            # Ray hands lists and tensors to jax as object arrays, which jax
            # rejects: the same numpy as the plain loop.
            def __call__(self, t):
                return host_arrays(wl, t)

        it = iter(ds.iter_jax_batches(batch_size=B, drop_last=True, prefetch_batches=2, collate_fn=Collate(),
                                      **kw))
    elif name.startswith("grain"):
        import grain
        ds = grain.experimental.ParquetIterDataset(files)
        if name.endswith("shuffle"):
            ds = grain.experimental.WindowShuffleIterDataset(ds, window_size=W, seed=0)
        ds = ds.map(lambda r: grain_row(wl, r)).batch(B, drop_remainder=True)
        if args.grain_workers > 0:
            ds = ds.mp_prefetch(grain.MultiprocessingOptions(num_workers=args.grain_workers))
        ds = grain.experimental.device_put(ds, sharding)
        it = iter(ds)
    else:
        raise SystemExit(f"unknown loader {name!r}")

    ints = jnp.zeros((n_ints,), jnp.int64)
    flt = jnp.zeros((), jnp.float64)
    steps = nbytes = nbytes_step = 0
    ttfb = t1 = None
    first_ints = None  # the checksum after the first step (text: its tokens)
    partial = False
    wait = args.loop == "wait"
    in_flight = collections.deque()
    for batch in it:
        ints, flt = acc(ints, flt, {k: batch[k] for k in keys})
        if wait:
            ints.block_until_ready()
        else:
            in_flight.append(ints)
            if len(in_flight) > FREE_IN_FLIGHT:
                in_flight.popleft().block_until_ready()
        steps += 1
        if ttfb is None:
            jax.block_until_ready(batch)
            t1 = time.perf_counter()
            ttfb = t1 - t0
            nbytes_step = sum(int(batch[k].nbytes) for k in keys)
            first_ints = np.asarray(ints)
        nbytes += nbytes_step
        if args.max_seconds > 0 and time.perf_counter() - t1 > args.max_seconds:
            partial = True
            break
    ints, flt = jax.block_until_ready((ints, flt))
    t2 = time.perf_counter()
    mark("end")
    rows = steps * B
    el = max(t2 - t1, 1e-9) if t1 is not None else 1e-9
    out = {"loader": name, "workload": wl, "loop": args.loop, "steps": steps, "rows": rows, "bytes": nbytes,
           "time_to_first_batch_s": ttfb, "seconds": el, "partial": partial,
           "rows_per_second": (rows - B) / el, "bytes_per_second": (nbytes - nbytes_step) / el,
           "rows_per_second_with_first": rows / (el + (ttfb or 0.0)),
           "checksum": [int(x) for x in np.asarray(ints)], "features_sum": float(flt)}
    if wl == "text":  # non-padding tokens delivered, the workload's measure
        tokens = int(np.asarray(ints)[0])
        out.update(tokens=tokens, tokens_per_second=(tokens - int(first_ints[0])) / el if steps else 0.0,
                   tokens_per_second_with_first=tokens / (el + (ttfb or 0.0)))
    # The result is complete before teardown: Ray's shutdown right after an
    # iterator ends has crashed (a fatal check in its task manager, exit 1)
    # after a finished epoch; the parent reports such a run with its
    # teardown's exit status instead of dropping it.
    with open(args.result, "w") as f:
        json.dump(out, f)
    del it
    if loader is not None:
        loader.close()
    if setup is not None:
        import gc
        gc.collect()
        setup.shutdown()


# -- the parent ---------------------------------------------------------------------

def expected(workload: str, data: str) -> dict:
    """Rows and checksums of the files, read directly with pyarrow and numpy:
    [sum id, sum id^2, then label sum (tabular) / length sum, token sum
    (tokens, as delivered: truncated) / pixel sum (images)], features sum."""
    import numpy as np
    import pyarrow.parquet as pq
    ints = np.zeros(4, np.int64)
    flt, rows = 0.0, 0
    for f in sorted(x for x in os.listdir(data) if x.endswith(".parquet")):
        pf = pq.ParquetFile(os.path.join(data, f))
        for rg in range(pf.num_row_groups):
            t = pf.read_row_group(rg, columns=WORKLOADS[workload]["columns"])
            idc = t.column("id").to_numpy().astype(np.int64)
            s = [0, 0]
            if workload == "tabular":
                s[0] = t.column("label").to_numpy().astype(np.int64).sum()
                flt += float(t.column("features").combine_chunks().flatten().to_numpy().astype(np.float64).sum())
            elif workload == "tokens":
                tok, lens = pad_tokens(t.column("tokens").combine_chunks())
                s = [lens.astype(np.int64).sum(), tok.sum(dtype=np.int64)]
            else:
                img = t.column("image").combine_chunks()
                s[0] = img.storage.flatten().to_numpy().sum(dtype=np.int64)
            with np.errstate(over="ignore"):
                ints += np.array([idc.sum(), (idc * idc).sum(), s[0], s[1]], dtype=np.int64)
            rows += t.num_rows
    return {"rows": rows, "checksum": [int(x) for x in ints], "features_sum": flt}


def prepare_text(a: argparse.Namespace, s: dict, index: bool) -> dict:
    """The text workload's corpus, tokenizer and expected checksum (and, for
    meshfeed, its token-count index built once, timed); fills s["gen"],
    s["text"] (what the children need) and s["index"]."""
    print(f"compare: text: corpus and tokenizer in {s['data']} ...", file=sys.stderr, flush=True)
    info = compare_text.prepare(a.binary, s["data"], s["rows"], s["files"], s["row_group_rows"])
    s["gen"] = info["gen"]
    s["text"] = {"tokenizer": info["tokenizer"], "eod": info["eod"]}
    want = compare_text.expected(s["data"], info, s["batch"])
    if want["docs"] != s["rows"]:
        raise SystemExit(f"{s['data']} holds {want['docs']} documents, want {s['rows']}: remove it and rerun")
    if index:
        s["index"] = compare_text.build_index(a.binary, s["data"], info["tokenizer"])
        print(f"compare: text: {s['index']['command']}: {s['index']['seconds']:.2f} s"
              + (f" (failed: {s['index']['error']})" if "error" in s["index"] else ""), file=sys.stderr, flush=True)
    return want


def _run_child(name: str, wl: str, loop: str, a: argparse.Namespace, sizes: dict) -> dict:
    fd, res = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    cmd = [sys.executable, os.path.abspath(__file__), "--child", name, "--workload", wl, "--loop", loop,
           "--data", sizes["data"], "--batch", str(sizes["batch"]), "--window", str(sizes["window"]),
           "--grain-workers", str(a.grain_workers), "--max-seconds", str(sizes["max_seconds"]), "--result", res]
    if wl == "text":
        cmd += ["--text-info", json.dumps(sizes["text"])]
    env = dict(os.environ, MESHFEED_BIN=a.binary)
    if wl == "text":  # Ray's and Grain's worker processes import compare_text's functions
        env["PYTHONPATH"] = os.pathsep.join(x for x in (HERE, env.get("PYTHONPATH")) if x)
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
    if cpu_end is None or os.path.getsize(res) == 0:
        os.unlink(res)
        return {"loader": name, "workload": wl, "loop": loop,
                "error": f"exit status {rc}; output: {''.join(lines)[-2000:]}"}
    with open(res) as f:
        out = json.load(f)
    os.unlink(res)
    if rc != 0:  # the epoch ran and was recorded; its teardown failed
        out["teardown_exit_status"] = rc
    out["cpu_seconds"] = cpu_end - cpu_start
    out["peak_memory_bytes"] = sampler.peak_bytes
    out["peak_rss_bytes"] = sampler.peak_rss_bytes
    out["cpu_seconds_per_gb"] = out["cpu_seconds"] / (out["bytes"] / 1e9) if out["bytes"] else 0.0
    if "tokens" in out:
        out["cpu_seconds_per_mtok"] = out["cpu_seconds"] / (out["tokens"] / 1e6) if out["tokens"] else 0.0
    return out


def check(r: dict, want: dict) -> str:
    """"ok", or what differs from the files (a partial run is only counted)."""
    if "error" in r:
        return "did not run"
    if r.get("partial"):
        return f"partial: stopped at the time cap after {r['rows']:,} of {want['rows']:,} rows (not checked)"
    bad = []
    if r["rows"] != want["rows"]:
        bad.append(f"rows {r['rows']:,}, want {want['rows']:,}")
    if r["checksum"] != want["checksum"]:
        bad.append(f"checksum {r['checksum']}, want {want['checksum']}")
    if abs(r["features_sum"] - want["features_sum"]) > 1e-9 * max(1.0, abs(want["features_sum"])):
        bad.append(f"features sum {r['features_sum']!r}, want {want['features_sum']!r}")
    return "; ".join(bad) or "ok"


FIELDS = ("rows_per_second", "bytes_per_second", "cpu_seconds_per_gb", "peak_memory_bytes", "peak_rss_bytes",
          "time_to_first_batch_s", "rows_per_second_with_first")
# The text workload's, beside FIELDS.
TEXT_FIELDS = ("tokens_per_second", "tokens_per_second_with_first", "cpu_seconds_per_mtok")


def summarize(runs: list[dict]) -> dict:
    """Medians over the runs that did run (each figure on its own)."""
    ok = [r for r in runs if "error" not in r]
    if not ok:
        return {"loader": runs[0]["loader"], "error": runs[0]["error"], "runs": len(runs)}
    out = {"loader": ok[0]["loader"], "runs": len(ok), "partial": any(r.get("partial") for r in ok),
           "rows_per_second_min": min(r["rows_per_second"] for r in ok),
           "rows_per_second_max": max(r["rows_per_second"] for r in ok),
           "teardown_exit_status": next((r["teardown_exit_status"] for r in ok if r.get("teardown_exit_status")), 0)}
    for k in FIELDS:
        out[k] = statistics.median(r[k] for r in ok)
    if "tokens_per_second" in ok[0]:
        for k in ("tokens_per_second", "tokens_per_second_with_first"):
            out[k + "_min"] = min(r[k] for r in ok)
            out[k + "_max"] = max(r[k] for r in ok)
        for k in TEXT_FIELDS:
            out[k] = statistics.median(r[k] for r in ok)
    return out


def _utilization(a: argparse.Namespace, wl: str, sizes: dict, rate: float, kind: str) -> dict:
    step_ms = 1e3 * sizes["batch"] / (0.8 * rate)
    fd, res = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    cols = WORKLOADS[wl]["columns"]
    cmd = [sys.executable, "-m", "meshfeed", "bench", sizes["data"], "--global-batch-size", str(sizes["batch"]),
           "--mesh", "data=8"]
    if wl == "text":
        cmd += compare_text.utilization_args(sizes["text"])
    else:
        cmd += ["--columns", ",".join(cols), "--shuffle-window", str(meshfeed_window(sizes["window"]))]
    cmd += ["--epochs", "1", "--x64", "--step", kind, "--step-ms", f"{step_ms:.3f}"]
    if wl == "tokens":
        cmd += ["--length", f"tokens={TOKENS_LEN}"]
    cmd += ["--json", res, "--no-progress"]
    env = dict(os.environ, MESHFEED_BIN=a.binary, PYTHONPATH=os.path.join(ROOT, "pyclient"))
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    shown = "python -m meshfeed bench " + " ".join(
        os.path.relpath(x, ROOT) if x.startswith(ROOT) else x.replace(ROOT + os.sep, "") for x in cmd[4:-3])
    if r.returncode != 0:
        os.unlink(res)
        return {"error": r.stderr[-2000:] or r.stdout[-2000:], "command": shown}
    with open(res) as f:
        out = json.load(f)
    os.unlink(res)
    out["command"] = shown
    return out


def median_run(runs: list[dict]) -> dict:
    """The run of median utilization among those that did not fail (a
    failure when all failed), with every run's utilization beside it."""
    ok = sorted((r for r in runs if "error" not in r), key=lambda r: r["utilization"])
    if not ok:
        return runs[0]
    out = dict(ok[(len(ok) - 1) // 2])
    out["utilization_runs"] = [r["utilization"] for r in ok]
    out["failed_runs"] = len(runs) - len(ok)
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
    for p in ("jax", "jaxlib", "pyarrow", "numpy", "ray", "grain"):
        try:
            out.append(f"{p} {md.version(p)}")
        except md.PackageNotFoundError:
            out.append(f"{p} (not installed)")
    try:
        out.append(subprocess.run(["go", "version"], capture_output=True, text=True).stdout.split()[2])
    except (OSError, IndexError):
        pass
    return ", ".join(out)


TABLE_HEAD = ("| loader | runs | rows/s (median; min-max) | GB/s | CPU s per GB | peak memory (PSS, all processes) | "
              "time to first batch | rows/s from the start (first batch included) | rows/s vs plain loop |")


def fmt_table(rows: list[dict]) -> str:
    """One table: a row per loader (medians)."""
    lines = [TABLE_HEAD, "|" + "---|" * 9]
    base = next((r for r in rows if r["loader"] == "plain" and "error" not in r), None)
    for r in rows:
        if "error" in r:
            lines.append(compare_text.failed_row(LABELS[r["loader"]], r["error"], 0, 80))
            continue
        rng = (f"; {r['rows_per_second_min']:,.0f}-{r['rows_per_second_max']:,.0f}" if r["runs"] > 1 else "")
        ratio = f"{r['rows_per_second'] / base['rows_per_second']:.2f}x" if base else ""
        lines.append(f"| {compare_text.row_name(LABELS[r['loader']], r)} | {r['runs']} | "
                     f"{r['rows_per_second']:,.0f}{rng} | {r['bytes_per_second'] / 1e9:.3f} | "
                     f"{r['cpu_seconds_per_gb']:.1f} | {r['peak_memory_bytes'] / 2**20:,.0f} MiB | "
                     f"{r['time_to_first_batch_s']:.2f} s | {r.get('rows_per_second_with_first', 0.0):,.0f} | {ratio} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--workloads", default=",".join(WORKLOADS), help="comma-separated subset of " + ",".join(WORKLOADS))
    ap.add_argument("--loaders", default=",".join(LOADERS), help="comma-separated subset of " + ",".join(LOADERS))
    ap.add_argument("--loops", default=",".join(LOOPS), help="comma-separated subset of " + ",".join(LOOPS))
    ap.add_argument("--repeats", type=int, default=3, help="runs of each --repeat-loaders loader (alternating)")
    ap.add_argument("--repeat-loaders", default=",".join(REPEAT_LOADERS),
                    help="loaders run --repeats times; the others run once")
    ap.add_argument("--scale", type=float, default=1.0, help="multiplies every workload's row count")
    ap.add_argument("--rows", type=int, default=None, help="rows of every workload (overrides WORKLOADS and --scale)")
    ap.add_argument("--batch", type=int, default=None, help="global batch of every workload (default: the workload's)")
    ap.add_argument("--files", type=int, default=None, help="files per dataset (default: the workload's)")
    ap.add_argument("--row-group-rows", type=int, default=None, help="rows per row group (default: the workload's)")
    ap.add_argument("--window", type=int, default=None, help="shuffle window/buffer in rows (default: the workload's)")
    ap.add_argument("--cache", default=os.path.join(ROOT, ".cache"), help="datasets go to CACHE/bench-compare-WORKLOAD")
    ap.add_argument("--max-seconds", type=float, default=10.0,
                    help="stop a run after this many seconds of streaming (its epoch is then partial, not checked); "
                         "0: no cap. The text workload's cap is at least its own (WORKLOADS), so that every "
                         "loader's epoch is checked")
    ap.add_argument("--grain-workers", type=int, default=0,
                    help="Grain mp_prefetch workers (0: in-process; text: one per core)")
    ap.add_argument("--no-utilization", action="store_true", help="skip the `meshfeed bench` utilization runs")
    ap.add_argument("--util-repeats", type=int, default=3,
                    help="`meshfeed bench` runs of each utilization step (alternating); the median run is reported")
    ap.add_argument("--binary", default=os.path.join(ROOT, "bin", "meshfeed"), help="meshfeed binary")
    ap.add_argument("--write", default=None, metavar="BENCHMARKS.md", help="write the section into this file")
    ap.add_argument("--json", default=None, help="write all results as JSON")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--workload", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--loop", default="free", help=argparse.SUPPRESS)
    ap.add_argument("--data", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--result", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--text-info", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        _child(a)
        return 0

    def pick(text, allowed, what):
        names = [n.strip() for n in text.split(",") if n.strip()]
        for n in names:
            if n not in allowed:
                ap.error(f"--{what}: unknown {n!r} (want some of {','.join(allowed)})")
        return names
    workloads = pick(a.workloads, WORKLOADS, "workloads")
    loaders = pick(a.loaders, LOADERS, "loaders")
    loops = pick(a.loops, LOOPS, "loops")
    repeat = set(pick(a.repeat_loaders, LOADERS, "repeat-loaders")) if a.repeat_loaders else set()
    if a.repeats < 1:
        ap.error("--repeats must be >= 1")
    t_start = time.perf_counter()
    machine = _machine()
    plan = {}
    for wl in workloads:
        w = WORKLOADS[wl]
        s = {"rows": a.rows or int(round(w["rows"] * a.scale)), "batch": a.batch or w["batch"],
             "files": a.files or w["files"], "row_group_rows": a.row_group_rows or w["row_group_rows"],
             "window": a.window or w["window"], "data": os.path.join(a.cache, f"bench-compare-{wl}")}
        cap = w.get("max_seconds", 0.0)
        s["max_seconds"] = a.max_seconds if a.max_seconds <= 0 or not cap else max(a.max_seconds, cap)
        if s["batch"] % 8 or (wl != "text" and s["rows"] % s["batch"]):
            ap.error(f"{wl}: the batch {s['batch']} must divide the rows {s['rows']} and be a multiple of 8")
        s["gen"] = [a.binary, "gen", "--out", s["data"], "--rows", str(s["rows"]), "--files", str(s["files"]),
                    "--row-group-rows", str(s["row_group_rows"]), *w["gen"], "--compression", "snappy", "--if-absent"]
        plan[wl] = s
    results, summary, util, want = [], {}, {}, {}
    for wl in workloads:
        s = plan[wl]
        if wl == "text":
            want[wl] = prepare_text(a, s, "meshfeed" in loaders)
        else:
            print(f"compare: {wl}: {' '.join(s['gen'])}", file=sys.stderr, flush=True)
            subprocess.run(s["gen"], check=True, stdout=subprocess.DEVNULL)
            want[wl] = expected(wl, s["data"])
            if want[wl]["rows"] != s["rows"]:
                raise SystemExit(f"{s['data']} holds {want[wl]['rows']} rows, want {s['rows']}: remove it and rerun")
        runs: dict = {}
        names = loaders_of(wl, loaders)
        for rep in range(a.repeats):
            for loop in loops:
                for n in names:
                    if rep > 0 and n not in repeat:
                        continue
                    print(f"compare: {wl}, {loop} loop, {label(wl, n)}, run {rep + 1} ...", file=sys.stderr,
                          flush=True)
                    r = _run_child(n, wl, loop, a, s)
                    if r.get("partial") and r["rows"] == want[wl]["rows"]:
                        r["partial"] = False  # the cap struck after the last step: a whole epoch
                    r["check"] = check(r, want[wl])
                    results.append(r)
                    runs.setdefault((loop, n), []).append(r)
                    print(f"compare:   {r.get('rows_per_second', 0):,.0f} rows/s, "
                          + (f"{r['tokens_per_second']:,.0f} tokens/s ({r['tokens_per_second_with_first']:,.0f} "
                             f"over the epoch), " if "tokens_per_second" in r else "")
                          + f"{r.get('peak_memory_bytes', 0) / 2**20:,.0f} MiB, check {r['check']}"
                          + (f"\n{r['error']}" if "error" in r else ""), file=sys.stderr, flush=True)
        summary[wl] = {loop: [summarize(runs[(loop, n)]) for n in names] for loop in loops}
        ref_name = "meshfeed" if wl == "text" else "meshfeed-shuffle"
        ref = next((r for r in summary[wl].get("free", summary[wl][loops[0]])
                    if r["loader"] == ref_name and "error" not in r), None)
        if ref and not a.no_utilization:
            got: dict[str, list[dict]] = {"sleep": [], "compute": []}
            for i in range(a.util_repeats):  # alternating, like the loaders' runs
                for kind in got:
                    print(f"compare: {wl}: utilization, {kind} step at 80% of meshfeed's rate "
                          f"(run {i + 1} of {a.util_repeats}) ...", file=sys.stderr, flush=True)
                    # text: the epoch's rate, first batch included (the text target's
                    # measure): meshfeed tokenizes ahead over the whole of a short
                    # epoch, so its rate after the first batch is not one it sustains.
                    rate = ref["rows_per_second_with_first"] if wl == "text" else ref["rows_per_second"]
                    got[kind].append(_utilization(a, wl, s, rate, kind))
            util[wl] = {kind: median_run(rs) for kind, rs in got.items()}
        # Written after every workload, so that an interrupted run keeps what it measured.
        elapsed = time.perf_counter() - t_start
        report = render(a, plan, summary, util, results, machine, elapsed, want)
        if a.json:
            os.makedirs(os.path.dirname(os.path.abspath(a.json)), exist_ok=True)
            with open(a.json, "w") as f:
                json.dump({"results": results, "summary": summary, "utilization": util, "expected": want,
                           "plan": plan, "elapsed_s": elapsed}, f, indent=2)
        if a.write:
            write_section(a.write, report)
    print(report)
    failed = [r for r in results if r["check"] != "ok" and not r.get("partial")]
    return 1 if failed else 0


def render(a, plan, summary, util, results, machine, elapsed, want=None) -> str:
    """The BENCHMARKS.md section: the method, then a subsection per workload
    run, each naming its run (write_section keeps the subsections of the
    workloads not run)."""
    out = [SECTION, ""]
    out.append("Measured by `make bench-compare` (`benchmarks/compare.py`); each workload's subsection names the run "
               "it comes from (machine, versions, repeats, time cap).")
    out.append("")
    out.append("Every loader streams one epoch (every row exactly once) into sharded `jax.Array`s on an 8-device "
               "CPU mesh (`P(\"data\")`, `jax_enable_x64` on), in its own process. rows/s and GB/s (bytes of the "
               "arrays delivered to jax) count the steps after the first; time to first batch (from building the "
               "pipeline, after `ray.init` for Ray, to the first batch ready) is its own column. Peak memory is the "
               "peak of the summed **PSS** of the loader's whole process tree (the training process, the meshfeed "
               "server, Ray's raylet/GCS/workers, Grain's workers; shared pages counted once; summed RSS is in the "
               "JSON), sampled 10 times a second; CPU seconds are the tree's, from building the pipeline to the end "
               "of the epoch. Loaders named in a run's --repeat-loaders run several times, alternating with the "
               "others (each (workload, loop) round runs every loader once before the next round); every figure is "
               "the median of its runs, the rows/s column also gives the range. A run stops at its time cap "
               "(\"partial epoch\": rows/s still valid, not checksummed). "
               "The plain loop, Ray's collate_fn and Grain's per-row map turn record batches into numpy as a "
               "user would (benchmarks/compare.py `host_arrays`, `grain_row`): vectorized padding of tokens, "
               "`to_numpy_ndarray` of images.")
    for wl, loops in summary.items():
        s, w = plan[wl], WORKLOADS[wl]
        out.append("")
        out.append(f"### Workload: {wl}")
        out.append("")
        names = [r["loader"] for r in next(iter(loops.values()))]
        rep_names = [x for x in a.repeat_loaders.split(",") if x in names] if a.repeats > 1 else []
        out.append(f"Run: `benchmarks/compare.py` (workloads {', '.join(summary)} took {elapsed / 60:.1f} min) on "
                   f"{machine}. Versions: {_versions()}. "
                   + (f"Loaders {', '.join(rep_names)} ran {a.repeats} times each, the others once; " if rep_names
                      else "Every loader ran once; ")
                   + (f"runs stop after {s['max_seconds']:g} s of streaming." if s["max_seconds"] > 0
                      else "no time cap."))
        out.append("")
        gen = " ".join(os.path.relpath(x, ROOT) if x.startswith(ROOT) else x for x in s["gen"])
        if wl == "text":
            out.append(compare_text.dataset_paragraph(gen, s, w["what"], (want or {}).get(wl, {})))
        else:
            out.append(f"Dataset `{gen}`: {s['rows']:,} rows of {w['what']}, snappy, {s['files']} files, row groups "
                       f"of {s['row_group_rows']:,} rows. Global batch {s['batch']:,}; where shuffled, every loader "
                       f"holds {s['window']:,} rows for shuffling (Ray's local shuffle buffer, Grain's window, "
                       f"meshfeed's {DEVICES} per-stream windows of {meshfeed_window(s['window']):,} rows).")
        for loop, rows in loops.items():
            out.append("")
            out.append(f"{wl}, {LOOP_LABELS[loop]}:")
            out.append("")
            out.append(compare_text.fmt_table(rows) if wl == "text" else fmt_table(rows))
        if wl == "text" and (line := compare_text.index_line(s, loops, (want or {}).get(wl, {}))):
            out.append("")
            out.append(line)
        mine = [r for r in results if r["workload"] == wl]
        good = sum(r["check"] == "ok" for r in mine)
        part = [f"{r['loop']}/{r['loader']} ({r['rows']:,} rows)" for r in mine if r.get("partial")]
        bad = [f"{r['loop']}/{r['loader']}: {r['check']}" for r in mine if r["check"] != "ok" and not r.get("partial")]
        out.append("")
        what = ("Rows and checksums (" + ", ".join(compare_text.CHECKSUM) + ") against `tokenizers` encoding "
                "every document of the files" if wl == "text" else
                "Rows and checksums (row count; sums of id, id², then label / lengths and tokens / pixels; sum "
                "of features) against the files read directly with pyarrow")
        out.append(f"{what}: {good} of {len(mine)} runs ok"
                   + (f"; stopped at the time cap, not checked: {', '.join(part)}" if part else "")
                   + (f"; **failed**: {'; '.join(bad)}" if bad else "") + ".")
        for kind, u in util.get(wl, {}).items():
            out.append("")
            if "error" in u:
                out.append(f"- utilization with a {kind} step: the run failed: "
                           f"`{(u['error'].strip().splitlines() or [''])[-1]}`")
                continue
            which = " epoch (first batch included)" if wl == "text" else " (shuffle window)"
            out.append(f"- `{u['command']}` (a {kind} step of {u['step_ms']:.2f} ms = 80% of meshfeed's{which} "
                       f"free-loop rate above): utilization **{100 * u['utilization']:.2f}%**"
                       + _util_spread(u) + ", data wait "
                       f"per step p50 {u['wait_p50_ms']:.3f} ms, p99 {u['wait_p99_ms']:.3f} ms; "
                       f"{u['rows_per_second']:,.0f} rows/s; peak RSS client "
                       f"{u['peak_rss_client_bytes'] / 2**20:,.0f} MiB + server "
                       f"{u['peak_rss_server_bytes'] / 2**20:,.0f} MiB; host_copies {u.get('host_copies')}, "
                       f"unaligned_transfers {u.get('unaligned_transfers')}.")
        out.append("")
        out.append(f"{wl} against the issue's targets (computed by compare.py from the medians above):")
        out.extend(compare_text.targets(loops, util.get(wl, {})) if wl == "text" else
                   targets(loops, util.get(wl, {}), wl))
    out.append("")
    return "\n".join(out)


def targets(loops: dict, util: dict, wl: str) -> list[str]:
    """One line per target: met, or missed and by how much. rows/s: meshfeed
    in file order against the plain loop (also file order), meshfeed with a
    shuffle window against Ray shuffled."""
    lines = []
    want_plain = 3.0 if wl == "images" else 1.5
    verdict = compare_text.verdict
    for loop, rows in loops.items():
        by = {r["loader"]: r for r in rows if "error" not in r}
        for mine, other, want in (("meshfeed", "plain", want_plain), ("meshfeed-shuffle", "ray-shuffle", 2.0)):
            m, o = by.get(mine), by.get(other)
            if m is None or o is None:
                lines.append(f"- {loop} loop, rows/s {LABELS[mine]} >= {want:g}x {LABELS[other]}: not measured.")
                continue
            got = m["rows_per_second"] / o["rows_per_second"]
            lines.append(f"- {loop} loop, rows/s {LABELS[mine]} >= {want:g}x {LABELS[other]}: {got:.2f}x, "
                         + verdict(got >= want, f"{100 * (1 - got / want):.0f}% short") + ".")
        p = by.get("plain")
        for mine in ("meshfeed", "meshfeed-shuffle"):
            m = by.get(mine)
            if m and p:
                lines.append(f"- {loop} loop, CPU s per GB {LABELS[mine]} below the plain loop's: "
                             f"{m['cpu_seconds_per_gb']:.1f} vs {p['cpu_seconds_per_gb']:.1f}, "
                             + verdict(m["cpu_seconds_per_gb"] < p["cpu_seconds_per_gb"], "above") + ".")
        m = by.get("meshfeed")
        if m and p:
            lim = p["peak_memory_bytes"] + 150 * 2**20
            lines.append(f"- {loop} loop, peak memory meshfeed (file order) within the plain loop's + 150 MiB: "
                         f"{m['peak_memory_bytes'] / 2**20:,.0f} vs {lim / 2**20:,.0f} MiB, "
                         + verdict(m["peak_memory_bytes"] <= lim,
                                   f"{(m['peak_memory_bytes'] - lim) / 2**20:,.0f} MiB over") + ".")
        m = by.get("meshfeed-shuffle")
        for other in ("grain-shuffle", "ray-shuffle"):
            o = by.get(other)
            if m and o:
                lines.append(f"- {loop} loop, peak memory meshfeed (shuffle window) below {LABELS[other]}: "
                             f"{m['peak_memory_bytes'] / 2**20:,.0f} vs {o['peak_memory_bytes'] / 2**20:,.0f} MiB, "
                             + verdict(m["peak_memory_bytes"] < o["peak_memory_bytes"],
                                       f"{(m['peak_memory_bytes'] - o['peak_memory_bytes']) / 2**20:,.0f} MiB over")
                             + ".")
    for kind, u in util.items():
        if "error" in u:
            continue
        lines.append(f"- utilization >= 98% with a {kind} step at 80% of the maximum rate: "
                     f"{100 * u['utilization']:.2f}%, "
                     + verdict(u["utilization"] >= 0.98, f"{100 * (0.98 - u['utilization']):.2f} points short") + ".")
    return lines


def _util_spread(u: dict) -> str:
    rs = u.get("utilization_runs") or []
    if len(rs) < 2:
        return ""
    failed = f", {u['failed_runs']} failed" if u.get("failed_runs") else ""
    return f" (median of {len(rs)} runs: {100 * min(rs):.2f}-{100 * max(rs):.2f}%{failed})"


WORKLOAD_HEAD = "### Workload: "


def _section_parts(section: str) -> tuple[str, dict[str, str], str]:
    """A section's head (down to its first workload), its workload
    subsections by name, and its hand-written NOTES ("" when absent)."""
    k = section.find(NOTES)
    body, notes = (section[:k], section[k:]) if k >= 0 else (section, "")
    chunks = body.split("\n" + WORKLOAD_HEAD)
    subs = {c.split("\n", 1)[0].strip(): WORKLOAD_HEAD + c for c in chunks[1:]}
    return chunks[0], subs, notes


def write_section(path: str, section: str) -> None:
    """Replaces the section in path (from its heading to the next "## "
    heading or the end) with this one, keeping the old section's workload
    subsections that this one lacks (a run of some workloads) and its NOTES
    subsection, or appends it."""
    text = open(path).read() if os.path.exists(path) else ""
    i = text.find(SECTION)
    if i < 0:
        text = text.rstrip("\n") + "\n\n" + section
    else:
        j = text.find("\n## ", i + len(SECTION))
        old = text[i:j + 1] if j >= 0 else text[i:]
        head, subs, _ = _section_parts(section)
        _, old_subs, notes = _section_parts(old)
        names = list(WORKLOADS) + [n for n in {**old_subs, **subs} if n not in WORKLOADS]
        parts = [head.rstrip("\n")] + [(subs.get(n) or old_subs[n]).rstrip("\n") for n in names
                                        if n in subs or n in old_subs]
        if notes:  # keep the hand-written notes
            parts.append(notes.rstrip("\n"))
        section = "\n\n".join(parts) + "\n"
        text = text[:i] + section + (("\n" + text[j + 1:]) if j >= 0 else "")
    with open(path, "w") as f:
        f.write(text.rstrip("\n") + "\n")


if __name__ == "__main__":
    sys.exit(main())
