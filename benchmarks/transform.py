#!/usr/bin/env python3
"""Does a transform that holds the GIL for ~1 ms per step cost utilization?

The target (issue 27): a transform of about 1 ms per step in 2 worker
processes keeps utilization at 98% where the loader alone reaches it. So the
step is one at which the loader alone reaches 98%, found first:

1. the free loop (no simulated step) gives the loader's maximum rate; the
   search starts at the step at 80% of that rate (BENCHMARKS.md's convention)
   or at --min-step-ms (default 1: the transform's own time), the longer: a
   step shorter than the transform leaves 2 workers no slack at all;
2. the loader alone runs at that step --probe-repeats times (--probe-steps
   steps each); while the median utilization is under --target (98%), the
   step grows by --grow (x1.25), the batch unchanged, at most --max-probes
   times (then it stops: the loader alone never reached the target here).

Then, at that step, `python -m meshfeed bench` runs three ways, alternating,
--repeats times each: the loader alone, `transform_fns:gil_1ms` on threads
(transform_workers=0), and in --workers worker processes (default 2). The
table gives medians (min-max), with the transform's time per step and the
loader's wait for it (the bench report's `transform`), and a verdict.
--step-ms skips the search. The 1 ms loop is calibrated once here and passed
to every process by $MESHFEED_BENCH_GIL_LOOPS. Needs bin/meshfeed (`make build`).

    python benchmarks/transform.py --repeats 5 --steps 800
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
HERE = pathlib.Path(__file__).resolve().parent


def _bench(a: argparse.Namespace, env: dict, extra: list[str], step_ms: float, steps: int = 0) -> dict:
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "r.json")
        cmd = [sys.executable, "-m", "meshfeed", "bench", a.data, "--global-batch-size", str(a.batch),
               "--mesh", "data=8", "--columns", "id,label,features", "--x64", "--steps", str(steps or a.steps),
               "--step", a.step, "--step-ms", f"{step_ms:.3f}", "--json", out, "--no-progress", *extra]
        r = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if r.returncode:
            raise SystemExit(f"{' '.join(cmd)} failed:\n{r.stdout}\n{r.stderr}")
        with open(out) as f:
            rep = json.load(f)
        rep["command"] = "python -m meshfeed bench " + " ".join(cmd[4:cmd.index("--json")] + extra)
        return rep


_CPU = ("process", "workers", "server")  # the bench report's cpu_ms_per_step


def _med(xs: list[float], fmt: str) -> str:
    if len(xs) == 1:
        return fmt.format(xs[0])
    return f"{fmt.format(statistics.median(xs))} ({fmt.format(min(xs))}-{fmt.format(max(xs))})"


def overhead(a: argparse.Namespace) -> None:
    """Where a step's time goes in the stage alone (no server, no
    placement): a step of the tabular workload's shape (8 slices of
    id int64, label int32, features float32[64]) through ThreadStage and
    ProcessStage, ``inflight`` at a time as the prefetch thread does, with
    a function that does nothing and with gil_1ms: wall time per step,
    CPU of this process and of the workers per step. Then the whole path
    of the training process (_transformer_path)."""
    import threading
    import time

    import numpy as np

    os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")  # before jax
    sys.path[:0] = [str(HERE), str(ROOT / "pyclient")]
    import transform_fns
    from meshfeed._src import bench_proc
    from meshfeed._src.transform import ProcessStage, ThreadStage

    b = a.batch // 8
    host = {"id": [np.arange(b, dtype=np.int64) + i * b for i in range(8)],
            "label": [np.zeros(b, np.int32) for _ in range(8)],
            "features": [np.ones((b, 64), np.float32) for _ in range(8)]}
    loops = transform_fns.calibrate()
    stop = threading.Event()
    print(f"{a.steps} steps of {a.batch} rows (8 slices), {loops} loop iterations for ~1 ms\n")
    print("| stage | function | wall ms per step | this process's CPU ms per step | workers' CPU ms per step |")
    print("|---|---|---|---|---|")
    for name, n in (("threads", 0), (f"{a.workers} processes", a.workers)):
        for fname, count in (("returns its input (no work)", 1), ("gil_1ms", loops)):
            transform_fns.LOOPS = count
            os.environ["MESHFEED_BENCH_GIL_LOOPS"] = str(count)
            stage = ProcessStage(transform_fns.gil_1ms, n) if n else ThreadStage(transform_fns.gil_1ms)
            stage.wait_ready()
            try:
                pend: list = []
                for i in range(20):  # warm up
                    pend.append(stage.submit(host, (0, 0, i, 0)))
                    if len(pend) >= stage.inflight:
                        stage.result(pend.pop(0), stop, "")
                while pend:
                    stage.result(pend.pop(0), stop, "")
                w0 = sum(bench_proc.cpu_seconds(p) for p in stage.pids)
                c0, t0 = time.process_time(), time.perf_counter()
                for i in range(a.steps):
                    pend.append(stage.submit(host, (0, 0, i, 0)))
                    if len(pend) >= stage.inflight:
                        stage.result(pend.pop(0), stop, "")
                while pend:
                    stage.result(pend.pop(0), stop, "")
                wall, cpu = time.perf_counter() - t0, time.process_time() - c0
                wcpu = sum(bench_proc.cpu_seconds(p) for p in stage.pids) - w0
            finally:
                stage.close()
            k = 1e3 / a.steps
            print(f"| {name} | {fname} | {wall * k:.3f} | {cpu * k:.3f} | {wcpu * k:.3f} |", flush=True)
    _transformer_path(a)
    _transfer(a, host)


def _transformer_path(a: argparse.Namespace) -> None:
    """The training process's whole share of a transformed step but the
    stream's: the Loader's Transformer (submit; finish: the reply, the
    checks, the placement on 8 CPU devices, waited for) on steps of the
    same shape, given as the Materializer gives a shared-memory step
    (per-slice views, 64-byte aligned, with their alignment counts), with
    the function that does nothing, in --workers processes and on threads:
    CPU ms per step of this process and of the workers."""
    import threading
    import time

    import jax
    import numpy as np
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    import transform_fns
    from meshfeed._src import bench_proc
    from meshfeed._src import layout as lay
    from meshfeed._src.transform import Transformer

    jax.config.update("jax_enable_x64", True)
    if len(jax.devices()) < 8:
        print(f"\n(the Transformer's path needs 8 devices; jax has {len(jax.devices())}: skipped)")
        return
    sh = NamedSharding(jax.make_mesh((8,), ("data",)), P("data"))
    L = lay.layout_of(sh, a.batch)
    buf = np.zeros(4 << 20, np.uint8)
    off = (-buf.ctypes.data) % 64
    cols = {}
    for k, dt, tr in (("id", np.int64, ()), ("label", np.int32, ()), ("features", np.float32, (64,))):
        cols[k] = []
        for _ in range(8):
            v = np.ndarray((L.b, *tr), dt, buf, off)
            cols[k].append(v)
            off += -(-v.nbytes // 64) * 64

    def host() -> dict:
        if not hasattr(lay, "HostStep"):  # a client before it (to compare)
            return dict(cols)
        h = lay.HostStep(cols)
        h.unaligned = {k: 0 for k in cols}
        return h

    stop = threading.Event()
    transform_fns.LOOPS = 1
    os.environ["MESHFEED_BENCH_GIL_LOOPS"] = "1"
    print("\n| the Transformer's path (returns its input) | this process's CPU ms per step | "
          "workers' CPU ms per step |\n|---|---|---|")
    for name, n in ((f"{a.workers} processes", a.workers), ("threads", 0)):
        tf = Transformer(transform_fns.gil_1ms, n, 0, L, sh, None)
        tf.wait_ready()

        def run(steps: int, s0: int) -> None:
            pend: list = []
            for s in range(s0, s0 + steps):
                h = host()
                pend.append((s, tf.submit(h, 0, s), h))
                while pend and (len(pend) >= tf.inflight or s == s0 + steps - 1):
                    st, handle, hh = pend.pop(0)
                    jax.block_until_ready(list(tf.finish(handle, hh, 0, st, stop)[0].values()))
        try:
            run(100, 0)
            w0, c0 = sum(bench_proc.cpu_seconds(p) for p in tf.pids), time.process_time()
            run(a.steps, 100)
            cpu, wcpu = time.process_time() - c0, sum(bench_proc.cpu_seconds(p) for p in tf.pids) - w0
        finally:
            tf.close()
        print(f"| {name} | {1e3 * cpu / a.steps:.3f} | {1e3 * wcpu / a.steps:.3f} |", flush=True)


def _transfer(a: argparse.Namespace, host: dict) -> None:
    """One way of the step to a worker, as the stage does it (the slices
    concatenated into a shared-memory mapping) against pickling it through
    a socket pair, as multiprocessing would (dumps, send, receive, loads;
    both ends in this process): CPU ms per step."""
    import mmap
    import pickle
    import socket
    import time

    import numpy as np

    need = sum(sum(v.nbytes for v in vs) for vs in host.values())
    mm = mmap.mmap(-1, need + 64 * len(host))
    r, w = socket.socketpair()
    try:
        c0 = time.process_time()
        for _ in range(a.steps):
            off = 0
            for vs in host.values():
                shape = (sum(len(v) for v in vs), *vs[0].shape[1:])
                dst = np.ndarray(shape, vs[0].dtype, mm, off)
                np.concatenate(vs, out=dst)
                off += -(-dst.nbytes // 64) * 64
                del dst
        shm = time.process_time() - c0
        c0 = time.process_time()
        for _ in range(a.steps):
            blob = pickle.dumps({k: np.concatenate(vs) for k, vs in host.items()}, protocol=pickle.HIGHEST_PROTOCOL)
            view, got = memoryview(blob), 0
            buf = bytearray(len(blob))
            while got < len(blob):  # one thread: send and receive by turns
                got_now = w.send(view[got:got + (64 << 10)])  # within the socket buffer
                r.recv_into(memoryview(buf)[got:], got_now, socket.MSG_WAITALL)
                got += got_now
            pickle.loads(buf)
        pick = time.process_time() - c0
    finally:
        r.close()
        w.close()
        mm.close()
    k = 1e3 / a.steps
    print(f"\none step ({need:,} bytes) to a worker, CPU ms per step: shared memory (concatenated into the "
          f"segment) {shm * k:.3f}; pickled through a socket pair {pick * k:.3f}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default=str(ROOT / ".cache" / "bench-transform"),
                   help="dataset directory (generated when missing: --rows rows, id/label/features[64])")
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--batch", type=int, default=2000)
    p.add_argument("--steps", type=int, default=800)
    p.add_argument("--step", choices=("sleep", "compute"), default="sleep")
    p.add_argument("--step-ms", type=float, default=None,
                   help="the step (default: searched, see above)")
    p.add_argument("--min-step-ms", type=float, default=1.0, help="the search's shortest step")
    p.add_argument("--target", type=float, default=98.0, help="utilization %% the loader alone must reach")
    p.add_argument("--grow", type=float, default=1.25, help="factor the step grows by while it does not")
    p.add_argument("--max-probes", type=int, default=8)
    p.add_argument("--probe-repeats", type=int, default=3)
    p.add_argument("--probe-steps", type=int, default=400)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--prefetch-too", type=int, default=2, metavar="N",
                   help="also run the processes with --prefetch N (0: not); the Loader's default is 4 with a "
                        "transform, 2 without")
    p.add_argument("--overhead", action="store_true",
                   help="only the transform stage's own cost per step (no server, no placement)")
    a = p.parse_args()
    if a.overhead:
        overhead(a)
        return
    binary = os.environ.get("MESHFEED_BIN") or str(ROOT / "bin" / "meshfeed")
    if not os.path.isdir(a.data):
        subprocess.run([binary, "gen", "--out", a.data, "--rows", str(a.rows), "--files", "4",
                        "--row-group-rows", "65536", "--features", "64"], check=True)
    sys.path.insert(0, str(HERE))
    import transform_fns
    loops = transform_fns.calibrate()
    env = dict(os.environ, MESHFEED_BIN=binary, MESHFEED_BENCH_GIL_LOOPS=str(loops),
               PYTHONPATH=os.pathsep.join([str(HERE), str(ROOT / "pyclient"), os.environ.get("PYTHONPATH", "")]))
    step_ms = a.step_ms if a.step_ms is not None else find_step(a, env)
    configs = [("loader alone", []),
               ("gil_1ms, threads", ["--transform", "transform_fns:gil_1ms", "--transform-workers", "0"]),
               (f"gil_1ms, {a.workers} processes",
                ["--transform", "transform_fns:gil_1ms", "--transform-workers", str(a.workers)])]
    if a.prefetch_too:  # the same stage with the depth of the loader alone (the default before 2026-12-03)
        configs.append((f"gil_1ms, {a.workers} processes, prefetch {a.prefetch_too}",
                        [*configs[2][1], "--prefetch", str(a.prefetch_too)]))
    runs: dict[str, list[dict]] = {name: [] for name, _ in configs}
    for i in range(a.repeats):
        for name, extra in configs:
            r = _bench(a, env, extra, step_ms)
            runs[name].append(r)
            tf = r.get("transform") or {}
            cpu = r.get("cpu_ms_per_step") or {}
            print(f"run {i + 1} {name}: utilization {100 * r['utilization']:.2f}%, "
                  f"transform {tf.get('ms_per_step', 0):.3f} ms/step, waited {tf.get('wait_ms_per_step', 0):.3f}, "
                  f"CPU ms/step {' / '.join(format(cpu.get(k, 0.0), '.3f') for k in _CPU)} (process / workers / "
                  "server)", flush=True)
    report(a, loops, step_ms, configs, runs)


def find_step(a: argparse.Namespace, env: dict) -> float:
    """The step (ms) at which the loader alone reaches --target: from 80%
    of the free loop's rate (or --min-step-ms, the longer), grown by --grow
    until the median of --probe-repeats runs of --probe-steps steps
    reaches it."""
    free = _bench(a, env, [], 0.0, steps=a.probe_steps)
    per = a.batch / free["rows_per_second"] * 1e3
    step_ms = max(per / 0.8, a.min_step_ms)
    print(f"free loop: {free['rows_per_second']:,.0f} rows/s, {per:.3f} ms per step (80%: {per / 0.8:.3f} ms); "
          f"the search starts at {step_ms:.3f} ms", flush=True)
    for _ in range(a.max_probes):
        us = [_bench(a, env, [], step_ms, steps=a.probe_steps)["utilization"] for _ in range(a.probe_repeats)]
        med = statistics.median(us)
        print(f"loader alone at {step_ms:.3f} ms: median utilization {100 * med:.2f}% "
              f"({', '.join(f'{100 * u:.2f}' for u in us)})", flush=True)
        if med >= a.target / 100:
            return step_ms
        step_ms *= a.grow
    raise SystemExit(f"the loader alone did not reach {a.target}% within {a.max_probes} steps grown by "
                     f"x{a.grow} (last {step_ms / a.grow:.3f} ms): the machine is too busy for this target")


def report(a: argparse.Namespace, loops: int, step_ms: float, configs: list, runs: dict[str, list[dict]]) -> None:
    """The table of medians, the commands and the verdict."""
    print(f"\n{loops} loop iterations (~1 ms here); {a.steps} steps of {a.batch} rows, {a.step} step of "
          f"{step_ms:.3f} ms; medians of {a.repeats} (min-max)\n")
    print("| configuration | utilization % | data wait p50 / p99 ms | transform ms per step | "
          "loader's wait for it, ms per step | client CPU ms per step, start-up included | "
          "CPU ms per step from the first step's end: process / workers / server | rows/s |")
    print("|---|---|---|---|---|---|---|---|")
    med: dict[str, float] = {}
    for name, _ in configs:
        rs = runs[name]
        tfs = [r.get("transform") or {} for r in rs]
        med[name] = statistics.median(100 * r["utilization"] for r in rs)
        tcol = "-" if not any(tfs) else _med([t.get("ms_per_step", 0.0) for t in tfs], "{:.3f}")
        wcol = "-" if not any(tfs) else _med([t.get("wait_ms_per_step", 0.0) for t in tfs], "{:.3f}")
        print(f"| {name} | {_med([100 * r['utilization'] for r in rs], '{:.2f}')} | "
              f"{_med([r['wait_p50_ms'] for r in rs], '{:.3f}')} / {_med([r['wait_p99_ms'] for r in rs], '{:.3f}')} | "
              f"{tcol} | {wcol} | "
              f"{_med([1e3 * r['cpu_seconds_client'] / r['steps'] for r in rs], '{:.3f}')} | "
              f"{' / '.join(_med([r.get('cpu_ms_per_step', {}).get(k, 0.0) for r in rs], '{:.3f}') for k in _CPU)} | "
              f"{_med([r['rows_per_second'] for r in rs], '{:,.0f}')} |")
    print()
    for name, _ in configs:
        print(f"- {name}: `{runs[name][0]['command']}`")
    alone, procs = med[configs[0][0]], med[configs[2][0]]
    ok = alone >= a.target and procs >= a.target
    print(f"\ntarget ({a.target}% with {a.workers} worker processes where the loader alone reaches it): "
          f"loader alone {alone:.2f}%, {a.workers} processes {procs:.2f}%: {'met' if ok else 'NOT met'}")

if __name__ == "__main__":
    main()
