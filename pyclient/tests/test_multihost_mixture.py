"""Two JAX processes (jax.distributed on CPU, 4 devices each), each beside its
own meshfeed server, read one meshfeed.Mixture on a mesh of all 8 devices.

Each source is two files: under D = 8 with no shuffling, file 0 holds the rows
of slices 0-3 (process 0's) and file 1 those of slices 4-7 (process 1's). Each
process gets a directory of its own per source holding the source's manifest
and only its own file (a hard link), so a read of the other process's row
groups would fail: the run itself shows that each process reads only its own
row groups of every source. Its steps, merged across the processes, must equal
those one process with 8 devices gets from the whole files, step by step.
"""

import json
import os
import pathlib
import subprocess
import sys

import jax
import numpy as np
import pyarrow.parquet as pq
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import meshfeed
from test_multihost import NPROC, LOCAL_DEVICES, TIMEOUT_S, _free_port, run_processes

HERE = pathlib.Path(__file__).resolve().parent
WORKER = HERE / "multihost_mixture_worker.py"
sys.path.insert(0, str(HERE))
from multihost_mixture_worker import B, mixture  # noqa: E402

SIZES = (320, 480, 160)  # rows per source: 2 files each, each a multiple of 4 slices' rows


@pytest.fixture(scope="module")
def layout(tmp_path_factory, binary):
    """The sources whole, and per process a copy holding the manifest and its own file."""
    root = tmp_path_factory.mktemp("mhmix")
    full, per = [], [[] for _ in range(NPROC)]
    for i, rows in enumerate(SIZES):
        d = root / "full" / f"s{i}"
        subprocess.run([binary, "gen", "--out", str(d), "--rows", str(rows), "--files", "2", "--row-group-rows",
                        str(16 + 8 * i), "--features", "0", "--seed", str(i + 1)], check=True, capture_output=True)
        subprocess.run([binary, "manifest", str(d)], check=True, capture_output=True)
        files = sorted(d.glob("*.parquet"))
        files = [f for f in files if not f.name.startswith("_")]
        assert len(files) == NPROC and all(pq.read_metadata(f).num_rows == rows // 2 for f in files)
        full.append(str(d / "*.parquet"))
        for p in range(NPROC):
            mine = root / f"p{p}" / f"s{i}"
            mine.mkdir(parents=True)
            os.link(d / "_meshfeed_manifest.parquet", mine / "_meshfeed_manifest.parquet")
            os.link(files[p], mine / files[p].name)
            per[p].append(str(mine / "*.parquet"))
    return full, per


@pytest.fixture(scope="module")
def results(layout, binary, tmp_path_factory):
    _, per = layout
    work = tmp_path_factory.mktemp("mhmix-run")
    coord = f"127.0.0.1:{_free_port()}"
    argvs = [[sys.executable, str(WORKER), "--process-id", str(p), "--num-processes", str(NPROC),
              "--coordinator", coord, "--sources", json.dumps(per[p]), "--out", str(work / f"out{p}.json"),
              "--binary", binary] for p in range(NPROC)]
    logs = [work / f"worker{p}.log" for p in range(NPROC)]
    procs, timed_out = run_processes(argvs, logs, LOCAL_DEVICES, TIMEOUT_S)
    tails = "\n".join(f"--- worker {p} (rc {q.returncode}):\n" + logs[p].read_text(errors="replace")[-4000:]
                      for p, q in enumerate(procs))
    assert not timed_out, f"workers did not finish within {TIMEOUT_S}s\n{tails}"
    assert all(q.returncode == 0 for q in procs), tails
    return [json.loads((work / f"out{p}.json").read_text()) for p in range(NPROC)]


def _merge(results, step):
    """The global (source, id, valid) of one step from both processes' shards;
    each row held by exactly one process (no replicas on this mesh)."""
    src, ids, valid = np.full(B, -2), np.full(B, -2), np.zeros(B, bool)
    owner = np.full(B, -1)
    for r in results:
        for sh in r["steps"][step]["shards"]:
            lo, hi = sh["start"], sh["stop"]
            assert (owner[lo:hi] == -1).all(), f"step {step}: rows {lo}:{hi} held twice"
            owner[lo:hi] = r["process_index"]
            src[lo:hi], ids[lo:hi], valid[lo:hi] = sh["source"], sh["ids"], sh["valid"]
    assert (owner >= 0).all() and set(owner.tolist()) == set(range(NPROC)), (step, owner)
    return src, ids, valid


def test_two_processes_agree_with_one(results, layout):
    full, _ = layout
    sh = NamedSharding(jax.make_mesh((8,), ("data",)), P("data"))
    with meshfeed.Loader(mixture(full), global_batch_size=B, sharding=sh, last_batch="pad") as ld:
        single = [(np.asarray(b["source"]), np.asarray(b["id"]), np.asarray(b["valid"])) for b in ld]
        spe = ld.steps_per_epoch
    assert len(single) == spe > 1
    for r in results:  # every process plans the same steps (from the manifest: its copy holds one file)
        assert r["steps_per_epoch"] == spe and len(r["steps"]) == spe, r["process_index"]
        assert r["stats"]["rows"] > 0, r["stats"]
    seen = set()
    for s in range(spe):
        src, ids, valid = _merge(results, s)
        np.testing.assert_array_equal(valid, single[s][2], err_msg=f"step {s}: mask")
        np.testing.assert_array_equal(np.where(valid, src, -1), single[s][0], err_msg=f"step {s}: sources")
        np.testing.assert_array_equal(np.where(valid, ids, 0), single[s][1], err_msg=f"step {s}: ids")
        reds = [r["steps"][s]["reduction"] for r in results]
        assert reds[0] == reds[1] == {"rows": int(valid.sum()), "id_sum": int(ids[valid].sum())}, (s, reds)
        for x in zip(src[valid].tolist(), ids[valid].tolist()):
            assert x not in seen, f"step {s}: row {x} repeats within the first epochs"
            seen.add(x)
    # Each process delivered rows of its own file only: ids of its half of each source.
    for r in results:
        p = r["process_index"]
        for st in r["steps"]:
            for sh_ in st["shards"]:
                for s_, i_, v_ in zip(sh_["source"], sh_["ids"], sh_["valid"]):
                    if v_:
                        assert p * SIZES[s_] // 2 <= i_ < (p + 1) * SIZES[s_] // 2, (p, s_, i_)
