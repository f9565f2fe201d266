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

import json
import sys

import distworker

B = 64
WEIGHTS = (0.5, 0.3, 0.2)


def mixture(globs):
    """The mixture both the workers and the test read."""
    import meshfeed
    return meshfeed.Mixture([meshfeed.Source(g, weight=w, columns=["id", "label"]) for g, w in zip(globs, WEIGHTS)],
                            stop="first_exhausted", source_column="source", seed=5)


def main() -> int:
    ap = distworker.parser()
    ap.add_argument("--sources", required=True, help="JSON list of the sources' globs")
    args = ap.parse_args()

    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    distworker.join(args)
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
            shards = distworker.shards(batch, B, ids="id", source="source", valid="valid")
            out["steps"].append({"reduction": red, "shards": shards})
        out["stats"] = {"rows": ld.stats()["rows"]}
    return distworker.finish(args, out)


if __name__ == "__main__":
    sys.exit(main())
