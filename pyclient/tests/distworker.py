"""What every jax.distributed worker of the multi-process tests shares
(multihost_mixture_worker.py, filters_multihost_worker.py, elastic_worker.py):
the common arguments, joining ``jax.distributed`` over gloo, the per-shard
record of a step, and the atomic JSON result.
"""

import argparse
import json
import os
import signal
from typing import Any


def _sigterm(signum: int, frame: Any) -> None:  # let `with Loader(...)` stop this process's server
    raise SystemExit(128 + signum)


def parser() -> argparse.ArgumentParser:
    """Installs the SIGTERM handler and returns a parser with the arguments
    every worker takes (--process-id, --num-processes, --coordinator, --out,
    --binary); the worker adds its own."""
    signal.signal(signal.SIGTERM, _sigterm)
    ap = argparse.ArgumentParser()
    ap.add_argument("--process-id", type=int, required=True)
    ap.add_argument("--num-processes", type=int, required=True)
    ap.add_argument("--coordinator", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--binary", default=None)
    return ap


def join(args: argparse.Namespace) -> None:
    """Enables int64 and gloo CPU collectives and, with more than one process,
    joins ``jax.distributed``."""
    import jax

    jax.config.update("jax_enable_x64", True)
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    if args.num_processes > 1:
        jax.distributed.initialize(coordinator_address=args.coordinator, num_processes=args.num_processes,
                                   process_id=args.process_id, initialization_timeout=30,
                                   heartbeat_timeout_seconds=10, shutdown_timeout_seconds=30)


def shards(batch: dict, batch_size: int, **columns: str) -> list:
    """The addressable shards of a step in ``batch["id"]``'s order: per shard
    its row range and, for each ``key=column``, the shard of that column as a
    list."""
    import numpy as np

    by_col = {k: {s.device: s for s in batch[c].addressable_shards} for k, c in columns.items()}
    out = []
    for s in batch["id"].addressable_shards:
        start, stop, _ = s.index[0].indices(batch_size)
        rec = {"start": start, "stop": stop}
        rec.update({k: np.asarray(m[s.device].data).tolist() for k, m in by_col.items()})
        out.append(rec)
    return out


def write_json(path: str, obj: Any) -> None:
    """Writes obj as JSON to path atomically."""
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f)
    os.replace(tmp, path)


def finish(args: argparse.Namespace, result: Any) -> int:
    """Writes the result to --out, leaves ``jax.distributed`` and returns 0."""
    import jax

    write_json(args.out, result)
    if args.num_processes > 1:
        jax.distributed.shutdown()
    return 0
