"""One JAX process of the two-process mixture test (test_multihost_mixture.py
starts two).

Run as ``python multihost_mixture_worker.py --process-id I --num-processes 2
--coordinator 127.0.0.1:PORT --sources JSON --out result.json``, with
``XLA_FLAGS=--xla_force_host_platform_device_count=4``. The process joins
``jax.distributed``, reads a ``meshfeed.Mixture`` of the sources (globs, as
JSON) over a mesh of all 8 devices with its own local server, and records per
step the source, id and mask of every addressable shard (with its row range)
and a jitted global reduction (a cross-process collective). It writes
everything as JSON to ``--out`` at the end.
"""

import argparse
import json
import os
import signal
import sys

B = 64
WEIGHTS = (0.5, 0.3, 0.2)


def mixture(globs):
    """The mixture both the workers and the test read."""
    import meshfeed
    return meshfeed.Mixture([meshfeed.Source(g, weight=w, columns=["id", "label"]) for g, w in zip(globs, WEIGHTS)],
                            stop="first_exhausted", source_column="source", seed=5)


def _sigterm(signum, frame):  # let `with Loader(...)` stop this process's server
    raise SystemExit(128 + signum)


def main() -> int:
    signal.signal(signal.SIGTERM, _sigterm)
    ap = argparse.ArgumentParser()
    ap.add_argument("--process-id", type=int, required=True)
    ap.add_argument("--num-processes", type=int, required=True)
    ap.add_argument("--coordinator", required=True)
    ap.add_argument("--sources", required=True, help="JSON list of the sources' globs")
    ap.add_argument("--out", required=True)
    ap.add_argument("--binary", default=None)
    args = ap.parse_args()

    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    jax.config.update("jax_enable_x64", True)
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(coordinator_address=args.coordinator, num_processes=args.num_processes,
                               process_id=args.process_id, initialization_timeout=30,
                               heartbeat_timeout_seconds=10, shutdown_timeout_seconds=30)
    import meshfeed

    @jax.jit
    def reduce(batch):
        valid = batch["valid"]
        return {"rows": jnp.sum(valid.astype(jnp.int64)), "id_sum": jnp.sum(jnp.where(valid, batch["id"], 0))}

    sharding = NamedSharding(jax.make_mesh((8,), ("data",)), P("data"))
    out = {"process_index": jax.process_index(), "steps": []}
    with meshfeed.Loader(mixture(json.loads(args.sources)), global_batch_size=B, sharding=sharding,
                         last_batch="pad", server_options=meshfeed.ServerOptions(binary=args.binary)) as ld:
        out["steps_per_epoch"] = ld.steps_per_epoch
        for batch in ld:
            red = {k: v.addressable_data(0).item() for k, v in reduce(batch).items()}
            shards = []
            src = {s.device: s for s in batch["source"].addressable_shards}
            valid = {s.device: s for s in batch["valid"].addressable_shards}
            for s in batch["id"].addressable_shards:
                start, stop, _ = s.index[0].indices(B)
                shards.append({"start": start, "stop": stop, "ids": np.asarray(s.data).tolist(),
                               "source": np.asarray(src[s.device].data).tolist(),
                               "valid": np.asarray(valid[s.device].data).tolist()})
            out["steps"].append({"reduction": red, "shards": shards})
        out["stats"] = {"rows": ld.stats()["rows"]}
    tmp = args.out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(out, f)
    os.replace(tmp, args.out)
    jax.distributed.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
