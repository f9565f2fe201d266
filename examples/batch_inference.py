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
devices. This script runs in one process; on several hosts, each process would
write the rows of its own addressable shards to its own part file.
"""

from __future__ import annotations

import argparse
import os
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


def data_uri(data: str) -> str:
    """A directory means all its Parquet files; anything else is passed through."""
    if "://" not in data and os.path.isdir(data):
        return os.path.join(data, "*.parquet")
    return data


def run(data: str, out: str, batch_size: int, seed: int, id_column: str, feature_column: str) -> dict:
    """Writes the predictions of every row of ``data`` to ``out``; returns a summary."""
    if jax.process_count() != 1:
        raise SystemExit("batch_inference.py runs in one process (see the module docstring for several hosts)")
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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Offline batch inference over a Parquet dataset with meshfeed.",
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--data", required=True, help="dataset directory, glob or gs:// URI")
    ap.add_argument("--out", required=True, help="output Parquet file (columns id, prediction)")
    ap.add_argument("--batch-size", type=int, default=256, help="global batch size, a multiple of the device count")
    ap.add_argument("--seed", type=int, default=0, help="seed of the model's weights")
    ap.add_argument("--id-column", default="id")
    ap.add_argument("--feature-column", default="features")
    args = ap.parse_args(argv)
    jax.config.update("jax_enable_x64", True)  # int64 ids reach the host unchanged
    try:
        s = run(args.data, args.out, args.batch_size, args.seed, args.id_column, args.feature_column)
    except meshfeed.MeshfeedError as e:
        print(f"batch_inference: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    print(f"wrote {s['rows']} predictions in {s['steps']} steps on {s['devices']} devices to {args.out} "
          f"({s['seconds']:.2f} s, {s['rows_per_s']:.0f} rows/s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
