"""Per-step client time of placing one received step on the devices
(one placement call per step): Materializer on a 3-column record (int64 id, int32
label, float32[8] features), B=2000, 8 CPU devices, 4x2 mesh with
P("data") and an 8-way P("data"); x64 on and off.

    XLA_FLAGS=--xla_force_host_platform_device_count=8 .venv/bin/python benchmarks/placement.py
"""

import argparse
import os
import time

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
from jax.sharding import NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402


def _abuf(values):
    buf = pa.allocate_buffer(values.nbytes)
    np.frombuffer(buf, dtype=values.dtype)[:] = values
    return pa.Array.from_buffers(pa.from_numpy_dtype(values.dtype), len(values), [None, buf])


def record(n, id_dtype):
    ids = _abuf(np.arange(n, dtype=id_dtype))
    label = _abuf((np.arange(n) % 10).astype(np.int32))
    feats = pa.FixedSizeListArray.from_arrays(_abuf(np.arange(n * 8, dtype=np.float32)), 8)
    return pa.record_batch([ids, label, feats], names=["id", "label", "features"])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--batch", type=int, default=2000)
    ap.add_argument("--x64", choices=["on", "off"], default="on")
    ap.add_argument("--id-dtype", choices=["int64", "int32"], default=None,
                    help="dtype of the id column received (default: int64 with x64 on, int32 with it off, "
                         "as the client now asks the server for)")
    args = ap.parse_args()
    jax.config.update("jax_enable_x64", args.x64 == "on")
    from meshfeed._src.layout import Materializer, layout_of
    # With x64 off the client asks the server for int32 ids (no host copy); model that record.
    rb = record(args.batch, np.dtype(args.id_dtype or ("int64" if args.x64 == "on" else "int32")))
    for name, shape, axes, spec in [("4x2 P(data)", (4, 2), ("data", "model"), P("data")),
                                    ("8 P(data)", (8,), ("data",), P("data"))]:
        sh = NamedSharding(jax.make_mesh(shape, axes), spec)
        mat = Materializer(rb.schema, sh, layout_of(sh, args.batch), None)
        for _ in range(20):
            jax.block_until_ready(mat(rb))
        times = []
        for _ in range(args.steps):
            t = time.perf_counter()
            out = mat(rb)
            times.append(time.perf_counter() - t)
            jax.block_until_ready(out)
        times = np.array(times) * 1e3
        print(f"{name:12s} x64={args.x64}: median {np.median(times):.3f} ms/step, p90 {np.percentile(times, 90):.3f} ms "
              f"({args.steps} steps, counts {mat.counts})")


if __name__ == "__main__":
    main()
