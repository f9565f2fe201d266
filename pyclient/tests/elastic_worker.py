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

import argparse
import json
import os
import signal
import sys


def _sigterm(signum, frame):  # let `with Loader(...)` stop this process's server
    raise SystemExit(128 + signum)


def main() -> int:
    signal.signal(signal.SIGTERM, _sigterm)
    ap = argparse.ArgumentParser()
    ap.add_argument("--process-id", type=int, required=True)
    ap.add_argument("--num-processes", type=int, required=True)
    ap.add_argument("--coordinator", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--runs", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--binary", default=None)
    args = ap.parse_args()

    import jax
    import numpy as np
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    jax.config.update("jax_enable_x64", True)
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    if args.num_processes > 1:
        jax.distributed.initialize(coordinator_address=args.coordinator, num_processes=args.num_processes,
                                   process_id=args.process_id, initialization_timeout=30,
                                   heartbeat_timeout_seconds=10, shutdown_timeout_seconds=30)
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
                shards = []
                valid = {s.device: s for s in batch["valid"].addressable_shards}
                for s in batch["id"].addressable_shards:
                    start, stop, _ = s.index[0].indices(args.batch_size)
                    shards.append({"start": start, "stop": stop, "ids": np.asarray(s.data).tolist(),
                                   "valid": np.asarray(valid[s.device].data).tolist()})
                run["steps"].append(shards)
                if spec.get("steps") is not None and i + 1 >= spec["steps"]:
                    break
            run["state"] = loader.state()
        if spec.get("state_out") and jax.process_index() == 0:
            tmp = spec["state_out"] + ".tmp"
            with open(tmp, "w") as f:
                json.dump(run["state"], f)
            os.replace(tmp, spec["state_out"])
        result["runs"][spec["name"]] = run

    tmp = args.out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(result, f)
    os.replace(tmp, args.out)
    if args.num_processes > 1:
        jax.distributed.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
