"""What a Ray worker of the tests records (imported by reference in the
workers through PYTHONPATH): per step, the ids of this process's
addressable shards, one JSON line per step, flushed at once so that a
failure loses nothing already seen."""

import json
import os


class StepRecorder:
    """``on_step(step, batch)`` for examples/ray_train.py.

    Each worker process numbers its attempt by creating the first free
    ``start-r{rank}-{n}`` file in ``out`` (attempt ``n``), and appends
    ``{"step", "shards": [{"start", "ids", "valid"}]}`` lines to
    ``steps-r{rank}-{n}.jsonl``. With ``fail_rank``/``fail_step`` given, that
    rank raises at that step of its first attempt, before recording it.
    """

    def __init__(self, out: str, fail_rank: int | None = None, fail_step: int | None = None):
        self.out, self.fail_rank, self.fail_step = out, fail_rank, fail_step
        self._file = None

    def _open(self):
        import jax

        self.rank = jax.process_index()
        n = 0
        while True:
            try:
                os.close(os.open(os.path.join(self.out, f"start-r{self.rank}-{n}"), os.O_CREAT | os.O_EXCL))
                break
            except FileExistsError:
                n += 1
        self.attempt = n
        self._file = open(os.path.join(self.out, f"steps-r{self.rank}-{n}.jsonl"), "a")

    def __getstate__(self):
        return {"out": self.out, "fail_rank": self.fail_rank, "fail_step": self.fail_step, "_file": None}

    def __call__(self, step, batch):
        import numpy as np

        if self._file is None:
            self._open()
        if self.attempt == 0 and self.rank == self.fail_rank and step == self.fail_step:
            raise RuntimeError(f"failure injected by the test: rank {self.rank} at step {step}")
        valid = {s.device: s for s in batch["valid"].addressable_shards}
        shards = []
        for s in batch["id"].addressable_shards:
            if s.replica_id != 0:
                continue
            start = s.index[0].start or 0
            shards.append({"start": start, "ids": np.asarray(s.data).tolist(),
                           "valid": np.asarray(valid[s.device].data).tolist()})
        self._file.write(json.dumps({"step": step, "shards": shards}) + "\n")
        self._file.flush()
