"""examples/ray_train.py's train_loop_per_worker without Ray: a stand-in for
ray.train persists reported checkpoints like Ray does; a run that crashes and
restarts from its last checkpoint sees the same data, step by step, as a run
that never stopped, and ends with the same parameters."""

import contextlib
import json
import shutil
import sys
import types

import numpy as np
import pytest

from conftest import ROOT

sys.path.insert(0, str(ROOT / "examples"))
import ray_train  # noqa: E402

STEPS, EVERY, CRASH_AT, B = 20, 5, 13, 64  # 16 steps per epoch: the run crosses an epoch boundary


class FakeCheckpoint:
    def __init__(self, path):
        self.path = str(path)

    @classmethod
    def from_directory(cls, path):
        return cls(path)

    @contextlib.contextmanager
    def as_directory(self):
        yield self.path


class FakeTrain:
    """What train_loop_per_worker uses of ray.train: report copies the checkpoint
    directory into storage before returning (the worker deletes its own copy)."""

    Checkpoint = FakeCheckpoint

    def __init__(self, storage):
        self.storage = storage
        self.latest = None
        self.reports = []

    def get_context(self):
        return types.SimpleNamespace(get_world_rank=lambda: 0)

    def get_checkpoint(self):
        return self.latest

    def report(self, metrics, checkpoint=None):
        self.reports.append(dict(metrics))
        if checkpoint is not None:
            dest = self.storage / f"checkpoint_{len(self.reports):06d}"
            shutil.copytree(checkpoint.path, dest)
            self.latest = FakeCheckpoint(dest)


class Crash(Exception):
    pass


def config(glob, server, api, seen, crash_at=None):
    def on_step(step, batch):
        if step == crash_at:
            raise Crash(step)
        seen.append((step, np.asarray(batch["id"]).copy()))

    return {"data": glob, "server": server.address, "steps": STEPS, "global_batch_size": B,
            "checkpoint_every": EVERY, "columns": ["id", "features"], "shuffle_seed": 3, "shuffle_window": 300,
            "on_step": on_step, "train_api": api}


def params_of(ckpt):
    with np.load(f"{ckpt.path}/{ray_train.PARAMS_FILE}") as z:
        return {k: z[k] for k in z.files}


def test_restart_from_checkpoint_sees_the_same_data(server, glob, tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    straight, want = FakeTrain(tmp_path / "a"), []
    ray_train.train_loop_per_worker(config(glob, server, straight, want))
    assert [s for s, _ in want] == list(range(STEPS))
    assert [r["step"] for r in straight.reports] == [5, 10, 15, 20]
    assert straight.reports[-1]["loss"] < straight.reports[0]["loss"]

    crashing, got = FakeTrain(tmp_path / "b"), []
    with pytest.raises(Crash):
        ray_train.train_loop_per_worker(config(glob, server, crashing, got, crash_at=CRASH_AT))
    assert [r["step"] for r in crashing.reports] == [5, 10]
    with crashing.latest.as_directory() as d:
        assert json.load(open(f"{d}/{ray_train.META_FILE}")) == {"step": 10}
        assert json.load(open(f"{d}/{ray_train.LOADER_STATE_FILE}"))["position"] == {"epoch": 0, "step": 10}
    first_try = list(got)
    got.clear()
    ray_train.train_loop_per_worker(config(glob, server, crashing, got))  # Ray's restart: same config
    assert [s for s, _ in first_try] == list(range(CRASH_AT))
    assert [s for s, _ in got] == list(range(10, STEPS)), "the restart did not resume at the checkpoint's step"
    assert [r["step"] for r in crashing.reports] == [5, 10, 15, 20]

    for (s, ids), (_, want_ids) in zip(first_try + got, want[:CRASH_AT] + want[10:]):
        np.testing.assert_array_equal(ids, want_ids, err_msg=f"step {s} ids")
    # not vacuous: shuffled, and epoch 1 (step 16) is another permutation than epoch 0
    assert not np.array_equal(want[0][1], np.arange(B))
    assert not np.array_equal(want[0][1], want[16][1])
    a, b = params_of(straight.latest), params_of(crashing.latest)
    assert sorted(a) == ["b1", "b2", "w1", "w2"]
    for k in a:
        np.testing.assert_array_equal(b[k], a[k], err_msg=k)

    # a run restarted after its last step trains nothing more
    n = len(crashing.reports)
    got.clear()
    ray_train.train_loop_per_worker(config(glob, server, crashing, got))
    assert got == [] and len(crashing.reports) == n


def test_module_imports_neither_ray_nor_jax_at_top_level():
    src = (ROOT / "examples" / "ray_train.py").read_text()
    top = [ln for ln in src.splitlines() if ln.startswith(("import ", "from "))]
    assert not any("jax" in ln or "ray" in ln or "meshfeed" in ln for ln in top), top
