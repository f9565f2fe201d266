"""Two JAX processes (4 CPU devices each, one meshfeed server each) read one
dataset through filters that keep about 0.1%, 50% and 100% of its rows: both
compute the same rows and steps per epoch from their own plans, take every
step together (a cross-process collective per step), and the global batches
are the rows pyarrow.parquet.read_table(filters=...) keeps, laid out by the
contract (contract.py)."""

import json
import os
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from contract import expected_ids, steps_per_epoch
from test_multihost import _free_port, run_processes

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "filters_multihost_worker.py")
FILES, ROWS_PER_FILE, RG_ROWS, B, NPROC, LOCAL_DEVICES = 3, 1001, 100, 16, 2, 4
TIMEOUT_S = 180
SEED = int(os.environ.get("MESHFEED_TEST_SEED", "7"))
FILTERS = {
    "0.1%": [[["id", "in", [17, 1500, 2999]]]],
    "50%": [[["score", "<", 0.5]]],
    "100%": [[["score", ">=", 0.0]]],
}


@pytest.fixture(scope="module")
def fdata(tmp_path_factory):
    print(f"MESHFEED_TEST_SEED={SEED}")
    rng = np.random.default_rng(SEED)
    d = tmp_path_factory.mktemp("fmh")
    for i in range(FILES):
        ids = np.arange(i * ROWS_PER_FILE, (i + 1) * ROWS_PER_FILE)
        pq.write_table(pa.table({"id": ids, "score": rng.random(len(ids))}), d / f"part-{i}.parquet",
                       row_group_size=RG_ROWS)
    return d


@pytest.fixture(scope="module")
def results(fdata, binary, tmp_path_factory):
    work = tmp_path_factory.mktemp("fmh-run")
    coord = f"127.0.0.1:{_free_port()}"
    argvs = [[sys.executable, WORKER, "--process-id", str(i), "--num-processes", str(NPROC), "--coordinator", coord,
              "--data", str(fdata / "*.parquet"), "--filters", json.dumps(FILTERS), "--out", str(work / f"out{i}.json"),
              "--batch-size", str(B), "--binary", binary] for i in range(NPROC)]
    procs, timed_out = run_processes(argvs, [work / f"worker{i}.log" for i in range(NPROC)], LOCAL_DEVICES, TIMEOUT_S)

    def tails():
        return "\n".join(f"--- worker {i} (rc {p.returncode}):\n" + (work / f"worker{i}.log").read_text(errors="replace")[-4000:]
                         for i, p in enumerate(procs))

    assert not timed_out, f"workers did not finish within {TIMEOUT_S}s\n{tails()}"
    assert all(p.returncode == 0 for p in procs), tails()
    return [json.loads((work / f"out{i}.json").read_text()) for i in range(NPROC)]


@pytest.mark.parametrize("name", list(FILTERS))
def test_processes_agree_on_filtered_steps(fdata, results, name):
    filters = [[tuple(t) for t in conj] for conj in FILTERS[name]]
    kept = pa.concat_tables([pq.read_table(f, filters=filters) for f in sorted(fdata.glob("*.parquet"))])
    ids = np.asarray(kept["id"])
    n = len(ids)
    runs = [r["runs"][name] for r in results]
    assert [r["num_rows"] for r in runs] == [n, n], f"{name}: processes plan {[r['num_rows'] for r in runs]} rows, pyarrow keeps {n}"
    spe = steps_per_epoch(n, B, "pad")
    assert [r["steps_per_epoch"] for r in runs] == [spe, spe]
    assert [len(r["steps"]) for r in runs] == [spe, spe]
    for s in range(spe):
        pos, mask = expected_ids(n, B, 8, s)
        want = np.where(mask, ids[np.where(mask, pos, 0)], 0)
        got, valid = np.full(B, -1), np.zeros(B, bool)
        for r in runs:
            for sh in r["steps"][s]["shards"]:
                got[sh["start"]:sh["stop"]], valid[sh["start"]:sh["stop"]] = sh["ids"], sh["valid"]
        assert valid.tolist() == list(mask), f"{name} step {s}: mask {valid.tolist()}, want {list(mask)}"
        assert got[valid].tolist() == want[np.asarray(mask)].tolist(), f"{name} step {s}"
        sums = [(r["steps"][s]["sum"], r["steps"][s]["count"]) for r in runs]
        assert sums[0] == sums[1] == (int(want[np.asarray(mask)].sum()), int(np.sum(mask))), (name, s, sums)
