"""examples/ray_train.py under Ray Train for real: JaxTrainer on a local Ray
instance, 2 CPU workers that join jax.distributed themselves (8 devices, one
global mesh), each beside the meshfeed server its Loader starts. One worker
fails on purpose mid-epoch; Ray's FailureConfig restarts the run, the train
function restores the last Ray checkpoint, and the steps trained on across
the restart are exactly those of an uninterrupted run: no gap, no duplicate.

The expected batches come from one Loader in this process over an 8-device
mesh (the contract: global batches do not depend on the process count)."""

import glob as globmod
import json
import os

import numpy as np
import pytest

import ray
import ray_train  # examples/
from conftest import NODE_IP, OBJECT_STORE_BYTES, gen, worker_env
from ray_recorder import StepRecorder

ROWS, B, STEPS, EVERY, FAIL_RANK, FAIL_AT = 1000, 64, 20, 5, 1, 13  # 16 steps per epoch: crosses an epoch
WORKERS, LOCAL_DEVICES = 2, 4
SHUFFLE_SEED, WINDOW = 3, 300


@pytest.fixture(scope="module")
def ray_instance(binary):
    """A local Ray instance of its own (address="local": never an existing
    cluster), small: 4 logical CPUs, no dashboard, an 80 MiB object store."""
    ray.init(address="local", num_cpus=4, include_dashboard=False, object_store_memory=OBJECT_STORE_BYTES,
             _node_ip_address=NODE_IP, runtime_env={"env_vars": worker_env(binary, LOCAL_DEVICES)}, log_to_driver=True)
    try:
        yield
    finally:
        ray.shutdown()


def _reference(data, steps):
    """The global (ids, valid) of the first ``steps`` steps, from one process."""
    import jax
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    import meshfeed

    sh = NamedSharding(jax.make_mesh((WORKERS * LOCAL_DEVICES,), ("data",)), P("data"))
    out = []
    with meshfeed.Loader(data, global_batch_size=B, sharding=sh, columns=["id", "features"], last_batch="pad",
                         shuffle=meshfeed.Shuffle(seed=SHUFFLE_SEED, window=WINDOW), num_epochs=None) as ld:
        for batch in ld:
            out.append((np.asarray(batch["id"]).copy(), np.asarray(batch["valid"]).copy()))
            if len(out) == steps:
                return out


def _attempt(rec_dir, n):
    """{step: (ids, valid, rows covered)} merged over both workers' lines of attempt n."""
    steps = {}
    for path in sorted(globmod.glob(os.path.join(rec_dir, f"steps-r*-{n}.jsonl"))):
        for line in open(path):
            r = json.loads(line)
            ids, valid, have = steps.setdefault(r["step"], (np.full(B, -1, np.int64), np.zeros(B, bool),
                                                            np.zeros(B, bool)))
            for sh in r["shards"]:
                lo = sh["start"]
                hi = lo + len(sh["ids"])
                assert not have[lo:hi].any(), f"attempt {n} step {r['step']}: rows {lo}:{hi} delivered twice"
                ids[lo:hi], valid[lo:hi], have[lo:hi] = sh["ids"], sh["valid"], True
    return steps


def test_jaxtrainer_restarts_and_resumes_exactly(ray_instance, binary, tmp_path, stop_leftover_servers):
    data = str(gen(binary, tmp_path / "ds", ROWS, 2, 100, 8) / "*.parquet")
    rec = tmp_path / "rec"
    rec.mkdir()
    config = {"data": data, "steps": STEPS, "global_batch_size": B, "checkpoint_every": EVERY,
              "columns": ["id", "features"], "shuffle_seed": SHUFFLE_SEED, "shuffle_window": WINDOW,
              "on_step": StepRecorder(str(rec), fail_rank=FAIL_RANK, fail_step=FAIL_AT)}
    trainer = ray_train.make_trainer(config, num_workers=WORKERS, use_tpu=False, storage=str(tmp_path / "storage"),
                                     name="restart", max_failures=1)
    result = trainer.fit()
    assert result.error is None, result.error

    # Two attempts of two workers each: the first failed, Ray started the second.
    starts = sorted(os.path.basename(p) for p in globmod.glob(str(rec / "start-*")))
    assert starts == ["start-r0-0", "start-r0-1", "start-r1-0", "start-r1-1"], starts
    first, second = _attempt(rec, 0), _attempt(rec, 1)
    last_ckpt = (FAIL_AT // EVERY) * EVERY  # 10: the checkpoint before the failure
    complete_first = sorted(s for s, (_, _, have) in first.items() if have.all())
    assert complete_first == list(range(FAIL_AT)), "the first attempt did not reach the failure step"
    assert sorted(second) == list(range(last_ckpt, STEPS)), "the restart did not resume at the last checkpoint"
    assert all(have.all() for _, _, have in second.values())

    # The steps trained on: the first attempt up to its last checkpoint, then the second.
    want = _reference(data, STEPS)
    for s in range(STEPS):
        ids, valid, _ = (first if s < last_ckpt else second)[s]
        np.testing.assert_array_equal(valid, want[s][1], err_msg=f"step {s} mask")
        np.testing.assert_array_equal(ids[valid], want[s][0][want[s][1]], err_msg=f"step {s} ids")
    # the steps the failure rolled back were the same data too (the restart replays them)
    for s in range(last_ckpt, FAIL_AT):
        np.testing.assert_array_equal(first[s][0], second[s][0], err_msg=f"replayed step {s}")
    epoch0 = np.concatenate([want[s][0][want[s][1]] for s in range(16)])
    assert sorted(epoch0.tolist()) == list(range(ROWS)), "epoch 0: not every row once"
    assert not np.array_equal(want[0][0], np.arange(B)) and not np.array_equal(want[0][0], want[16][0])

    # Ray's last checkpoint: the final step and the loader position after it
    with result.checkpoint.as_directory() as d:
        assert json.load(open(os.path.join(d, ray_train.META_FILE))) == {"step": STEPS}
        assert json.load(open(os.path.join(d, ray_train.LOADER_STATE_FILE)))["position"] == {"epoch": 1, "step": 4}
    assert result.metrics["step"] == STEPS
