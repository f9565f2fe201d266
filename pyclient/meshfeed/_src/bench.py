"""``python -m meshfeed bench``: does the accelerator wait for input?

Streams a dataset through :class:`meshfeed.Loader` onto a mesh, runs a
simulated training step after every batch (``--step-ms``: a jitted computation
calibrated to take that long on the present device, or ``--step sleep``), and
reports accelerator utilization (time in the step / wall time over the
measured steps), the data wait per step, throughput, time to the first batch,
peak memory and CPU cost. The first step is not measured: its wait is the
time to first batch, reported on its own.
"""

from __future__ import annotations

import argparse
import glob as globmod
import json
import math
import os
import pathlib
import shutil
import subprocess
import sys
import time
from typing import Any, Sequence

from . import bench_proc

_DATA_EXT = (".parquet", ".arrow", ".feather", ".ipc")
FAKEGCS_BUCKET = "meshfeed-bench"


# -- arguments -----------------------------------------------------------------

def _parse_mesh(text: str) -> list[tuple[str, int]]:
    axes = []
    for part in text.split(","):
        name, sep, size = part.partition("=")
        if not sep or not name.strip() or not size.strip().isdigit() or int(size) < 1:
            raise ValueError(f"--mesh {text!r}: want NAME=SIZE[,NAME=SIZE...], e.g. data=8 or data=4,model=2")
        axes.append((name.strip(), int(size)))
    if len({a for a, _ in axes}) != len(axes):
        raise ValueError(f"--mesh {text!r}: an axis is named twice")
    return axes


def _parse_topology(text: str) -> list[int]:
    try:
        dims = [int(x) for x in text.lower().split("x")]
    except ValueError:
        dims = []
    if not dims or min(dims) < 1:
        raise ValueError(f"--topology {text!r}: want AxB[xC], e.g. 4x4")
    return dims


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``meshfeed bench``."""
    p = argparse.ArgumentParser(
        prog="meshfeed bench", description=__doc__.split("\n\n")[0].strip("` "),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        epilog="Example: python -m meshfeed bench '/data/train/*.parquet' --global-batch-size 1024 "
               "--mesh data=8 --step-ms 20 --steps 500 --json out.json --plot out.png")
    p.add_argument("data", nargs="*", help="dataset URIs: local paths, globs, file:// or gs://")
    p.add_argument("--mixture", default=None, metavar="SPEC.json",
                   help="read a weighted mixture of datasets instead (meshfeed.Mixture as JSON: "
                        '{"sources": [{"data": URI, "weight": W, "columns": [...], "rename": {...}}, ...], '
                        '"stop": "first_exhausted" | "all_exhausted" | STEPS, "source_column": NAME})')
    p.add_argument("--global-batch-size", "-B", type=int, default=1024, help="rows per global step")
    mesh = p.add_mutually_exclusive_group()
    mesh.add_argument("--mesh", default=None,
                      help="mesh axes NAME=SIZE[,...] over the present devices (default: data=<all devices>)")
    mesh.add_argument("--topology", default=None,
                      help="device topology AxB[xC] (e.g. 4x4 on a TPU slice); the batch is split over all of it")
    p.add_argument("--chips-per-host", type=int, default=None,
                   help="with --topology: devices per process, checked against the devices present")
    p.add_argument("--batch-axes", default=None,
                   help="mesh axes the batch dimension is split over, comma-separated "
                        "(default: the first --mesh axis; every --topology axis)")
    p.add_argument("--columns", default=None, help="comma-separated columns to read (default: all)")
    p.add_argument("--length", action="append", default=[], metavar="NAME=L",
                   help="give list column NAME the static length L (meshfeed.Column(length=L, "
                        "overflow='truncate')); repeatable; NAME must be in --columns")
    p.add_argument("--tokenizer", action="append", default=[], metavar="NAME=PATH",
                   help="tokenize string column NAME with tokenizer.json PATH (meshfeed.Column(tokenizer=PATH)); "
                        "repeatable; NAME must be in --columns")
    p.add_argument("--pack", action="append", default=[], metavar="NAME=concat",
                   help="pack tokenized column NAME by concatenate-then-split into rows of its --length "
                        "(meshfeed.Column(pack='concat')); needs --tokenizer and --length for NAME")
    p.add_argument("--last-batch", choices=("drop", "pad", "raise"), default="drop", help="final-batch policy")
    p.add_argument("--shuffle-window", type=int, default=0, help="shuffle window in rows (0: file order, no shuffle)")
    p.add_argument("--seed", type=int, default=0, help="shuffle seed")
    run = p.add_mutually_exclusive_group()
    run.add_argument("--steps", type=int, default=None, help="steps to run (epochs repeat as needed)")
    run.add_argument("--epochs", type=int, default=None, help="epochs to run (default 1 when --steps is not given)")
    p.add_argument("--step", choices=("compute", "sleep"), default="compute",
                   help="simulated step: a jitted computation on the device, or a plain sleep")
    p.add_argument("--step-ms", type=float, default=0.0,
                   help="simulated step time in ms (0: no step; measures the loader's maximum rate)")
    p.add_argument("--x64", action="store_true",
                   help="enable jax_enable_x64 (64-bit columns stay 64-bit instead of a narrowing host copy)")
    p.add_argument("--prefetch", type=int, default=None,
                   help="steps staged on device ahead of the loop (default: the Loader's, 2, or 4 with --transform)")
    p.add_argument("--server", default=None, help="address of a running meshfeed server (default: start one)")
    p.add_argument("--binary", default=None, help="path of the meshfeed binary")
    p.add_argument("--gcs-emulator", action="store_true",
                   help="serve the (local) dataset from an in-process fake GCS server and read it as gs://")
    p.add_argument("--fakegcs", default=None, metavar="PATH",
                   help="with --gcs-emulator: the fakegcs helper (`go build -o bin/fakegcs ./benchmarks/fakegcs` "
                        "in a checkout; default: $MESHFEED_FAKEGCS, beside the meshfeed binary, PATH)")
    p.add_argument("--transform", default=None, metavar="MODULE:FUNCTION",
                   help="run FUNCTION of MODULE (importable from here) on every step as Loader(transform=...); "
                        "the report says how long it took per step and how long the loader waited for it")
    p.add_argument("--transform-workers", type=int, default=0, metavar="N",
                   help="with --transform: 0 runs it on threads, N > 0 in N worker processes")
    p.add_argument("--json", default=None, metavar="PATH", help="also write the figures as JSON")
    p.add_argument("--plot", default=None, metavar="PATH.png", help="draw the per-step timeline (needs matplotlib)")
    p.add_argument("--no-progress", action="store_true", help="no live progress line on stderr")
    return p


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """Parses and checks the arguments (exits with a usage error when bad)."""
    p = build_parser()
    a = p.parse_args(argv)
    try:
        a.mesh_axes = _parse_mesh(a.mesh) if a.mesh else None
        a.topology_dims = _parse_topology(a.topology) if a.topology else None
    except ValueError as e:
        p.error(str(e))
    if a.chips_per_host is not None and a.topology is None:
        p.error("--chips-per-host needs --topology")
    if a.chips_per_host is not None and a.chips_per_host < 1:
        p.error("--chips-per-host must be >= 1")
    if a.global_batch_size < 1:
        p.error("--global-batch-size must be >= 1")
    if a.steps is not None and a.steps < 1:
        p.error("--steps must be >= 1")
    if a.epochs is not None and a.epochs < 1:
        p.error("--epochs must be >= 1")
    if a.steps is None and a.epochs is None:
        a.epochs = 1
    if a.step_ms < 0 or not math.isfinite(a.step_ms):
        p.error("--step-ms must be a finite number >= 0")
    if a.shuffle_window < 0:
        p.error("--shuffle-window must be >= 0")
    if a.prefetch is not None and a.prefetch < 1:
        p.error("--prefetch must be >= 1")
    if a.gcs_emulator and a.server:
        p.error("--gcs-emulator starts its own server; drop --server")
    if bool(a.data) == bool(a.mixture):
        p.error("name the datasets, or a mixture with --mixture SPEC.json (not both)")
    if a.mixture and (a.columns or a.length or a.shuffle_window or a.gcs_emulator):
        p.error("--mixture: give columns, lengths and shuffles per source in the spec (and no --gcs-emulator)")
    if a.transform_workers < 0:
        p.error("--transform-workers must be >= 0")
    if a.transform_workers and not a.transform:
        p.error("--transform-workers needs --transform")
    if a.transform is not None:
        try:
            a.transform_fn = load_transform(a.transform)
        except ValueError as e:
            p.error(str(e))
    else:
        a.transform_fn = None
    if a.plot:
        try:
            import matplotlib  # noqa: F401
        except ImportError as e:
            p.error(f"--plot needs matplotlib ({e}); pip install matplotlib, or `make bench-setup`")
    a.column_list = [c.strip() for c in a.columns.split(",") if c.strip()] if a.columns else None
    a.lengths = {}
    for item in a.length:
        name, sep, n = item.partition("=")
        if not sep or not name.strip() or not n.strip().isdigit() or int(n) < 1:
            p.error(f"--length {item!r}: want NAME=L with L >= 1, e.g. tokens=2048")
        if a.column_list is None or name.strip() not in a.column_list:
            p.error(f"--length {item!r}: name the column in --columns too")
        a.lengths[name.strip()] = int(n)
    a.tokenizers, a.packs = {}, {}
    for flag, items, out in (("--tokenizer", a.tokenizer, a.tokenizers), ("--pack", a.pack, a.packs)):
        for item in items:
            name, sep, value = (x.strip() for x in item.partition("="))
            if not sep or not name or not value:
                p.error(f"{flag} {item!r}: want NAME=VALUE, e.g. text=tokenizer.json or text=concat")
            if a.column_list is None or name not in a.column_list:
                p.error(f"{flag} {item!r}: name the column in --columns too")
            out[name] = value
    for name in a.packs:
        if name not in a.tokenizers or name not in a.lengths:
            p.error(f"--pack {name}={a.packs[name]}: give --tokenizer {name}=PATH and --length {name}=L too")
    return a


def column_options(a: argparse.Namespace) -> Any:
    """The Loader's columns: the --columns list, or a dict of meshfeed.Column
    where --length, --tokenizer or --pack shape one."""
    from .config import Column
    shaped = set(a.lengths) | set(a.tokenizers)
    if not shaped:
        return a.column_list
    out: dict[str, Any] = {}
    for c in a.column_list:
        if c not in shaped:
            out[c] = None
            continue
        kw: dict[str, Any] = {"length": a.lengths.get(c, 0)}
        if c in a.tokenizers:
            kw["tokenizer"] = a.tokenizers[c]
        if c in a.packs:
            kw["pack"] = a.packs[c]
        elif c in a.lengths:
            kw["overflow"] = "truncate"
        out[c] = Column(**kw)
    return out


def load_transform(spec: str) -> Any:
    """The function ``MODULE:FUNCTION`` names (FUNCTION may be dotted:
    ``module:Class.method``); ValueError saying what is wrong."""
    import importlib
    mod, sep, name = spec.partition(":")
    if not sep or not mod or not name:
        raise ValueError(f"--transform {spec!r}: want MODULE:FUNCTION, e.g. my_augment:flip")
    try:
        obj: Any = importlib.import_module(mod)
    except ImportError as e:
        raise ValueError(f"--transform {spec!r}: cannot import {mod!r} ({e}); is its directory on PYTHONPATH?") from e
    for part in name.split("."):
        if not hasattr(obj, part):
            raise ValueError(f"--transform {spec!r}: {mod} has no {name!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise ValueError(f"--transform {spec!r}: {name} is not callable")
    return obj


def _devices_wanted(a: argparse.Namespace) -> int | None:
    if a.mesh_axes:
        return math.prod(s for _, s in a.mesh_axes)
    if a.topology_dims:
        return a.chips_per_host or math.prod(a.topology_dims)
    return None


def _force_cpu_devices(n: int | None) -> None:
    """On a CPU-only host, give XLA ``n`` devices unless the caller chose
    (affects only the CPU backend; must precede jax's backend start)."""
    if n and "--xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + f" --xla_force_host_platform_device_count={n}").strip()


def make_sharding(a: argparse.Namespace):
    """The mesh and the sharding of dimension 0 that the arguments describe."""
    import jax
    from jax.sharding import NamedSharding, PartitionSpec as P

    devices = jax.devices()
    if a.topology_dims:
        want = math.prod(a.topology_dims)
        if len(devices) != want:
            raise SystemExit(f"--topology {a.topology} needs {want} devices, jax has {len(devices)} "
                             f"({jax.default_backend()})")
        if a.chips_per_host is not None and jax.local_device_count() != a.chips_per_host:
            raise SystemExit(f"--chips-per-host {a.chips_per_host}: this process has "
                             f"{jax.local_device_count()} devices")
        names = tuple(["x", "y", "z", "w"][:len(a.topology_dims)]) if len(a.topology_dims) <= 4 else \
            tuple(f"a{i}" for i in range(len(a.topology_dims)))
        from jax.experimental import mesh_utils
        mesh = jax.sharding.Mesh(mesh_utils.create_device_mesh(tuple(a.topology_dims), devices), names)
        default_axes = names
    else:
        axes = a.mesh_axes or [("data", len(devices))]
        want = math.prod(s for _, s in axes)
        if len(devices) != want:
            raise SystemExit(f"--mesh {a.mesh or 'data=' + str(want)} needs {want} devices, jax has "
                             f"{len(devices)} ({jax.default_backend()}); on CPU set "
                             f"XLA_FLAGS=--xla_force_host_platform_device_count={want}")
        names = tuple(n for n, _ in axes)
        mesh = jax.make_mesh(tuple(s for _, s in axes), names,
                             axis_types=(jax.sharding.AxisType.Auto,) * len(axes))
        default_axes = names[:1]
    batch_axes = tuple(x.strip() for x in a.batch_axes.split(",")) if a.batch_axes else default_axes
    unknown = [x for x in batch_axes if x not in mesh.axis_names]
    if unknown:
        raise SystemExit(f"--batch-axes {','.join(batch_axes)}: no mesh axis {unknown[0]!r} "
                         f"(axes: {', '.join(mesh.axis_names)})")
    spec = P(batch_axes if len(batch_axes) > 1 else batch_axes[0])
    return mesh, NamedSharding(mesh, spec)


# -- the fake GCS --------------------------------------------------------------

def find_fakegcs(explicit: str | None = None, binary: str | None = None) -> str:
    """The fakegcs helper, a test tool of the meshfeed repository that no
    wheel carries: ``--fakegcs``, $MESHFEED_FAKEGCS, ``fakegcs`` beside the
    meshfeed binary in use, then PATH."""
    from .errors import BinaryNotFoundError
    from .server import find_binary
    cands = [("--fakegcs", explicit), ("$MESHFEED_FAKEGCS", os.environ.get("MESHFEED_FAKEGCS") or None)]
    try:
        cands.append(("beside the meshfeed binary", str(pathlib.Path(find_binary(binary)).resolve().parent / "fakegcs")))
    except BinaryNotFoundError:
        cands.append(("beside the meshfeed binary (none found)", None))
    cands.append(("PATH", shutil.which("fakegcs")))
    tried = []
    for what, path in cands:
        if path and os.path.isfile(path) and os.access(path, os.X_OK):
            return path
        tried.append(f"{what}: {path or 'not set'}")
    raise SystemExit("--gcs-emulator needs the fakegcs helper; tried " + "; ".join(tried) + ". In a checkout of "
                     "the meshfeed repository: `go build -o bin/fakegcs ./benchmarks/fakegcs`, then --fakegcs bin/fakegcs")


def _local_files(uri: str) -> list[str]:
    path = uri[len("file://"):] if uri.startswith("file://") else uri
    if os.path.isdir(path):
        files = sorted(os.path.join(path, f) for f in os.listdir(path) if f.endswith(_DATA_EXT))
    else:
        files = sorted(f for f in globmod.glob(path) if os.path.isfile(f))
    if not files:
        raise SystemExit(f"--gcs-emulator: {uri!r} names no local data files")
    return files


class FakeGCS:
    """The fakegcs helper process serving the local datasets as
    ``gs://meshfeed-bench/d<i>/...``; stop() ends it."""

    def __init__(self, uris: Sequence[str], helper: str):
        objects, self.uris = [], []
        for i, u in enumerate(uris):
            if u.startswith("gs://"):
                raise SystemExit(f"--gcs-emulator serves local data; {u!r} is already on GCS")
            for f in _local_files(u):
                objects.append(f"d{i}/{os.path.basename(f)}={os.path.abspath(f)}")
            self.uris.append(f"gs://{FAKEGCS_BUCKET}/d{i}/*")
        args = [helper, "--bucket", FAKEGCS_BUCKET] + objects
        # stdin stays open: the helper exits when it closes (also if we die).
        self.proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        if not line.startswith("fakegcs: serving "):
            self.stop()
            raise SystemExit(f"fakegcs did not start (printed {line!r})")
        self.url = line.split()[2]

    def stop(self) -> None:
        """Ends the helper (closing its stdin) and waits for it."""
        if self.proc.poll() is None:
            try:
                self.proc.stdin.close()
                self.proc.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()
        self.proc.stdout.close()


# -- progress and report -----------------------------------------------------------

class Progress:
    """A live progress line on stderr: redrawn in place on a terminal,
    a new line every few seconds otherwise."""

    def __init__(self, total: int | None, enabled: bool = True):
        self.total = total
        self.enabled = enabled
        self.tty = sys.stderr.isatty()
        self.every = 0.1 if self.tty else 5.0
        self.last = 0.0

    def update(self, step: int, rows_per_s: float, wait_ms: float, force: bool = False) -> None:
        now = time.perf_counter()
        if not self.enabled or (not force and now - self.last < self.every):
            return
        self.last = now
        if self.total:
            done = int(24 * min(step, self.total) / self.total)
            head = f"step {step:>{len(str(self.total))}}/{self.total} [{'#' * done}{'.' * (24 - done)}]"
        else:
            head = f"step {step}"
        line = f"{head} {rows_per_s:>12,.0f} rows/s  wait {wait_ms:8.2f} ms"
        sys.stderr.write(("\r" + line + "  ") if self.tty else line + "\n")
        sys.stderr.flush()

    def close(self) -> None:
        if self.enabled and self.tty:
            sys.stderr.write("\n")
            sys.stderr.flush()


def _pct(xs: Sequence[float], q: float) -> float:
    import numpy as np
    return float(np.percentile(np.asarray(xs, dtype=np.float64), q)) if len(xs) else 0.0


def _mib(n: float) -> str:
    return f"{n / 2**20:,.1f} MiB"


def format_report(r: dict[str, Any]) -> str:
    """The end-of-run table."""
    rows = [
        ("accelerator utilization", f"{100 * r['utilization']:.2f}%"
         + (f" ({r['step']} step of {r['step_ms']:g} ms; measured {r['step_ms_measured']:.2f} ms)"
            if r["step_ms"] > 0 else " (no simulated step: the loader's maximum rate)")),
        ("data wait per step", f"p50 {r['wait_p50_ms']:.3f} ms   p90 {r['wait_p90_ms']:.3f} ms   "
                               f"p99 {r['wait_p99_ms']:.3f} ms   max {r['wait_max_ms']:.3f} ms"),
        ("rows/s", f"{r['rows_per_second']:,.0f}"),
        ("GB/s delivered", f"{r['bytes_per_second'] / 1e9:.3f}"),
        ("time to first batch", f"{r['time_to_first_batch_s']:.3f} s"),
    ]
    tf = r.get("transform")
    if tf:
        n = tf["workers"]
        where = f"{n} worker process{'es' if n != 1 else ''}" if tf["mode"] == "processes" else f"{n} threads"
        rows.append(("transform", f"{tf['function']} on {where}: {tf['ms_per_step']:.3f} ms per step in the "
                                  f"function; the loader waited {tf['wait_ms_per_step']:.3f} ms per step for it"))
    rows += [
        ("peak RSS", f"client {_mib(r['peak_rss_client_bytes'])}, server {_mib(r['peak_rss_server_bytes'])}"
                     + ("" if r["server_local"] else " (server not started here: not measured)")),
        ("CPU seconds per GB", f"{r['cpu_seconds_per_gb']:.2f} (client {r['cpu_seconds_client']:.2f} s, "
                               f"server {r['cpu_seconds_server']:.2f} s)"),
        ("measured", f"{r['measured_steps']} steps of {r['global_batch_size']} rows, {r['rows']:,} rows, "
                     f"{r['bytes'] / 1e9:.3f} GB in {r['wall_s']:.2f} s (after the first step)"),
    ]
    w = max(len(k) for k, _ in rows)
    via = f" (read as {', '.join(r['uris'])} from a fake GCS server)" if r["storage"] == "fake GCS" else ""
    head = (f"meshfeed bench: {', '.join(r['data'])}{via}\n{r['devices']} {r['backend']} devices, "
            f"mesh {r['mesh']}, batch over {r['batch_axes']}, shuffle window {r['shuffle_window']}, "
            f"last batch {r['last_batch']}")
    return head + "\n" + "\n".join(f"  {k:<{w}}  {v}" for k, v in rows)


def plot_timeline(path: str, t_wait0: Sequence[float], waits: Sequence[float], computes: Sequence[float],
                  title: str) -> None:
    """Draws the per-step timeline: wait and compute as bars over wall time,
    and the wait of each step."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(11, 5.5), gridspec_kw={"height_ratios": [1, 2]})
    wait_bars = [(t, w) for t, w in zip(t_wait0, waits)]
    comp_bars = [(t + w, c) for t, w, c in zip(t_wait0, waits, computes)]
    ax1.broken_barh(comp_bars, (10, 8), facecolors="tab:blue", label="compute (simulated step)")
    ax1.broken_barh(wait_bars, (0, 8), facecolors="tab:red", label="waiting for data")
    ax1.set_yticks([4, 14], ["wait", "compute"])
    ax1.set_xlabel("seconds since the loader was created")
    ax1.legend(loc="upper right", fontsize=8)
    ax1.set_title(title, fontsize=9)
    steps = list(range(len(waits)))
    ax2.plot(steps, [1e3 * w for w in waits], color="tab:red", lw=0.8, label="wait (ms)")
    ax2.plot(steps, [1e3 * c for c in computes], color="tab:blue", lw=0.8, label="compute (ms)")
    ax2.set_xlabel("step")
    ax2.set_ylabel("ms")
    ax2.set_yscale("symlog", linthresh=1.0)
    ax2.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# -- the run -------------------------------------------------------------------------

def _cpu_now(loader: Any) -> tuple[float, float, float]:
    """CPU seconds so far of this process, of the transform's worker
    processes and of the local server (0 where there is none)."""
    tf = loader._tbox[0]
    srv = getattr(loader, "_server", None)
    return (time.process_time(), sum(bench_proc.cpu_seconds(p) for p in (tf.pids if tf is not None else ())),
            bench_proc.cpu_seconds(srv.pid) if srv is not None else 0.0)


def run(a: argparse.Namespace) -> dict[str, Any]:
    """Runs the benchmark the arguments describe and returns its figures."""
    import jax

    from .bench_step import make_step
    from .config import ServerOptions, Shuffle
    from .loader import Loader

    def mixture_spec(path: str) -> Any:
        from .mixture import mixture_from_spec
        with open(path) as f:
            return mixture_from_spec(json.load(f))

    if a.x64:
        jax.config.update("jax_enable_x64", True)
    mesh, sharding = make_sharding(a)
    step_fn = make_step(a.step, a.step_ms, mesh.devices.flat[0])
    step_ms_measured = step_fn.calibrate() if hasattr(step_fn, "calibrate") else a.step_ms

    fake = FakeGCS(a.data, find_fakegcs(a.fakegcs, a.binary)) if a.gcs_emulator else None
    uris = fake.uris if fake else list(a.data)
    old_emu = os.environ.get("STORAGE_EMULATOR_HOST")
    if fake:
        os.environ["STORAGE_EMULATOR_HOST"] = fake.url  # inherited by the server process
    try:
        shuffle = Shuffle(seed=a.seed, window=a.shuffle_window) if a.shuffle_window > 0 else None
        cpu0 = time.process_time()
        t_start = time.perf_counter()
        columns = column_options(a)
        data: Any = uris
        if a.mixture is not None:  # a mixture is one pass; its sources carry columns and shuffles
            data, columns, shuffle = mixture_spec(a.mixture), None, None
        loader = Loader(data, global_batch_size=a.global_batch_size, sharding=sharding, columns=columns,
                        last_batch=a.last_batch, shuffle=shuffle,
                        num_epochs=1 if a.mixture is not None else None if a.steps is not None else a.epochs,
                        prefetch=a.prefetch,
                        server=a.server,
                        server_options=ServerOptions(binary=a.binary) if a.server is None else None,
                        transform=a.transform_fn, transform_workers=a.transform_workers)
        with loader:
            total = a.steps if a.steps is not None else loader.steps_per_epoch * a.epochs
            if a.mixture is not None:
                total = min(total, loader.steps_per_epoch)
            progress = Progress(total, enabled=not a.no_progress)
            times: list[tuple[float, float, float]] = []  # per step: next() called, returned, step done
            it = iter(loader)
            mark = None  # (time, rows, bytes) at the end of the first step
            cpu_mark = (0.0, 0.0, 0.0)  # _cpu_now there
            t_end = t_start
            clock, show, B = time.perf_counter, progress.enabled, a.global_batch_size
            # The loop does no more per step than a training loop would: the
            # figures are computed from the timestamps after it.
            for n in range(1, total + 1):
                t0 = clock()
                try:
                    batch = next(it)
                except StopIteration:
                    break
                # A step comes out of next() on its devices (the prefetch
                # thread waited for its transfers: test_loader checks), so
                # its wait for data is all in next(). block_until_ready here
                # would let go of the GIL even for ready arrays and add the
                # wait to get it back from the loader's threads: a cost of
                # the measurement that a training loop does not pay.
                t1 = clock()
                if step_fn is not None:
                    step_fn(batch)
                t_end = clock()
                times.append((t0, t1, t_end))
                if mark is None:
                    st = loader.stats()
                    mark = (t_end, st["rows"], st["bytes"])
                    ttfb = t1 - t_start
                    cpu_mark = _cpu_now(loader)
                elif show:
                    el = t_end - mark[0]
                    progress.update(n, (n - 1) * B / el if el > 0 else 0.0, (t1 - t0) * 1e3)
            t_wait0 = [t0 - t_start for t0, _, _ in times]
            waits = [t1 - t0 for t0, t1, _ in times]
            computes = [t2 - t1 for _, t1, t2 in times]
            st = loader.stats()
            n = len(waits)
            progress.update(n, (st["rows"] - mark[1]) / (t_end - mark[0]) if mark and t_end > mark[0] else 0.0,
                            waits[-1] * 1e3 if waits else 0.0, force=True)
            progress.close()
            tf = loader._tbox[0]  # the transform's worker processes: their CPU counts as the client's
            worker_cpu = sum(bench_proc.cpu_seconds(p) for p in (tf.pids if tf is not None else ()))
            srv = getattr(loader, "_server", None)
            server_pid = srv.pid if srv is not None else None
            server_rss = bench_proc.peak_rss(server_pid) if server_pid else 0
            server_cpu = bench_proc.cpu_seconds(server_pid) if server_pid else 0.0
            spe, num_rows = loader.steps_per_epoch, loader.num_rows
            # From the first step's end, as the rates: no start-up (imports,
            # planning, the transform's worker processes starting).
            steady = [b - a for a, b in zip(cpu_mark, _cpu_now(loader))] if n > 1 else [0.0, 0.0, 0.0]
        client_cpu = time.process_time() - cpu0 + worker_cpu
        client_rss = bench_proc.peak_rss(os.getpid())
    finally:
        if fake:
            fake.stop()
            if old_emu is None:
                os.environ.pop("STORAGE_EMULATOR_HOST", None)
            else:
                os.environ["STORAGE_EMULATOR_HOST"] = old_emu
    if not waits:
        raise SystemExit("the dataset gave no steps (fewer rows than one global batch with --last-batch drop?)")

    # Measured steps: all but the first (whose wait is the time to first batch).
    m_waits, m_comp = (waits[1:], computes[1:]) if n > 1 else (waits, computes)
    wall = (t_end - mark[0]) if n > 1 else (t_end - t_start)
    rows = st["rows"] - mark[1] if n > 1 else st["rows"]
    nbytes = st["bytes"] - mark[2] if n > 1 else st["bytes"]
    wall = max(wall, 1e-9)
    cpu_total = client_cpu + server_cpu
    out = {
        "data": list(a.data), "uris": list(uris), "storage": "fake GCS" if fake else ("server " + a.server if a.server else "local"),
        "backend": jax.default_backend(), "devices": len(jax.devices()),
        "mesh": ",".join(f"{k}={v}" for k, v in mesh.shape.items()),
        "batch_axes": ",".join(sharding.spec[0] if isinstance(sharding.spec[0], tuple) else [sharding.spec[0]]),
        "global_batch_size": a.global_batch_size, "shuffle_window": a.shuffle_window, "last_batch": a.last_batch,
        "num_rows": num_rows, "steps_per_epoch": spe,
        "step": a.step if a.step_ms > 0 else "none", "step_ms": a.step_ms,
        "step_ms_measured": float(step_ms_measured), "step_iterations": getattr(step_fn, "iterations", 0),
        "steps": n, "measured_steps": len(m_waits), "rows": int(rows), "bytes": int(nbytes), "wall_s": wall,
        "utilization": min(1.0, float(sum(m_comp)) / wall),
        "compute_s": float(sum(m_comp)), "wait_s": float(sum(m_waits)),
        "rows_per_second": rows / wall, "bytes_per_second": nbytes / wall,
        "wait_p50_ms": _pct(m_waits, 50) * 1e3, "wait_p90_ms": _pct(m_waits, 90) * 1e3,
        "wait_p99_ms": _pct(m_waits, 99) * 1e3, "wait_max_ms": max(m_waits) * 1e3,
        "time_to_first_batch_s": ttfb,
        "peak_rss_bytes": client_rss + server_rss, "peak_rss_client_bytes": client_rss,
        "peak_rss_server_bytes": server_rss, "server_local": server_pid is not None,
        "cpu_seconds_client": client_cpu, "cpu_seconds_server": server_cpu,
        # CPU ms per measured step (from the first step's end): this process,
        # the transform's worker processes, the local server.
        "cpu_ms_per_step": {k: 1e3 * v / max(len(m_waits), 1)
                            for k, v in zip(("process", "workers", "server"), steady)},
        "cpu_seconds_per_gb": cpu_total / (st["bytes"] / 1e9) if st["bytes"] else 0.0,
        "total_rows": int(st["rows"]), "total_bytes": int(st["bytes"]),
        "host_copies": st["host_copies"], "unaligned_transfers": st["unaligned_transfers"],
        "transport": st["transport"], "in_place_bytes": int(st["in_place_bytes"]),
        "transform": st.get("transform"),
    }
    if a.plot:
        plot_timeline(a.plot, t_wait0, waits, computes,
                      f"meshfeed bench: utilization {100 * out['utilization']:.1f}%, "
                      f"{out['rows_per_second']:,.0f} rows/s, step {out['step']} {a.step_ms:g} ms")
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m meshfeed bench`` and ``meshfeed-bench``."""
    a = parse_args(argv)
    _force_cpu_devices(_devices_wanted(a) or 8)
    try:
        report = run(a)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # noqa: BLE001 - a CLI prints errors, not tracebacks
        from .errors import MeshfeedError
        if isinstance(e, MeshfeedError):
            print(f"meshfeed bench: {type(e).__name__}: {e}", file=sys.stderr)
            return 1
        raise
    print(format_report(report))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(report, f, indent=2)
            f.write("\n")
    return 0
