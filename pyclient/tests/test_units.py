"""Unit tests of the client's parts that need no server."""


import dataclasses
import os

import jax
import ml_dtypes
import numpy as np
import pyarrow as pa
import pyarrow.flight as flight
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import meshfeed
from meshfeed._src import server as server_mod
from meshfeed._src.errors import from_flight
from meshfeed._src.layout import Materializer, layout_of

from conftest import ROOT


def named(shape, names, spec):
    return NamedSharding(jax.make_mesh(shape, names), spec)


@pytest.mark.parametrize("shape,names,spec,B,b,D", [
    ((4, 2), ("data", "model"), P("data"), 64, 16, 4),
    ((8,), ("data",), P("data"), 64, 8, 8),
    ((4, 2), ("data", "model"), P(("data", "model")), 64, 8, 8),
    ((4, 2), ("data", "model"), P("model"), 64, 32, 2),
    ((4, 2), ("data", "model"), P(), 64, 64, 1),
])
def test_layout_of(shape, names, spec, B, b, D):
    sh = named(shape, names, spec)
    L = layout_of(sh, B)
    assert (L.B, L.b, L.D) == (B, b, D), f"layout_of({spec}) = {(L.B, L.b, L.D)}, want {(B, b, D)}"
    assert L.slices == tuple(range(D))  # one process holds every device
    assert len(L.devices) == 8
    # independent check: the device's rows per jax equal slice k of the layout
    for dev, k in L.devices:
        start = sh.devices_indices_map((B,))[dev][0].start or 0
        assert L.slices[k] * b == start


@pytest.mark.parametrize("N,B,policy,want", [
    (1000, 64, "drop", 15), (1000, 64, "pad", 16), (1000, 64, "raise", 15),
    (1024, 64, "drop", 16), (1024, 64, "pad", 16), (1024, 64, "raise", 16),
    (10, 64, "drop", 0), (10, 64, "pad", 1), (0, 8, "pad", 0),
])
def test_steps_per_epoch(N, B, policy, want):
    from meshfeed._src.plan import steps_per_epoch
    got = steps_per_epoch(N, B, policy)
    assert got == want, f"steps_per_epoch({N}, {B}, {policy!r}) = {got}, want {want}"


def test_rows_per_slice():
    from meshfeed._src.plan import rows_per_slice, steps_per_epoch
    assert [rows_per_slice(64, D) for D in (1, 2, 8, 64)] == [64, 32, 8, 1]
    for B, D in ((64, 3), (8, 0), (0, 1)):
        with pytest.raises(ValueError, match="do not divide"):
            rows_per_slice(B, D)
    with pytest.raises(ValueError, match="last_batch='keep'"):
        steps_per_epoch(10, 2, "keep")


def test_server_memory_defaults_are_named_once():
    """The local and the Ray servers' read-ahead and budget come from the
    constants named side by side in server.py (no literal elsewhere)."""
    from meshfeed._src import rayservers
    a = list(rayservers.DEFAULT_SERVER_ARGS)
    assert a[a.index("--read-ahead") + 1] == str(server_mod.RAY_READ_AHEAD)
    assert a[a.index("--memory-budget") + 1] == str(server_mod.RAY_MEMORY_BUDGET)
    assert a[a.index("--max-streams") + 1] == str(server_mod.RAY_MAX_STREAMS)
    assert meshfeed.LOCAL_READ_AHEAD is server_mod.LOCAL_READ_AHEAD == 128 << 20
    assert meshfeed.LOCAL_MEMORY_BUDGET is server_mod.LOCAL_MEMORY_BUDGET == 2 << 30


def test_layout_of_other_sharding_kinds():
    devs = jax.devices()
    sd = jax.sharding.SingleDeviceSharding(devs[3])
    L = layout_of(sd, 16)
    assert (L.b, L.D, L.slices) == (16, 1, (0,)) and L.devices[0][0] == devs[3]


def _abuf(values):
    """A primitive Arrow array whose values live in a 64-byte aligned Arrow buffer."""
    buf = pa.allocate_buffer(values.nbytes)
    np.frombuffer(buf, dtype=values.dtype)[:] = values
    return pa.Array.from_buffers(pa.from_numpy_dtype(values.dtype), len(values), [None, buf])


def _aligned_batch(n_rows):
    """A record built in this process, every values buffer 64-byte aligned."""
    ids = _abuf(np.arange(n_rows, dtype=np.int64))
    feats = pa.FixedSizeListArray.from_arrays(_abuf(np.arange(n_rows * 4, dtype=np.float32)), 4)
    bf = np.arange(n_rows * 2, dtype=np.float32).astype(ml_dtypes.bfloat16)
    bf_col = pa.FixedSizeListArray.from_arrays(_abuf(bf.view(np.uint16)), 2)
    img = pa.FixedSizeListArray.from_arrays(_abuf((np.arange(n_rows * 8) % 251).astype(np.uint8)), 8)
    mask = pa.array(np.arange(n_rows) % 3 != 0)
    names = pa.array([f"r{i}" for i in range(n_rows)])
    schema = pa.schema([
        pa.field("id", pa.int64()),
        pa.field("x", feats.type),
        pa.field("bf", bf_col.type, metadata={"meshfeed.dtype": "bfloat16"}),
        pa.field("img", img.type, metadata={"ARROW:extension:name": "arrow.fixed_shape_tensor",
                                            "ARROW:extension:metadata": '{"shape": [2, 4]}'}),
        pa.field("name", pa.string()),
        pa.field("valid", pa.bool_()),
    ])
    return pa.record_batch([ids, feats, bf_col, img, names, mask], schema=schema)


def test_materialize_aliases_arrow_memory():
    """device_put on the CPU backend aliases 64-byte aligned host memory; the
    materializer must hand it views of the Arrow buffers, never copies. A copy
    anywhere (numpy or jax) puts the jax buffer outside the Arrow buffer."""
    B = 64
    sh = named((4, 2), ("data", "model"), P("data"))
    L = layout_of(sh, B)
    rb = _aligned_batch(B)
    mat = Materializer(rb.schema, sh, L, "valid")
    out = mat(rb)
    assert out["x"].shape == (B, 4) and out["bf"].dtype == jax.numpy.bfloat16 and out["bf"].shape == (B, 2)
    assert out["img"].shape == (B, 2, 4) and out["img"].dtype == np.uint8
    assert isinstance(out["name"], pa.Array) and out["name"].to_pylist()[:2] == ["r0", "r1"]
    np.testing.assert_array_equal(np.asarray(out["id"]), np.arange(B))
    np.testing.assert_array_equal(np.asarray(out["x"]).reshape(-1), np.arange(B * 4, dtype=np.float32))
    np.testing.assert_array_equal(np.asarray(out["bf"]).astype(np.float32).reshape(-1), np.arange(B * 2))
    np.testing.assert_array_equal(np.asarray(out["img"]).reshape(-1), np.arange(B * 8) % 251)
    np.testing.assert_array_equal(np.asarray(out["valid"]), np.arange(B) % 3 != 0)
    bufs = {"id": rb.column(0).buffers()[1], "x": rb.column(1).values.buffers()[1],
            "bf": rb.column(2).values.buffers()[1], "img": rb.column(3).values.buffers()[1]}
    for name, buf in bufs.items():
        assert buf.address % 64 == 0
        for shard in out[name].addressable_shards:
            p = shard.data.unsafe_buffer_pointer()
            assert buf.address <= p < buf.address + buf.size, f"{name} on {shard.device}: copied"
            assert p == buf.address + shard.index[0].start * out[name].dtype.itemsize * int(np.prod(out[name].shape[1:]))
    assert mat.counts == {"host_copies": 0, "mask_unpacks": 1, "unaligned_transfers": 0}


def test_materialize_sliced_record_offsets():
    """A record that is a slice of a larger one (non-zero Arrow offsets)."""
    sh = named((8,), ("data",), P("data"))
    L = layout_of(sh, 16)
    rb = _aligned_batch(40).slice(8, 16)
    out = Materializer(rb.schema, sh, L, "valid")(rb)
    np.testing.assert_array_equal(np.asarray(out["id"]), np.arange(8, 24))
    np.testing.assert_array_equal(np.asarray(out["x"])[0], [32, 33, 34, 35])
    np.testing.assert_array_equal(np.asarray(out["valid"]), np.arange(8, 24) % 3 != 0)


def test_trailing_dims_cannot_be_sharded():
    sh = named((4, 2), ("data", "model"), P("data", "model"))
    with pytest.raises(meshfeed.InvalidRequestError, match="dimension 0 only"):
        layout_of(sh, 64)
    # a sharding valid for (B,) whose trailing dims would be split: refused per column
    sh = named((4, 2), ("data", "model"), P("data"))
    L = layout_of(sh, 64)
    rb = _aligned_batch(64)

    two_d = NamedSharding(sh.mesh, P("data", "model"))
    with pytest.raises(meshfeed.InvalidRequestError, match="column 'x'"):
        Materializer(rb.schema.remove(0), two_d, L, "valid")


@pytest.mark.parametrize("exc,cls,code", [
    (pa.ArrowInvalid("gRPC returned precondition failed error, with message: plan: N=10. Detail: x"),
     meshfeed.PlanError, "FAILED_PRECONDITION"),
    (pa.ArrowInvalid("Flight returned invalid argument error, with message: bad B"),
     meshfeed.InvalidRequestError, "INVALID_ARGUMENT"),
    (pa.ArrowInvalid("gRPC returned resource exhausted error, with message: too many streams"),
     meshfeed.ResourceExhaustedError, "RESOURCE_EXHAUSTED"),
    (pa.ArrowKeyError("gRPC returned not found error, with message: no file"), meshfeed.NotFoundError, "NOT_FOUND"),
    (flight.FlightUnavailableError("Flight returned unavailable error, with message: down"),
     meshfeed.UnavailableError, "UNAVAILABLE"),
    (flight.FlightUnauthorizedError("Flight returned unauthorized error, with message: /etc"),
     meshfeed.PermissionDeniedError, "PERMISSION_DENIED"),
    (flight.FlightUnauthenticatedError("Flight returned unauthenticated error, with message: token"),
     meshfeed.PermissionDeniedError, "UNAUTHENTICATED"),
    (flight.FlightInternalError("Flight returned internal error, with message: bug"), meshfeed.MeshfeedError, "INTERNAL"),
])
def test_from_flight(exc, cls, code):
    got = from_flight(exc)
    assert type(got) is cls, f"from_flight({exc!r}) = {type(got).__name__}, want {cls.__name__}"
    assert got.code == code and got.__cause__ is exc
    server_msg = str(exc).split("with message: ")[1].split(". Detail")[0]
    assert got.server_message == server_msg and server_msg in str(got)


def test_from_flight_passes_other_errors():
    e = KeyboardInterrupt()
    assert from_flight(e) is e


@pytest.mark.parametrize("uri,root", [
    ("/data/train/*.parquet", "/data/train"),
    ("/data/**/x*.parquet", "/data"),
    ("file:///data/a/b?.parquet", "/data/a"),
    ("gs://bucket/train/*.parquet", "gs://bucket"),
    ("s3://bucket/train/*.parquet", "s3://bucket"),
    ("https://huggingface.co/datasets/o/d/resolve/main/data/train-0.parquet?download=true",
     "https://huggingface.co/datasets/o/d/resolve/main/data"),
    ("http://127.0.0.1:8080/a.parquet", "http://127.0.0.1:8080"),
    ("/*.parquet", "/"),
])
def test_allowed_root(uri, root):
    assert server_mod.allowed_root(uri) == root, f"allowed_root({uri!r}) = {server_mod.allowed_root(uri)!r}, want {root!r}"


@pytest.mark.parametrize("uri,ok", [
    ("gs://b/x.parquet", True),
    ("s3://b/train/*.parquet", True),
    ("https://huggingface.co/datasets/o/d/resolve/main/x.parquet", True),
    ("http://127.0.0.1:8080/x.parquet", True),
    ("ftp://host/x.parquet", False),
])
def test_normalize_remote_uri(uri, ok):
    from meshfeed._src.config import _normalize_uri
    norm, problem = _normalize_uri(uri)
    if ok:
        assert (norm, problem) == (uri, None), f"_normalize_uri({uri!r}) = {(norm, problem)!r}"
    else:
        assert norm is None and uri in problem and "s3://" in problem, f"_normalize_uri({uri!r}) = {problem!r}"


def test_allowed_root_of_file_and_dir(tmp_path):
    f = tmp_path / "a.parquet"
    f.write_bytes(b"")
    assert server_mod.allowed_root(str(f)) == str(tmp_path)
    assert server_mod.allowed_root(str(tmp_path)) == str(tmp_path)


def test_binary_not_found_lists_every_place(tmp_path, monkeypatch):
    monkeypatch.setenv("MESHFEED_BIN", str(tmp_path / "env-bin"))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setattr(server_mod, "_PKG_DIR", tmp_path / "pkg" / "meshfeed")
    with pytest.raises(meshfeed.BinaryNotFoundError) as e:
        server_mod.find_binary(tmp_path / "explicit")
    msg = str(e.value)
    for want in ["binary= argument: " + str(tmp_path / "explicit"), "$MESHFEED_BIN: " + str(tmp_path / "env-bin"),
                 "bundled in the package: " + str(tmp_path / "pkg" / "meshfeed" / "_bin" / "meshfeed"),
                 "PATH: no meshfeed binary on PATH"]:
        assert want in msg, f"{want!r} not in {msg!r}"
    # the installed package never looks outside itself (no repository bin/)
    assert str(tmp_path / "bin") not in msg and "repository bin/" not in msg, msg
    # and through the public API: server=None needs the binary
    with pytest.raises(meshfeed.BinaryNotFoundError):
        meshfeed.Loader(str(tmp_path / "*.parquet"), global_batch_size=8,
                        server_options=meshfeed.ServerOptions(binary=tmp_path / "explicit"),
                        sharding=jax.sharding.SingleDeviceSharding(jax.devices()[0]))


def test_binary_search_order(tmp_path, monkeypatch):
    exe = []
    for name in ("explicit", "env"):
        p = tmp_path / name
        p.write_text("#!/bin/sh\n")
        p.chmod(0o755)
        exe.append(str(p))
    monkeypatch.setenv("MESHFEED_BIN", exe[1])
    assert server_mod.find_binary(exe[0]) == exe[0]
    assert server_mod.find_binary(None) == exe[1]
    assert server_mod.find_binary(tmp_path / "missing") == exe[1]


def _exe(path, text="#!/bin/sh\n"):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)
    return str(path)


def test_bundled_binary_comes_before_path(tmp_path, monkeypatch):
    monkeypatch.delenv("MESHFEED_BIN", raising=False)
    monkeypatch.setattr(server_mod, "_PKG_DIR", tmp_path / "pkg" / "meshfeed")
    on_path = _exe(tmp_path / "path" / "meshfeed")
    monkeypatch.setenv("PATH", str(tmp_path / "path"))
    assert server_mod.find_binary() == on_path  # nothing bundled: PATH
    bundled = _exe(tmp_path / "pkg" / "meshfeed" / "_bin" / "meshfeed")
    assert server_mod.bundled_binary() == tmp_path / "pkg" / "meshfeed" / "_bin" / "meshfeed"
    assert server_mod.find_binary() == bundled
    env = _exe(tmp_path / "env-bin")
    monkeypatch.setenv("MESHFEED_BIN", env)
    assert server_mod.find_binary() == env  # $MESHFEED_BIN still wins


def _fake_checkout(root, module="github.com/meshfeed/meshfeed"):
    """A source checkout's shape: <root>/go.mod, <root>/pyclient/pyproject.toml
    and the package in <root>/pyclient/meshfeed."""
    (root / "pyclient" / "meshfeed").mkdir(parents=True)
    (root / "pyclient" / "pyproject.toml").write_text("[project]\nname = 'meshfeed'\n")
    (root / "go.mod").write_text(f"module {module}\n\ngo 1.26.0\n")
    return root / "pyclient" / "meshfeed"


def test_source_checkout_binary_comes_after_bundled_before_path(tmp_path, monkeypatch):
    monkeypatch.delenv("MESHFEED_BIN", raising=False)
    monkeypatch.setattr(server_mod, "_PKG_DIR", _fake_checkout(tmp_path / "repo"))
    on_path = _exe(tmp_path / "path" / "meshfeed")
    monkeypatch.setenv("PATH", str(tmp_path / "path"))
    assert server_mod.source_checkout() == tmp_path / "repo"
    assert server_mod.find_binary() == on_path  # nothing built yet: PATH
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(meshfeed.BinaryNotFoundError) as e:
        server_mod.find_binary()
    want = f"source checkout: {tmp_path / 'repo' / 'bin' / 'meshfeed'} (does not exist; `make build` writes it)"
    assert want in str(e.value), str(e.value)
    monkeypatch.setenv("PATH", str(tmp_path / "path"))
    built = _exe(tmp_path / "repo" / "bin" / "meshfeed")
    assert server_mod.find_binary() == built  # before PATH
    bundled = _exe(tmp_path / "repo" / "pyclient" / "meshfeed" / "_bin" / "meshfeed")
    assert server_mod.find_binary() == bundled  # the bundled binary keeps its priority
    env = _exe(tmp_path / "env-bin")
    monkeypatch.setenv("MESHFEED_BIN", env)
    assert server_mod.find_binary() == env


@pytest.mark.parametrize("layout", ["other module", "no pyproject", "site-packages"])
def test_only_a_meshfeed_checkout_counts(tmp_path, monkeypatch, layout):
    """A package that is not in meshfeed's own checkout never looks at a
    bin/ around it."""
    monkeypatch.delenv("MESHFEED_BIN", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    if layout == "site-packages":
        pkg = tmp_path / "lib" / "site-packages" / "meshfeed"
        pkg.mkdir(parents=True)
        (tmp_path / "lib" / "go.mod").write_text("module github.com/meshfeed/meshfeed\n")
        _exe(tmp_path / "lib" / "bin" / "meshfeed")
    else:
        pkg = _fake_checkout(tmp_path / "repo", "example.com/other" if layout == "other module"
                             else "github.com/meshfeed/meshfeed")
        if layout == "no pyproject":
            (tmp_path / "repo" / "pyclient" / "pyproject.toml").unlink()
        _exe(tmp_path / "repo" / "bin" / "meshfeed")
    monkeypatch.setattr(server_mod, "_PKG_DIR", pkg)
    assert server_mod.source_checkout() is None
    with pytest.raises(meshfeed.BinaryNotFoundError, match="source checkout: none"):
        server_mod.find_binary()


def test_checkout_venv_finds_the_built_binary(dataset, tmp_path):
    """In the checkout's own environment (make setup: an editable install),
    with no $MESHFEED_BIN and no bin/ on PATH, `import meshfeed` finds the
    binary `make build` wrote at <repo>/bin/meshfeed and a Loader starts it."""
    import subprocess
    import sys
    built = ROOT / "bin" / "meshfeed"
    if not built.exists():
        pytest.skip(f"{built} not built (make build)")
    if server_mod.bundled_binary().exists():
        pytest.skip("this package bundles a binary, which comes first")
    code = (
        "import jax, meshfeed\n"
        "from meshfeed._src.server import find_binary\n"
        "print(meshfeed.__file__)\n"
        "print(find_binary())\n"
        f"with meshfeed.Loader({str(dataset / '*.parquet')!r}, global_batch_size=100, num_epochs=1,\n"
        "                     sharding=jax.sharding.SingleDeviceSharding(jax.devices()[0])) as ld:\n"
        "    print(ld._server.args[0])\n"
        "    print(sum(1 for _ in ld))\n")
    env = {k: v for k, v in os.environ.items() if k != "MESHFEED_BIN"}
    env.update(PATH=os.pathsep.join(p for p in ("/usr/local/bin", "/usr/bin", "/bin") if os.path.isdir(p)),
               JAX_PLATFORMS="cpu")
    env.pop("PYTHONPATH", None)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path,
                       timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    pkg, found, started, steps = r.stdout.splitlines()[-4:]
    if not pkg.startswith(str(ROOT / "pyclient")):
        pytest.skip(f"meshfeed is not installed from this checkout here ({pkg})")
    assert found == started == str(built), r.stdout
    assert steps == "10", r.stdout


CONSOLE_SCRIPT = """#!/venv/bin/python3
# -*- coding: utf-8 -*-
import re
import sys
from meshfeed.__main__ import console
if __name__ == '__main__':
    sys.exit(console())
"""


def test_path_search_skips_the_console_script(tmp_path, monkeypatch):
    """`meshfeed` on PATH may be this package's console script, which would
    run find_binary again: never taken for the server."""
    monkeypatch.delenv("MESHFEED_BIN", raising=False)
    monkeypatch.setattr(server_mod, "_PKG_DIR", tmp_path / "pkg" / "meshfeed")
    _exe(tmp_path / "venv" / "meshfeed", CONSOLE_SCRIPT)
    monkeypatch.setenv("PATH", str(tmp_path / "venv"))
    with pytest.raises(meshfeed.BinaryNotFoundError, match="console script does not count"):
        server_mod.find_binary()
    real = _exe(tmp_path / "go-bin" / "meshfeed")
    monkeypatch.setenv("PATH", f"{tmp_path / 'venv'}:{tmp_path / 'go-bin'}")
    assert server_mod.find_binary() == real


def test_console_command_runs_the_binary(binary, tmp_path):
    """`python -m meshfeed` and the `meshfeed` console script: server commands
    become the binary (its output and exit status), bench stays Python."""
    import os
    import subprocess
    import sys
    env = dict(os.environ, MESHFEED_BIN=binary)
    script = os.path.join(os.path.dirname(sys.executable), "meshfeed")
    for cmd in ([sys.executable, "-m", "meshfeed"], [script]):
        r = subprocess.run(cmd + ["version"], capture_output=True, text=True, env=env, cwd=tmp_path)
        assert (r.returncode, r.stdout) == (0, f"meshfeed {meshfeed.__version__}\n"), r
        r = subprocess.run(cmd + ["plan", "--global-batch-size", "0"], capture_output=True, text=True, env=env)
        assert r.returncode != 0 and "meshfeed plan" in r.stderr, r
        r = subprocess.run(cmd + ["--help"], capture_output=True, text=True, env=env)
        assert r.returncode == 0 and "bench" in r.stdout and f"The binary ({binary})" in r.stdout, r
        for c in ("gen", "inspect", "plan", "read", "serve", "version"):
            assert f"  {c} " in r.stdout, f"{c!r} missing from --help:\n{r.stdout}"
    r = subprocess.run([sys.executable, "-m", "meshfeed", "version"], capture_output=True, text=True,
                       env=dict(env, MESHFEED_BIN=str(tmp_path / "missing"), PATH=str(tmp_path)))
    checkout = server_mod.checkout_binary()
    if server_mod.bundled_binary().exists() or (checkout is not None and checkout.exists()):
        assert (r.returncode, r.stdout) == (0, f"meshfeed {meshfeed.__version__}\n"), r  # found all the same
    else:
        assert r.returncode == 2 and "meshfeed binary not found" in r.stderr, r


def test_local_server_start_failure_shows_stderr(binary, tmp_path):
    with pytest.raises(meshfeed.MeshfeedError, match="(?s)exited with status.*backend"):
        server_mod.LocalServer(binary, [str(tmp_path)], backend="no-such-backend")


@pytest.mark.parametrize("make,msg", [
    (lambda: meshfeed.Shuffle(seed=-1), "Shuffle(seed=-1)"),
    (lambda: meshfeed.Shuffle(window=1.5), "Shuffle(window=1.5)"),
    # Only what makes a well-formed request; the values the server refuses
    # (dtype names, negative lengths, fills, overflow rules, packing) moved to
    # test_shaping.py::test_server_judges_column_shaping.
    (lambda: meshfeed.Column(dtype=3), "Column(dtype=3)"),
    (lambda: meshfeed.Column(length=1.5), "Column(length=1.5)"),
    (lambda: meshfeed.Column(fill=float("nan")), "write non-finite fills as 'nan'"),
    (lambda: meshfeed.Column(fill=[1]), "Column(fill=[1])"),
    (lambda: meshfeed.Column(pack_ratio=float("inf")), "Column(pack_ratio=inf)"),
])
def test_config_validation(make, msg):
    with pytest.raises(ValueError) as e:
        make()
    assert msg in str(e.value)


def test_config_is_keyword_only_and_frozen():
    with pytest.raises(TypeError):
        meshfeed.Shuffle(1, 2)  # noqa
    s = meshfeed.Shuffle(seed=1, window=8)
    with pytest.raises(AttributeError):
        s.seed = 2
    assert meshfeed.Column(dtype="bfloat16", length=16, fill="nan").to_wire("t") == \
        {"name": "t", "dtype": "bfloat16", "length": 16, "fill": "nan"}


def test_public_surface():
    assert set(meshfeed.__all__) == {
        "Loader", "LoaderConfig", "ServerOptions", "Shuffle", "Column", "LastBatch", "Transport",
        "LOCAL_READ_AHEAD", "LOCAL_MEMORY_BUDGET", "MeshfeedError", "NotFoundError", "PermissionDeniedError",
        "InvalidRequestError", "PlanError", "UnavailableError", "ResourceExhaustedError",
        "BinaryNotFoundError", "StateMismatchError", "TransformError", "Mixture", "Source", "StopRule"}
    assert meshfeed.PlanError.__module__ == "meshfeed"
    assert meshfeed.LoaderConfig.__module__ == meshfeed.ServerOptions.__module__ == "meshfeed"
    assert [n for n in dir(meshfeed) if not n.startswith("_")] == sorted(meshfeed.__all__)


def test_loader_config_reports_every_problem_at_once():
    LoaderConfig = meshfeed.LoaderConfig
    with pytest.raises(meshfeed.InvalidRequestError) as e:
        LoaderConfig(data=[], global_batch_size=0, sharding="data", last_batch="keep", num_epochs=0,
                     prefetch=True, mask_key="", recovery_timeout=-1, server="unix:///s",
                     server_options=meshfeed.ServerOptions(extra_args=["--x"]), columns={"id": "int32"}, shuffle=3,
                     transport="pipe")
    msg = str(e.value)
    for want in ["12 problems", "data: name at least one dataset URI", "global_batch_size=0", "sharding='data'",
                 "last_batch='keep'", "num_epochs=0", "prefetch=True", "mask_key=''", "recovery_timeout=-1",
                 "server_options: only for a local server", "columns['id']='int32'", "shuffle=3",
                 "transport='pipe': want one of auto, shm, flight"]:
        assert want in msg, f"{want!r} not in {msg!r}"


def test_prefetch_default_stages_more_with_a_transform():
    """prefetch=None stages 2 steps, 4 with a transform (threads or workers);
    an explicit depth is kept either way."""
    sh = jax.sharding.NamedSharding(jax.sharding.Mesh(np.array(jax.devices()[:1]), ("data",)),
                                    jax.sharding.PartitionSpec("data"))
    kw = dict(data="/d", global_batch_size=8, sharding=sh)
    C = meshfeed.LoaderConfig
    assert C(**kw).prefetch is None and C(**kw).staged == 2
    assert C(**kw, transform=_identity).staged == 4
    assert C(**kw, transform=_identity, transform_workers=2).staged == 4
    assert C(**kw, transform=_identity, prefetch=1).staged == 1
    assert C(**kw, prefetch=3).staged == 3
    with pytest.raises(meshfeed.InvalidRequestError, match="prefetch=0"):
        C(**kw, prefetch=0)


def _identity(cols):
    return cols


def test_server_options_validation_and_shape():
    with pytest.raises(meshfeed.InvalidRequestError) as e:
        meshfeed.ServerOptions(binary=3, read_ahead=-1, memory_budget=1.5, extra_args="--x")
    msg = str(e.value)
    for want in ["4 problems", "binary=3", "read_ahead=-1", "memory_budget=1.5", "extra_args='--x'"]:
        assert want in msg, f"{want!r} not in {msg!r}"
    with pytest.raises(TypeError):
        meshfeed.ServerOptions("bin/meshfeed")  # noqa: keyword-only
    o = meshfeed.ServerOptions(read_ahead=0, extra_args=["--map-cache", "1"])
    assert o.extra_args == ("--map-cache", "1") and o.memory_budget is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        o.read_ahead = 1
    hash(o)  # frozen and of tuples: usable as a key


def test_config_literals_are_types():
    """last_batch and transport are Literal types a type checker sees, and
    the runtime check accepts exactly their values."""
    import typing
    for owner in (meshfeed.LoaderConfig, meshfeed.Loader.__init__):
        hints = typing.get_type_hints(owner)
        assert hints["last_batch"] == meshfeed.LastBatch, hints["last_batch"]
        assert hints["transport"] == meshfeed.Transport, hints["transport"]
        assert hints["server_options"] == meshfeed.ServerOptions | None
    assert typing.get_args(meshfeed.LastBatch) == ("drop", "pad", "raise")
    assert typing.get_args(meshfeed.Transport) == ("auto", "shm", "flight")
    sh = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    for lb in typing.get_args(meshfeed.LastBatch):
        assert meshfeed.LoaderConfig(data="/d", global_batch_size=8, sharding=sh, last_batch=lb).last_batch == lb
    with pytest.raises(meshfeed.InvalidRequestError, match="last_batch='dorp': want one of drop, pad, raise"):
        meshfeed.LoaderConfig(data="/d", global_batch_size=8, sharding=sh, last_batch="dorp")


TYPO = """
import jax
import meshfeed

sh = jax.sharding.SingleDeviceSharding(jax.devices()[0])
meshfeed.Loader("/d/*.parquet", global_batch_size=8, sharding=sh, last_batch="pad", transport="shm",
                server_options=meshfeed.ServerOptions(read_ahead=1 << 20))
meshfeed.Loader("/d/*.parquet", global_batch_size=8, sharding=sh, last_batch="dorp")
meshfeed.LoaderConfig(data="/d", global_batch_size=8, sharding=sh, transport="pipe")
meshfeed.ServerOptions(read_ahead="128M")
"""


def test_type_checker_flags_a_wrong_literal(tmp_path):
    """mypy, on a snippet using the public API: each wrong value is flagged
    on its line, the right ones are not."""
    import subprocess
    import sys
    import time
    pytest.importorskip("mypy")
    (tmp_path / "snippet.py").write_text(TYPO)
    t = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "mypy", "--follow-imports=silent", "--ignore-missing-imports",
                        "--no-incremental", "--cache-dir", str(tmp_path / "cache"), "snippet.py"],
                       capture_output=True, text=True, cwd=tmp_path, timeout=120,
                       env=dict(os.environ, MYPYPATH=str(ROOT / "pyclient")))
    took = time.monotonic() - t
    errors = [line for line in r.stdout.splitlines() if ": error:" in line]
    lines = TYPO.splitlines()
    flagged = {lines[int(e.split(":")[1]) - 1].split("(")[0] for e in errors}
    assert r.returncode == 1 and len(errors) == 3, r.stdout + r.stderr
    assert flagged == {"meshfeed.Loader", "meshfeed.LoaderConfig", "meshfeed.ServerOptions"}, r.stdout
    assert "Literal['dorp']" in r.stdout and "Literal['pipe']" in r.stdout, r.stdout
    print(f"mypy took {took:.1f} s")


def test_loader_config_request_and_fingerprint_derive_from_one_config():
    LoaderConfig = meshfeed.LoaderConfig
    sh = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    cfg = LoaderConfig(data="rel/*.parquet", global_batch_size=8, sharding=sh, last_batch="pad",
                       shuffle=meshfeed.Shuffle(seed=5, window=3), num_epochs=None,
                       columns={"id": None, "t": meshfeed.Column(length=4)})
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.global_batch_size = 16
    assert cfg.datasets == (os.path.abspath("rel/*.parquet"),)
    req = cfg.request(4, [1, 3], (2, 7))
    assert req == {"version": 1, "datasets": list(cfg.datasets), "global_batch_size": 8, "num_slices": 4,
                   "slices": [1, 3], "last_batch": "pad", "epochs": 0, "start": {"epoch": 2, "step": 7},
                   "columns": [{"name": "id"}, {"name": "t", "length": 4}], "seed": 5,
                   "shuffle": {"enabled": True, "window": 3}, "mask_column": "valid"}
    fp = cfg.fingerprint(4, {"num_rows": 100, "steps_per_epoch": 13})
    # every request field but the per-process and per-position ones, plus the plan
    assert set(fp) == set(req) - {"version", "slices", "start", "epochs"} | {"num_rows", "steps_per_epoch"}
    assert all(fp[k] == req[k] for k in req if k in fp)
    # the same stream read by another process, from another position, for other epochs: same fingerprint
    other = LoaderConfig(data="rel/*.parquet", global_batch_size=8, sharding=sh, last_batch="pad",
                         shuffle=meshfeed.Shuffle(seed=5, window=3), num_epochs=3,
                         columns={"id": None, "t": meshfeed.Column(length=4)})
    assert other.fingerprint(4, {"num_rows": 100, "steps_per_epoch": 13}) == fp


# -- recovery decides by type, code and the server's detail ----------------------

def _pb_varint(x):
    out = bytearray()
    while True:
        out.append((x & 0x7F) | (0x80 if x > 0x7F else 0))
        x >>= 7
        if not x:
            return bytes(out)


def _pb(num, v):
    """One protobuf field: an int (varint) or bytes/str (length-delimited)."""
    if isinstance(v, int):
        return _pb_varint(num << 3) + _pb_varint(v)
    v = v.encode() if isinstance(v, str) else v
    return _pb_varint(num << 3 | 2) + _pb_varint(len(v)) + v


def rpc_status(code, message, retry_s=None, reason=None, metadata=None):
    """A google.rpc.Status as grpc-go's status.WithDetails sends it."""
    out = _pb(1, code) + _pb(2, message)
    if retry_s is not None:
        delay = _pb(1, _pb(1, int(retry_s)) + _pb(2, int(retry_s % 1 * 1e9)))
        out += _pb(3, _pb(1, "type.googleapis.com/google.rpc.RetryInfo") + _pb(2, delay))
    if reason is not None:
        info = _pb(1, reason) + _pb(2, "meshfeed") + b"".join(
            _pb(3, _pb(1, k) + _pb(2, v)) for k, v in (metadata or {}).items())
        out += _pb(3, _pb(1, "type.googleapis.com/google.rpc.ErrorInfo") + _pb(2, info))
    return out


@pytest.mark.parametrize("code,cls", [
    ("INVALID_ARGUMENT", meshfeed.InvalidRequestError),
    ("OUT_OF_RANGE", meshfeed.InvalidRequestError),
    ("UNIMPLEMENTED", meshfeed.InvalidRequestError),
    ("NOT_FOUND", meshfeed.NotFoundError),
    ("PERMISSION_DENIED", meshfeed.PermissionDeniedError),
    ("UNAUTHENTICATED", meshfeed.PermissionDeniedError),
    ("FAILED_PRECONDITION", meshfeed.PlanError),
    ("RESOURCE_EXHAUSTED", meshfeed.ResourceExhaustedError),
    ("UNAVAILABLE", meshfeed.UnavailableError),
    ("DEADLINE_EXCEEDED", meshfeed.UnavailableError),
    ("INTERNAL", meshfeed.MeshfeedError),
    ("CANCELLED", meshfeed.MeshfeedError),
    (None, meshfeed.MeshfeedError),
])
def test_error_codes_map_to_one_class_on_every_path(code, cls):
    """A code names the same exception whether it comes in a shared-memory
    error frame (from_code) or as a Flight error's status detail
    (from_flight), OUT_OF_RANGE and UNIMPLEMENTED included."""
    from meshfeed._src.errors import GRPC_CODES, from_code
    got = from_code(code, "boom")
    assert type(got) is cls and got.code == code and got.server_message == "boom", \
        f"from_code({code!r}) = {type(got).__name__}, want {cls.__name__}"
    if code is None:
        return
    exc = flight.FlightInternalError("Flight returned internal error, with message: x",
                                     rpc_status(GRPC_CODES.index(code), "boom"))
    got = from_flight(exc)
    assert type(got) is cls and got.code == code and got.server_message == "boom", \
        f"from_flight({code!r} detail) = {type(got).__name__}, want {cls.__name__}"


def test_status_detail_decodes_and_tolerates_absence():
    from meshfeed._src.errors import status_detail
    d = status_detail(rpc_status(14, "draining", retry_s=1.5, reason="SERVER_DRAINING", metadata={"step": "3"}))
    assert d.code == "UNAVAILABLE" and d.message == "draining" and d.retry and d.retry_delay == 1.5
    assert (d.reason, d.domain, d.metadata) == ("SERVER_DRAINING", "meshfeed", {"step": "3"})
    d = status_detail(rpc_status(9, "overflow"))
    assert d.code == "FAILED_PRECONDITION" and not d.retry and d.reason is None
    for junk in (None, b"", b"\xff\xff", b"not a proto", rpc_status(99, "x"), rpc_status(0, "ok")):
        assert status_detail(junk) is None, junk


@pytest.mark.parametrize("exc,want", [
    # a killed server: UNAVAILABLE, whatever the message says
    (flight.FlightUnavailableError("Flight returned unavailable error, with message: Stream removed"), True),
    (flight.FlightUnavailableError("Flight returned unavailable error, with message: anything"), True),
    (flight.FlightTimedOutError("Flight returned timeout error, with message: deadline"), True),
    (ConnectionResetError(104, "Connection reset by peer"), True),
    (BrokenPipeError(32, "Broken pipe"), True),
    # words in a message decide nothing any more
    (flight.FlightInternalError("Flight returned internal error, with message: socket closed eof goaway"), False),
    (flight.FlightCancelledError("Flight returned cancelled error, with message: connection reset rst_stream"), False),
    (pa.ArrowInvalid("gRPC returned precondition failed error, with message: storage unavailable"), False),
    (RuntimeError("connection refused"), False),
    # the server's detail decides: an INTERNAL it marks retryable, an UNAVAILABLE it explains
    (flight.FlightInternalError("Flight returned internal error, with message: x",
                                rpc_status(13, "backend restarted", retry_s=0.1)), True),
    (flight.FlightInternalError("Flight returned internal error, with message: x",
                                rpc_status(14, "draining", reason="SERVER_DRAINING")), True),
    (flight.FlightInternalError("Flight returned internal error, with message: x",
                                rpc_status(9, "column id row 5: overflow")), False),
])
def test_recoverable_by_type_code_and_detail(exc, want):
    from meshfeed._src.errors import recoverable
    assert recoverable(exc) is want, f"recoverable({exc!r}) = {not want}, want {want}"


def test_from_flight_takes_the_code_from_the_server_detail():
    """pyarrow raises FlightInternalError for any code that carries a detail:
    the detail's code decides the exception type."""
    e = flight.FlightInternalError("Flight returned internal error, with message: plan: N=10",
                                   rpc_status(9, "plan: N=10 B=3", reason="PLAN"))
    got = from_flight(e)
    assert type(got) is meshfeed.PlanError and got.code == "FAILED_PRECONDITION", repr(got)
    assert got.server_message == "plan: N=10 B=3" and got.detail.reason == "PLAN" and got.__cause__ is e


@pytest.fixture
def detail_server(tmp_path):
    """A real Flight server (pyarrow's, on a Unix socket) whose calls fail with
    a status and extra_info, as the Go server is to send them: pyarrow's
    server puts extra_info in grpc-status-details-bin beside x-arrow-status."""
    class Failing(flight.FlightServerBase):
        def do_get(self, context, ticket):
            code, retry = ticket.ticket.decode().split(":")
            detail = rpc_status(int(code), f"code {code}", retry_s=0.5 if retry == "1" else None, reason="TEST")
            raise flight.FlightInternalError(f"code {code}", detail)

    sock = str(tmp_path / "f.sock")
    srv = Failing(f"grpc+unix://{sock}")
    yield flight.connect(f"grpc+unix://{sock}")
    srv.shutdown()


@pytest.mark.parametrize("ticket,cls,code,want", [
    ("14:0", meshfeed.UnavailableError, "UNAVAILABLE", True),
    ("13:1", meshfeed.MeshfeedError, "INTERNAL", True),
    ("13:0", meshfeed.MeshfeedError, "INTERNAL", False),
    ("3:0", meshfeed.InvalidRequestError, "INVALID_ARGUMENT", False),
    ("9:0", meshfeed.PlanError, "FAILED_PRECONDITION", False),
])
def test_status_detail_over_the_wire(detail_server, ticket, cls, code, want):
    from meshfeed._src.errors import recoverable
    with pytest.raises(flight.FlightError) as e:
        detail_server.do_get(flight.Ticket(ticket.encode())).read_all()
    assert e.value.extra_info, "extra_info lost on the wire"
    got = from_flight(e.value)
    assert type(got) is cls and got.code == code and got.detail.reason == "TEST", repr(got)
    assert recoverable(e.value) is want


@pytest.mark.parametrize("make", [
    lambda: named((4, 2), ("data", "model"), P("data")),
    lambda: named((8,), ("data",), P("data")),
    lambda: named((4, 2), ("data", "model"), P(("data", "model"))),
    lambda: named((4, 2), ("data", "model"), P("model")),  # replicated over data
    lambda: named((4, 2), ("data", "model"), P()),  # fully replicated
    lambda: jax.sharding.SingleDeviceSharding(jax.devices()[5]),
], ids=["4x2-data", "8-data", "4x2-data+model", "4x2-model", "replicated", "single-device"])
def test_one_placement_call_per_step(make, monkeypatch):
    """Every array column of a step goes to the devices in one jax.device_put
    call (a batched transfer), whatever the sharding; each device holds
    exactly its rows, and aligned rows are still aliased, not copied."""
    sh = make()
    B = 64
    L = layout_of(sh, B)
    rb = _aligned_batch(B)
    mat = Materializer(rb.schema, sh, L, "valid")
    from jax._src import api as jax_api  # what make_array_from_process_local_data calls on one process
    calls, makes = [], []

    def counting(real, into):
        def f(*a, **kw):
            into.append(len(a[0]) if isinstance(a[0], (list, tuple)) else 1)
            return real(*a, **kw)
        return f

    monkeypatch.setattr(jax, "device_put", counting(jax.device_put, calls))
    monkeypatch.setattr(jax_api, "device_put", counting(jax_api.device_put, calls))
    monkeypatch.setattr(jax, "make_array_from_process_local_data",
                        counting(jax.make_array_from_process_local_data, makes))
    for step in range(3):
        out = mat(rb)
        assert len(calls) == step + 1, f"step {step}: {len(calls) - step} device_put calls, want 1"
    # id, x, bf, img and valid in one call per step; name stays a pyarrow array
    assert calls == [5, 5, 5] and makes == [5, 5, 5], (calls, makes)
    want = {"id": np.arange(B), "valid": np.arange(B) % 3 != 0,
            "x": np.arange(B * 4, dtype=np.float32).reshape(B, 4)}
    for name, w in want.items():
        assert out[name].sharding == sh
        for shard in out[name].addressable_shards:
            np.testing.assert_array_equal(np.asarray(shard.data), w[shard.index], err_msg=f"{name} {shard.device}")
    buf = rb.column(0).buffers()[1]
    for shard in out["id"].addressable_shards:
        p = shard.data.unsafe_buffer_pointer()
        assert buf.address <= p < buf.address + buf.size, f"id on {shard.device}: copied"
    # independently, per device: the rows of each Arrow-backed view that do not start 64-byte aligned
    unaligned = sum(1 for view, b in mat.last_views.values() if b is not None for _, k in L.devices
                    if view[k * L.b:(k + 1) * L.b].ctypes.data % 64)
    assert mat.counts == {"host_copies": 0, "mask_unpacks": 1, "unaligned_transfers": unaligned}


def test_unaligned_transfers_counted_per_device():
    """The counter without a loop over devices: a record sliced one row in
    puts every device's int64 rows 8 bytes off a 64-byte boundary."""
    sh = named((4, 2), ("data", "model"), P("data"))
    L = layout_of(sh, 64)
    rb = _aligned_batch(65).slice(1, 64).select(["id"])
    mat = Materializer(rb.schema, sh, L, None)
    out = mat(rb)
    np.testing.assert_array_equal(np.asarray(out["id"]), np.arange(1, 65))
    want = sum(1 for dev, k in L.devices if (rb.column(0).buffers()[1].address + 8 * (1 + k * L.b)) % 64)
    assert mat.counts["unaligned_transfers"] == want == 8


def _per_slice(L):
    """The shared-memory wire's form of a step: one record per local slice
    d (ids b*d..b*(d+1)-1 and 4 floats per row), every buffer 64-byte aligned."""
    out = []
    for d in L.slices:
        ids = _abuf(np.arange(L.b * d, L.b * (d + 1), dtype=np.int64))
        x = pa.FixedSizeListArray.from_arrays(_abuf(np.arange(L.b * d * 4, L.b * (d + 1) * 4, dtype=np.float32)), 4)
        out.append(pa.record_batch([ids, x], names=["id", "x"]))
    return out


@pytest.mark.parametrize("make", [
    lambda: named((4, 2), ("data", "model"), P("data")),
    lambda: named((8,), ("data",), P("data")),
    lambda: named((4, 2), ("data", "model"), P(("data", "model"))),
    lambda: named((4, 2), ("data", "model"), P("model")),
    lambda: named((4, 2), ("data", "model"), P()),
], ids=["4x2-data", "8-data", "4x2-data+model", "4x2-model", "replicated"])
def test_per_slice_placement_direct_equals_public(make, monkeypatch):
    """The shared-memory step (one record per slice) is placed with one
    place_slices call: jax's batched transfer per column (the direct path,
    checked on first use), each device aliasing its slice's aligned view,
    with the same arrays as the public jax.device_put path."""
    from meshfeed._src import layout as layout_mod
    sh = make()
    B = 64
    L = layout_of(sh, B)
    recs = _per_slice(L)
    calls = []
    real = layout_mod.place_slices
    monkeypatch.setattr(layout_mod, "place_slices", lambda *a, **kw: calls.append(1) or real(*a, **kw))
    mat = Materializer(recs[0].schema, sh, L, None)
    direct = [mat(recs) for _ in range(3)]
    assert calls == [1, 1, 1], calls
    assert layout_mod.placement_path() == "direct"
    assert mat.counts == {"host_copies": 0, "mask_unpacks": 0, "unaligned_transfers": 0}
    monkeypatch.setitem(layout_mod._direct, "ok", False)
    public = Materializer(recs[0].schema, sh, L, None)(recs)
    want_ids = np.concatenate([np.arange(L.b * d, L.b * (d + 1)) for d in range(L.D)])
    for out in direct:
        for name in ("id", "x"):
            assert out[name].sharding == public[name].sharding == sh
            assert out[name].shape == public[name].shape and out[name].dtype == public[name].dtype
            for a, b in zip(out[name].addressable_shards, public[name].addressable_shards):
                assert a.device == b.device and a.index == b.index
                np.testing.assert_array_equal(np.asarray(a.data), np.asarray(b.data))
        for shard in out["id"].addressable_shards:
            np.testing.assert_array_equal(np.asarray(shard.data), want_ids[shard.index])
            k = dict(L.devices)[shard.device]
            buf = recs[k].column(0).buffers()[1]
            assert shard.data.unsafe_buffer_pointer() == buf.address, f"id on {shard.device}: copied"


def test_per_slice_placement_check_takes_nan(monkeypatch):
    """A first step holding NaN passes the direct path's check (values are
    compared bitwise): the direct path stays on."""
    from meshfeed._src import layout as layout_mod
    sh = named((8,), ("data",), P("data"))
    L = layout_of(sh, 64)
    recs = _per_slice(L)
    x = np.full(L.b * 4, np.nan, dtype=np.float32)
    recs = [pa.record_batch([r.column(0), pa.FixedSizeListArray.from_arrays(_abuf(x), 4)], names=["id", "x"])
            for r in recs]
    monkeypatch.setitem(layout_mod._direct, "ok", None)
    out = Materializer(recs[0].schema, sh, L, None)(recs)
    assert layout_mod.placement_path() == "direct"
    assert np.isnan(np.asarray(out["x"])).all()


def test_per_slice_placement_falls_back_when_direct_fails(monkeypatch):
    """A jax whose private batched transfer fails (or gives other arrays)
    is noticed on the first step: a warning, then the public path for good,
    with the same values."""
    from meshfeed._src import layout as layout_mod
    sh = named((4, 2), ("data", "model"), P("data"))
    L = layout_of(sh, 64)
    recs = _per_slice(L)
    monkeypatch.setitem(layout_mod._direct, "ok", None)

    def broken(aval, sharding, xs, devices):
        return layout_mod._put_public(sharding, L, [(aval.shape, list(reversed(xs)))])[0]  # wrong devices

    monkeypatch.setattr(layout_mod, "_batched_device_put", broken)
    mat = Materializer(recs[0].schema, sh, L, None)
    with pytest.warns(UserWarning, match="batched transfer is not usable"):
        out = mat(recs)
    assert layout_mod.placement_path() == "device_put"
    want = np.concatenate([np.arange(16 * d, 16 * (d + 1)) for d in range(4)])
    np.testing.assert_array_equal(np.asarray(out["id"]), want)
    out = mat(recs)  # no second warning, still right
    np.testing.assert_array_equal(np.asarray(out["id"]), want)
