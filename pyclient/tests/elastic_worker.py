"""One JAX process of test_elastic_multihost.py: a Loader over an 8-device
mesh spanning every process, stopped after some steps or resumed from a saved
state, with any number of processes.

Run as ``python elastic_worker.py --process-id I --num-processes P
--coordinator 127.0.0.1:PORT --data GLOB --runs RUNS_JSON --out result.json``
with ``XLA_FLAGS=--xla_force_host_platform_device_count=8/P``. RUNS_JSON is a
list of ``{"name", "state_in": path or null, "steps": max steps or null,
"state_out": path or null}``; for each run the process records the ids and
mask of every addressable shard per step (with the shard's row range) and
writes ``state()`` at the end to ``state_out`` (process 0 only; every process
reports its own state in the result so the test can compare them).
"""

import json
import sys

import distworker


def main() -> int:
    ap = distworker.parser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--runs", required=True)
    ap.add_argument("--batch-size", type=int, default=64)
    args = ap.parse_args()

    import jax
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    distworker.join(args)
    import meshfeed

    sharding = NamedSharding(jax.make_mesh((8,), ("data",)), P("data"))
    result = {"process_index": jax.process_index(), "process_count": jax.process_count(), "runs": {}}
    for spec in json.loads(args.runs):
        state = None
        if spec.get("state_in"):
            with open(spec["state_in"]) as f:
                state = json.load(f)
        run = {"steps": []}
        with meshfeed.Loader(args.data, global_batch_size=args.batch_size, sharding=sharding,
                             columns=["id"], last_batch="pad", shuffle=meshfeed.Shuffle(seed=5, window=40),
                             num_epochs=2, state=state,
                             server_options=meshfeed.ServerOptions(binary=args.binary)) as loader:
            for i, batch in enumerate(loader):
                shards = distworker.shards(batch, args.batch_size, ids="id", valid="valid")
                run["steps"].append(shards)
                if spec.get("steps") is not None and i + 1 >= spec["steps"]:
                    break
            run["state"] = loader.state()
        if spec.get("state_out") and jax.process_index() == 0:
            distworker.write_json(spec["state_out"], run["state"])
        result["runs"][spec["name"]] = run

    return distworker.finish(args, result)


if __name__ == "__main__":
    sys.exit(main())
