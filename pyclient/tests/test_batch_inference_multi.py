"""examples/batch_inference.py --out-dir in two JAX processes (jax.distributed
on CPU, 4 devices each, one 8-device mesh): every row predicted exactly once
across the processes' parts, padding never written, and the union equal to a
one-process run; a process killed between committing its part and its state
(and the job restarted, as a scheduler restarts all processes of a
jax.distributed job) resumes from its last commit without duplicates."""

import glob
import json
import os
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from test_batch_inference import DEVICES, ROWS, SCRIPT, SEED, B, bi_dataset, run_script  # noqa: F401  (fixture)
from test_multihost import _free_port, run_processes

NPROC, LOCAL = 2, 4
EVERY = 3  # steps per committed part: 16 steps -> parts at steps 3, 6, 9, 12, 15, 16
TIMEOUT_S = 120


def _launch(data, out_dir, *extra_per_process, timeout=TIMEOUT_S):
    """Runs NPROC processes of the script; returns [(returncode, log)].
    extra_per_process[i]: more arguments for process i."""
    coord = f"127.0.0.1:{_free_port()}"
    argvs = [[sys.executable, str(SCRIPT), "--data", str(data), "--out-dir", str(out_dir), "--batch-size", str(B),
              "--seed", str(SEED), "--commit-every", str(EVERY), "--coordinator", coord,
              "--num-processes", str(NPROC), "--process-id", str(i),
              *(list(extra_per_process[i]) if i < len(extra_per_process) else [])] for i in range(NPROC)]
    # One that dies stops the wait: a scheduler restarts the whole job, so
    # does the caller; the survivors are stopped too.
    procs, _ = run_processes(argvs, [f"{out_dir}.log{i}" for i in range(NPROC)], LOCAL, timeout, poll=0.05)
    return [(p.returncode, open(f"{out_dir}.log{i}", errors="replace").read()) for i, p in enumerate(procs)]


def _parts(out_dir):
    """{process: table of its committed parts, in order}; checks no stray files."""
    out = {}
    for i in range(NPROC):
        st = json.load(open(os.path.join(out_dir, f"state-{i:05d}.json")))
        files = sorted(glob.glob(os.path.join(out_dir, f"part-{i:05d}-*.parquet")))
        assert [os.path.basename(f) for f in files] == [f"part-{i:05d}-{k:06d}.parquet" for k in range(st["parts"])]
        t = pa.concat_tables([pq.read_table(f) for f in files])
        assert t.num_rows == st["rows"], (i, st)
        out[i] = t
    assert not glob.glob(os.path.join(out_dir, "*.tmp"))
    return out


@pytest.fixture(scope="module")
def one_process(bi_dataset, tmp_path_factory):  # noqa: F811
    """The same job in one process with 8 devices: (ids, predictions) sorted by id."""
    out = tmp_path_factory.mktemp("bi1") / "parts"
    p = run_script("--data", bi_dataset, "--out-dir", out, "--batch-size", B, "--seed", SEED, "--commit-every", EVERY)
    assert p.returncode == 0, p.stdout + p.stderr
    assert f"wrote {ROWS} predictions in {-(-ROWS // B)} steps on {DEVICES} devices in 1 processes" in p.stdout
    t = pq.read_table(glob.glob(str(out / "part-*.parquet")))
    order = np.argsort(t.column("id").to_numpy())
    return t.column("id").to_numpy()[order], t.column("prediction").to_numpy()[order]


def _check_union(parts, one_process):
    ids = {i: t.column("id").to_numpy() for i, t in parts.items()}
    for i in ids:
        assert len(ids[i]) > 0, f"process {i} wrote nothing"
    assert not set(ids[0].tolist()) & set(ids[1].tolist()), "a row was written by both processes"
    allt = pa.concat_tables(parts.values())
    got_ids, got_pred = allt.column("id").to_numpy(), allt.column("prediction").to_numpy()
    assert len(got_ids) == ROWS and len(np.unique(got_ids)) == ROWS, "not every row exactly once"
    order = np.argsort(got_ids)
    np.testing.assert_array_equal(got_ids[order], one_process[0])
    np.testing.assert_allclose(got_pred[order], one_process[1], rtol=1e-6, atol=1e-7)


def test_two_processes_every_row_once(bi_dataset, one_process, tmp_path):  # noqa: F811
    out = tmp_path / "parts"
    res = _launch(bi_dataset, out)
    assert all(rc == 0 for rc, _ in res), res
    assert f"wrote {ROWS} predictions in {-(-ROWS // B)} steps on {NPROC * LOCAL} devices in {NPROC} processes" \
        in res[0][1], res[0][1]
    parts = _parts(out)
    _check_union(parts, one_process)
    for i in range(NPROC):  # 16 steps, a commit every 3 and at the end: 6 parts each
        assert json.load(open(out / f"state-{i:05d}.json"))["parts"] == 6


@pytest.mark.parametrize("where", ["part:2", "state:3"])
def test_killed_process_resumes_without_duplicates(bi_dataset, one_process, tmp_path, where):  # noqa: F811
    """Process 1 SIGKILLs itself right after renaming its 2nd part (before its
    state says so: an uncommitted part is left behind) or right after its
    3rd commit; the job is restarted and finishes."""
    out = tmp_path / "parts"
    res = _launch(bi_dataset, out, [], ["--test-crash-after", where])
    assert res[1][0] == -9, res[1]  # killed at the crash point
    what, n = where.split(":")
    st1 = json.load(open(out / "state-00001.json"))
    committed = n if what == "state" else str(int(n) - 1)
    assert st1["parts"] == int(committed), st1
    left = sorted(glob.glob(str(out / "part-00001-*.parquet")))
    assert len(left) == int(n), left  # with "part": one more than committed
    res2 = _launch(bi_dataset, out)
    assert all(rc == 0 for rc, _ in res2), res2
    pos = st1["loader"]["position"]
    assert f"process 1: resuming at epoch 0 step {pos['step']}" in res2[1][1], res2[1][1]
    assert pos["step"] == int(committed) * EVERY  # mid-epoch: not from the start
    # process 0 resumes there too (every process runs every step), whatever it had committed
    assert f"process 0: resuming at epoch 0 step {pos['step']}" in res2[0][1], res2[0][1]
    _check_union(_parts(out), one_process)
