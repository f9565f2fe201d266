"""One JAX process of the filtered multi-host test (test_filters_multihost.py
starts two). Like multihost_worker.py: joins ``jax.distributed``, then for
each filter opens a ``meshfeed.Loader`` (its own local server) over the global
mesh, and records per step the ids and mask of its addressable shards and a
jitted global sum (a cross-process collective: both processes must take the
same steps, or it hangs). Writes JSON to ``--out``.
"""

import json
import sys

import distworker


def main() -> int:
    ap = distworker.parser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--filters", required=True, help="JSON: {name: filters}")
    ap.add_argument("--batch-size", type=int, default=16)
    args = ap.parse_args()

    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    distworker.join(args)
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
                step = {"sum": total.addressable_data(0).item(), "count": count.addressable_data(0).item(),
                        "shards": distworker.shards(batch, args.batch_size, ids="id", valid="valid")}
                run["steps"].append(step)
        result["runs"][name] = run
    return distworker.finish(args, result)


if __name__ == "__main__":
    sys.exit(main())
