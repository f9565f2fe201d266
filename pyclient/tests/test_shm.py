"""The same-host shared-memory wire, client side (meshfeed._src.shm): the
steps equal Flight's, buffers alias the region without a copy, a slot is
reused only when every array made from it is gone, and no mapping survives a
killed server or client."""

import gc
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time

import jax
import numpy as np
import pyarrow as pa
import pyarrow.flight as flight
import pyarrow.parquet as pq
import pytest

from meshfeed._src.errors import InvalidRequestError, MeshfeedError, PlanError
from meshfeed._src.server import LocalServer
from meshfeed._src.shm import ShmIneligible, ShmReader

pytestmark = pytest.mark.skipif(not hasattr(os, "memfd_create"), reason="needs Linux memfd")


@pytest.fixture(scope="module")
def shm_server(dataset, binary):
    srv = LocalServer(binary, [str(dataset.parent)], shm=True)
    yield srv
    srv.stop()


def _ticket(glob, **kw):
    req = {"version": 1, "datasets": [glob], "global_batch_size": 40, "num_slices": 4, "slices": [0, 1, 2, 3],
           "last_batch": "pad", "epochs": 1, "columns": [{"name": "id"}, {"name": "features"}, {"name": "image"}]}
    req.update(kw)
    return json.dumps(req).encode()


def _shm_path(srv):
    return srv.shm_address[len("unix://"):]


def _region_maps(pid="self"):
    with open(f"/proc/{pid}/maps") as f:
        return [line for line in f if "meshfeed-shm" in line]


def _region_fds(pid):
    out = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            out += "meshfeed-shm" in os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            pass
    return out


def test_steps_equal_flight(shm_server, glob):
    """Every step, values, schema and metadata, equals the Flight stream's for
    the same ticket; every buffer is 64-byte aligned."""
    tkt = _ticket(glob, shuffle={"enabled": True, "window": 64}, seed=5, epochs=2)
    r = ShmReader(_shm_path(shm_server), tkt, slots=3)
    c = flight.connect(shm_server.address.replace("unix://", "grpc+unix://"))
    fr = c.do_get(flight.Ticket(tkt))
    assert r.schema.equals(fr.schema)
    n = 0
    while True:
        try:
            a = r.read_chunk()
        except StopIteration:
            break
        b = fr.read_chunk()
        assert len(a.data) == 4 and all(r.num_rows == 10 for r in a.data)
        assert pa.Table.from_batches(a.data).combine_chunks().to_batches()[0].equals(b.data), f"step {n}"
        assert json.loads(a.app_metadata.to_pybytes()) == json.loads(b.app_metadata.to_pybytes())
        for col in [c for r in a.data for c in r.columns]:
            arr = col.storage if isinstance(col.type, pa.BaseExtensionType) else col
            while True:
                for buf in arr.buffers():
                    if buf is not None:
                        assert buf.address % 64 == 0, f"step {n}: buffer at {buf.address:#x}"
                if not pa.types.is_fixed_size_list(arr.type):
                    break
                arr = arr.values
        n += 1
    with pytest.raises(StopIteration):
        fr.read_chunk()
    assert n == 2 * 25
    r.close()
    c.close()


def test_held_batch_unchanged(shm_server, glob):
    """A step held as jax.Arrays that alias the region (no copy) keeps its
    slot: 100 later steps stream through the other slots and its values are
    unchanged; once it is dropped, its slot is released."""
    tkt = _ticket(glob, global_batch_size=8, num_slices=1, slices=[0], epochs=2)
    r = ShmReader(_shm_path(shm_server), tkt, slots=2)
    first = r.read_chunk()
    ids_np = first.data[0].column("id").to_numpy()
    assert ids_np.ctypes.data % 64 == 0
    held = jax.device_put(ids_np, jax.devices()[0])
    aliased = held.unsafe_buffer_pointer() == ids_np.ctypes.data
    expect = np.array(ids_np, copy=True)
    del first, ids_np
    gc.collect()
    for _ in range(100):
        chunk = r.read_chunk()
        del chunk
    assert aliased, "XLA copied an aligned view: this test would not guard slot reuse"
    np.testing.assert_array_equal(np.asarray(held), expect)
    released = r.released
    del held
    gc.collect()
    assert r.released == released + 1, "dropping the last jax.Array of a step did not release its slot"
    last = r.read_chunk()  # the server may now use the held slot again
    assert last.data[0].num_rows == 8
    r.close()


def test_bad_request_and_ineligible_column(shm_server, glob, dataset):
    with pytest.raises(InvalidRequestError, match="global_batch_size 0"):
        ShmReader(_shm_path(shm_server), _ticket(glob, global_batch_size=0))
    d = dataset.parent / "strings"
    d.mkdir(exist_ok=True)
    pq.write_table(pa.table({"s": ["a", "b", "c", "d"]}), d / "s.parquet")
    with pytest.raises(ShmIneligible, match="cannot travel through shared memory"):
        ShmReader(_shm_path(shm_server), _ticket(str(d / "*.parquet"), global_batch_size=4, num_slices=1, slices=[0],
                                                 columns=[{"name": "s"}])).read_chunk()


def test_server_killed(dataset, binary, glob):
    """SIGKILL of the server mid-stream: the reader raises an UNAVAILABLE
    error, and once the client drops the steps no mapping is left."""
    srv = LocalServer(binary, [str(dataset.parent)], shm=True)
    try:
        r = ShmReader(_shm_path(srv), _ticket(glob, global_batch_size=8, num_slices=1, slices=[0], epochs=0), slots=4)
        chunks = [r.read_chunk() for _ in range(3)]
        assert _region_maps()
        os.kill(srv.pid, signal.SIGKILL)
        srv.proc.wait(5)
        with pytest.raises(MeshfeedError) as e:
            for _ in range(1000):
                chunks.append(r.read_chunk())
        assert e.value.code == "UNAVAILABLE"
        # The steps received stay readable after the server died.
        assert all(c.data[0].num_rows == 8 for c in chunks)
        r.close()
        del chunks, e
        gc.collect()
        assert not _region_maps(), "a mapping of the region outlived every step made from it"
    finally:
        srv.stop()


def test_client_killed(shm_server, glob, tmp_path):
    """SIGKILL of a client mid-stream, holding 5 steps: the server closes its
    side of the regions and the arena (no descriptor and no mapping left: the
    records it held for the client's steps are released) and keeps serving."""
    pid = shm_server.pid
    base, base_maps = _region_fds(pid), len(_region_maps(pid))
    script = tmp_path / "client.py"
    script.write_text(textwrap.dedent(f"""
        import os, signal, sys
        sys.path.insert(0, {os.path.dirname(os.path.dirname(os.path.dirname(__file__)))!r})
        from meshfeed._src.shm import ShmIneligible, ShmReader
        r = ShmReader({_shm_path(shm_server)!r}, {_ticket(glob, epochs=0)!r}, slots=4)
        for _ in range(5):
            r.read_chunk()
        print("ready", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    """))
    p = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert "ready" in p.stdout, p.stderr
    deadline = time.monotonic() + 10
    while (_region_fds(pid) > base or len(_region_maps(pid)) > base_maps) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _region_fds(pid) == base, "the server kept the killed client's region"
    assert len(_region_maps(pid)) == base_maps, "the server kept a mapping of the killed client's region or arena"
    r = ShmReader(_shm_path(shm_server), _ticket(glob))
    assert sum(x.num_rows for x in r.read_chunk().data) == 40
    r.close()


# --- the Loader over shared memory -------------------------------------------

def _mesh_sharding():
    from jax.sharding import NamedSharding, PartitionSpec as P
    mesh = jax.make_mesh((8,), ("data",))
    return NamedSharding(mesh, P("data"))


def test_loader_uses_shm_without_copies(glob):
    """A Loader with its own server reads over shared memory by default, with
    no host copy and no unaligned transfer (b = 15 rows per device: a
    contiguous layout would leave 7 of 8 devices' int64 and int32 rows
    unaligned), and delivers exactly the batches the Flight path delivers."""
    import meshfeed
    kw = dict(global_batch_size=120, sharding=_mesh_sharding(), columns=["id", "label", "features"],
              last_batch="drop", shuffle=meshfeed.Shuffle(seed=3, window=100))
    with meshfeed.Loader(glob, **kw) as shm_loader, meshfeed.Loader(glob, transport="flight", **kw) as fl:
        n = 0
        for a, b in zip(shm_loader, fl):
            assert a.keys() == b.keys()
            for k in a:
                np.testing.assert_array_equal(np.asarray(a[k]), np.asarray(b[k]), err_msg=f"step {n} column {k}")
                assert a[k].sharding == b[k].sharding
            n += 1
        st = shm_loader.stats()
        assert n == shm_loader.steps_per_epoch == 1000 // 120
        assert st["transport"] == "shm" and fl.stats()["transport"] == "flight"
        assert st["host_copies"] == 0 and st["unaligned_transfers"] == 0, st


def test_loader_falls_back_to_flight(dataset):
    """Columns shared memory cannot carry (strings): "auto" reads over Flight
    with a warning; "shm" refuses."""
    import meshfeed
    d = dataset.parent / "strings2"
    d.mkdir(exist_ok=True)
    pq.write_table(pa.table({"id": np.arange(64, dtype=np.int64), "s": [str(i) for i in range(64)]}), d / "s.parquet")
    kw = dict(global_batch_size=16, sharding=_mesh_sharding(), columns=["id", "s"])
    with pytest.warns(RuntimeWarning, match="instead of shared memory"):
        with meshfeed.Loader(str(d / "*.parquet"), **kw) as ld:
            got = [np.asarray(b["id"]) for b in ld]
            assert ld.stats()["transport"] == "flight"
    np.testing.assert_array_equal(np.sort(np.concatenate(got)), np.arange(64))  # every row once
    with meshfeed.Loader(str(d / "*.parquet"), transport="shm", **kw) as ld:
        with pytest.raises(MeshfeedError, match="cannot travel through shared memory"):
            next(iter(ld))


def test_loader_keeps_every_batch(glob):
    """A loop that keeps every batch (list(loader): far more steps than the
    shared-memory slots) is not stalled, and no kept batch is overwritten."""
    import meshfeed
    kw = dict(global_batch_size=16, sharding=_mesh_sharding(), columns=["id"], prefetch=1)
    with meshfeed.Loader(glob, **kw) as ld:
        kept = list(ld)
        assert ld.stats()["transport"] == "shm"
    with meshfeed.Loader(glob, transport="flight", **kw) as ld:
        want = [np.asarray(b["id"]) for b in ld]
    assert len(kept) == len(want) == 1000 // 16 > 2 * (1 + 3)
    for s, (b, w) in enumerate(zip(kept, want)):
        np.testing.assert_array_equal(np.asarray(b["id"]), w, err_msg=f"kept step {s}")


def test_loader_deletes_dropped_steps_off_the_training_thread(glob):
    """A step the loop has let go of is deleted (its ``jax.Array``s and their
    device buffers freed) on the loader's prefetch thread, not on the thread
    that calls next(). A batch the loop keeps is not deleted early: its
    values stay, and it is freed where the loop drops it. Every step but the
    kept one and the last is freed by the end of the epoch."""
    import threading
    import weakref

    import meshfeed

    freed: list[tuple[int, str]] = []  # (step, thread that freed its array)

    def on_free(step: int) -> None:
        freed.append((step, threading.current_thread().name))

    kw = dict(global_batch_size=16, sharding=_mesh_sharding(), columns=["id"], last_batch="drop")
    with meshfeed.Loader(glob, transport="flight", **kw) as fl:
        want = [np.asarray(b["id"]).copy() for b in fl]
    with meshfeed.Loader(glob, **kw) as ld:
        n, kept = 0, None
        for batch in ld:
            weakref.finalize(batch["id"], on_free, n)
            if n == 3:
                kept = batch
            n += 1
            time.sleep(0.002)  # the step: the loop lets go of the GIL
        assert ld.stats()["transport"] == "shm"
        steps = ld.steps_per_epoch
        time.sleep(0.05)
        before = sorted(s for s, _ in freed)
        np.testing.assert_array_equal(np.asarray(kept["id"]), want[3])  # 60 later steps did not touch it
        del kept
        assert freed[-1] == (3, "MainThread"), "the kept step was not freed by its drop"
    assert n == steps == 1000 // 16
    # Every step but the kept one and the last (still bound to `batch`) was
    # freed by then; allow a few that the loop dropped after the prefetch
    # thread let go of them.
    assert before == [s for s in range(steps - 1) if s != 3], before
    off = sum(t == "meshfeed-prefetch" for _, t in freed)
    assert off >= 0.9 * (steps - 2), f"{off} of {steps - 2} steps freed on the prefetch thread: {freed}"


def test_many_regions_in_one_read(shm_server, glob):
    """Steps kept without release make the server add a region per 2 steps;
    the reader, reading only after many have arrived, still maps each
    region from its own descriptor (several can come in one read)."""
    r = ShmReader(_shm_path(shm_server), _ticket(glob, global_batch_size=8, num_slices=1, slices=[0], epochs=1), slots=2)
    kept = []
    for _ in range(30):
        kept.append(r.read_chunk())
        time.sleep(0.01)  # let the server run ahead by its window
    assert len(r._regions) >= 10, len(r._regions)
    ids = np.concatenate([c.data[0].column("id").to_numpy() for c in kept])
    assert len(set(ids.tolist())) == len(ids) == 30 * 8, "a kept step was overwritten or repeated"
    r.close()


def test_direct_views_equal_records_and_hold_their_slot(shm_server, glob):
    """The Materializer views a step's numeric columns straight in the slot
    (no record batches built): the same arrays as through the records, each
    device aliasing its slice, the slot kept while they live (100 later
    steps leave them unchanged) and released once they are gone."""
    from jax.sharding import NamedSharding, PartitionSpec as P
    from meshfeed._src.layout import Materializer, layout_of
    sh = NamedSharding(jax.make_mesh((4,), ("data",), devices=jax.devices()[:4]), P("data"))
    L = layout_of(sh, 40)
    tkt = _ticket(glob, epochs=5, columns=[{"name": "id"}, {"name": "features"}])
    r = ShmReader(_shm_path(shm_server), tkt, slots=2)
    first = r.read_chunk()
    # The addresses the reader gives from its mappings' are the arrays' own.
    assert first._addr == first._hold.ctypes.data
    assert first._ahold is None or first._aaddr == first._ahold.ctypes.data
    mat = Materializer(r.schema, sh, L, "valid")
    held = mat(first)
    assert first._data is None, "the direct path built record batches"
    assert mat.counts == {"host_copies": 0, "mask_unpacks": 1, "unaligned_transfers": 0}
    via_records = Materializer(r.schema, sh, L, "valid")(first.data)
    for name in ("id", "features", "valid"):
        np.testing.assert_array_equal(np.asarray(held[name]), np.asarray(via_records[name]), err_msg=name)
    for shard in held["id"].addressable_shards:
        k = shard.index[0].start // L.b
        assert shard.data.unsafe_buffer_pointer() == first.data[k].column("id").buffers()[1].address
    expect = {k: np.array(v, copy=True) for k, v in held.items()}
    del first, via_records, shard
    gc.collect()
    for _ in range(100):
        mat(r.read_chunk())
    for k, v in expect.items():
        np.testing.assert_array_equal(np.asarray(held[k]), v, err_msg=k)
    released = r.released
    del held
    gc.collect()
    assert r.released == released + 1, "dropping a step's arrays did not release its slot"
    r.close()


def test_descriptor_outside_its_slot_is_refused():
    """A step descriptor whose buffer lies outside its slot (or whose slice
    lists too few buffers) is an error naming it, never a view of other
    memory."""
    import threading

    from meshfeed._src import shm as shm_mod

    class Region:
        slot_bytes = 1024
        addr = 0  # unknown: the chunk asks its arrays

        def slot(self, k):
            return np.zeros(self.slot_bytes, np.uint8)

    r = object.__new__(ShmReader)
    r._regions, r._closed, r._send_lock, r.released = {0: Region()}, True, threading.RLock(), 0
    r._arena, r.in_place_bytes = None, 0
    r._reader_ident, r._pending, r._owe_ack, r.writes, r._live = None, [], False, 0, {}
    r.schema = pa.schema([pa.field("id", pa.int64())])
    r._starts = [0, shm_mod._nbuffers(pa.int64())]
    step = {"region": 0, "slot": 1, "rows": 8, "epoch": 0, "step": 3, "slices": [0], "real_rows": [8]}
    ok = r._step(dict(step, buffers=[[[0, 0], [1024, 64]]]))
    assert ok.dense(0, np.dtype(np.int64), (8,)) is not None
    with pytest.raises(MeshfeedError, match=r"step 3: buffer \[960, 1024\) outside its slot \[1024, 2048\)"):
        r._step(dict(step, buffers=[[[0, 0], [960, 64]]]))
    with pytest.raises(MeshfeedError, match=r"buffer \[2000, 2064\) outside"):
        r._step(dict(step, buffers=[[[0, 0], [2000, 64]]]))
    with pytest.raises(MeshfeedError, match="1 buffers in a slice, want 2"):
        r._step(dict(step, buffers=[[[1024, 64]]]))
    # A values buffer of another length than its rows need: refused by name
    # when it is viewed, not viewed short or long.
    for n in (56, 72):
        with pytest.raises(MeshfeedError, match=f"column 'id' holds {n} bytes in a slice, want 64 for \\(8,\\) of int64"):
            r._step(dict(step, buffers=[[[0, 0], [1024, n]]])).dense(0, np.dtype(np.int64), (8,))
    assert ok.meta == {"epoch": 0, "step": 3, "slices": [0], "real_rows": [8]}
    assert json.loads(ok.app_metadata.to_pybytes()) == ok.meta  # what Flight's app_metadata carries
    # Arena entries ([offset, length, region]): only in the arena, and only
    # when the server sent one.
    with pytest.raises(MeshfeedError, match=r"buffer \[0, 64, 0\] outside the arena"):
        r._step(dict(step, buffers=[[[0, 0], [0, 64, 0]]]))

    class Arena:
        mm = bytearray(4096)
        addr = 0  # unknown: the chunk asks its arrays

        def span(self, lo, hi):
            return np.frombuffer(memoryview(self.mm)[lo:hi], np.uint8)

    r._arena = r._regions[5] = Arena()
    Arena.mm[72:80] = np.int64(7).tobytes()
    got = r._step(dict(step, buffers=[[[0, 0], [64, 64, 5]]]))
    assert got.in_place == 64 and r.in_place_bytes == 64
    assert got.dense(0, np.dtype(np.int64), (8,))[0][0][1] == 7  # row 1 at arena byte 72
    with pytest.raises(MeshfeedError, match=r"buffer \[4064, 64, 5\] outside the arena"):
        r._step(dict(step, buffers=[[[0, 0], [4064, 64, 5]]]))
    with pytest.raises(MeshfeedError, match=r"outside the arena"):
        r._step(dict(step, buffers=[[[0, 0], [64, 64, 0]]]))  # region 0 is a slot region, not the arena
    # The arena's entries are checked together: one bad entry among good
    # ones (several slices) is named all the same.
    two = dict(step, slices=[0, 1], real_rows=[8, 8])
    assert r._step(dict(two, buffers=[[[0, 0], [64, 64, 5]], [[0, 0], [128, 64, 5]]])).in_place == 128
    for bad in ([-64, 64, 5], [128, -8, 5], [4032, 128, 5], [128, 64, 1], [128, 64, 5, 1]):
        with pytest.raises(MeshfeedError, match=re.escape(f"buffer {bad} outside")):
            r._step(dict(two, buffers=[[[0, 0], [64, 64, 5]], [[0, 0], bad]]))


@pytest.fixture(scope="module")
def wide_glob(tmp_path_factory, binary):
    """8,192 rows of id and features float32[1024] in row groups of 1,024:
    decoded pieces large enough for the server's arena."""
    import subprocess
    out = tmp_path_factory.mktemp("wide")
    subprocess.run([binary, "gen", "--out", str(out), "--rows", "8192", "--files", "2", "--row-group-rows", "1024",
                    "--features", "1024", "--compression", "none"], check=True, capture_output=True)
    return str(out / "*.parquet")


def _arena_ranges():
    """This process's mappings of a meshfeed memfd, as (start, end)."""
    out = []
    for line in _region_maps():
        lo, hi = line.split()[0].split("-")
        out.append((int(lo, 16), int(hi, 16)))
    return out


def test_loader_decodes_into_the_arena(wide_glob):
    """The Loader's server decodes features straight into the stream's arena
    and sends them by reference (stats()["in_place_bytes"] counts every
    features byte, no host copy, no unaligned transfer); each device's
    jax.Array aliases the arena; a step held while 100 later steps stream
    keeps its values (the server reuses arena bytes only after the release);
    every step equals Flight's; and once the loader and its arrays are gone,
    no mapping of a region or the arena is left."""
    import meshfeed
    kw = dict(global_batch_size=64, sharding=_mesh_sharding(), columns=["id", "features"], last_batch="drop")
    # A read-ahead of 2 MiB: row groups are read in pieces, each freed (and
    # its arena bytes reused) as soon as its last step is released.
    with meshfeed.Loader(wide_glob, server_options=meshfeed.ServerOptions(read_ahead=2 << 20), **kw) as ld, \
            meshfeed.Loader(wide_glob, transport="flight", **kw) as fl:
        it, fit = iter(ld), iter(fl)
        first, ffirst = next(it), next(fit)
        held = first["features"]
        expect = np.asarray(ffirst["features"])
        np.testing.assert_array_equal(np.asarray(held), expect)
        ptr = held.addressable_shards[3].data.unsafe_buffer_pointer()
        assert any(lo <= ptr < hi for lo, hi in _arena_ranges()), "device 3's features are not a view of shared memory"
        del first, ffirst
        n = 1
        for a, b in zip(it, fit):
            for k in a:
                np.testing.assert_array_equal(np.asarray(a[k]), np.asarray(b[k]), err_msg=f"step {n} column {k}")
            n += 1
            if n == 101:
                np.testing.assert_array_equal(np.asarray(held), expect, err_msg="a held step changed")
        assert n == 8192 // 64 > 101
        st = ld.stats()
        features = n * 64 * 1024 * 4
        assert st["transport"] == "shm" and st["host_copies"] == 0 and st["unaligned_transfers"] == 0, st
        assert features <= st["in_place_bytes"] <= st["bytes"], st
        np.testing.assert_array_equal(np.asarray(held), expect)
    del held, a, b, it, fit, ld, fl
    gc.collect()
    assert not _region_maps(), "a mapping of a region or the arena outlived the loader and its arrays"


def test_server_without_arena_copies(wide_glob):
    """--shm-arena 0: the same steps, every byte copied into slots."""
    import meshfeed
    kw = dict(global_batch_size=64, sharding=_mesh_sharding(), columns=["id", "features"], last_batch="drop")
    with meshfeed.Loader(wide_glob, server_options=meshfeed.ServerOptions(extra_args=["--shm-arena", "0"]), **kw) as ld, \
            meshfeed.Loader(wide_glob, **kw) as arena:
        for n, (a, b) in enumerate(zip(ld, arena)):
            for k in a:
                np.testing.assert_array_equal(np.asarray(a[k]), np.asarray(b[k]), err_msg=f"step {n} column {k}")
        st = ld.stats()
        assert st["transport"] == "shm" and st["in_place_bytes"] == 0 < st["bytes"], st
        assert arena.stats()["in_place_bytes"] > 0


@pytest.fixture(scope="module")
def mix_globs(tmp_path_factory, binary):
    """Three sources of different sizes and row groups."""
    root = tmp_path_factory.mktemp("shm-mix")
    out = []
    for i, rows in enumerate((300, 500, 170)):
        d = root / f"s{i}"
        subprocess.run([binary, "gen", "--out", str(d), "--rows", str(rows), "--files", str(i + 1),
                        "--row-group-rows", str(20 + 15 * i), "--features", "4", "--seed", str(i + 1)],
                       check=True, capture_output=True)
        out.append(str(d / "*.parquet"))
    return out


def test_mixture_over_shm(mix_globs):
    """A mixture's slices reach the server's transport as their sources'
    parts (several records per slice, not joined); the shared-memory wire
    joins them in the slot, with the arena and without it (--shm-arena 0):
    every batch equals the Flight path's (source column and mask included,
    b = 8 rows per device, so parts and mask bits end mid-byte), with no host
    copy on the client."""
    import meshfeed
    mix = meshfeed.Mixture([meshfeed.Source(g, weight=w, columns=["id", "label", "features"],
                                            shuffle=meshfeed.Shuffle(seed=i, window=16))
                            for i, (g, w) in enumerate(zip(mix_globs, (0.5, 0.3, 0.2)))],
                           stop="first_exhausted", source_column="source", seed=3)
    kw = dict(global_batch_size=64, sharding=_mesh_sharding(), last_batch="pad")
    no_arena = meshfeed.ServerOptions(extra_args=["--shm-arena", "0"])
    with meshfeed.Loader(mix, **kw) as arena, meshfeed.Loader(mix, server_options=no_arena, **kw) as copied, \
            meshfeed.Loader(mix, transport="flight", **kw) as fl:
        n = 0
        for a, c, f in zip(arena, copied, fl):
            assert a.keys() == f.keys() == c.keys() >= {"id", "label", "features", "source", "valid"}
            for k in f:
                np.testing.assert_array_equal(np.asarray(a[k]), np.asarray(f[k]), err_msg=f"arena: step {n} column {k}")
                np.testing.assert_array_equal(np.asarray(c[k]), np.asarray(f[k]), err_msg=f"no arena: step {n} column {k}")
            n += 1
        assert n == fl.steps_per_epoch > 0
        for ld in (arena, copied):
            st = ld.stats()
            assert st["transport"] == "shm" and st["host_copies"] == 0, st
        assert copied.stats()["in_place_bytes"] == 0


def test_placed_mixture_sends_every_column_in_place(tmp_path_factory, binary):
    """A mixture whose slices the server places (fixed-width columns, no
    shuffle window, no padding) allocates each step's slices once in the
    stream's arena, every column in it: the shared-memory wire sends every
    byte by reference (in_place_bytes == bytes), the small columns (id,
    label, the source column: a few hundred bytes a device) included, where
    each had been an allocation of its own under the arena's minimum, copied
    into the slot. Every batch equals the Flight path's."""
    import meshfeed
    root = tmp_path_factory.mktemp("shm-placed")
    globs = []
    for i in range(3):
        subprocess.run([binary, "gen", "--out", str(root / f"s{i}"), "--rows", "3000", "--files", "1",
                        "--row-group-rows", "1000", "--features", "64", "--seed", str(i + 1)],
                       check=True, capture_output=True)
        globs.append(str(root / f"s{i}" / "*.parquet"))
    mix = meshfeed.Mixture([meshfeed.Source(g, weight=w, columns=["id", "label", "features"])
                            for g, w in zip(globs, (0.5, 0.3, 0.2))],
                           stop="first_exhausted", source_column="source", seed=5)
    # b = 64 rows a device: 17,408 bytes a slice, 139,264 a step.
    kw = dict(global_batch_size=512, sharding=_mesh_sharding(), last_batch="drop")
    with meshfeed.Loader(mix, **kw) as ld, meshfeed.Loader(mix, transport="flight", **kw) as fl:
        n = 0
        for a, f in zip(ld, fl):
            assert a.keys() == f.keys() == {"id", "label", "features", "source"}
            for k in f:
                np.testing.assert_array_equal(np.asarray(a[k]), np.asarray(f[k]), err_msg=f"step {n} column {k}")
            n += 1
        assert n == fl.steps_per_epoch > 0
        st = ld.stats()
        assert st["transport"] == "shm" and st["host_copies"] == 0, st
        assert st["in_place_bytes"] == st["bytes"] > 0, st
