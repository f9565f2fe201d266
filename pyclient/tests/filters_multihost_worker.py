"""One JAX process of the filtered multi-host test (test_filters_multihost.py
starts two). Like multihost_worker.py: joins ``jax.distributed``, then for
each filter opens a ``meshfeed.Loader`` (its own local server) over the global
mesh, and records per step the ids and mask of its addressable shards and a
jitted global sum (a cross-process collective: both processes must take the
same steps, or it hangs). Writes JSON to ``--out``.
"""

import argparse
import json
import os
import signal
import sys


def _sigterm(signum, frame):
    raise SystemExit(128 + signum)


def main() -> int:
    signal.signal(signal.SIGTERM, _sigterm)
    ap = argparse.ArgumentParser()
    ap.add_argument("--process-id", type=int, required=True)
    ap.add_argument("--num-processes", type=int, required=True)
    ap.add_argument("--coordinator", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--filters", required=True, help="JSON: {name: filters}")
    ap.add_argument("--out", required=True)
    ap.add_argument("--batch-size", type=int, default=16)
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
        return jnp.sum(jnp.where(batch["valid"], batch["id"], 0)), jnp.sum(batch["valid"].astype(jnp.int64))

    sharding = NamedSharding(jax.make_mesh((8,), ("data",)), P("data"))
    result = {"process_index": jax.process_index(), "runs": {}}
    for name, filters in json.loads(args.filters).items():
        filters = [[tuple(t) for t in conj] for conj in filters]
        run = {"steps": []}
        with meshfeed.Loader(args.data, global_batch_size=args.batch_size, sharding=sharding, columns=["id"],
                             last_batch="pad", filters=filters,
                             server_options=meshfeed.ServerOptions(binary=args.binary)) as loader:
            run["steps_per_epoch"], run["num_rows"] = loader.steps_per_epoch, loader.num_rows
            for batch in loader:
                total, count = reduce(batch)
                step = {"sum": total.addressable_data(0).item(), "count": count.addressable_data(0).item(), "shards": []}
                valid = {s.device: s for s in batch["valid"].addressable_shards}
                for s in batch["id"].addressable_shards:
                    start, stop, _ = s.index[0].indices(args.batch_size)
                    step["shards"].append({"start": start, "stop": stop, "ids": np.asarray(s.data).tolist(),
                                           "valid": np.asarray(valid[s.device].data).tolist()})
                run["steps"].append(step)
        result["runs"][name] = run
    tmp = args.out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(result, f)
    os.replace(tmp, args.out)
    jax.distributed.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
