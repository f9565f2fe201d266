"""Offline batch inference with meshfeed: every row exactly once, predictions
written back next to their row ids.

What it does:
  1. Opens a ``meshfeed.Loader`` over the Parquet files of ``--data`` in file
     order (``shuffle=None``) with ``last_batch="pad"``, so every row is
     delivered exactly once and the last global batch is filled up with padding
     rows that the boolean mask column ``valid`` marks as not real.
  2. Shards each global batch over all local devices (a 1-D mesh, axis
     ``data``) and runs a small jitted model on it: a fixed random linear layer
     over the ``features`` column followed by tanh, one float per row.
  3. Drops the padding rows with the mask and streams ``(id, prediction)``
     rows to ``--out`` (Parquet; written to a temporary file and renamed at the
     end, so a crash never leaves a partial file under the final name).

The model's weights come from ``--seed`` alone, so anyone can recompute a
prediction from the input files::

    rng = numpy.random.default_rng(seed)
    w = (rng.standard_normal(K) / sqrt(K)).astype(float32)   # K = features per row
    bias = float32(rng.standard_normal())
    prediction = tanh(features @ w + bias)

Rows appear in the output in the loader's order: step by step, and inside a
step slice by slice (see "The contract" in docs/DESIGN.md); the id column says
which row each prediction belongs to.

Run it (8 CPU devices; on an accelerator host drop the two variables)::

    bin/meshfeed gen --out /tmp/ds --rows 100000 --files 4 --features 64
    XLA_FLAGS=--xla_force_host_platform_device_count=8 JAX_PLATFORMS=cpu \\
        .venv/bin/python examples/batch_inference.py --data /tmp/ds --out /tmp/predictions.parquet --batch-size 1024

It prints one line when done, e.g.::

    wrote 100000 predictions in 98 steps on 8 devices to /tmp/predictions.parquet (2.10 s, 47619 rows/s)

``--data`` is a directory (all its ``*.parquet`` files), a glob or a
``gs://`` URI. The global batch size must be a multiple of the number of
devices.

Several processes (``jax.distributed``), resumable: ``--out-dir DIR`` instead
of ``--out``. Every process of the job runs this script; the mesh spans the
devices of all processes, each process streams only its own slices from its own
meshfeed server, and writes the rows of its addressable shards (padding
dropped) to its own parts::

    DIR/part-PPPPP-SSSSSS.parquet   # process PPPPP's SSSSSS-th part: (id, prediction)
    DIR/state-PPPPP.json            # its last commit: parts written, rows, Loader.state()

Every ``--commit-every`` steps a process commits: its new part is written to a
temporary file and renamed, then its state file (the loader position after the
step, the number of parts) is written the same way. A process killed at any
point and started again (with the same arguments) resumes from its last
commit: parts numbered at or past the committed count (written, not
committed) are deleted, and the loader resumes at the committed position. The
processes of a job restart together (one cannot rejoin a running
``jax.distributed`` job), and their last commits may differ by a step group
(a process may die between two commits of the others): all resume at the
earliest, and a process that had committed further predicts those steps again
(every process runs every step of the global mesh) without writing them. So
every row is written exactly once across all parts, and their union is what
one process writes. The state records the process count; resuming with
another count is refused. Run it on each host of a job, e.g.::

    python examples/batch_inference.py --data gs://b/ds --out-dir gs-fuse/preds \\
        --coordinator HOST0:1234 --num-processes 4 --process-id $I      # or --distributed on Cloud TPU/SLURM

(``--distributed`` calls ``jax.distributed.initialize()`` without arguments,
which finds the coordinator on Cloud TPU, SLURM and Kubernetes JobSets.) The
part directory must be storage every process can write (a shared file system,
or a local disk per host, gathered afterwards); process 0 prints the summary.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import signal
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import meshfeed

OUT_SCHEMA = pa.schema([("id", pa.int64()), ("prediction", pa.float32())])
FLUSH_ROWS = 1 << 16  # rows per output row group


def model_params(num_features: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The model's weights, a pure function of (num_features, seed)."""
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal(num_features) / np.sqrt(num_features)).astype(np.float32)
    bias = np.float32(rng.standard_normal())
    return w, bias


@jax.jit
def predict(w: jax.Array, bias: jax.Array, features: jax.Array) -> jax.Array:
    """One float per row: tanh(features @ w + bias), laid out like the batch."""
    return jnp.tanh(features @ w + bias)


def is_mixture_spec(data: str) -> bool:
    """Whether ``data`` is a JSON file describing a meshfeed.Mixture (an
    object with "sources", as ``python -m meshfeed bench --mixture`` takes)."""
    if not data.endswith(".json") or not os.path.isfile(data):
        return False
    try:
        with open(data) as f:
            spec = json.load(f)
    except (OSError, ValueError):
        return False
    return isinstance(spec, dict) and "sources" in spec


def data_uri(data: str) -> str:
    """A directory means all its Parquet files; anything else is passed through."""
    if "://" not in data and os.path.isdir(data):
        return os.path.join(data, "*.parquet")
    return data


def run(data: str, out: str, batch_size: int, seed: int, id_column: str, feature_column: str) -> dict:
    """Writes the predictions of every row of ``data`` to ``out``; returns a summary."""
    if jax.process_count() != 1:
        raise SystemExit("--out writes one file from one process; with several processes use --out-dir")
    n_dev = jax.device_count()
    if batch_size <= 0 or batch_size % n_dev:
        raise SystemExit(f"--batch-size {batch_size}: want a positive multiple of the {n_dev} devices")
    mesh = jax.make_mesh((n_dev,), ("data",))
    sharding = NamedSharding(mesh, P("data"))

    t0 = time.perf_counter()
    tmp = out + ".tmp"
    written = steps = 0
    params = None
    pending_ids: list[np.ndarray] = []
    pending_pred: list[np.ndarray] = []

    def flush(writer: pq.ParquetWriter) -> None:
        if pending_ids:
            writer.write_table(pa.table([np.concatenate(pending_ids), np.concatenate(pending_pred)], schema=OUT_SCHEMA))
            pending_ids.clear()
            pending_pred.clear()

    try:
        with meshfeed.Loader(data_uri(data), global_batch_size=batch_size, sharding=sharding,
                             columns=[id_column, feature_column], shuffle=None, last_batch="pad",
                             mask_key="valid") as loader, \
                pq.ParquetWriter(tmp, OUT_SCHEMA) as writer:
            for batch in loader:
                feats = batch[feature_column]  # (B, K) float32, sharded over "data"
                if params is None:
                    if feats.ndim != 2:
                        raise SystemExit(f"column {feature_column!r} has shape {feats.shape}, want (rows, K)")
                    params = [jax.device_put(p) for p in model_params(feats.shape[1], seed)]
                pred = predict(*params, feats.astype(jnp.float32))
                valid = np.asarray(batch["valid"])  # False on padding rows of the last step
                pending_ids.append(np.asarray(batch[id_column])[valid].astype(np.int64))
                pending_pred.append(np.asarray(pred)[valid].astype(np.float32))
                written += int(valid.sum())
                steps += 1
                if sum(len(x) for x in pending_ids) >= FLUSH_ROWS:
                    flush(writer)
            flush(writer)
            if written != loader.num_rows:  # the feeder's promise: every row exactly once
                raise SystemExit(f"wrote {written} predictions for {loader.num_rows} rows")
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    secs = time.perf_counter() - t0
    return {"rows": written, "steps": steps, "devices": n_dev, "seconds": secs,
            "rows_per_s": written / secs if secs > 0 else 0.0}


STATE_VERSION = 1


def part_path(out_dir: str, process: int, seq: int) -> str:
    return os.path.join(out_dir, f"part-{process:05d}-{seq:06d}.parquet")


def state_path(out_dir: str, process: int) -> str:
    return os.path.join(out_dir, f"state-{process:05d}.json")


def _write_atomically(path: str, write) -> None:
    """write(tmp_path), fsync, rename over path: readers see all of it or none."""
    tmp = path + ".tmp"
    write(tmp)
    fd = os.open(tmp, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def _committed(out_dir: str, me: int, nproc: int) -> dict | None:
    """This process's last commit, after deleting what it wrote past it."""
    saved = None
    if os.path.exists(state_path(out_dir, me)):
        with open(state_path(out_dir, me)) as f:
            saved = json.load(f)
        if saved.get("version") != STATE_VERSION or saved.get("process_index") != me:
            raise SystemExit(f"{state_path(out_dir, me)}: not a state of process {me} of this script")
        if saved["process_count"] != nproc:
            raise SystemExit(f"{out_dir} was written by {saved['process_count']} processes; this job has {nproc}: "
                             "resume with the same process count, or write to another --out-dir")
    parts = saved["parts"] if saved else 0
    pat = re.compile(rf"part-{me:05d}-(\d{{6}})\.parquet(\.tmp)?$")
    for f in glob.glob(os.path.join(out_dir, f"part-{me:05d}-*")):
        m = pat.search(f)
        if m and (m.group(2) or int(m.group(1)) >= parts):
            os.remove(f)  # written after the last commit: its rows are predicted again
    return saved


def _gather_rows(ids: jax.Array, pred: jax.Array, valid: jax.Array) -> tuple[np.ndarray, np.ndarray]:
    """This process's real rows: its addressable shards in row order (one per
    distinct slice: replicas skipped), padding dropped."""
    def local(a: jax.Array) -> list:
        return sorted(((s.index[0].start or 0, s.data) for s in a.addressable_shards if s.replica_id == 0),
                      key=lambda t: t[0])
    li, lp, lv = local(ids), local(pred), local(valid)
    assert [a for a, _ in li] == [a for a, _ in lp] == [a for a, _ in lv], "ids, predictions and mask laid out differently"
    v = np.concatenate([np.asarray(d) for _, d in lv])
    return (np.concatenate([np.asarray(d) for _, d in li])[v].astype(np.int64),
            np.concatenate([np.asarray(d) for _, d in lp])[v].astype(np.float32))


def run_parts(data: str, out_dir: str, batch_size: int, seed: int, id_column: str, feature_column: str,
              commit_every: int, crash_after: tuple[str, int] | None = None) -> dict:
    """Writes this process's predictions to parts under ``out_dir``,
    resuming from its last commit there (see the module docstring);
    returns a summary of the whole job."""
    from jax.experimental import multihost_utils

    nproc, me = jax.process_count(), jax.process_index()
    n_dev = jax.device_count()
    if batch_size <= 0 or batch_size % n_dev:
        raise SystemExit(f"--batch-size {batch_size}: want a positive multiple of the {n_dev} devices")
    if commit_every < 1:
        raise SystemExit(f"--commit-every {commit_every}: want >= 1")
    os.makedirs(out_dir, exist_ok=True)
    mesh = jax.make_mesh((n_dev,), ("data",))
    sharding = NamedSharding(mesh, P("data"))
    t0 = time.perf_counter()

    saved = _committed(out_dir, me, nproc)
    parts, rows = (saved["parts"], saved["rows"]) if saved else (0, 0)
    own = (saved["loader"]["position"]["epoch"], saved["loader"]["position"]["step"]) if saved else (0, 0)
    # Every process runs every step: all start at the earliest commit of any.
    everyone = multihost_utils.process_allgather(np.array(own, np.int64))
    start = min(tuple(int(x) for x in row) for row in np.asarray(everyone).reshape(nproc, 2))
    state = None if start == (0, 0) else {**saved["loader"], "position": {"epoch": start[0], "step": start[1]}}
    if saved:
        print(f"process {me}: resuming at epoch {start[0]} step {start[1]} from {parts} committed parts "
              f"(own commit at epoch {own[0]} step {own[1]})", file=sys.stderr, flush=True)

    pending_ids: list[np.ndarray] = []
    pending_pred: list[np.ndarray] = []
    params = None
    steps = 0

    def crash_point(what: str) -> None:
        if crash_after is not None and crash_after == (what, parts):
            os.kill(os.getpid(), signal.SIGKILL)  # testing: die here as a killed process would

    def commit(loader) -> None:
        nonlocal parts, rows
        if pending_ids:
            t = pa.table([np.concatenate(pending_ids), np.concatenate(pending_pred)], schema=OUT_SCHEMA)
            _write_atomically(part_path(out_dir, me, parts), lambda p: pq.write_table(t, p))
            parts += 1
            rows += t.num_rows
            pending_ids.clear()
            pending_pred.clear()
            crash_point("part")
        st = {"version": STATE_VERSION, "process_index": me, "process_count": nproc, "parts": parts,
              "rows": rows, "loader": loader.state()}

        def write(p: str) -> None:
            with open(p, "w") as f:
                json.dump(st, f)
        _write_atomically(state_path(out_dir, me), write)
        crash_point("state")

    with meshfeed.Loader(data_uri(data), global_batch_size=batch_size, sharding=sharding,
                         columns=[id_column, feature_column], shuffle=None, last_batch="pad",
                         mask_key="valid", state=state) as loader:
        spe = loader.steps_per_epoch
        g = start[0] * spe + start[1]  # global index of the next step
        own_g = own[0] * spe + own[1]
        for batch in loader:
            feats = batch[feature_column]
            if params is None:
                if feats.ndim != 2:
                    raise SystemExit(f"column {feature_column!r} has shape {feats.shape}, want (rows, K)")
                params = [jax.device_put(p) for p in model_params(feats.shape[1], seed)]
            pred = predict(*params, feats.astype(jnp.float32))
            steps += 1
            if g >= own_g:  # not committed by this process before
                i, p = _gather_rows(batch[id_column], pred, batch["valid"])
                pending_ids.append(i)
                pending_pred.append(p)
            g += 1
            if g > own_g and (g % commit_every == 0 or g == spe):
                commit(loader)
        num_rows = loader.num_rows
        if g > own_g or saved is None:
            commit(loader)  # the end: nothing pending, the position says done
    # The feeder's promise across processes: every row exactly once.
    total = int(np.asarray(multihost_utils.process_allgather(np.array(rows, np.int64))).sum())
    if total != num_rows:
        raise SystemExit(f"the {nproc} processes wrote {total} predictions for {num_rows} rows")
    secs = time.perf_counter() - t0
    return {"rows": total, "own_rows": rows, "parts": parts, "steps": steps, "devices": n_dev,
            "processes": nproc, "seconds": secs}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Offline batch inference over a Parquet dataset with meshfeed.",
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--data", required=True, help="dataset directory, glob or gs:// URI")
    out = ap.add_mutually_exclusive_group(required=True)
    out.add_argument("--out", help="output Parquet file (columns id, prediction); one process")
    out.add_argument("--out-dir", help="directory of resumable parts, one set per process (see above)")
    ap.add_argument("--commit-every", type=int, default=64, help="with --out-dir: steps per committed part")
    ap.add_argument("--coordinator", help="host:port of the jax.distributed coordinator (process 0)")
    ap.add_argument("--num-processes", type=int, help="processes of the job (with --coordinator)")
    ap.add_argument("--process-id", type=int, help="this process's index (with --coordinator)")
    ap.add_argument("--distributed", action="store_true",
                    help="jax.distributed.initialize() with no arguments (Cloud TPU, SLURM, Kubernetes)")
    ap.add_argument("--test-crash-after", help=argparse.SUPPRESS)  # "part:N" or "state:N": SIGKILL itself there
    ap.add_argument("--batch-size", type=int, default=256, help="global batch size, a multiple of the device count")
    ap.add_argument("--seed", type=int, default=0, help="seed of the model's weights")
    ap.add_argument("--id-column", default="id")
    ap.add_argument("--feature-column", default="features")
    args = ap.parse_args(argv)
    jax.config.update("jax_enable_x64", True)  # int64 ids reach the host unchanged
    if args.coordinator or args.distributed:
        jax.config.update("jax_cpu_collectives_implementation", "gloo")  # CPU collectives across processes
        if args.distributed:
            jax.distributed.initialize()
        else:
            if args.num_processes is None or args.process_id is None:
                raise SystemExit("--coordinator needs --num-processes and --process-id")
            jax.distributed.initialize(coordinator_address=args.coordinator, num_processes=args.num_processes,
                                       process_id=args.process_id)
    if is_mixture_spec(args.data):
        raise SystemExit(f"--data {args.data} is a mixture spec: batch inference reads one dataset (every row "
                         "once, in file order); run it once per source dataset instead")
    crash = None
    if args.test_crash_after:
        what, n = args.test_crash_after.split(":")
        crash = (what, int(n))
    try:
        if args.out_dir is not None:
            s = run_parts(args.data, args.out_dir, args.batch_size, args.seed, args.id_column, args.feature_column,
                          args.commit_every, crash)
        else:
            s = run(args.data, args.out, args.batch_size, args.seed, args.id_column, args.feature_column)
    except meshfeed.MeshfeedError as e:
        print(f"batch_inference: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    if args.out_dir is not None:
        print(f"process {jax.process_index()}: wrote {s['own_rows']} rows in {s['parts']} parts", flush=True)
        if jax.process_index() == 0:
            print(f"wrote {s['rows']} predictions in {s['steps']} steps on {s['devices']} devices in "
                  f"{s['processes']} processes to {args.out_dir} ({s['seconds']:.2f} s)", flush=True)
        if args.coordinator or args.distributed:
            jax.distributed.shutdown()
        return 0
    print(f"wrote {s['rows']} predictions in {s['steps']} steps on {s['devices']} devices to {args.out} "
          f"({s['seconds']:.2f} s, {s['rows_per_s']:.0f} rows/s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
