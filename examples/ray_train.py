#!/usr/bin/env python3
"""meshfeed under Ray Train's JaxTrainer on a TPU slice, resuming from Ray checkpoints.

    python examples/ray_train.py --data gs://bucket/train/*.parquet \\
        --num-workers 4 --topology 4x4 --accelerator-type TPU-V6E --storage gs://bucket/ray

One Ray worker runs per TPU host. Each imports jax inside
``train_loop_per_worker`` (so each worker initializes its own TPU runtime; the
JaxTrainer has already set up ``jax.distributed`` on TPU; with ``--cpu`` the
workers are CPU processes that join ``jax.distributed`` themselves), builds a
``meshfeed.Loader`` over the global mesh (the loader starts a meshfeed server
on its host and streams only the batch slices of this process's devices), and
trains. Every ``checkpoint_every`` steps it reports a checkpoint directory that
holds the model parameters (``params.npz``), the loader position
(``loader_state.json``, from ``Loader.state()``) and the step (``meta.json``).
After a failure Ray restarts the workers; ``ray.train.get_checkpoint()`` then
returns the last checkpoint and the loader resumes exactly at the next step.

The train function also runs without Ray: the Ray Train calls it makes
(``get_checkpoint``, ``report``, ``Checkpoint.from_directory``,
``get_context``) go through ``config["train_api"]`` when given (the tests pass
a small stand-in there), else through ``ray.train``.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from typing import Any

PARAMS_FILE = "params.npz"
LOADER_STATE_FILE = "loader_state.json"
META_FILE = "meta.json"


def _train_api(config: dict) -> Any:
    """The Ray Train module, or the stand-in named by config["train_api"]."""
    api = config.get("train_api")
    if api is not None:
        return api
    import ray.train  # imported here: only Ray workers need it
    import ray.train.collective  # noqa: F401  (broadcast_from_rank_zero, for jax_distributed)

    return ray.train


def init_jax_distributed(train: Any, timeout_s: int = 60) -> None:
    """Joins this worker to ``jax.distributed`` over all workers of the run.

    JaxTrainer does this itself on TPU and GPU (``use_tpu``/``use_gpu``), not
    on CPU. Here rank 0 picks a free port on its node, every worker gets
    ``NODE_IP:PORT`` through ``ray.train.collective.broadcast_from_rank_zero``,
    and each calls ``jax.distributed.initialize`` with its world rank. A run
    restarted after a failure gets new worker processes, which join anew.
    """
    import socket

    import jax

    ctx = train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    address = None
    if rank == 0:
        import ray.util

        ip = ray.util.get_node_ip_address()
        with socket.socket() as s:
            s.bind((ip, 0))
            address = f"{ip}:{s.getsockname()[1]}"
    address = train.collective.broadcast_from_rank_zero(address)
    # Cross-process collectives on CPU (gloo, jax's default; explicit so a changed default fails loudly).
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(coordinator_address=address, num_processes=world, process_id=rank,
                               initialization_timeout=timeout_s)


def _loader_kwargs(config: dict, rank: int) -> dict:
    kw = config.get("loader_kwargs") or {}
    return kw[rank % len(kw)] if isinstance(kw, list) else kw


def train_loop_per_worker(config: dict) -> None:
    """Trains a small MLP on meshfeed batches; checkpoints and resumes through Ray Train.

    config keys: ``data`` (dataset URI or glob, required), ``steps`` (total
    steps, counted across restarts), ``global_batch_size``, ``checkpoint_every``,
    ``columns`` (read columns; must include "features"), ``shuffle_seed`` and
    ``shuffle_window``, ``lr``, ``hidden``, ``classes``, ``server`` (address of
    a running meshfeed server; default: start one on this host), ``loader_kwargs``
    (more ``meshfeed.Loader`` arguments: a dict, or a list of dicts of which
    world rank ``r`` takes entry ``r % len``, e.g. ``[servers.loader_kwargs(r)
    ...]`` of a ``meshfeed.ray.ServerGroup``),
    ``jax_distributed`` (True: this function joins ``jax.distributed`` itself,
    as JaxTrainer does so only on TPU and GPU; see :func:`init_jax_distributed`),
    ``on_step`` (optional callable(step, batch), for tests and monitoring; Ray
    pickles it with the config), ``train_api`` (see the module doc).
    """
    # jax is imported in the worker, after Ray placed it on its TPU host.
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    import meshfeed

    train = _train_api(config)
    if config.get("jax_distributed"):
        init_jax_distributed(train)
    steps = int(config.get("steps", 1000))
    B = int(config.get("global_batch_size", 1024))
    every = int(config.get("checkpoint_every", 100))
    lr = float(config.get("lr", 0.5))
    hidden, classes = int(config.get("hidden", 128)), int(config.get("classes", 10))
    on_step = config.get("on_step")
    rank = train.get_context().get_world_rank()

    # Every device of the slice on one "data" axis: batches are split over all chips.
    mesh = jax.make_mesh((jax.device_count(),), ("data",))
    batch_sharding = NamedSharding(mesh, P("data"))
    replicated = NamedSharding(mesh, P())

    # Resume: parameters, loader position and step from the last reported checkpoint.
    start, params, loader_state = 0, None, None
    ckpt = train.get_checkpoint()
    if ckpt is not None:
        with ckpt.as_directory() as d:
            with open(os.path.join(d, META_FILE)) as f:
                start = int(json.load(f)["step"])
            with open(os.path.join(d, LOADER_STATE_FILE)) as f:
                loader_state = json.load(f)
            with np.load(os.path.join(d, PARAMS_FILE)) as z:
                params = {k: jax.device_put(z[k], replicated) for k in z.files}

    def loss_fn(p, x, y, w):
        h = jax.nn.relu(x @ p["w1"] + p["b1"])
        logp = jax.nn.log_softmax(h @ p["w2"] + p["b2"])
        nll = -jnp.take_along_axis(logp, y[:, None], axis=1)[:, 0]
        return jnp.sum(nll * w) / jnp.maximum(jnp.sum(w), 1.0)

    @jax.jit
    def train_step(p, teacher, batch):
        x = batch["features"]
        y = jnp.argmax(x @ teacher, axis=1)  # a fixed random teacher: a target the MLP can learn
        w = batch["valid"].astype(x.dtype)
        loss, g = jax.value_and_grad(loss_fn)(p, x, y, w)
        return jax.tree.map(lambda a, b: a - lr * b, p, g), loss

    def init(features):  # one compiled function: eager ops would each compile on first use
        def f():
            k1, k2, kt = jax.random.split(jax.random.key(0), 3)
            return ({"w1": jax.random.normal(k1, (features, hidden)) * np.sqrt(2.0 / features),
                     "b1": jnp.zeros((hidden,)),
                     "w2": jax.random.normal(k2, (hidden, classes)) * np.sqrt(1.0 / hidden),
                     "b2": jnp.zeros((classes,))},
                    jax.random.normal(kt, (features, classes)))
        return jax.jit(f, out_shardings=replicated)()

    def save(step, metrics):
        # The parameters are replicated: every process holds them whole. A sharded
        # model would save with orbax (see meshfeed.orbax) instead.
        host = {k: np.asarray(v.addressable_data(0)) for k, v in params.items()}
        with tempfile.TemporaryDirectory() as d:
            checkpoint = None
            if rank == 0:  # one copy: every process holds the same params and the same position
                np.savez(os.path.join(d, PARAMS_FILE), **host)
                with open(os.path.join(d, LOADER_STATE_FILE), "w") as f:
                    json.dump(loader.state(), f)
                with open(os.path.join(d, META_FILE), "w") as f:
                    json.dump({"step": step}, f)
                checkpoint = train.Checkpoint.from_directory(d)
            train.report(metrics, checkpoint=checkpoint)  # Ray persists the directory before returning

    shuffle = meshfeed.Shuffle(seed=int(config.get("shuffle_seed", 0)), window=int(config.get("shuffle_window", 65536)))
    with meshfeed.Loader(config["data"], global_batch_size=B, sharding=batch_sharding,
                         columns=config.get("columns", ["features"]), last_batch="pad", shuffle=shuffle,
                         num_epochs=None, state=loader_state, server=config.get("server"),
                         **_loader_kwargs(config, rank)) as loader:
        teacher = None
        step = start
        for batch in loader if step < steps else ():
            if teacher is None:  # the feature width is known once the first batch is here
                fresh, teacher = init(batch["features"].shape[1])
                params = fresh if params is None else params
            if on_step is not None:
                on_step(step, batch)
            params, loss = train_step(params, teacher, batch)
            step += 1
            if step % every == 0 or step == steps:
                stats = loader.stats()
                save(step, {"step": step, "loss": float(loss), "rows": stats["rows"], "rows_per_s": stats["rows_per_s"]})
            if step >= steps:
                break
    if config.get("jax_distributed"):
        jax.distributed.shutdown()  # every worker got here: leave the coordination service cleanly


def make_trainer(config: dict, *, num_workers: int, use_tpu: bool, topology: str | None = None,
                 accelerator_type: str | None = None, storage: str | None = None,
                 name: str = "meshfeed-ray-train", max_failures: int = 3) -> Any:
    """The JaxTrainer of this example: ``train_loop_per_worker`` on ``num_workers``
    workers, checkpoints kept by Ray (the last two), ``max_failures`` restarts.

    ``use_tpu=True``: one worker per TPU host of a ``topology`` slice, and
    JaxTrainer initializes ``jax.distributed``. ``use_tpu=False``: CPU
    workers (one CPU each), which join ``jax.distributed`` themselves
    (``config["jax_distributed"]`` is set).
    """
    from ray.train import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
    from ray.train.v2.jax import JaxTrainer

    if use_tpu:
        scaling = ScalingConfig(use_tpu=True, num_workers=num_workers, topology=topology,
                                accelerator_type=accelerator_type)
    else:
        scaling = ScalingConfig(num_workers=num_workers, resources_per_worker={"CPU": 1})
        config = {**config, "jax_distributed": True}
    return JaxTrainer(
        train_loop_per_worker,
        train_loop_config=config,
        scaling_config=scaling,
        run_config=RunConfig(name=name, storage_path=storage,
                             checkpoint_config=CheckpointConfig(num_to_keep=2),
                             failure_config=FailureConfig(max_failures=max_failures)),
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", required=True, help="dataset URI or glob, e.g. gs://bucket/train/*.parquet")
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--global-batch-size", type=int, default=1024)
    p.add_argument("--checkpoint-every", type=int, default=100)
    p.add_argument("--num-workers", type=int, default=4, help="TPU hosts (one worker per host), or CPU workers")
    p.add_argument("--topology", default="4x4", help="TPU slice topology")
    p.add_argument("--accelerator-type", default="TPU-V6E")
    p.add_argument("--cpu", action="store_true",
                   help="CPU workers instead of a TPU slice (each joins jax.distributed itself); "
                        "set XLA_FLAGS=--xla_force_host_platform_device_count=N for N devices per worker")
    p.add_argument("--storage", default=None, help="RunConfig storage_path for checkpoints (e.g. gs://bucket/ray)")
    p.add_argument("--name", default="meshfeed-ray-train", help="run name (rerun with the same name to resume)")
    p.add_argument("--max-failures", type=int, default=3, help="worker-group restarts, each from the last checkpoint")
    p.add_argument("--ray-servers", type=int, default=0,
                   help="start this many meshfeed servers as Ray actors (meshfeed.ray) and read from them "
                        "over TLS instead of one server per training host")
    p.add_argument("--server-resource", default="meshfeed_server",
                   help="custom Ray resource of the CPU nodes meant for the servers (--ray-servers)")
    p.add_argument("--allow", action="append", default=None,
                   help="root the servers may read (--ray-servers; default: the bucket or directory of --data)")
    args = p.parse_args()

    try:
        import ray
        import ray.train.v2.jax  # noqa: F401
    except ImportError as e:
        raise SystemExit(f"ray_train.py needs Ray Train with its JAX trainer (pip install 'ray[train]'): {e}")

    ray.init()
    config = {"data": args.data, "steps": args.steps, "global_batch_size": args.global_batch_size,
              "checkpoint_every": args.checkpoint_every}
    servers = None
    if args.ray_servers:
        import meshfeed.ray as mf_ray
        from meshfeed._src.server import allowed_root

        servers = mf_ray.start_servers(args.ray_servers, allow=args.allow or [allowed_root(args.data)],
                                       resources={args.server_resource: 1})
        config["loader_kwargs"] = [servers.loader_kwargs(r) for r in range(args.num_workers)]
    try:
        trainer = make_trainer(config, num_workers=args.num_workers, use_tpu=not args.cpu, topology=args.topology,
                               accelerator_type=args.accelerator_type, storage=args.storage, name=args.name,
                               max_failures=args.max_failures)
        result = trainer.fit()
    finally:
        if servers is not None:
            servers.stop()
    print(f"done: metrics {result.metrics}, checkpoint {result.checkpoint}")


if __name__ == "__main__":
    main()
