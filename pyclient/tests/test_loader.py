"""meshfeed.Loader against a real pipeline server over generated Parquet files."""

import json
import os
import threading
import time

import jax
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import meshfeed
from conftest import FEATURES, IMAGE, ROWS
from contract import expected_ids, features, label, pixels, steps_per_epoch

LAYOUTS = [((4, 2), ("data", "model"), P("data"), 4),
           ((8,), ("data",), P("data"), 8),
           ((4, 2), ("data", "model"), P(("data", "model")), 8)]


def sharding(shape, names, spec):
    return NamedSharding(jax.make_mesh(shape, names), spec)


@pytest.mark.parametrize("policy", ["pad", "drop"])
@pytest.mark.parametrize("shape,names,spec,D", LAYOUTS, ids=["4x2-data", "8-data", "4x2-data+model"])
def test_batches_follow_the_contract(server, glob, shape, names, spec, D, policy):
    B = 64
    sh = sharding(shape, names, spec)
    with meshfeed.Loader(glob, global_batch_size=B, sharding=sh, server=server.address, last_batch=policy) as ld:
        assert ld.num_rows == ROWS
        want_steps = steps_per_epoch(ROWS, B, policy)
        assert ld.steps_per_epoch == want_steps
        batches = list(ld)
        stats = ld.stats()
    assert len(batches) == want_steps
    names_want = ["id", "label", "features", "image"] + (["valid"] if policy == "pad" else [])
    delivered = []
    for s, batch in enumerate(batches):
        assert list(batch) == names_want
        for name, arr in batch.items():
            assert isinstance(arr, jax.Array), name
            assert arr.sharding.is_equivalent_to(sh, arr.ndim), (name, arr.sharding, sh)
        assert batch["id"].shape == (B,) and batch["id"].dtype == np.int64
        assert batch["features"].shape == (B, FEATURES) and batch["features"].dtype == np.float32
        assert batch["image"].shape == (B, *IMAGE) and batch["image"].dtype == np.uint8
        ids, mask = expected_ids(ROWS, B, D, s)
        got = np.asarray(batch["id"])
        np.testing.assert_array_equal(got, ids, err_msg=f"step {s} ids")
        if policy == "pad":
            np.testing.assert_array_equal(np.asarray(batch["valid"]), mask, err_msg=f"step {s} mask")
        else:
            assert mask.all()
        real = ids[mask]
        delivered += real.tolist()
        np.testing.assert_array_equal(np.asarray(batch["label"])[mask], [label(i) for i in real])
        for j in np.flatnonzero(mask)[:: max(1, B // 8)]:
            np.testing.assert_array_equal(np.asarray(batch["features"])[j], features(int(ids[j]), FEATURES))
            np.testing.assert_array_equal(np.asarray(batch["image"])[j].reshape(-1),
                                          pixels(int(ids[j]), int(np.prod(IMAGE))))
        if policy == "pad":  # padding rows hold zeros
            assert not np.asarray(batch["features"])[~mask].any()
        # every device holds exactly its slice of the global batch
        for shard in batch["id"].addressable_shards:
            np.testing.assert_array_equal(np.asarray(shard.data), got[shard.index])
    # invariant 4: every row exactly once (pad), all but the remainder (drop)
    assert len(delivered) == len(set(delivered))
    assert len(delivered) == (ROWS if policy == "pad" else (ROWS // B) * B)
    assert stats["steps"] == want_steps and stats["rows"] == len(delivered)
    assert stats["padded_rows"] == (want_steps * B - ROWS if policy == "pad" else 0)
    assert stats["mask_unpacks"] == (want_steps if policy == "pad" else 0)
    assert stats["host_copies"] == 0


def test_raise_fails_at_construction(server, glob):
    sh = sharding((8,), ("data",), P("data"))
    with pytest.raises(meshfeed.PlanError, match=r"(?s)N=1000.*B=64.*40"):
        meshfeed.Loader(glob, global_batch_size=64, sharding=sh, server=server.address, last_batch="raise")
    # B dividing N: fine
    with meshfeed.Loader(glob, global_batch_size=200, sharding=sh, server=server.address, last_batch="raise") as ld:
        assert ld.steps_per_epoch == 5


def test_resume_equals_tail_of_uninterrupted_run(server, glob):
    sh = sharding((4, 2), ("data", "model"), P("data"))
    kw = dict(global_batch_size=128, sharding=sh, server=server.address, last_batch="pad", num_epochs=2,
              columns=["id", "features"])
    with meshfeed.Loader(glob, **kw) as ld:
        full = [np.asarray(b["id"]) for b in ld]
        assert ld.state()["position"] == {"epoch": 2, "step": 0}
    assert len(full) == 16
    for k in (3, 8, 11):  # inside epoch 0, at the epoch boundary, inside epoch 1
        with meshfeed.Loader(glob, **kw) as ld:
            it = iter(ld)
            for _ in range(k):
                next(it)
            saved = json.loads(json.dumps(ld.state()))
        assert saved["position"] == {"epoch": k // 8, "step": k % 8}
        with meshfeed.Loader(glob, state=saved, **kw) as ld:
            tail = [np.asarray(b["id"]) for b in ld]
        assert len(tail) == len(full) - k
        for got, want in zip(tail, full[k:]):
            np.testing.assert_array_equal(got, want)


def test_state_from_other_config_is_refused(server, glob):
    sh = sharding((8,), ("data",), P("data"))
    with meshfeed.Loader(glob, global_batch_size=64, sharding=sh, server=server.address) as ld:
        saved = ld.state()
    with pytest.raises(meshfeed.StateMismatchError, match=r"global_batch_size: state has 64, this loader has 128"):
        meshfeed.Loader(glob, global_batch_size=128, sharding=sh, server=server.address, state=saved)
    with pytest.raises(meshfeed.StateMismatchError, match=r"num_slices: state has 8, this loader has 4"):
        meshfeed.Loader(glob, global_batch_size=64, sharding=sharding((4, 2), ("data", "model"), P("data")),
                        server=server.address, state=saved)


def test_server_errors_are_typed(server, dataset, glob):
    sh = sharding((8,), ("data",), P("data"))
    with pytest.raises(meshfeed.NotFoundError, match="nothere") as e:
        meshfeed.Loader(str(dataset / "nothere*.parquet"), global_batch_size=64, sharding=sh, server=server.address)
    assert e.value.code == "NOT_FOUND" and "nothere" in e.value.server_message
    with pytest.raises(meshfeed.PermissionDeniedError, match="not under an allowed root"):
        meshfeed.Loader("/etc/*.parquet", global_batch_size=64, sharding=sh, server=server.address)
    with pytest.raises(meshfeed.InvalidRequestError, match="no_such_column"):
        meshfeed.Loader(glob, global_batch_size=64, sharding=sh, server=server.address, columns=["no_such_column"])
    with pytest.raises(meshfeed.InvalidRequestError, match="batch dimension of 63 rows"):
        meshfeed.Loader(glob, global_batch_size=63, sharding=sh, server=server.address)  # client side: 63 % 8


def test_zero_copy_views_on_the_wire(server, glob, monkeypatch):
    """Every column's numpy view handed to device_put points into the received
    Arrow buffer (no host copy). Where a device's rows are 64-byte aligned, the
    CPU jax array must alias that memory too."""
    from meshfeed._src import layout as layout_mod
    real_call = layout_mod.Materializer.__call__
    seen = []

    def recording(self, rb):
        out = real_call(self, rb)
        seen.append(self.last_views)
        return out

    monkeypatch.setattr(layout_mod.Materializer, "__call__", recording)
    sh = sharding((4, 2), ("data", "model"), P("data"))
    with meshfeed.Loader(glob, global_batch_size=64, sharding=sh, server=server.address, last_batch="pad") as ld:
        batch = next(iter(ld))
        views = seen[0]  # the views of step 0 (the thread may have materialized more since)
        layout = ld._layout
        stats = ld.stats()
    assert set(views) == {"id", "label", "features", "image", "valid"}
    checked = 0
    for name, (view, buf) in views.items():
        if name == "valid":
            assert buf is None  # bit-packed: unpacked, counted in mask_unpacks
            continue
        lo, hi = buf.address, buf.address + buf.size
        assert lo <= view.ctypes.data and view.ctypes.data + view.nbytes <= hi, name
        for dev, k in layout.devices:
            rows = view[k * layout.b:(k + 1) * layout.b]
            shard = next(s for s in batch[name].addressable_shards if s.device == dev)
            if rows.ctypes.data % 64 == 0:
                p = shard.data.unsafe_buffer_pointer()
                assert lo <= p < hi, f"{name} on {dev}: jax copied aligned rows"
                checked += 1
    assert stats["host_copies"] == 0 and stats["mask_unpacks"] == 1
    assert stats["unaligned_transfers"] == 4 * len(layout.devices) - checked


def test_prefetch_stats_and_thread_errors(server, glob, monkeypatch):
    sh = sharding((8,), ("data",), P("data"))
    with meshfeed.Loader(glob, global_batch_size=200, sharding=sh, server=server.address, prefetch=3,
                         columns=["id"]) as ld:
        time.sleep(0.01)
        n = sum(1 for _ in ld)
        st = ld.stats()
    assert n == 5 and st["steps"] == 5 and st["rows"] == 1000 and st["bytes"] >= 1000 * 8
    assert 0 <= st["wait_ms"]["p50"] <= st["wait_ms"]["p90"] <= st["wait_ms"]["p99"] <= st["wait_ms"]["max"]
    assert st["wait_ms"]["max"] > 0 and st["rows_per_s"] > 0

    from meshfeed._src import layout as layout_mod
    real_call = layout_mod.Materializer.__call__
    calls = []

    def failing(self, rb):
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("boom in step 2")
        return real_call(self, rb)

    monkeypatch.setattr(layout_mod.Materializer, "__call__", failing)
    with meshfeed.Loader(glob, global_batch_size=200, sharding=sh, server=server.address, columns=["id"]) as ld:
        it = iter(ld)
        next(it), next(it)
        with pytest.raises(RuntimeError, match="boom in step 2"):
            next(it)
        assert ld.state()["position"] == {"epoch": 0, "step": 2}


def test_close_stops_server_and_thread(dataset, glob):
    sh = sharding((8,), ("data",), P("data"))
    ld = meshfeed.Loader(glob, global_batch_size=64, sharding=sh, num_epochs=None, prefetch=2)  # local server
    proc = ld._server.proc
    assert proc.poll() is None
    next(iter(ld))
    time.sleep(0.2)  # the thread is now blocked on a full queue of an unbounded stream
    t0 = time.monotonic()
    ld.close()
    assert time.monotonic() - t0 < 10
    assert proc.poll() is not None, "server still running after close()"
    with pytest.raises(ProcessLookupError):
        os.kill(proc.pid, 0)
    assert not [t for t in threading.enumerate() if t.name == "meshfeed-prefetch"]
    with pytest.raises(meshfeed.MeshfeedError, match="closed"):
        next(iter(ld))
    ld.close()  # idempotent


def test_local_server_stopped_on_garbage_collection(glob):
    import gc
    sh = sharding((8,), ("data",), P("data"))
    ld = meshfeed.Loader(glob, global_batch_size=64, sharding=sh)
    proc = ld._server.proc
    next(iter(ld))
    del ld
    gc.collect()
    assert proc.wait(timeout=15) is not None


def test_shuffle_delivers_every_row_once_in_another_order(server, glob):
    sh = sharding((8,), ("data",), P("data"))
    kw = dict(global_batch_size=200, sharding=sh, server=server.address, columns=["id"], last_batch="raise")
    runs = []
    for seed in (1, 1, 2):
        with meshfeed.Loader(glob, shuffle=meshfeed.Shuffle(seed=seed, window=50), **kw) as ld:
            runs.append(np.concatenate([np.asarray(b["id"]) for b in ld]))
    assert sorted(runs[0].tolist()) == list(range(ROWS))
    np.testing.assert_array_equal(runs[0], runs[1])  # deterministic
    assert (runs[0] != runs[2]).any() and (runs[0] != np.concatenate(
        [expected_ids(ROWS, 200, 8, s)[0] for s in range(5)])).any()


def test_server_options_reach_the_local_server(dataset, glob):
    """ServerOptions become flags of the local server: the read-ahead and
    memory budget as typed values, extra_args after them; with --map-cache
    the rows are still the contract's, over two epochs (the second read
    through the cached mappings); a bad flag fails at construction naming it."""
    sh = sharding((8,), ("data",), P("data"))
    opts = meshfeed.ServerOptions(read_ahead=64 << 20, memory_budget=96 << 20,
                                  extra_args=["--map-cache", str(1 << 30)])
    with meshfeed.Loader(glob, global_batch_size=64, sharding=sh, num_epochs=2, server_options=opts) as ld:
        args = ld._server.args
        assert args[-2:] == ["--map-cache", str(1 << 30)]
        assert args[args.index("--read-ahead") + 1] == str(64 << 20), args
        assert args[args.index("--memory-budget") + 1] == str(96 << 20), args
        assert ld.config.server_options == opts
        got = [(np.asarray(b["id"]), np.asarray(b["label"])) for b in ld]
    per_epoch = steps_per_epoch(ROWS, 64, "drop")
    assert len(got) == 2 * per_epoch
    for i, (ids, labels) in enumerate(got):
        want, _ = expected_ids(ROWS, 64, 8, i % per_epoch)
        np.testing.assert_array_equal(ids, want, err_msg=f"step {i} ids")
        np.testing.assert_array_equal(labels, [label(int(x)) for x in want], err_msg=f"step {i} labels")
    with pytest.raises(meshfeed.MeshfeedError, match="no-such-flag"):
        meshfeed.Loader(glob, global_batch_size=64, sharding=sh,
                        server_options=meshfeed.ServerOptions(extra_args=["--no-such-flag"]))
    with pytest.raises(meshfeed.InvalidRequestError, match="server_options"):
        meshfeed.Loader(glob, global_batch_size=64, sharding=sh, server="unix:///nonexistent",
                        server_options=meshfeed.ServerOptions(extra_args=["--x"]))


def test_local_server_defaults_are_the_named_constants(glob):
    """Without ServerOptions the local server gets LOCAL_READ_AHEAD and
    LOCAL_MEMORY_BUDGET (the values ServerOptions' None stands for)."""
    sh = sharding((8,), ("data",), P("data"))
    with meshfeed.Loader(glob, global_batch_size=64, sharding=sh) as ld:
        args = ld._server.args
        assert args[args.index("--read-ahead") + 1] == str(meshfeed.LOCAL_READ_AHEAD) == str(128 << 20), args
        assert args[args.index("--memory-budget") + 1] == str(meshfeed.LOCAL_MEMORY_BUDGET), args
        assert ld.config.server_options is None


def test_local_server_admits_a_large_shuffle_window(tmp_path, binary):
    """The local server's default memory account holds one large stream: a
    65,536-row shuffle window on 8 devices of 64-float rows (about 580 MB of
    read-ahead and windows) is planned and streamed, not refused; and the Go
    runtime's soft limit of that server is local_gc_limit's."""
    import subprocess
    from meshfeed._src.server import local_gc_limit
    out = tmp_path / "big"
    subprocess.run([binary, "gen", "--out", str(out), "--rows", "300000", "--files", "2",
                    "--row-group-rows", "65536", "--features", "64"], check=True, capture_output=True)
    sh = sharding((8,), ("data",), P("data"))
    with meshfeed.Loader(str(out), columns=["id", "features"], global_batch_size=1024, sharding=sh,
                         shuffle=meshfeed.Shuffle(seed=0, window=65536)) as ld:
        batch = next(iter(ld))
        assert batch["features"].shape == (1024, 64)
        env = open(f"/proc/{ld._server.pid}/environ", "rb").read().split(b"\0")
        if "GOMEMLIMIT" not in os.environ:
            assert f"GOMEMLIMIT={local_gc_limit(None)}".encode() in env


def test_loader_from_its_config(glob):
    """A loader's frozen config builds another loader of the same stream;
    a state of one resumes on the other."""
    sh = sharding((8,), ("data",), P("data"))
    with meshfeed.Loader(glob, global_batch_size=64, sharding=sh, last_batch="pad",
                         shuffle=meshfeed.Shuffle(seed=3, window=40)) as ld:
        cfg = ld.config
        assert isinstance(cfg, meshfeed.LoaderConfig) and cfg.last_batch == "pad" and cfg.global_batch_size == 64
        first = [np.asarray(b["id"]) for b in ld]
    with meshfeed.Loader.from_config(cfg) as again:
        assert again.config is cfg
        it = iter(again)
        np.testing.assert_array_equal(np.asarray(next(it)["id"]), first[0])
        saved = again.state()
    with meshfeed.Loader.from_config(cfg, state=saved) as resumed:
        rest = [np.asarray(b["id"]) for b in resumed]
    assert len(rest) == len(first) - 1
    for i, (a, b) in enumerate(zip(rest, first[1:])):
        np.testing.assert_array_equal(a, b, err_msg=f"step {i + 1}")
    with pytest.raises(meshfeed.InvalidRequestError, match="want a meshfeed.LoaderConfig"):
        meshfeed.Loader.from_config({"data": glob})


def test_deprecated_server_args_and_binary_still_work(binary, glob):
    """The names of the last release: server_args= and binary= still reach
    the local server, each with a DeprecationWarning naming its new place;
    server_args with a server address is still refused."""
    sh = sharding((8,), ("data",), P("data"))
    with pytest.warns(DeprecationWarning, match=r"server_args=.*server_options=meshfeed\.ServerOptions") as w:
        ld = meshfeed.Loader(glob, global_batch_size=64, sharding=sh, server_args=["--map-cache", str(1 << 30)])
    assert all(r.filename == __file__ for r in w), [r.filename for r in w]  # points at the caller
    with ld:
        assert ld._server.args[-2:] == ["--map-cache", str(1 << 30)]
        assert ld.config.server_options == meshfeed.ServerOptions(extra_args=("--map-cache", str(1 << 30)))
        assert sum(1 for _ in ld) == steps_per_epoch(ROWS, 64, "drop")
    with pytest.warns(DeprecationWarning, match=r"binary=.*server_options=meshfeed\.ServerOptions\(binary="):
        ld = meshfeed.Loader(glob, global_batch_size=64, sharding=sh, binary=binary)
    with ld:
        assert ld._server.args[0] == binary and ld.config.server_options.binary == binary
    with pytest.warns(DeprecationWarning), pytest.raises(meshfeed.InvalidRequestError, match="server_options"):
        meshfeed.Loader(glob, global_batch_size=64, sharding=sh, server="unix:///nonexistent", server_args=["--x"])
    with pytest.warns(DeprecationWarning), pytest.raises(meshfeed.InvalidRequestError, match="both given"):
        meshfeed.Loader(glob, global_batch_size=64, sharding=sh, binary=binary,
                        server_options=meshfeed.ServerOptions(binary=binary))


def test_one_placement_call_per_step_through_the_loader(server, glob, monkeypatch):
    """The hot path places each step with one placement call: no per-device
    jax.device_put loop, whatever the mesh."""
    calls = []
    real = jax.make_array_from_process_local_data
    real_put = jax.device_put
    puts = []
    monkeypatch.setattr(jax, "make_array_from_process_local_data", lambda *a, **kw: calls.append(1) or real(*a, **kw))
    monkeypatch.setattr(jax, "device_put", lambda *a, **kw: puts.append(1) or real_put(*a, **kw))
    for shape, names, spec, D in LAYOUTS:
        calls.clear()
        with meshfeed.Loader(glob, global_batch_size=64, sharding=sharding(shape, names, spec),
                             server=server.address, last_batch="pad") as ld:
            n = 0
            for s, batch in enumerate(ld):
                np.testing.assert_array_equal(np.asarray(batch["id"]), expected_ids(ROWS, 64, D, s)[0])
                n += 1
        assert n == ld.steps_per_epoch and len(calls) == n, (spec, n, len(calls))
    assert not puts, f"{len(puts)} per-array jax.device_put calls on the hot path"


def test_prefetch_queue_calls(server, glob):
    """next() on a step that is ready calls no Python-level threading or
    queue code (queue.Queue's conditions and locks cost the loop 10-20 us a
    step right after its step on a 2-vCPU VM: prefetch.StepQueue), and no
    more than a handful of Python functions in all."""
    import sys

    with meshfeed.Loader(glob, global_batch_size=64, sharding=sharding((8,), ("data",), P("data")),
                         server=server.address, num_epochs=None, prefetch=2) as ld:
        it = iter(ld)
        next(it)
        counted = []
        for _ in range(5):
            deadline = time.monotonic() + 10
            while ld._box[0].queue.qsize() < 1 and time.monotonic() < deadline:
                time.sleep(0.01)
            assert ld._box[0].queue.qsize() >= 1, "no step queued within 10 s"
            calls: list[str] = []

            def prof(frame, event, arg):
                if event == "call" and threading.current_thread() is threading.main_thread():
                    calls.append(f"{frame.f_code.co_filename}:{frame.f_code.co_name}")

            sys.setprofile(prof)
            try:
                next(it)
            finally:
                sys.setprofile(None)
            counted.append(calls)
    for calls in counted:
        slow = [c for c in calls if c.rsplit("/", 1)[-1].split(":")[0] in ("threading.py", "queue.py")]
        assert not slow, f"next() called Python-level threading/queue code: {slow}"
        assert len(calls) <= 6, f"next() made {len(calls)} Python calls: {calls}"


def test_prefetch_thread_calls_and_writes_per_step(glob):
    """The prefetch thread's cost per shared-memory step, counted: its
    Python-level calls (jax's placement wrapper, pxla.batched_device_put,
    and the aval it made per column are no longer on the path: jaxlib's
    batched transfer is called directly, and its batched wait instead of
    jax.block_until_ready's tree flattening; no generator sums the totals or
    checks alignment; a weak reference's callback, not weakref.finalize,
    releases the slot) and its writes to the server's socket (the step's
    ack rides with the releases in one write, not two)."""
    import sys

    from meshfeed._src import shm

    counts: dict[str, int] = {}
    on = [False]

    def prof(frame, event, arg):
        if not on[0] or threading.current_thread().name != "meshfeed-prefetch":
            return
        if event == "call":
            code = frame.f_code
            k = f"{os.path.basename(code.co_filename)}:{code.co_name}"
            counts[k] = counts.get(k, 0) + 1
        elif event == "c_call" and getattr(arg, "__name__", "") == "sendall":
            counts["c:sendall"] = counts.get("c:sendall", 0) + 1

    threading.setprofile(prof)  # threads started from now on: the prefetch thread
    try:
        with meshfeed.Loader(glob, global_batch_size=64, sharding=sharding((8,), ("data",), P("data")),
                             columns=["id", "label", "features", "image"], num_epochs=None, prefetch=2) as ld:
            it = iter(ld)
            for _ in range(5):
                next(it)
            reader = ld._box[0]._reader
            assert isinstance(reader, shm.ShmReader), type(reader)
            r0 = reader.released
            on[0] = True
            for _ in range(40):
                next(it)
                time.sleep(0.002)
            on[0] = False
            released = reader.released - r0
    finally:
        threading.setprofile(None)
        sys.setprofile(None)
    steps = counts.get("shm.py:read_chunk", 0)  # steps the thread read while counted
    assert steps >= 30, counts
    writes = counts.pop("c:sendall", 0)
    per_step = sum(counts.values()) / steps
    jax_wrapper = {k: v for k, v in counts.items() if k.split(":")[0] in ("pxla.py", "core.py", "api.py", "tree_util.py")}
    assert not jax_wrapper, f"jax's Python-level placement wrapper is on the step's path: {jax_wrapper}"
    assert counts.get("prefetch.py:<genexpr>", 0) == 0 and counts.get("layout.py:<genexpr>", 0) == 0, counts
    assert per_step <= 55, \
        f"{per_step:.1f} Python calls a step in the prefetch thread (100 before): {sorted(counts.items())}"
    # One write a step (its ack, with the releases of the steps the loop let
    # go of since); a second only where a release came while the thread read
    # and it then waits for the loop (under load). Two a step before.
    assert released >= 40 - 8, (released, writes)
    assert writes <= 1.5 * steps, f"{writes} writes for {steps} steps ({released} releases)"


@pytest.mark.parametrize("transport", ["shm", "flight"])
def test_steps_come_out_ready(glob, monkeypatch, transport):
    """A step next() returns is on its devices: the prefetch thread waited,
    once per step and for every jax.Array of it, before queueing it (so a
    training step never waits for a transfer, and bench's wait for data is
    all in next())."""
    from meshfeed._src import prefetch

    waited = []
    real = prefetch._wait_arrays  # jaxlib's batched wait (jax.block_until_ready where there is none)

    def block(xs):
        waited.append((threading.current_thread().name, [id(x) for x in xs]))
        return real(xs)

    monkeypatch.setattr(prefetch, "_wait_arrays", block)
    with meshfeed.Loader(glob, global_batch_size=64, sharding=sharding((8,), ("data",), P("data")),
                         columns=["id", "label", "features", "image"], transport=transport) as ld:
        steps = []
        for batch in ld:
            assert all(v.is_ready() for v in batch.values()), "a step came out not ready"
            steps.append(sorted(id(v) for v in batch.values()))
        assert ld.stats()["transport"] == transport
    assert len(waited) == len(steps) == ld.steps_per_epoch
    assert all(name == "meshfeed-prefetch" for name, _ in waited), {name for name, _ in waited}
    assert [sorted(ids) for _, ids in waited] == steps, "the prefetch thread did not wait on each step's arrays"


def test_wait_is_annotated_while_profiling(server, glob, monkeypatch):
    """next() marks its wait as "meshfeed.next" in a profiler trace, and only
    builds the annotation while a trace is on."""
    made = []

    class Annotation:
        on = False

        def __init__(self, name):
            made.append(name)

        @classmethod
        def is_enabled(cls):
            return cls.on

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    monkeypatch.setattr(jax.profiler, "TraceAnnotation", Annotation)
    with meshfeed.Loader(glob, global_batch_size=64, sharding=sharding((8,), ("data",), P("data")),
                         server=server.address, columns=["id"]) as ld:
        it = iter(ld)
        next(it)
        next(it)
        assert made == [], "annotations built with no trace on"
        Annotation.on = True
        next(it)
        assert made == ["meshfeed.next"]


def test_wait_stats_keep_bounded_memory(server, glob, monkeypatch):
    """stats() takes the wait percentiles of the most recent steps only (a
    ring: memory does not grow with the run), and max and mean of all."""
    from meshfeed._src import loader as loader_mod

    monkeypatch.setattr(loader_mod, "WAITS_KEPT", 3)
    with meshfeed.Loader(glob, global_batch_size=200, sharding=sharding((8,), ("data",), P("data")),
                         server=server.address, columns=["id"], prefetch=4) as ld:
        it = iter(ld)
        next(it)  # waits for the stream to open
        # The loader's own measure of that wait (a clock around next() would
        # also count what the thread does besides waiting, which on a loaded
        # machine took seconds once).
        first = ld.stats()["wait_ms"]["max"]
        time.sleep(0.2)  # the next steps are staged by then: their waits are short
        for _ in range(4):
            next(it)
        st = ld.stats()
        assert len(ld._waits) == 3, "the waits kept grew with the steps"
    w = st["wait_ms"]
    assert st["steps"] == 5
    assert w["max"] == first and w["max"] > 5 * w["p99"], w  # the first step's wait, out of the ring
    assert w["p50"] <= w["p90"] <= w["p99"] <= w["max"] and 0 < w["mean"] < w["max"], w


def test_state_from_the_previous_fingerprint_format_resumes(server, glob):
    """Checkpoints written before the fingerprint was derived from the request
    (flat seed, window, mask_key) still resume; a changed value is still refused."""
    sh = sharding((8,), ("data",), P("data"))
    kw = dict(global_batch_size=64, sharding=sh, server=server.address, last_batch="pad", columns=["id"],
              shuffle=meshfeed.Shuffle(seed=3, window=40))
    with meshfeed.Loader(glob, **kw) as ld:
        it = iter(ld)
        next(it), next(it)
        new = ld.state()
        want = np.asarray(next(it)["id"])
    fp = new["fingerprint"]
    old = {"version": 1, "position": new["position"], "fingerprint": {
        "datasets": fp["datasets"], "columns": [{"name": "id"}], "global_batch_size": 64, "num_slices": 8,
        "seed": 3, "window": 40, "last_batch": "pad", "mask_key": "valid",
        "num_rows": fp["num_rows"], "steps_per_epoch": fp["steps_per_epoch"]}}
    with meshfeed.Loader(glob, state=old, **kw) as ld:
        np.testing.assert_array_equal(np.asarray(next(iter(ld))["id"]), want)
    old["fingerprint"]["window"] = 41
    with pytest.raises(meshfeed.StateMismatchError, match="shuffle"):
        meshfeed.Loader(glob, state=old, **kw)
