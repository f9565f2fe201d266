"""A Loader state saved with P JAX processes resumes with P' processes on the
same 8-device mesh (P=2 then 1, and 1 then 2): the steps after the resume
equal those of an uninterrupted run, so nothing is skipped or repeated. The
state carries no process count: every process saves the same state, and the
plan depends only on the dataset and the configuration (DESIGN.md invariant
2)."""

import json
import sys

import numpy as np

from test_multihost import HERE, ROWS, _free_port, mh_dataset, run_processes  # noqa: F401 (fixture)

WORKER = HERE / "elastic_worker.py"
B, K = 64, 5  # global batch; steps read before the state is saved
TIMEOUT_S = 120


def _launch(work, tag, nproc, runs, data, binary):
    """Runs the worker in nproc processes over one mesh of 8 devices; returns
    their results, by process index."""
    coord = f"127.0.0.1:{_free_port()}"
    argvs = [[sys.executable, str(WORKER), "--process-id", str(i), "--num-processes", str(nproc),
              "--coordinator", coord, "--data", data, "--runs", json.dumps(runs),
              "--out", str(work / f"{tag}-{i}.json"), "--batch-size", str(B), "--binary", binary] for i in range(nproc)]
    procs, timed_out = run_processes(argvs, [work / f"{tag}-{i}.log" for i in range(nproc)], 8 // nproc, TIMEOUT_S)
    tails = "\n".join(f"--- {tag} worker {i} (rc {p.returncode}):\n"
                      + (work / f"{tag}-{i}.log").read_text(errors="replace")[-4000:] for i, p in enumerate(procs))
    assert not timed_out, f"{tag}: workers did not finish within {TIMEOUT_S}s\n{tails}"
    assert all(p.returncode == 0 for p in procs), tails
    results = [json.loads((work / f"{tag}-{i}.json").read_text()) for i in range(nproc)]
    assert [(r["process_index"], r["process_count"]) for r in results] == [(i, nproc) for i in range(nproc)]
    return results


def _global_steps(results, name):
    """Each step's global ids and mask, merged from every process's shards."""
    n = len(results[0]["runs"][name]["steps"])
    assert all(len(r["runs"][name]["steps"]) == n for r in results), "processes saw different step counts"
    out = []
    for s in range(n):
        ids, valid, owned = np.full(B, -1, np.int64), np.zeros(B, bool), np.zeros(B, bool)
        for r in results:
            for sh in r["runs"][name]["steps"][s]:
                lo, hi = sh["start"], sh["stop"]
                assert not owned[lo:hi].any(), f"{name} step {s}: rows {lo}:{hi} held twice"
                ids[lo:hi], valid[lo:hi], owned[lo:hi] = sh["ids"], sh["valid"], True
        assert owned.all(), f"{name} step {s}: rows held by no process"
        out.append((ids, valid))
    return out


def test_state_resumes_with_another_process_count(mh_dataset, binary, tmp_path):
    data = str(mh_dataset / "*.parquet")
    s2, s1 = str(tmp_path / "state-p2.json"), str(tmp_path / "state-p1.json")
    # P=2 reads K steps and saves; P=1 runs uninterrupted, resumes the P=2
    # state, and reads K steps and saves; P=2 resumes the P=1 state.
    a = _launch(tmp_path, "a", 2, [{"name": "head", "steps": K, "state_out": s2}], data, binary)
    b = _launch(tmp_path, "b", 1, [{"name": "full"}, {"name": "from-p2", "state_in": s2},
                                   {"name": "head", "steps": K, "state_out": s1}], data, binary)
    c = _launch(tmp_path, "c", 2, [{"name": "from-p1", "state_in": s1}], data, binary)

    states = [r["runs"]["head"]["state"] for r in a]
    assert states[0] == states[1], "both processes save the same state"
    assert states[0] == b[0]["runs"]["head"]["state"], "the state does not depend on the process count"
    assert states[0]["position"]["step"] == K

    full = _global_steps(b, "full")
    real = np.concatenate([ids[v] for ids, v in full])
    ids, counts = np.unique(real, return_counts=True)
    assert len(ids) == ROWS and (counts == 2).all(), "two epochs, every row once in each"
    for name, res, part in (("head", a, full[:K]), ("from-p2", b, full[K:]), ("head", b, full[:K]),
                            ("from-p1", c, full[K:])):
        got = _global_steps(res, name)
        assert len(got) == len(part), (name, len(got), len(part))
        for i, ((gi, gv), (wi, wv)) in enumerate(zip(got, part)):
            np.testing.assert_array_equal(gi, wi, err_msg=f"{name} step {i}")
            np.testing.assert_array_equal(gv, wv, err_msg=f"{name} step {i}")
