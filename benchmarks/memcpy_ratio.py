#!/usr/bin/env python3
"""meshfeed's delivery rate against memcpy, measured in the same run.

    make bench-memcpy       # or: .venv/bin/python benchmarks/memcpy_ratio.py

One client process on an 8-device CPU mesh (P("data")), the server the
Loader starts (shared memory), page-cache-warm *uncompressed* Parquet: how
many bytes per second of jax.Arrays the loop receives (each step's arrays
ready, as next() returns them; nothing else computed), against a single-threaded
memcpy of 256 MiB (numpy.copyto, best of 5, measured before and after the
loader runs). The target: at least 50% of memcpy.

Beside it, the ceiling of a loader that makes exactly one copy (the one
decoding has to make), measured in the same run per workload: one pass over
the dataset's files, read-only mapped from the page cache, copied in chunks of
one step's size into a ring of 256 MiB (numpy.copyto, best of 3 passes; the
mappings stay populated between passes, as with --map-cache).
--map-cache BYTES starts the server with ``--map-cache`` (files kept mapped
between epochs). --compare-arena alternates each run with one of a server
started with ``--shm-arena 0`` (every step copied into its slot instead of
decoded into the arena and sent by reference), one table row each; the
"in place" column is the share of delivered bytes that the server sent by
reference.

Datasets (written once with bin/meshfeed gen --compression none into
CACHE/memcpy-WORKLOAD):

  wide     id int64, features fixed_size_list<float32>[1024]; B=1,024 (4 MiB steps)
  images   id int64, image fixed_shape_tensor<uint8>[128,128,3]; B=256 (stored, as
           every Parquet writer stores uint8, as INT32: the server reads 4 bytes per
           delivered byte)
  tabular  id int64, label int32, features fixed_size_list<float32>[64]; B=2,000
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

WORKLOADS = {
    "wide": {"rows": 131072, "batch": 1024, "files": 4, "row_group_rows": 4096, "columns": ["id", "features"],
             "gen": ["--features", "1024"]},
    "images": {"rows": 8192, "batch": 256, "files": 4, "row_group_rows": 256, "columns": ["id", "image"],
               "gen": ["--features", "0", "--image", "128x128x3"]},
    "tabular": {"rows": 2_000_000, "batch": 2000, "files": 4, "row_group_rows": 65536,
                "columns": ["id", "label", "features"], "gen": ["--features", "64"]},
}


def memcpy_gbps(mib: int = 256, reps: int = 5) -> float:
    """Best of ``reps`` single-threaded copies of ``mib`` MiB, in GB/s."""
    import numpy as np
    src = np.ones(mib << 20, np.uint8)
    dst = np.empty_like(src)
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - t)
    return src.nbytes / best / 1e9


def one_copy_gbps(data: str, chunk: int, reps: int = 3) -> float:
    """Best of ``reps`` passes copying the Parquet files under ``data``,
    mapped read-only from the page cache, in ``chunk``-byte pieces into a
    ring of 256 MiB (as memcpy's destination: a buffer of one step, reused,
    would stay in the cache, which the loader's destinations do not), in
    GB/s. The mappings stay populated between passes, as with the server's
    ``--map-cache``."""
    import mmap

    import numpy as np
    views = []
    for f in sorted(os.listdir(data)):
        if f.endswith(".parquet"):
            with open(os.path.join(data, f), "rb") as fh:  # the mapping outlives the descriptor
                views.append(np.frombuffer(mmap.mmap(fh.fileno(), 0, prot=mmap.PROT_READ), np.uint8))
    slots = max(1, (256 << 20) // chunk)
    ring = np.empty((slots, chunk), np.uint8)
    ring.fill(0)  # touched before timing, like memcpy's destination after its first pass
    total = sum(len(v) // chunk * chunk for v in views)
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        k = 0
        for v in views:
            for off in range(0, len(v) - chunk + 1, chunk):
                np.copyto(ring[k % slots], v[off:off + chunk])
                k += 1
        best = min(best, time.perf_counter() - t)
    return total / best / 1e9  # the mappings go with the views


def run(data: str, spec: dict, epochs: int, server_args: list[str]) -> dict:
    import jax
    from jax.sharding import NamedSharding, PartitionSpec as P

    import meshfeed
    mesh = jax.make_mesh((8,), ("data",), axis_types=(jax.sharding.AxisType.Auto,))
    sh = NamedSharding(mesh, P("data"))
    B = spec["batch"]
    with meshfeed.Loader(data, global_batch_size=B, sharding=sh, columns=spec["columns"], last_batch="drop",
                         num_epochs=epochs, prefetch=2,
                         server_options=meshfeed.ServerOptions(extra_args=server_args)) as loader:
        it = iter(loader)
        first = next(it)
        jax.block_until_ready(first)
        step_bytes = sum(int(a.nbytes) for a in first.values())
        del first
        steps = 0
        c0, t0 = time.process_time(), time.perf_counter()
        for batch in it:  # next() returns a step on its devices (its transfers done)
            steps += 1
        el = time.perf_counter() - t0
        cpu = time.process_time() - c0
        stats = loader.stats()
    return {"steps": steps, "step_bytes": step_bytes, "seconds": el, "gbps": steps * step_bytes / el / 1e9,
            "client_cpu_s": cpu, "transport": stats.get("transport"), "host_copies": stats.get("host_copies"),
            "unaligned_transfers": stats.get("unaligned_transfers"),
            "in_place": stats.get("in_place_bytes", 0) / max(stats.get("bytes", 0), 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workloads", default="wide,images,tabular")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--cache", default=os.path.join(ROOT, ".cache"))
    ap.add_argument("--binary", default=os.path.join(ROOT, "bin", "meshfeed"))
    ap.add_argument("--json", default=None)
    ap.add_argument("--map-cache", type=int, default=0, help="start the server with --map-cache BYTES (0: off)")
    ap.add_argument("--compare-arena", action="store_true",
                    help="alternate every run with one of a server without the shared-memory arena (--shm-arena 0)")
    a = ap.parse_args()
    os.environ["JAX_PLATFORMS"] = "cpu"
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip()
    os.environ.setdefault("MESHFEED_BIN", a.binary)
    sys.path.insert(0, os.path.join(ROOT, "pyclient"))
    import jax
    jax.config.update("jax_enable_x64", True)
    out = {"memcpy_before_gbps": memcpy_gbps(), "workloads": {}}
    for wl in a.workloads.split(","):
        spec = WORKLOADS[wl]
        data = os.path.join(a.cache, f"memcpy-{wl}")
        subprocess.run([a.binary, "gen", "--out", data, "--rows", str(spec["rows"]), "--files", str(spec["files"]),
                        "--row-group-rows", str(spec["row_group_rows"]), "--compression", "none", "--if-absent",
                        *spec["gen"]], check=True, capture_output=True)
        for f in os.listdir(data):  # page cache warm
            with open(os.path.join(data, f), "rb") as fh:
                while fh.read(1 << 24):
                    pass
        server_args = ["--map-cache", str(a.map_cache)] if a.map_cache else []
        variants = {wl: server_args}
        if a.compare_arena:
            variants[f"{wl}, --shm-arena 0"] = server_args + ["--shm-arena", "0"]
        runs: dict[str, list] = {k: [] for k in variants}
        for _ in range(a.repeats):  # alternating
            for k, args in variants.items():
                runs[k].append(run(data, spec, a.epochs, args))
        one = one_copy_gbps(data, runs[wl][0]["step_bytes"])
        for k, rs in runs.items():
            out["workloads"][k] = {"runs": rs, "median_gbps": statistics.median(r["gbps"] for r in rs),
                                   "one_copy_gbps": one}
    out["memcpy_after_gbps"] = memcpy_gbps()
    mc = statistics.median([out["memcpy_before_gbps"], out["memcpy_after_gbps"]])
    print(f"memcpy (numpy.copyto of 256 MiB, best of 5): {out['memcpy_before_gbps']:.2f} GB/s before, "
          f"{out['memcpy_after_gbps']:.2f} GB/s after")
    if a.map_cache:
        print(f"server started with --map-cache {a.map_cache}")
    print("| workload | step | runs | delivered GB/s (median; min-max) | vs memcpy | one copy from the page cache, "
          "GB/s (vs memcpy) | delivered vs one copy | client CPU s per GB | transport | in place | host_copies | "
          "unaligned_transfers |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for wl, w in out["workloads"].items():
        g = [r["gbps"] for r in w["runs"]]
        r0 = w["runs"][0]
        cpu = statistics.median(r["client_cpu_s"] / (r["steps"] * r["step_bytes"] / 1e9) for r in w["runs"])
        print(f"| {wl} | {r0['step_bytes'] / 1e6:.2f} MB | {len(g)} | {w['median_gbps']:.2f}; {min(g):.2f}-{max(g):.2f} "
              f"| {100 * w['median_gbps'] / mc:.0f}% | {w['one_copy_gbps']:.2f} ({100 * w['one_copy_gbps'] / mc:.0f}%) "
              f"| {100 * w['median_gbps'] / w['one_copy_gbps']:.0f}% | {cpu:.2f} | {r0['transport']} "
              f"| {100 * r0['in_place']:.0f}% | {r0['host_copies']} "
              f"| {r0['unaligned_transfers']} |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
