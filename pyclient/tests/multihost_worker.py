"""One JAX process of the multi-host test (test_multihost.py starts two).

Run as ``python multihost_worker.py --process-id I --num-processes 2
--coordinator 127.0.0.1:PORT --data GLOB --out result.json``, with
``XLA_FLAGS=--xla_force_host_platform_device_count=4`` in the environment so
that each process has 4 CPU devices and ``jax.devices()`` spans 8.

The process joins ``jax.distributed``, then, for every run below, opens a
``meshfeed.Loader`` (which starts this process's own local server) over the
global mesh and records, per step: the ids, mask and labels of every
addressable shard (with the shard's row range) and the results of a jitted
global reduction over the whole batch, a cross-process collective (gloo) whose
fully replicated result every process reads locally. It writes everything as
JSON to ``--out`` (atomically, at the end) for the test to merge.
"""

import argparse
import json
import os
import signal
import sys
import time


def _sigterm(signum, frame):  # let `with Loader(...)` stop this process's server
    raise SystemExit(128 + signum)


# (name, mesh shape, axis names, partition spec of the batch dimension, shuffle, epochs)
RUNS = [
    ("4x2-data", (4, 2), ("data", "model"), ("data",), None, 1),
    ("8-data", (8,), ("data",), ("data",), None, 1),
    ("8-data-shuffled", (8,), ("data",), ("data",), (7, 64), 2),
]


def main() -> int:
    signal.signal(signal.SIGTERM, _sigterm)
    ap = argparse.ArgumentParser()
    ap.add_argument("--process-id", type=int, required=True)
    ap.add_argument("--num-processes", type=int, required=True)
    ap.add_argument("--coordinator", required=True, help="host:port of the jax.distributed coordinator")
    ap.add_argument("--data", required=True, help="dataset glob")
    ap.add_argument("--out", required=True, help="JSON result file")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--binary", default=None, help="meshfeed binary")
    args = ap.parse_args()

    t0 = time.monotonic()
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    jax.config.update("jax_enable_x64", True)  # int64 ids stay int64
    # Cross-process collectives on CPU (jax's default; explicit so a changed default fails loudly).
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(coordinator_address=args.coordinator, num_processes=args.num_processes,
                               process_id=args.process_id, initialization_timeout=30,
                               heartbeat_timeout_seconds=10, shutdown_timeout_seconds=30)
    import meshfeed
    from meshfeed._src import layout as layout_mod

    # Count the client's placement calls (one per step, the hot path): every
    # array of a step goes through one make_array_from_process_local_data
    # (Flight) or one place_slices of per-device views (shared memory).
    placements = []
    real_make = layout_mod.jax.make_array_from_process_local_data
    real_per_device = layout_mod.place_slices

    def counting_make(*a, **kw):
        placements.append(1)
        return real_make(*a, **kw)

    def counting_per_device(*a, **kw):
        placements.append(1)
        return real_per_device(*a, **kw)

    layout_mod.jax.make_array_from_process_local_data = counting_make
    layout_mod.place_slices = counting_per_device

    result = {"process_index": jax.process_index(), "process_count": jax.process_count(),
              "local_device_count": jax.local_device_count(), "device_count": jax.device_count(), "runs": {}}

    @jax.jit
    def reduce(batch):
        valid = batch["valid"]
        ids = jnp.where(valid, batch["id"], 0)
        labels = jnp.where(valid, batch["label"].astype(jnp.int64), 0)
        feats = jnp.where(valid[:, None], batch["features"].astype(jnp.float64), 0.0)
        return {"id_sum": jnp.sum(ids), "label_sum": jnp.sum(labels),
                "valid_count": jnp.sum(valid.astype(jnp.int64)), "feature_sum": jnp.sum(feats),
                # all rows, padding included: padding ids and labels must be zero
                "id_sum_all": jnp.sum(batch["id"]), "label_sum_all": jnp.sum(batch["label"].astype(jnp.int64))}

    for name, shape, axes, spec, shuffle, epochs in RUNS:
        mesh = jax.make_mesh(shape, axes)  # over jax.devices(): both processes' devices
        sharding = NamedSharding(mesh, P(*spec))
        shuf = meshfeed.Shuffle(seed=shuffle[0], window=shuffle[1]) if shuffle else None
        run = {"steps": []}
        placements.clear()
        with meshfeed.Loader(args.data, global_batch_size=args.batch_size, sharding=sharding,
                             columns=["id", "label", "features"], last_batch="pad", shuffle=shuf,
                             num_epochs=epochs, server_options=meshfeed.ServerOptions(binary=args.binary)) as loader:
            run["steps_per_epoch"] = loader.steps_per_epoch
            run["num_rows"] = loader.num_rows
            for batch in loader:
                red = reduce(batch)
                step = {"reduction": {}, "shards": []}
                for k, v in red.items():
                    assert v.is_fully_replicated, (k, v.sharding)
                    step["reduction"][k] = v.addressable_data(0).item()
                ids = {s.device: s for s in batch["id"].addressable_shards}
                valid = {s.device: s for s in batch["valid"].addressable_shards}
                labels = {s.device: s for s in batch["label"].addressable_shards}
                for dev, s in ids.items():
                    start, stop, _ = s.index[0].indices(args.batch_size)
                    step["shards"].append({"device": dev.id, "start": start, "stop": stop,
                                           "ids": np.asarray(s.data).tolist(),
                                           "valid": np.asarray(valid[dev].data).tolist(),
                                           "labels": np.asarray(labels[dev].data).tolist()})
                run["steps"].append(step)
            run["stats"] = loader.stats()
            run["placements"] = len(placements)
        result["runs"][name] = run

    result["seconds"] = time.monotonic() - t0
    tmp = args.out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(result, f)
    os.replace(tmp, args.out)
    jax.distributed.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
