"""Two JAX processes (jax.distributed on CPU, 4 devices each), each beside its
own meshfeed server, read one dataset on meshes spanning both processes.

Each process runs multihost_worker.py and reports the ids of its addressable
shards per step and the result of a jitted global reduction (a cross-process
gloo collective). Expected values come from the files themselves (pyarrow) and
the contract's step layout (contract.py), not from the client.
"""

import json
import os
import pathlib
import signal
import socket
import subprocess
import sys
import time

import jax
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import meshfeed
from contract import expected_ids, steps_per_epoch

HERE = pathlib.Path(__file__).resolve().parent
WORKER = HERE / "multihost_worker.py"
# Streams of unequal length (1003 rows over 4 and 8 streams), row groups that
# straddle stream edges and files, and N % B != 0 so the last step is padded.
ROWS, FILES, RG_ROWS, FEATURES, B = 1003, 3, 50, 4, 64
NPROC, LOCAL_DEVICES = 2, 4
TIMEOUT_S = 120  # normally ~10 s; generous for a loaded 2-core machine
# name -> (data-parallel degree D, epochs, shuffled); must match multihost_worker.RUNS
RUNS = {"4x2-data": (4, 1, False), "8-data": (8, 1, False), "8-data-shuffled": (8, 2, True)}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _descendants(pid: int) -> list[int]:
    """Process ids below ``pid`` (from /proc), children first."""
    parent: dict[int, int] = {}
    for p in pathlib.Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            stat = (p / "stat").read_text()
        except OSError:
            continue
        parent[int(p.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    out, todo = [], [pid]
    while todo:
        cur = todo.pop()
        kids = [c for c, pp in parent.items() if pp == cur]
        out += kids
        todo += kids
    return out


def _kill_all(procs: list[subprocess.Popen]) -> None:
    """Stops the workers (SIGTERM lets them stop their servers), then kills
    whatever is left of them and their descendants, by pid."""
    below = {q for p in procs if p.poll() is None for q in _descendants(p.pid)}
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + 5
    for p in procs:
        try:
            p.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    for q in below:
        try:
            os.kill(q, signal.SIGKILL)
        except ProcessLookupError:
            pass


def run_processes(argvs, logs, local_devices, timeout, poll=0.1):
    """Runs one process per argv (stdout and stderr into the matching path of
    logs) with jax on local_devices CPU devices each; stops waiting as soon as
    one fails (its peers would only block in a collective) or at the timeout,
    then stops them all and their descendants. Returns the processes (their
    returncode set) and whether the wait timed out."""
    env = dict(os.environ)
    env["XLA_FLAGS"] = " ".join(
        [f for f in env.get("XLA_FLAGS", "").split() if not f.startswith("--xla_force_host_platform_device_count")]
        + [f"--xla_force_host_platform_device_count={local_devices}"])
    env["JAX_PLATFORMS"] = "cpu"
    procs, files = [], []
    try:
        for argv, path in zip(argvs, logs):
            log = open(path, "wb")
            files.append(log)
            procs.append(subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and any(p.poll() is None for p in procs):
            if any(p.poll() not in (None, 0) for p in procs):
                break
            time.sleep(poll)
        timed_out = any(p.poll() is None for p in procs)
    finally:
        _kill_all(procs)
        for log in files:
            log.close()
    return procs, timed_out


@pytest.fixture(scope="module")
def mh_dataset(tmp_path_factory, binary):
    out = tmp_path_factory.mktemp("mh") / "ds"
    subprocess.run([binary, "gen", "--out", str(out), "--rows", str(ROWS), "--files", str(FILES),
                    "--row-group-rows", str(RG_ROWS), "--features", str(FEATURES)], check=True,
                   capture_output=True, timeout=60)
    return out


@pytest.fixture(scope="module")
def table(mh_dataset):
    """The dataset in the contract's order: files sorted by path, rows in file order."""
    files = sorted(mh_dataset.glob("*.parquet"))
    assert len(files) == FILES
    t = pa.concat_tables([pq.read_table(f, columns=["id", "label", "features"]) for f in files])
    assert t.num_rows == ROWS
    return {"id": t.column("id").to_numpy(), "label": t.column("label").to_numpy(),
            "features": np.stack(t.column("features").to_numpy(zero_copy_only=False)).astype(np.float32)}


@pytest.fixture(scope="module")
def results(mh_dataset, binary, tmp_path_factory):
    """Runs the two worker processes; returns their JSON results, by process id."""
    work = tmp_path_factory.mktemp("mh-run")
    coord = f"127.0.0.1:{_free_port()}"
    argvs = [[sys.executable, str(WORKER), "--process-id", str(i), "--num-processes", str(NPROC),
              "--coordinator", coord, "--data", str(mh_dataset / "*.parquet"), "--out", str(work / f"out{i}.json"),
              "--batch-size", str(B), "--binary", binary] for i in range(NPROC)]
    procs, timed_out = run_processes(argvs, [work / f"worker{i}.log" for i in range(NPROC)], LOCAL_DEVICES, TIMEOUT_S)

    def tails() -> str:
        return "\n".join(f"--- worker {i} (rc {p.returncode}):\n"
                         + (work / f"worker{i}.log").read_text(errors="replace")[-4000:] for i, p in enumerate(procs))

    assert not timed_out, f"workers did not finish within {TIMEOUT_S}s\n{tails()}"
    assert all(p.returncode == 0 for p in procs), tails()
    return [json.loads((work / f"out{i}.json").read_text()) for i in range(NPROC)]


def _merge(results, name, step):
    """The global ids, mask and labels of one step, from both processes'
    addressable shards; checks replicas agree and each slice has one owner."""
    ids = np.full(B, -1, np.int64)
    valid = np.zeros(B, bool)
    labels = np.zeros(B, np.int64)
    owner = np.full(B, -1)
    for r in results:
        pi = r["process_index"]
        for sh in r["runs"][name]["steps"][step]["shards"]:
            lo, hi = sh["start"], sh["stop"]
            got = (np.array(sh["ids"], np.int64), np.array(sh["valid"], bool), np.array(sh["labels"], np.int64))
            if (owner[lo:hi] == -1).all():
                ids[lo:hi], valid[lo:hi], labels[lo:hi] = got
                owner[lo:hi] = pi
                continue
            # a replica (mesh axis "model"): same process, same rows
            assert (owner[lo:hi] == pi).all(), \
                f"{name} step {step}: rows {lo}:{hi} held by processes {set(owner[lo:hi].tolist())} and {pi}"
            np.testing.assert_array_equal(got[0], ids[lo:hi], err_msg=f"{name} step {step}: replicas differ")
            np.testing.assert_array_equal(got[1], valid[lo:hi])
    assert (owner >= 0).all(), f"{name} step {step}: rows {np.flatnonzero(owner < 0)} held by no device"
    assert set(owner.tolist()) == set(range(NPROC)), f"{name} step {step}: owners {set(owner.tolist())}"
    return ids, valid, labels


def _expected_reduction(table, pos):
    """The reduction of the worker over the rows at positions ``pos`` of the table."""
    return {"id_sum": int(table["id"][pos].sum()), "label_sum": int(table["label"][pos].astype(np.int64).sum()),
            "valid_count": len(pos), "feature_sum": float(table["features"][pos].astype(np.float64).sum())}


def _check_reduction(results, name, step, want):
    reds = [r["runs"][name]["steps"][step]["reduction"] for r in results]
    assert reds[0] == reds[1], f"{name} step {step}: processes disagree: {reds}"
    red = reds[0]
    for k in ("id_sum", "label_sum", "valid_count"):
        assert red[k] == want[k], f"{name} step {step}: {k} = {red[k]}, want {want[k]}"
    assert red["feature_sum"] == pytest.approx(want["feature_sum"], rel=1e-9, abs=1e-9), (name, step)
    # padding rows carry id 0 and label 0
    assert red["id_sum_all"] == want["id_sum"] and red["label_sum_all"] == want["label_sum"], (name, step, red)


def test_processes_join_one_global_mesh(results):
    for i, r in enumerate(results):
        assert (r["process_index"], r["process_count"], r["local_device_count"], r["device_count"]) == \
            (i, NPROC, LOCAL_DEVICES, NPROC * LOCAL_DEVICES), r
        assert sorted(r["runs"]) == sorted(RUNS)


@pytest.mark.parametrize("name", [n for n, (_, _, shuf) in RUNS.items() if not shuf])
def test_every_row_once_and_global_reduction(results, table, name):
    D, epochs, _ = RUNS[name]
    spe = steps_per_epoch(ROWS, B, "pad")
    for r in results:  # invariant 1: the same steps per epoch on every process
        run = r["runs"][name]
        assert (run["num_rows"], run["steps_per_epoch"], len(run["steps"])) == (ROWS, spe, spe * epochs), \
            f"{name}: process {r['process_index']}"
        assert run["stats"]["host_copies"] == 0
        # one placement call per step (the hot path): every step of the stream was materialized once
        assert run["placements"] == spe * epochs, (name, run["placements"])
    delivered = []
    for s in range(spe):
        ids, valid, labels = _merge(results, name, s)
        pos, want_valid = expected_ids(ROWS, B, D, s)  # row positions in the table
        np.testing.assert_array_equal(valid, want_valid, err_msg=f"{name} step {s} mask")
        real = pos[want_valid]
        np.testing.assert_array_equal(ids[valid], table["id"][real], err_msg=f"{name} step {s} ids")
        np.testing.assert_array_equal(labels[valid], table["label"][real], err_msg=f"{name} step {s} labels")
        assert not ids[~valid].any() and not labels[~valid].any(), f"{name} step {s}: padding not zero"
        _check_reduction(results, name, s, _expected_reduction(table, real))
        delivered += ids[valid].tolist()
    # invariant 4 across processes: every row exactly once
    assert sorted(delivered) == sorted(table["id"].tolist())
    # each process received only its own slices' rows: together, each row once
    rows = [r["runs"][name]["stats"]["rows"] for r in results]
    assert sum(rows) == ROWS and min(rows) > 0, rows


def test_shuffled_epochs_match_one_process(results, table, mh_dataset):
    """Two shuffled epochs: every row once per epoch across processes, the
    global reduction matches the files, and (invariant 2) the global batches
    equal those a single process with 8 devices gets for the same request."""
    name = "8-data-shuffled"
    D, epochs, _ = RUNS[name]
    spe = steps_per_epoch(ROWS, B, "pad")
    row_of = {int(i): k for k, i in enumerate(table["id"])}
    sh = NamedSharding(jax.make_mesh((8,), ("data",)), P("data"))
    with meshfeed.Loader(str(mh_dataset / "*.parquet"), global_batch_size=B, sharding=sh,
                         columns=["id", "label", "features"], last_batch="pad",
                         shuffle=meshfeed.Shuffle(seed=7, window=64), num_epochs=epochs) as ld:
        single = [(np.asarray(b["id"]), np.asarray(b["valid"])) for b in ld]
    assert len(single) == spe * epochs
    orders = []
    for e in range(epochs):
        order = []
        for s in range(spe):
            g = e * spe + s
            ids, valid, labels = _merge(results, name, g)
            np.testing.assert_array_equal(ids, single[g][0], err_msg=f"epoch {e} step {s}: ids differ from one process")
            np.testing.assert_array_equal(valid, single[g][1], err_msg=f"epoch {e} step {s}: mask differs")
            pos = np.array([row_of[int(i)] for i in ids[valid]], dtype=np.int64)
            np.testing.assert_array_equal(labels[valid], table["label"][pos])
            _check_reduction(results, name, g, _expected_reduction(table, pos))
            order += ids[valid].tolist()
        assert sorted(order) == sorted(table["id"].tolist()), f"epoch {e}: not every row exactly once"
        orders.append(order)
    # the shuffle is really on, and differs per epoch
    assert orders[0] != orders[1]
    unshuffled = [int(table["id"][p]) for s in range(spe) for p, m in zip(*expected_ids(ROWS, B, D, s)) if m]
    assert orders[0] != unshuffled
