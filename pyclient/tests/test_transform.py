"""Loader(transform=...): a user function between receiving a step and
placing it, on threads or in worker processes, against a real server."""

import functools
import gc
import os
import time
import traceback

import jax
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import meshfeed
import transform_fns as F
from conftest import FEATURES, ROWS
from contract import expected_ids, features, steps_per_epoch

# The transforms' seed: MESHFEED_TEST_SEED when set (printed, so that a run can be repeated).
SEED = int(os.environ.get("MESHFEED_TEST_SEED", "0") or 0) or int(time.time()) % 100_000
print(f"test_transform: transform_seed {SEED} (set MESHFEED_TEST_SEED to repeat)")

MODES = [pytest.param(0, id="threads"), pytest.param(2, id="processes")]


def sharding(shape=(8,), names=("data",), spec=P("data")):
    return NamedSharding(jax.make_mesh(shape, names), spec)


def alive(pid):
    """Whether process ``pid`` exists (and is not a zombie)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def reference_noise(seed, epoch, step, n):
    """What F.noisy draws at (epoch, step) on process 0, computed with
    numpy alone from the documented seeding."""
    rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([seed, epoch, step, 0])))
    return rng.standard_normal(n).astype(np.float32)


@pytest.mark.parametrize("workers", MODES)
@pytest.mark.parametrize("shape,names,spec,D", [((8,), ("data",), P("data"), 8),
                                                 ((4, 2), ("data", "model"), P("data"), 4)],
                         ids=["8-data", "4x2-data"])
def test_order_values_and_seeds(server, glob, workers, shape, names, spec, D):
    """Each step's output is the function of that step's rows (the process's
    slices concatenated in slice order), in step order, with the seed of
    (seed, epoch, step, process): the same noise numpy draws from it."""
    B = 64
    with meshfeed.Loader(glob, global_batch_size=B, sharding=sharding(shape, names, spec), server=server.address,
                         last_batch="pad", num_epochs=2, transform=F.noisy, transform_workers=workers,
                         transform_seed=SEED) as ld:
        spe = ld.steps_per_epoch
        steps = list(ld)
        st = ld.stats()
    assert len(steps) == 2 * spe == 2 * steps_per_epoch(ROWS, B, "pad")
    for i, batch in enumerate(steps):
        ep, s = divmod(i, spe)
        ids, mask = expected_ids(ROWS, B, D, s)
        assert list(batch) == ["id", "label", "features", "image", "valid", "noise", "x"]
        assert all(isinstance(v, jax.Array) and v.shape[0] == B for v in batch.values())
        np.testing.assert_array_equal(np.asarray(batch["id"]), ids, err_msg=f"epoch {ep} step {s}")
        np.testing.assert_array_equal(np.asarray(batch["valid"]), mask)
        noise = reference_noise(SEED, ep, s, B)
        np.testing.assert_array_equal(np.asarray(batch["noise"]), noise, err_msg=f"epoch {ep} step {s} seed")
        j = int(np.flatnonzero(mask)[-1])
        np.testing.assert_allclose(np.asarray(batch["x"])[j], np.float32(features(int(ids[j]), FEATURES)) + noise[j],
                                   rtol=1e-6)
    tf = st["transform"]
    assert tf["mode"] == ("processes" if workers else "threads") and tf["function"] == "transform_fns:noisy"
    assert tf["workers"] == 2, tf  # processes (each holding 2 steps) or threads, not the steps in the stage
    assert tf["seconds"] > 0 and tf["ms_per_step"] > 0 and tf["wait_seconds"] >= 0
    assert st["steps"] == len(steps)


@pytest.mark.parametrize("workers", MODES)
def test_random_augmentation_resumes_exactly(server, glob, workers):
    """Interrupted and resumed from state(), a random augmentation gives
    the steps an uninterrupted run gives (shuffled, across an epoch end)."""
    kw = dict(global_batch_size=64, sharding=sharding(), server=server.address, num_epochs=2,
              shuffle=meshfeed.Shuffle(seed=SEED, window=128), transform=F.noisy, transform_workers=workers)
    with meshfeed.Loader(glob, **kw) as ld:
        whole = [{k: np.asarray(v) for k, v in b.items()} for b in ld]
        spe = ld.steps_per_epoch
    cut = spe + 3  # inside the second epoch
    with meshfeed.Loader(glob, **kw) as ld:
        it = iter(ld)
        first = [{k: np.asarray(v) for k, v in next(it).items()} for _ in range(cut)]
        state = ld.state()
    with meshfeed.Loader(glob, state=state, **kw) as ld:
        rest = [{k: np.asarray(v) for k, v in b.items()} for b in ld]
    assert len(first) + len(rest) == len(whole) == 2 * spe
    for i, (a, b) in enumerate(zip(first + rest, whole)):
        assert a.keys() == b.keys()
        for k in a:
            np.testing.assert_array_equal(a[k], b[k], err_msg=f"step {i} key {k}")
    # The seed follows the shuffle's when transform_seed is not given.
    np.testing.assert_array_equal(whole[cut]["noise"], reference_noise(SEED, 1, 3, 64))


def test_worker_processes_stop_on_close_exit_and_gc(server, glob):
    """close(), leaving a with block, and garbage collection each stop the
    worker processes; they ran the function (not this process)."""
    kw = dict(global_batch_size=64, sharding=sharding(), server=server.address, transform=F.ids_and_pid,
              transform_workers=2)
    ld = meshfeed.Loader(glob, **kw)
    pids = ld._tbox[0].pids
    assert len(pids) == 2 and all(alive(p) for p in pids)
    ran = {int(np.asarray(b["pid"])[0]) for b in ld}
    assert ran == set(pids), (ran, pids)
    ld.close()
    assert not any(alive(p) for p in pids), pids
    with meshfeed.Loader(glob, **kw) as ld:
        pids = ld._tbox[0].pids
        next(iter(ld))
    assert not any(alive(p) for p in pids), pids
    ld = meshfeed.Loader(glob, **kw)
    pids = ld._tbox[0].pids
    b = next(iter(ld))
    np.testing.assert_array_equal(np.asarray(b["twice"]), 2 * expected_ids(ROWS, 64, 8, 0)[0])
    del ld, b
    gc.collect()
    deadline = time.monotonic() + 10
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(alive(p) for p in pids), pids


def test_threads_stop_on_close(server, glob):
    import threading
    with meshfeed.Loader(glob, global_batch_size=64, sharding=sharding(), server=server.address,
                         transform=F.noisy) as ld:
        next(iter(ld))
        assert any(t.name.startswith("meshfeed-transform") for t in threading.enumerate())
    assert not [t.name for t in threading.enumerate() if t.name.startswith("meshfeed-transform") and t.is_alive()]


@pytest.mark.parametrize("workers", MODES)
def test_exception_surfaces_with_its_traceback_and_step(server, glob, workers):
    """The function's exception comes out of next() as a TransformError
    naming the epoch and step, chained to the exception itself (and, from
    a worker process, to the worker's traceback); the steps before it
    arrive, and the loader keeps raising it."""
    bad = int(expected_ids(ROWS, 64, 8, 5)[0][3])  # a row of step 5
    with meshfeed.Loader(glob, global_batch_size=64, sharding=sharding(), server=server.address,
                         transform=functools.partial(F.raise_on_id, bad=bad), transform_workers=workers) as ld:
        it = iter(ld)
        for s in range(5):
            np.testing.assert_array_equal(np.asarray(next(it)["id"]), expected_ids(ROWS, 64, 8, s)[0])
        with pytest.raises(meshfeed.TransformError, match=r"epoch 0 step 5 .*ValueError: bad row") as ei:
            next(it)
        with pytest.raises(meshfeed.TransformError):
            next(it)
    cause = ei.value.__cause__
    assert isinstance(cause, ValueError) and str(cause) == f"bad row {bad} in this step"
    text = "".join(traceback.format_exception(ei.value))
    assert "raise_on_id" in text and "transform_fns.py" in text, text
    if workers:
        assert "in worker process" in str(ei.value)
        assert type(cause.__cause__).__name__ == "RemoteTraceback"


@pytest.mark.parametrize("workers", MODES)
@pytest.mark.parametrize("fn,match", [
    (F.short, r"transform output 'id' at epoch 0 step 0 .* has shape \(63,\): want 64 rows"),
    (F.strings, r"transform output 'name' at epoch 0 step 0 .* is a <U\d+ array"),
    (F.not_a_dict, r"transform returned list at epoch 0 step 0"),
], ids=["rows", "dtype", "not-a-dict"])
def test_first_result_is_checked(server, glob, workers, fn, match):
    with meshfeed.Loader(glob, global_batch_size=64, sharding=sharding(), server=server.address,
                         transform=fn, transform_workers=workers) as ld:
        with pytest.raises(meshfeed.TransformError, match=match):
            next(iter(ld))


def test_later_results_keep_the_first_ones_keys_and_dtypes(server, glob):
    at = int(expected_ids(ROWS, 64, 8, 2)[0][0])
    with meshfeed.Loader(glob, global_batch_size=64, sharding=sharding(), server=server.address,
                         transform=functools.partial(F.wider_later, at=at)) as ld:
        it = iter(ld)
        next(it), next(it)
        with pytest.raises(meshfeed.TransformError,
                           match=r"'x' at epoch 0 step 2 .* is float64 .*, at the first step float32"):
            next(it)


def test_pad_mask_is_added_back_when_left_out(server, glob):
    with meshfeed.Loader(glob, global_batch_size=64, sharding=sharding(), server=server.address, last_batch="pad",
                         transform=F.drop_mask, transform_workers=1) as ld:
        steps = list(ld)
    for s, b in enumerate(steps):
        assert list(b) == ["id", "valid"]
        np.testing.assert_array_equal(np.asarray(b["valid"]), expected_ids(ROWS, 64, 8, s)[1])


@pytest.mark.parametrize("workers", MODES)
@pytest.mark.parametrize("transport", ["shm", "flight"])
def test_one_placement_call_per_step(glob, monkeypatch, workers, transport):
    """A transformed step is placed with one place_slices call, no
    per-array jax.device_put, and comes out on its devices."""
    from meshfeed._src import layout as layout_mod
    calls, puts = [], []
    real, real_put = layout_mod.place_slices, jax.device_put
    monkeypatch.setattr(layout_mod, "place_slices", lambda *a, **kw: calls.append(1) or real(*a, **kw))
    monkeypatch.setattr(jax, "device_put", lambda *a, **kw: puts.append(1) or real_put(*a, **kw))
    with meshfeed.Loader(glob, global_batch_size=64, sharding=sharding(), transport=transport,
                         columns=["id", "features"], transform=F.noisy, transform_workers=workers) as ld:
        n = 0
        for s, b in enumerate(ld):
            assert all(v.is_ready() for v in b.values())
            np.testing.assert_array_equal(np.asarray(b["id"]), expected_ids(ROWS, 64, 8, s)[0])
            n += 1
        assert ld.stats()["transport"] == transport
        copies = ld.stats()["host_copies"]
    assert n == ld.steps_per_epoch and len(calls) == n, (n, len(calls))
    assert not puts, f"{len(puts)} jax.device_put calls"
    # Counted: the slices concatenated (shared memory), the trips through a
    # worker's segments; none with threads on a Flight record (one view).
    assert (copies > 0) if workers or transport == "shm" else copies == 0, copies


def test_configuration_is_checked(glob):
    sh = sharding()
    with pytest.raises(meshfeed.InvalidRequestError, match=r"transform_workers=2: no transform"):
        meshfeed.Loader(glob, global_batch_size=64, sharding=sh, transform_workers=2)
    with pytest.raises(meshfeed.InvalidRequestError, match=r"transform_workers=-1"):
        meshfeed.Loader(glob, global_batch_size=64, sharding=sh, transform=F.noisy, transform_workers=-1)
    with pytest.raises(meshfeed.InvalidRequestError, match=r"transform=3"):
        meshfeed.Loader(glob, global_batch_size=64, sharding=sh, transform=3)
    with pytest.raises(meshfeed.InvalidRequestError, match=r"does not pickle.*top level of a module"):
        meshfeed.Loader(glob, global_batch_size=64, sharding=sh, transform=lambda b, r: b, transform_workers=1)


def test_transform_is_not_in_the_fingerprint(server, glob):
    """A state resumes under another transform (functions cannot be compared)."""
    kw = dict(global_batch_size=64, sharding=sharding(), server=server.address)
    with meshfeed.Loader(glob, transform=F.noisy, **kw) as ld:
        next(iter(ld))
        state = ld.state()
    with meshfeed.Loader(glob, state=state, **kw) as ld:
        np.testing.assert_array_equal(np.asarray(next(iter(ld))["id"]), expected_ids(ROWS, 64, 8, 1)[0])


def test_bench_cli_reports_the_transform(tmp_path, binary, glob):
    """`meshfeed bench --transform MODULE:FUNCTION` runs it and reports
    its time per step and the loader's wait for it."""
    import json
    import subprocess
    import sys
    workers = 1
    here = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ, MESHFEED_BIN=binary, PYTHONPATH=os.pathsep.join([here, os.environ.get("PYTHONPATH", "")]))
    out = tmp_path / "bench.json"
    r = subprocess.run([sys.executable, "-m", "meshfeed", "bench", glob, "-B", "80", "--steps", "6", "--step", "sleep",
                        "--step-ms", "2", "--transform", "transform_fns:noisy", "--transform-workers", str(workers),
                        "--json", str(out), "--no-progress"], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    rep = json.loads(out.read_text())
    tf = rep["transform"]
    assert tf["function"] == "transform_fns:noisy" and tf["mode"] == "processes" and tf["workers"] == 1
    assert tf["ms_per_step"] > 0 and tf["wait_ms_per_step"] >= 0
    assert "transform_fns:noisy on 1 worker process:" in r.stdout, r.stdout
    assert "ms per step in the function; the loader waited" in r.stdout
    bad = subprocess.run([sys.executable, "-m", "meshfeed", "bench", glob, "--transform", "transform_fns"],
                         capture_output=True, text=True, env=env, timeout=120)
    assert bad.returncode == 2 and "want MODULE:FUNCTION" in bad.stderr, bad.stderr


def test_inputs_returned_unchanged_do_not_travel_back(glob):
    """From a worker process, an input column returned as it is is placed
    from the views it was received in: copies are each column in and each
    new array out, nothing more; on shared memory those views are aligned."""
    with meshfeed.Loader(glob, global_batch_size=64, sharding=sharding(), transport="shm", columns=["id", "features"],
                         transform=F.keep_id, transform_workers=1) as ld:
        for s, b in enumerate(ld):
            ids = expected_ids(ROWS, 64, 8, s)[0]
            np.testing.assert_array_equal(np.asarray(b["id"]), ids)
            np.testing.assert_array_equal(np.asarray(b["twice"]), 2 * ids)
        st = ld.stats()
    assert st["host_copies"] == st["steps"] * (2 + 1), st  # id and features in, twice out
    assert st["unaligned_transfers"] == 0, st


@pytest.mark.parametrize("transport", ["shm", "flight"])
def test_inputs_returned_unchanged_keep_the_materializers_alignment_count(glob, monkeypatch, transport):
    """An input a worker returns unchanged is placed with the count of
    unaligned transfers the Materializer made from the addresses it viewed
    (layout.HostStep), not asked of each view again; that count is what
    the views' own addresses give, on either wire."""
    from meshfeed._src import transform as T
    from meshfeed._src.transform_worker import ALIGN
    seen = []
    real = T.Transformer._place

    def place(self, out):
        L = self.layout
        for k, v in out.items():
            if isinstance(v, T._Slices):
                vs = v.views if len(v.views) == len(L.slices) else \
                    [v.views[0][i * L.b:(i + 1) * L.b] for i in range(len(L.slices))]
                want = int(self._devs[np.array([x.ctypes.data for x in vs]) % ALIGN != 0].sum())
                seen.append((k, v.unaligned, want))
        return real(self, out)

    monkeypatch.setattr(T.Transformer, "_place", place)
    with meshfeed.Loader(glob, global_batch_size=64, sharding=sharding(), transport=transport,
                         columns=["id", "features"], transform=F.noisy, transform_workers=2) as ld:
        n = sum(1 for _ in ld)
        st = ld.stats()
    assert st["transport"] == transport
    assert len(seen) == 2 * n, (len(seen), n)  # id and features, every step
    assert all(got == want for _, got, want in seen), [x for x in seen if x[1] != x[2]][:4]


def test_a_worker_gets_the_columns_layout_only_when_it_changes(monkeypatch):
    """A step frame repeats its worker's last column layout as None; a
    step of other columns, dtypes or shapes sends its own, and every step's
    values are read right either way."""
    import threading
    from meshfeed._src import transform as T
    from meshfeed._src import transform_worker as TW
    frames = []
    real = TW.Channel.send

    def send(self, obj):
        if isinstance(obj, tuple) and obj and obj[0] == "step":
            frames.append(obj[1])
        return real(self, obj)

    monkeypatch.setattr(TW.Channel, "send", send)
    rng = np.random.default_rng(SEED)

    def step(kind):
        if kind == 0:
            return {"id": [rng.integers(0, 99, 4) for _ in range(2)], "f": [rng.random((4, 3)) for _ in range(2)]}
        return {"id": [rng.integers(0, 99, 5).astype(np.int32) for _ in range(2)]}

    kinds = [0, 0, 0, 0, 1, 1, 0, 0, 1, 0]
    stage = T.ProcessStage(F.row_sums, 2)
    stop = threading.Event()
    try:
        stage.wait_ready()
        for i, kind in enumerate(kinds):
            host = step(kind)
            out, _, _ = stage.result(stage.submit(host, (SEED, 0, i, 0)), stop, f"step {i}")
            for k, v in host.items():
                a = np.concatenate(v)
                np.testing.assert_array_equal(out[k + "_sum"], a.reshape(len(a), -1).sum(axis=1).astype(np.float64))
    finally:
        stage.close()
    # Steps go to workers 0, 1, 0, 1, ...: a layout is sent where that
    # worker's previous step had another (or none).
    want, last = [], [None, None]
    for i, kind in enumerate(kinds):
        want.append(last[i % 2] != kind)
        last[i % 2] = kind
    assert [f is not None for f in frames] == want, frames


def test_threads_concatenate_into_aligned_arrays(glob):
    """On threads, a column's slices are concatenated into a 64-byte
    aligned array: returned as it is, it is placed without an unaligned
    transfer where its slices' rows start aligned (here every slice: 8 rows
    of 8 bytes)."""
    with meshfeed.Loader(glob, global_batch_size=64, sharding=sharding(), transport="shm", columns=["id"],
                         transform=F.drop_mask, transform_workers=0) as ld:
        for s, b in enumerate(ld):
            np.testing.assert_array_equal(np.asarray(b["id"]), expected_ids(ROWS, 64, 8, s)[0])
        st = ld.stats()
    assert st["steps"] > 0 and st["unaligned_transfers"] == 0, st


def test_a_reply_already_there_is_read_without_a_select(monkeypatch):
    """The parent reads a worker's reply that is already there with one
    read, no select: one system call less a step (and one less point where
    the prefetch thread lets go of the GIL)."""
    import select
    import threading
    from meshfeed._src import transform as T
    real, calls = select.select, []
    stage = T.ProcessStage(F.row_sums, 1)
    stop = threading.Event()
    try:
        stage.wait_ready()
        for i in range(4):
            host = {"id": [np.arange(4) + 8 * i, np.arange(4, 8) + 8 * i]}
            w = stage.submit(host, (SEED, 0, i, 0))
            if i > 1:  # steps 0 and 1 also size their output segments (a request and its answer)
                assert real([w[0].ch.rfd], [], [], 30)[0], "no reply within 30 s"
                monkeypatch.setattr(select, "select", lambda *a: calls.append(a) or real(*a))
            out, _, _ = stage.result(w, stop, f"step {i}")
            monkeypatch.setattr(select, "select", real)
            np.testing.assert_array_equal(out["id_sum"], np.arange(8, dtype=np.float64) + 8 * i)
    finally:
        stage.close()
    assert not calls, calls


def test_a_killed_worker_is_an_error_naming_it(server, glob):
    """A worker process killed mid-run: next() raises a TransformError
    naming the process and its status (the stream cannot go on without
    it); close() still stops the other."""
    import signal
    with meshfeed.Loader(glob, global_batch_size=64, sharding=sharding(), server=server.address, prefetch=1,
                         transform=F.noisy, transform_workers=2) as ld:
        it = iter(ld)
        next(it)
        pids = ld._tbox[0].pids
        os.kill(pids[0], signal.SIGKILL)
        want = rf"worker process {pids[0]} (exited with status -9|is gone)"
        with pytest.raises(meshfeed.TransformError, match=want):
            for _ in it:
                pass
    assert not any(alive(p) for p in pids)


def test_workers_exit_when_the_training_process_is_killed(tmp_path, binary, glob):
    """SIGKILL of the process that made the loader: its worker processes
    read EOF on their sockets and exit (nothing to clean up by name)."""
    import signal
    import subprocess
    import sys
    here = os.path.dirname(os.path.abspath(__file__))
    script = tmp_path / "train.py"
    script.write_text(
        "import os, sys, time, jax\n"
        "from jax.sharding import NamedSharding, PartitionSpec as P\n"
        "import meshfeed, transform_fns\n"
        f"ld = meshfeed.Loader({glob!r}, global_batch_size=64, sharding=NamedSharding(jax.make_mesh((8,), ('data',)),"
        " P('data')), transform=transform_fns.noisy, transform_workers=2, num_epochs=None)\n"
        "next(iter(ld))\n"
        "print(*ld._tbox[0].pids, flush=True)\n"
        "time.sleep(600)\n")
    env = dict(os.environ, MESHFEED_BIN=binary, JAX_PLATFORMS="cpu",
               XLA_FLAGS="--xla_force_host_platform_device_count=8", PYTHONPATH=os.pathsep.join([here, os.environ.get("PYTHONPATH", "")]))
    p = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True, env=env)
    try:
        pids = [int(x) for x in p.stdout.readline().split()]
        assert len(pids) == 2 and all(alive(q) for q in pids), pids
    finally:
        p.send_signal(signal.SIGKILL)
        p.wait()
        p.stdout.close()
    deadline = time.monotonic() + 20
    while any(alive(q) for q in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(alive(q) for q in pids), pids


@pytest.mark.parametrize("workers", MODES)
def test_outputs_of_other_dtypes_and_shapes(server, glob, workers):
    """An output may change dtype (bfloat16 included) and shape; it is
    placed as the sharding says."""
    import ml_dtypes
    sh = sharding((4, 2), ("data", "model"), P("data"))
    with meshfeed.Loader(glob, global_batch_size=64, sharding=sh, server=server.address,
                         transform=F.to_bfloat16, transform_workers=workers) as ld:
        b = next(iter(ld))
    f = b["f"]
    assert f.dtype == ml_dtypes.bfloat16 and f.shape == (64, FEATURES) and f.sharding.is_equivalent_to(sh, 2)
    ids = expected_ids(ROWS, 64, 4, 0)[0]
    want = np.asarray([features(int(i), FEATURES) for i in ids], np.float32).astype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(np.asarray(f), want)


@pytest.mark.parametrize("workers", MODES)
def test_recovery_after_the_server_is_killed_keeps_order_and_seeds(glob, workers):
    """The loader's own server SIGKILLed mid-epoch with steps in the
    transform stage: the loader restarts it, drops the staged steps and
    resumes; the transformed steps equal an uninterrupted run's (the
    workers' abandoned steps are drained, their seeds are the steps')."""
    import signal
    kw = dict(global_batch_size=64, sharding=sharding(), num_epochs=None, prefetch=3, transform=F.noisy,
              transform_workers=workers, transform_seed=SEED, columns=["id", "features"])
    n = 20
    with meshfeed.Loader(glob, **kw) as ld:
        ref = [{k: np.asarray(v) for k, v in b.items()} for _, b in zip(range(n), ld)]
    with meshfeed.Loader(glob, **kw) as ld:
        got = []
        for i, b in zip(range(n), ld):
            got.append({k: np.asarray(v) for k, v in b.items()})
            if i == 6:
                os.kill(ld.server_pid, signal.SIGKILL)
        assert ld.stats()["recoveries"] >= 1
    for i, (a, b) in enumerate(zip(got, ref)):
        for k in b:
            np.testing.assert_array_equal(a[k], b[k], err_msg=f"step {i} key {k}")


@pytest.mark.parametrize("workers", MODES)
def test_string_columns_are_pyarrow_arrays_both_ways(tmp_path, workers):
    """A string column reaches the function as a pyarrow array (by pickle
    in a worker process) and a pyarrow array it returns is delivered as it
    is; computed from it, a numeric array is placed."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    n = 256
    names = [f"row-{i}" * (1 + i % 3) for i in range(n)]
    pq.write_table(pa.table({"id": pa.array(range(n), pa.int64()), "name": names}), tmp_path / "s.parquet",
                   row_group_size=64)
    with meshfeed.Loader(str(tmp_path / "s.parquet"), global_batch_size=64, sharding=sharding(), transport="flight",
                         transform=F.shout, transform_workers=workers) as ld:
        steps = list(ld)
    assert len(steps) == n // 64
    for s, b in enumerate(steps):
        ids = expected_ids(n, 64, 8, s)[0]
        np.testing.assert_array_equal(np.asarray(b["id"]), ids)
        assert isinstance(b["name"], pa.Array) and b["name"].to_pylist() == [names[i].upper() for i in ids]
        assert isinstance(b["name_len"], jax.Array)
        np.testing.assert_array_equal(np.asarray(b["name_len"]), [len(names[i]) for i in ids])


def test_a_function_of_the_main_script_runs_in_workers(tmp_path, binary, glob):
    """A transform defined in the script being run (``__main__``) loads in
    the worker processes: they load that script as multiprocessing's spawn
    does (its ``if __name__ == "__main__"`` block does not run there)."""
    import subprocess
    import sys
    script = tmp_path / "main_fn.py"
    script.write_text(
        "import os\n"
        "import numpy as np\n"
        "def triple(batch, rng):\n"
        "    return {'id3': batch['id'] * 3, 'pid': np.full(len(batch['id']), os.getpid())}\n"
        "if __name__ == '__main__':\n"
        "    import jax\n"
        "    from jax.sharding import NamedSharding, PartitionSpec as P\n"
        "    import meshfeed\n"
        f"    with meshfeed.Loader({glob!r}, global_batch_size=64, transform=triple, transform_workers=1,\n"
        "                         sharding=NamedSharding(jax.make_mesh((8,), ('data',)), P('data'))) as ld:\n"
        "        b = next(iter(ld))\n"
        "        print(int(np.asarray(b['id3'])[5]), int(np.asarray(b['pid'])[0]) in ld._tbox[0].pids, os.getpid())\n")
    env = dict(os.environ, MESHFEED_BIN=binary, JAX_PLATFORMS="cpu",
               XLA_FLAGS="--xla_force_host_platform_device_count=8")
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    id3, in_worker, _ = r.stdout.split()
    assert int(id3) == 3 * int(expected_ids(ROWS, 64, 8, 0)[0][5]) and in_worker == "True", r.stdout


@pytest.mark.parametrize("workers", MODES)
@pytest.mark.parametrize("transport", ["shm", "flight"])
def test_packed_column_steps_have_the_packed_rows(tmp_path, workers, transport):
    """A packed column (Column(length=L, pack_ratio=r)) delivers ceil(b / r)
    rows per slice: the function gets those rows and its outputs are
    checked against and placed as them, equal to the packed step without a
    transform (list<int32> of random lengths, 8 slices of 8 documents packed
    into 4 rows each)."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    rng = np.random.default_rng(SEED)
    n, L, B = 512, 16, 64
    docs = [rng.integers(0, 1000, rng.integers(1, 7)).astype(np.int32).tolist() for _ in range(n)]
    pq.write_table(pa.table({"tokens": pa.array(docs, pa.list_(pa.int32()))}), tmp_path / "t.parquet",
                   row_group_size=128)
    cols = {"tokens": meshfeed.Column(length=L, pack_ratio=2)}

    def loader(**kw):
        return meshfeed.Loader(str(tmp_path / "t.parquet"), global_batch_size=B, sharding=sharding(), columns=cols,
                               transport=transport, num_epochs=1, **kw)

    with loader() as ld:
        plain = [{k: np.asarray(v) for k, v in b.items()} for b in ld]
    with loader(transform=F.packed_tokens, transform_workers=workers) as ld:
        got = list(ld)
    assert len(got) == len(plain) == n // B
    for s, (g, p) in enumerate(zip(got, plain)):
        assert p["tokens"].shape == (B // 2, L)
        assert g["tokens"].shape == (B // 2, L) and g["tokens"].sharding == sharding()
        np.testing.assert_array_equal(np.asarray(g["tokens"]), p["tokens"] + 1, err_msg=f"step {s}")
        np.testing.assert_array_equal(np.asarray(g["tokens_segment_ids"]), p["tokens_segment_ids"])
        np.testing.assert_array_equal(np.asarray(g["tokens_count"]), (p["tokens_segment_ids"] > 0).sum(axis=1))


def _io_calls(path):
    """(read, write) system calls so far of the task whose /proc io file
    is ``path`` (Linux's syscr and syscw); None where it cannot be read."""
    try:
        with open(path) as f:
            got = dict(line.split(": ") for line in f.read().splitlines())
        return int(got["syscr"]), int(got["syscw"])
    except (OSError, KeyError, ValueError):
        return None


def test_a_step_is_one_write_and_one_read_on_each_side(monkeypatch):
    """In the steady state (segments sized, layout sent) a step costs the
    prefetch thread one write (the step frame, into the worker's pipe) and
    one read (the reply, already there: no select), and the worker one
    read and one write: Linux's read and write system call counters of
    both. The socket beside the pipes carries descriptors only: no
    send_fds once the segments exist."""
    import select
    import socket
    import threading
    from meshfeed._src import transform as T
    if _io_calls(f"/proc/self/task/{threading.get_native_id()}/io") is None:
        pytest.skip("no /proc/<pid>/task/<tid>/io here")
    sent_fds = []
    real_send_fds = socket.send_fds
    monkeypatch.setattr(socket, "send_fds", lambda *a, **k: sent_fds.append(a) or real_send_fds(*a, **k))
    stage = T.ProcessStage(F.row_sums, 1)
    stop = threading.Event()
    me = f"/proc/self/task/{threading.get_native_id()}/io"
    steps = 12
    try:
        stage.wait_ready()
        w = stage.workers[0]

        def step(i):  # one at a time: each step's segments are sized by its second
            host = {"id": [np.arange(4) + 8 * i, np.arange(4, 8) + 8 * i]}
            h = stage.submit(host, (SEED, 0, i, 0))
            assert select.select([w.ch.rfd], [], [], 30)[0], "no reply within 30 s"
            out, _, _ = stage.result(h, stop, f"step {i}")
            np.testing.assert_array_equal(out["id_sum"], np.arange(8, dtype=np.float64) + 8 * i)

        for i in range(3):  # segments, layout, the worker's first-step imports
            step(i)
        fds_before = len(sent_fds)
        c0 = _io_calls(me)
        c1 = _io_calls(me)
        probe = c1[0] - c0[0]  # the reads of one look at a /proc io file
        me0 = _io_calls(me)
        wr0 = _io_calls(f"/proc/{w.pid}/io")
        for i in range(3, 3 + steps):
            step(i)
        wr1 = _io_calls(f"/proc/{w.pid}/io")
        me1 = _io_calls(me)
    finally:
        stage.close()
    assert len(sent_fds) == fds_before, "a descriptor was sent in the steady state"
    assert wr0 is not None and wr1 is not None
    # The worker: its next read may have returned already (the last reply
    # is read by then, the next step not sent: it blocks inside it), so the
    # reads of `steps` steps are `steps`.
    assert (wr1[0] - wr0[0], wr1[1] - wr0[1]) == (steps, steps), (wr0, wr1)
    # This thread: the select above is neither; the writes are the step
    # frames, the reads the replies and three looks at /proc files (the
    # rest of me0's, the worker's twice: a look's counter is read before
    # its own reads count).
    assert (me1[0] - me0[0] - 3 * probe, me1[1] - me0[1]) == (steps, steps), (me0, me1, probe)


def test_a_worker_takes_its_next_step_while_it_runs_one():
    """A worker process holds DEPTH (2) steps: the next one is sent before
    the reply to the one before is read (each on its own segments), and
    the replies come back in step order with the right values, also where
    every step needs larger segments than the last, so that a worker asks
    for a new output segment while its next step (and that step's new
    input segment) already waits in its pipe."""
    import threading
    from meshfeed._src import transform as T
    assert T.DEPTH == 2
    rng = np.random.default_rng(SEED)
    stage = T.ProcessStage(F.row_sums, 1)
    stop = threading.Event()
    assert stage.inflight == 2
    hosts, pend, got = [], [], []
    try:
        stage.wait_ready()
        w = stage.workers[0]
        for i in range(12):
            rows = 3 * (i + 1) ** 2  # every step larger: segments grow
            host = {"id": [rng.integers(0, 99, rows) for _ in range(2)], "f": [rng.random((rows, 5)) for _ in range(2)]}
            hosts.append(host)
            pend.append(stage.submit(host, (SEED, 0, i, 0)))
            assert w.sent - w.got == len(pend)
            if len(pend) == stage.inflight:
                got.append(stage.result(pend.pop(0), stop, f"step {i - 1}")[0])
        while pend:
            got.append(stage.result(pend.pop(0), stop, "last")[0])
    finally:
        stage.close()
    assert len(got) == len(hosts)
    for host, out in zip(hosts, got):
        for k, v in host.items():
            a = np.concatenate(v)
            np.testing.assert_array_equal(out[k + "_sum"], a.reshape(len(a), -1).sum(axis=1).astype(np.float64))


def test_an_abandoned_step_in_a_worker_is_read_and_dropped():
    """Steps a stopped prefetcher left in the stage (two in one worker)
    are answered and dropped before a later step's reply: the next
    prefetcher's results are its own steps'."""
    import threading
    from meshfeed._src import transform as T
    stage = T.ProcessStage(F.row_sums, 1)
    stop = threading.Event()
    try:
        stage.wait_ready()
        for i in range(2):  # abandoned: never asked for
            stage.submit({"id": [np.full(4, 1000 + i), np.full(4, 1000 + i)]}, (SEED, 0, i, 0))
        for i in range(2, 6):
            host = {"id": [np.arange(4) + 8 * i, np.arange(4, 8) + 8 * i]}
            out, _, _ = stage.result(stage.submit(host, (SEED, 0, i, 0)), stop, f"step {i}")
            np.testing.assert_array_equal(out["id_sum"], np.arange(8, dtype=np.float64) + 8 * i)
    finally:
        stage.close()


def test_workers_run_under_sched_batch():
    """Worker processes run under SCHED_BATCH (Linux): one woken by its
    next step does not preempt the prefetch thread that woke it."""
    from meshfeed._src import transform as T
    if not hasattr(os, "sched_getscheduler"):
        pytest.skip("no sched_getscheduler here")
    stage = T.ProcessStage(F.row_sums, 2)
    try:
        stage.wait_ready()
        assert [os.sched_getscheduler(p) for p in stage.pids] == [os.SCHED_BATCH] * 2
    finally:
        stage.close()


def test_a_steps_generator_is_the_list_seeded_one():
    """rng_for seeds with the entropy's uint32 words where every value fits
    in 32 bits (numpy's list path builds an array per int): the state, the
    draws and spawn()'s children equal SeedSequence([seed, epoch, step,
    process])'s, for values in 32 bits and beyond (the list path)."""
    from meshfeed._src.transform_worker import rng_for
    r = np.random.default_rng(SEED)
    cases = [(0, 0, 0, 0), (2**32 - 1, 5, 7, 1), (2**32, 1, 2, 3), (2**63 + 5, 0, 9, 0)]
    cases += [tuple(int(x) for x in r.integers(0, 2**31, 4)) for _ in range(20)]
    for e in cases:
        want = np.random.Generator(np.random.PCG64(np.random.SeedSequence(list(e))))
        got = rng_for(e)
        assert got.bit_generator.state == want.bit_generator.state, e
        np.testing.assert_array_equal(got.random(5), want.random(5))
        for a, b in zip(got.spawn(2), want.spawn(2)):
            np.testing.assert_array_equal(a.integers(0, 1 << 30, 4), b.integers(0, 1 << 30, 4))
