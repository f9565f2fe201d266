"""Record JAX's batch-dimension layout for package shard's cross-check.

For every case below this script builds a mesh on JAX's CPU backend, applies
NamedSharding(mesh, PartitionSpec(...)) to an array of shape (B, 3) and records,
per device, the [start, stop) of dim 0 from Sharding.devices_indices_map, plus
the shard row count from Sharding.shard_shape. A B that the sharding does not
divide is recorded with the name of the error JAX raises instead of rows. shard/jax_vectors_test.go must
reproduce every recorded map exactly.

Processes: one CPU process cannot own several JAX processes, so each device is
assigned the simulated process id  device.id // devices_per_process  (the
process-major id order of a multi-host TPU slice). The assignment is recorded
per case; JAX itself sees a single process.

Usage:
    .venv/bin/python testdata/jax_vectors.py --out testdata/jax_vectors.json

Output is deterministic: fixed case list, no RNG, sorted keys.
"""

import argparse
import json
import os
import sys

NUM_DEVICES = 16

# Must be set before jax is imported. This script owns its XLA configuration:
# any device count inherited from the environment is replaced, and the CPU
# backend is forced, so that every run sees the same NUM_DEVICES devices.
os.environ["XLA_FLAGS"] = " ".join(
    [f for f in os.environ.get("XLA_FLAGS", "").split() if not f.startswith("--xla_force_host_platform_device_count")]
    + [f"--xla_force_host_platform_device_count={NUM_DEVICES}"]
)
os.environ["JAX_PLATFORMS"] = "cpu"

import jax  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import Mesh, NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

# JAX's error for a shape the sharding does not divide; not public API in
# jax 0.10, hence the private import (pinned in requirements-dev.txt).
from jax._src.sharding import IndivisibleError  # noqa: E402

AXES2 = ("data", "model")
AXES3 = ("data", "fsdp", "model")
ABC = ("a", "b", "c")


def rev(n):
    return list(range(n - 1, -1, -1))


def stride(n, k):
    """The permutation i -> (i*k) mod n; k must be coprime with n."""
    return [(i * k) % n for i in range(n)]


# Each case: name, shape, axes, how the mesh is built, the dim-0 entry of the
# PartitionSpec, B values, devices per process, and optionally which devices
# (indices into jax.devices()) are used and a permutation applied to them.
#   build="mesh":      Mesh(np.array(devs)[perm].reshape(shape), axes)
#   build="make_mesh": jax.make_mesh(shape, axes, devices=devs)
#   spec: a str, a tuple of str, None (P(None)) or "REPLICATED" (P()).
CASES = [
    # 1-D meshes.
    dict(name="1d_data", shape=(8,), axes=("data",), spec="data", Bs=(8, 16, 6), dpp=4),
    dict(name="1d_replicated", shape=(8,), axes=("data",), spec="REPLICATED", Bs=(8,), dpp=4),
    dict(name="1d_none", shape=(8,), axes=("data",), spec=None, Bs=(4,), dpp=2),
    dict(name="1d_reversed", shape=(8,), axes=("data",), spec="data", Bs=(16,), dpp=4, perm=rev(8)),
    dict(name="1d_tuple_of_one", shape=(8,), axes=("data",), spec=("data",), Bs=(8,), dpp=8, perm=stride(8, 3)),
    dict(name="1d_make_mesh", shape=(4,), axes=("data",), spec="data", Bs=(12,), dpp=2, build="make_mesh"),
    dict(name="1d_16", shape=(16,), axes=("data",), spec="data", Bs=(32,), dpp=4, perm=stride(16, 5)),
    dict(name="1d_upper_devices", shape=(8,), axes=("data",), spec="data", Bs=(8,), dpp=4, use=list(range(8, 16))),
    # 2-D meshes.
    dict(name="2d_data", shape=(2, 4), axes=AXES2, spec="data", Bs=(8, 6), dpp=4),
    dict(name="2d_model", shape=(2, 4), axes=AXES2, spec="model", Bs=(8,), dpp=2),
    dict(name="2d_data_model", shape=(2, 4), axes=AXES2, spec=("data", "model"), Bs=(16,), dpp=4),
    dict(name="2d_model_data", shape=(2, 4), axes=AXES2, spec=("model", "data"), Bs=(8, 24, 12), dpp=4),
    dict(name="2d_data_fsdp", shape=(4, 2), axes=("data", "fsdp"), spec=("data", "fsdp"), Bs=(8,), dpp=4),
    dict(name="2d_stride_perm", shape=(4, 2), axes=AXES2, spec="data", Bs=(12,), dpp=2, perm=stride(8, 3)),
    dict(name="2d_4x4_model_data_perm", shape=(4, 4), axes=AXES2, spec=("model", "data"), Bs=(32,), dpp=4,
         perm=[3, 0, 5, 14, 9, 12, 1, 6, 15, 2, 11, 4, 7, 10, 13, 8]),
    dict(name="2d_replicated", shape=(2, 4), axes=AXES2, spec="REPLICATED", Bs=(2,), dpp=4),
    dict(name="2d_make_mesh", shape=(4, 2), axes=AXES2, spec="data", Bs=(4,), dpp=4, build="make_mesh"),
    dict(name="2d_size1_data", shape=(1, 8), axes=AXES2, spec="data", Bs=(5,), dpp=4),
    dict(name="2d_make_mesh_4x4", shape=(4, 4), axes=AXES2, spec="data", Bs=(16,), dpp=4, build="make_mesh"),
    # 3-D meshes.
    dict(name="3d_data_fsdp", shape=(2, 2, 4), axes=AXES3, spec=("data", "fsdp"), Bs=(8, 6), dpp=4),
    dict(name="3d_fsdp_data", shape=(2, 2, 4), axes=AXES3, spec=("fsdp", "data"), Bs=(4,), dpp=4),
    dict(name="3d_model", shape=(2, 2, 4), axes=AXES3, spec="model", Bs=(8,), dpp=8),
    dict(name="3d_model_data_perm", shape=(2, 2, 4), axes=AXES3, spec=("model", "data"), Bs=(16,), dpp=4,
         perm=stride(16, 7)),
    dict(name="3d_c_a", shape=(2, 2, 2), axes=ABC, spec=("c", "a"), Bs=(8,), dpp=2),
    dict(name="3d_c_b_a", shape=(2, 2, 2), axes=ABC, spec=("c", "b", "a"), Bs=(8,), dpp=4, perm=rev(8)),
    dict(name="3d_make_mesh_b", shape=(2, 2, 2), axes=ABC, spec="b", Bs=(6,), dpp=2, build="make_mesh"),
    dict(name="3d_size1_middle", shape=(4, 1, 4), axes=AXES3, spec=("model", "fsdp", "data"), Bs=(16,), dpp=4,
         perm=rev(16)),
    dict(name="3d_replicated_none", shape=(2, 2, 4), axes=AXES3, spec=None, Bs=(3,), dpp=4),
    dict(name="3d_make_mesh_fsdp_model", shape=(2, 2, 4), axes=AXES3, spec=("fsdp", "model"), Bs=(8,), dpp=4,
         build="make_mesh"),
]


def partition_spec(spec):
    if spec == "REPLICATED":
        return P(), []
    if spec is None:
        return P(None), []
    if isinstance(spec, str):
        return P(spec), [spec]
    return P(tuple(spec)), list(spec)


def build_mesh(case):
    all_devs = jax.devices()
    n = int(np.prod(case["shape"]))
    use = case.get("use", list(range(n)))
    devs = [all_devs[i] for i in use]
    build = case.get("build", "mesh")
    if build == "make_mesh":
        assert "perm" not in case, case["name"]
        mesh = jax.make_mesh(case["shape"], case["axes"], devices=devs)
    else:
        perm = case.get("perm", list(range(n)))
        assert sorted(perm) == list(range(n)), case["name"]
        arr = np.array(devs, dtype=object)[perm].reshape(case["shape"])
        mesh = Mesh(arr, case["axes"])
    return mesh, build


def record(case, B):
    mesh, build = build_mesh(case)
    pspec, batch_axes = partition_spec(case["spec"])
    sharding = NamedSharding(mesh, pspec)
    shape = (B, 3)
    dpp = case["dpp"]
    mesh_devices = [int(d.id) for d in mesh.devices.flat]
    out = {
        "name": f"{case['name']}/B={B}",
        "build": build,
        "partition_spec": repr(pspec),
        "axes": list(case["axes"]),
        "shape": list(case["shape"]),
        "devices": mesh_devices,
        "devices_per_process": dpp,
        "process": [d // dpp for d in mesh_devices],
        "batch_axes": batch_axes,
        "B": B,
    }
    try:
        index_map = sharding.devices_indices_map(shape)
    except IndivisibleError as e:
        # JAX refuses a batch that the sharding does not divide evenly.
        out["error"] = type(e).__name__
        return out
    rows = {}
    for dev, index in index_map.items():
        start, stop, step = index[0].indices(B)  # slice(None) -> [0, B)
        assert step == 1, (case["name"], index)
        rows[str(int(dev.id))] = [start, stop]
    shard_rows = int(sharding.shard_shape(shape)[0])
    out.update(shard_rows=shard_rows, D=B // shard_rows, rows=rows)
    return out


def generate():
    assert len(jax.devices()) == NUM_DEVICES, jax.devices()
    cases = [record(c, B) for c in CASES for B in c["Bs"]]
    names = [c["name"] for c in cases]
    assert len(set(names)) == len(names), "duplicate case names"
    return {
        "generator": "testdata/jax_vectors.py",
        "jax_version": jax.__version__,
        "process_model": "process = device.id // devices_per_process (simulated; JAX ran as one CPU process)",
        "rows_are": "NamedSharding(mesh, partition_spec).devices_indices_map((B, 3)), dim 0 as [start, stop)",
        "cases": cases,
    }


def dumps(doc):
    """JSON with sorted keys and one case per line, so diffs name the case."""
    lines = ["{"]
    keys = sorted(doc)
    for i, k in enumerate(keys):
        comma = "," if i < len(keys) - 1 else ""
        if k == "cases":
            lines.append(f' {json.dumps(k)}: [')
            for j, c in enumerate(doc[k]):
                sep = "," if j < len(doc[k]) - 1 else ""
                lines.append("  " + json.dumps(c, sort_keys=True) + sep)
            lines.append(" ]" + comma)
        else:
            lines.append(f" {json.dumps(k)}: {json.dumps(doc[k], sort_keys=True)}{comma}")
    lines.append("}")
    text = "\n".join(lines) + "\n"
    assert json.loads(text) == doc
    return text


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="path of the JSON file to write ('-' for stdout)")
    args = ap.parse_args(argv)
    text = dumps(generate())
    if args.out == "-":
        sys.stdout.write(text)
    else:
        with open(args.out, "w", encoding="utf-8") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
