#!/usr/bin/env python3
"""Train a small MLP on a meshfeed-fed, 8-device CPU mesh and report how long
the training loop waited for data.

    XLA_FLAGS=--xla_force_host_platform_device_count=8 \\
        .venv/bin/python examples/demo_train.py --data .cache/demo

The dataset is the one `meshfeed gen` writes (id, label, features[K]). Its
`label` is a hash of the row id, unrelated to the features, so nothing could
learn it; the model instead learns the classes a fixed random "teacher"
(argmax of features @ W_teacher) assigns to the features, a target that it can
fit, so the loss visibly falls.

Batches are laid out as NamedSharding(mesh, P("data")) on a (data, model) mesh;
the MLP's hidden layer is split over "model". With last_batch="pad" the loss
is weighted by the `valid` mask, so padded rows of an epoch's last step count
for nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

# On a CPU host, give XLA 8 devices unless the caller chose (must precede jax's import).
if "--xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

import meshfeed  # noqa: E402


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--data", required=True, help="dataset directory, glob or gs:// URI (from `meshfeed gen`)")
    p.add_argument("--steps", type=int, default=300, help="training steps")
    p.add_argument("--batch", type=int, default=1024, help="global batch size")
    p.add_argument("--mesh", default="4x2", help="data x model mesh shape")
    p.add_argument("--hidden", type=int, default=128, help="hidden units (split over 'model')")
    p.add_argument("--classes", type=int, default=10, help="classes of the teacher")
    p.add_argument("--lr", type=float, default=0.5, help="SGD learning rate")
    p.add_argument("--seed", type=int, default=0, help="seed of the shuffle and of the weights")
    p.add_argument("--shuffle-window", type=int, default=65536, help="shuffle window in rows (0: file order)")
    p.add_argument("--prefetch", type=int, default=2, help="steps staged on device ahead of the loop")
    p.add_argument("--server", default=None, help="address of a running meshfeed server (default: start one)")
    p.add_argument("--json", default=None, help="also write the report as JSON to this file")
    args = p.parse_args(argv)
    try:
        args.mesh_shape = tuple(int(x) for x in args.mesh.lower().split("x"))
        if len(args.mesh_shape) != 2 or min(args.mesh_shape) < 1:
            raise ValueError
    except ValueError:
        p.error(f"--mesh {args.mesh!r}: want DATAxMODEL, e.g. 4x2")
    if args.steps < 1 or args.batch < 1:
        p.error("--steps and --batch must be >= 1")
    return args


def init_params(seed: int, features: int, hidden: int, classes: int, mesh) -> tuple[dict, jax.Array]:
    """The MLP's weights (hidden layer split over "model") and the teacher's,
    made by one compiled function (eager ops would each compile on first use)."""
    specs = {"w1": P(None, "model"), "b1": P("model"), "w2": P("model", None), "b2": P()}

    def init():
        k1, k2, kt = jax.random.split(jax.random.key(seed), 3)
        params = {"w1": jax.random.normal(k1, (features, hidden)) * np.sqrt(2.0 / features),
                  "b1": jnp.zeros((hidden,)),
                  "w2": jax.random.normal(k2, (hidden, classes)) * np.sqrt(1.0 / hidden),
                  "b2": jnp.zeros((classes,))}
        return params, jax.random.normal(kt, (features, classes))

    shardings = ({k: NamedSharding(mesh, v) for k, v in specs.items()}, NamedSharding(mesh, P()))
    return jax.jit(init, out_shardings=shardings)()


def loss_fn(params: dict, x, y, weight):
    h = jax.nn.relu(x @ params["w1"] + params["b1"])
    logp = jax.nn.log_softmax(h @ params["w2"] + params["b2"])
    nll = -jnp.take_along_axis(logp, y[:, None], axis=1)[:, 0]
    return jnp.sum(nll * weight) / jnp.maximum(jnp.sum(weight), 1.0)


def make_train_step(lr: float):
    def train_step(params, teacher, batch):
        x = batch["features"]
        y = jnp.argmax(x @ teacher, axis=1)
        weight = batch["valid"].astype(x.dtype) if "valid" in batch else jnp.ones(x.shape[:1], x.dtype)
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y, weight)
        return jax.tree.map(lambda p, g: p - lr * g, params, grads), loss

    return jax.jit(train_step, donate_argnums=0)


class Progress:
    """A one-line progress bar on stderr, redrawn with a carriage return."""

    def __init__(self, total: int, width: int = 24, every_s: float = 0.1):
        self.total, self.width, self.every_s = total, width, every_s
        self.last = 0.0

    def update(self, step: int, rows_per_s: float, wait_ms: float, loss: float | None, force: bool = False) -> None:
        now = time.perf_counter()
        if not force and now - self.last < self.every_s:
            return
        self.last = now
        done = int(self.width * step / self.total)
        bar = "#" * done + "." * (self.width - done)
        loss_s = f"  loss {loss:.4f}" if loss is not None else ""
        sys.stderr.write(f"\rstep {step:>{len(str(self.total))}}/{self.total} [{bar}] "
                         f"{rows_per_s:>10,.0f} rows/s  data wait {wait_ms:6.2f} ms{loss_s}  ")
        sys.stderr.flush()

    def close(self) -> None:
        sys.stderr.write("\n")
        sys.stderr.flush()


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    n_dev = args.mesh_shape[0] * args.mesh_shape[1]
    if jax.device_count() != n_dev:
        sys.exit(f"--mesh {args.mesh} needs {n_dev} devices, jax has {jax.device_count()} "
                 f"({jax.default_backend()}); on CPU set XLA_FLAGS=--xla_force_host_platform_device_count={n_dev}")
    # Auto axes: XLA picks the layouts of intermediates (the MLP contracts over "model").
    mesh = jax.make_mesh(args.mesh_shape, ("data", "model"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
    shuffle = meshfeed.Shuffle(seed=args.seed, window=args.shuffle_window) if args.shuffle_window > 0 else None
    loader = meshfeed.Loader(args.data, global_batch_size=args.batch, sharding=NamedSharding(mesh, P("data")),
                             columns=["features"], last_batch="pad", shuffle=shuffle, num_epochs=None,
                             prefetch=args.prefetch, server=args.server)
    with loader:
        print(f"meshfeed demo: {loader.num_rows:,} rows, {loader.steps_per_epoch:,} steps per epoch of "
              f"{args.batch} rows; mesh data={args.mesh_shape[0]} x model={args.mesh_shape[1]} "
              f"on {n_dev} {jax.default_backend()} devices", flush=True)
        train_step = make_train_step(args.lr)
        params = teacher = None
        losses = []          # device scalars; read one step behind to keep one step in flight
        loss_values = []
        waits = []
        compile_s = 0.0
        progress = Progress(args.steps)
        it = iter(loader)
        t0 = time.perf_counter()
        for step in range(args.steps):
            t = time.perf_counter()
            try:
                batch = next(it)
            except StopIteration:
                break
            waits.append(time.perf_counter() - t)
            if params is None:  # shapes are known once the first batch is here
                tc = time.perf_counter()
                params, teacher = init_params(args.seed, batch["features"].shape[1], args.hidden, args.classes, mesh)
                params, loss = train_step(params, teacher, batch)  # traces and compiles
                compile_s = time.perf_counter() - tc
            else:
                params, loss = train_step(params, teacher, batch)
            losses.append(loss)
            if len(losses) >= 2:  # wait for the previous step, not this one
                loss_values.append(float(losses[len(loss_values)]))
            el = time.perf_counter() - t0 - compile_s
            progress.update(step + 1, (step + 1) * args.batch / el if el > 0 else 0.0, waits[-1] * 1e3,
                            loss_values[-1] if loss_values else None)
        jax.block_until_ready(params)
        loss_values += [float(x) for x in losses[len(loss_values):]]
        wall = time.perf_counter() - t0
        st = loader.stats()
        steps = len(waits)
        train_s = max(wall - compile_s, 1e-9)
        progress.update(steps, st["rows"] / train_s, waits[-1] * 1e3 if waits else 0.0,
                        loss_values[-1] if loss_values else None, force=True)
        progress.close()

    wait_s = float(np.sum(waits))
    report = {"steps": steps, "global_batch_size": args.batch, "rows": st["rows"],
              "padded_rows": st["padded_rows"], "wall_s": wall, "compile_s": compile_s,
              "rows_per_s": st["rows"] / train_s, "data_wait_s": wait_s, "data_wait_share": wait_s / train_s,
              "data_wait_first_s": waits[0] if waits else 0.0,
              "wait_ms_p50": float(np.percentile(waits, 50)) * 1e3 if waits else 0.0,
              "wait_ms_p99": float(np.percentile(waits, 99)) * 1e3 if waits else 0.0,
              "loss_first": loss_values[0] if loss_values else None,
              "loss_last": loss_values[-1] if loss_values else None,
              "host_copies": st["host_copies"], "unaligned_transfers": st["unaligned_transfers"]}
    print("-- report " + "-" * 50)
    print(f"steps        {steps} x {args.batch} rows ({st['rows']:,} rows, {st['padded_rows']:,} padding)")
    print(f"throughput   {report['rows_per_s']:,.0f} rows/s over {train_s:.2f} s "
          f"(plus {compile_s:.2f} s initializing and compiling)")
    print(f"data wait    {wait_s:.3f} s = {100 * report['data_wait_share']:.1f}% of that time, "
          f"{report['data_wait_first_s']:.3f} s of it for the first batch "
          f"(per step p50 {report['wait_ms_p50']:.2f} ms, p99 {report['wait_ms_p99']:.2f} ms)")
    if loss_values:
        print(f"loss         first {loss_values[0]:.4f}  last {loss_values[-1]:.4f}")
    print(f"copies       {st['host_copies']} made by meshfeed, {st['unaligned_transfers']} unaligned "
          f"transfers copied by XLA")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
    return report


if __name__ == "__main__":
    main()
