"""The wheels as a user gets them (`make wheel`): names, tags, metadata and
RECORD checked with the PyPA's own tools (packaging, wheel), the bundled binary
checked for its architecture, and the host's wheel installed into a fresh
virtual environment outside the repository and run from there, with no
MESHFEED_BIN, no repository and no Go on PATH: it must use the binary it carries.

`make wheel-test` builds the wheels first and passes them in $MESHFEED_DIST;
without it this module builds them itself (`make wheel DIST=...`)."""

from __future__ import annotations

import json
import os
import pathlib
import platform
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import textwrap
import zipfile

import pytest
from packaging.metadata import Metadata
from packaging.requirements import Requirement
from packaging.tags import Tag
from packaging.utils import parse_wheel_filename

from conftest import ROOT

ARCHES = {"x86_64": 62, "aarch64": 183}  # wheel arch -> ELF e_machine (EM_X86_64, EM_AARCH64)
VERSION = re.search(r'^__version__ = "([^"]+)"$', (ROOT / "pyclient" / "meshfeed" / "_version.py").read_text(),
                    re.M).group(1)
BIN = "meshfeed/_bin/meshfeed"


@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> pathlib.Path:
    d = os.environ.get("MESHFEED_DIST")
    if d:
        return pathlib.Path(d)
    out = tmp_path_factory.mktemp("dist")
    r = subprocess.run(["make", "-C", str(ROOT), "wheel", f"DIST={out}"], capture_output=True, text=True)
    assert r.returncode == 0, f"make wheel failed:\n{r.stdout}\n{r.stderr}"
    return out


def wheel_of(dist: pathlib.Path, arch: str) -> pathlib.Path:
    found = sorted(dist.glob(f"meshfeed-*-py3-none-*{arch}*.whl"))
    assert len(found) == 1, f"want one {arch} wheel in {dist}, found {[p.name for p in dist.iterdir()]}"
    return found[0]


def sdist_of(dist: pathlib.Path) -> pathlib.Path:
    found = sorted(dist.glob("meshfeed-*.tar.gz"))
    assert len(found) == 1, f"want one sdist in {dist}, found {[p.name for p in dist.iterdir()]}"
    return found[0]


def elf_info(data: bytes) -> dict:
    """e_machine, e_type, and whether a PT_INTERP program header (a dynamic
    loader: not a static binary) is present, from a little-endian ELF64 header."""
    assert data[:4] == b"\x7fELF", f"not an ELF file: {data[:16]!r}"
    assert data[4] == 2 and data[5] == 1, "want ELFCLASS64, little-endian"
    e_type, e_machine = int.from_bytes(data[16:18], "little"), int.from_bytes(data[18:20], "little")
    phoff = int.from_bytes(data[32:40], "little")
    phentsize, phnum = int.from_bytes(data[54:56], "little"), int.from_bytes(data[56:58], "little")
    types = [int.from_bytes(data[phoff + i * phentsize:phoff + i * phentsize + 4], "little") for i in range(phnum)]
    return {"machine": e_machine, "type": e_type, "interp": 3 in types}


@pytest.mark.parametrize("arch", ARCHES)
def test_wheel_name_tags_and_metadata(dist, arch):
    whl = wheel_of(dist, arch)
    name, version, build, tags = parse_wheel_filename(whl.name)
    assert (name, str(version), build) == ("meshfeed", VERSION, ())
    want = {Tag("py3", "none", f"manylinux_2_17_{arch}"), Tag("py3", "none", f"manylinux2014_{arch}")}
    assert set(tags) == want, f"{whl.name}: tags {sorted(map(str, tags))}, want {sorted(map(str, want))}"
    info = f"meshfeed-{VERSION}.dist-info"
    with zipfile.ZipFile(whl) as z:
        wheel_txt = z.read(f"{info}/WHEEL").decode()
        meta = Metadata.from_email(z.read(f"{info}/METADATA"), validate=True)  # raises on invalid metadata
        entry = z.read(f"{info}/entry_points.txt").decode()
    fields = [line.split(": ", 1) for line in wheel_txt.splitlines() if line]
    assert ["Wheel-Version", "1.0"] in fields and ["Root-Is-Purelib", "false"] in fields, wheel_txt
    assert {v for k, v in fields if k == "Tag"} == set(map(str, want)), wheel_txt
    assert meta.name == "meshfeed" and str(meta.version) == VERSION
    assert str(meta.requires_python) == ">=3.11"
    plain = {r.name for r in meta.requires_dist if r.marker is None}
    assert plain == {"jax", "numpy", "pyarrow", "ml_dtypes"}, "plain `pip install meshfeed` stays lean"
    assert set(meta.provides_extra) == {"orbax", "bench", "ray"}

    def extra(r: Requirement) -> str | None:
        m = re.search(r'extra == "([^"]+)"', str(r.marker)) if r.marker else None
        return m.group(1) if m else None
    by_extra = {(r.name, extra(r)) for r in meta.requires_dist if r.marker is not None}
    assert by_extra >= {("orbax-checkpoint", "orbax"), ("ray", "bench"), ("grain", "bench"),
                        ("matplotlib", "bench"), ("ray", "ray"), ("cryptography", "ray")}, by_extra
    assert "meshfeed = meshfeed.__main__:console" in entry and "meshfeed-bench = meshfeed._src.bench:main" in entry


@pytest.mark.parametrize("arch", ARCHES)
def test_wheel_carries_a_static_binary_for_its_arch(dist, arch):
    with zipfile.ZipFile(wheel_of(dist, arch)) as z:
        names = z.namelist()
        info = z.getinfo(BIN)
        elf = elf_info(z.read(BIN))
    assert (info.external_attr >> 16) & 0o111 == 0o111, f"{BIN} mode {oct(info.external_attr >> 16)}: not executable"
    assert elf["machine"] == ARCHES[arch], f"{arch} wheel: ELF e_machine {elf['machine']}, want {ARCHES[arch]}"
    assert elf["type"] == 2 and not elf["interp"], "want a static executable (CGO_ENABLED=0), as manylinux2014 claims"
    tops = {n.split("/", 1)[0] for n in names}
    assert tops == {"meshfeed", f"meshfeed-{VERSION}.dist-info"}, tops
    for want in ("meshfeed/__init__.py", "meshfeed/__main__.py", "meshfeed/_version.py", "meshfeed/_src/server.py"):
        assert want in names
    stray = [n for n in names if "__pycache__" in n or n.endswith((".so", ".pyc")) or "/tests/" in n]
    assert not stray, stray


def test_wheels_differ_only_in_the_binary(dist):
    contents = []
    for arch in ARCHES:
        with zipfile.ZipFile(wheel_of(dist, arch)) as z:
            contents.append({n: z.read(n) for n in z.namelist()
                             if n != BIN and not n.endswith(("/RECORD", "/WHEEL"))})
    assert contents[0] == contents[1]


@pytest.mark.parametrize("arch", ARCHES)
def test_wheel_record_hashes(dist, arch, tmp_path):
    whl = wheel_of(dist, arch)
    r = subprocess.run([sys.executable, "-m", "wheel", "unpack", "-d", str(tmp_path / "ok"), str(whl)],
                       capture_output=True, text=True)
    assert r.returncode == 0, f"wheel unpack {whl.name}:\n{r.stdout}{r.stderr}"
    # The check bites: one byte changed in a file listed in RECORD fails it.
    bad = tmp_path / whl.name
    with zipfile.ZipFile(whl) as src, zipfile.ZipFile(bad, "w", zipfile.ZIP_DEFLATED) as dst:
        for item in src.infolist():
            data = src.read(item)
            dst.writestr(item, data + b"#" if item.filename == "meshfeed/_version.py" else data)
    r = subprocess.run([sys.executable, "-m", "wheel", "unpack", "-d", str(tmp_path / "bad"), str(bad)],
                       capture_output=True, text=True)
    assert r.returncode != 0 and "meshfeed/_version.py" in r.stdout + r.stderr, r.stdout + r.stderr


def test_sdist_carries_the_go_sources(dist):
    sd = sdist_of(dist)
    top = f"meshfeed-{VERSION}"
    assert sd.name == f"{top}.tar.gz"
    with tarfile.open(sd) as t:
        names = set(t.getnames())
        pkg_info = t.extractfile(f"{top}/PKG-INFO").read()
    Metadata.from_email(pkg_info, validate=True)
    for want in ("setup.py", "pyproject.toml", "meshfeed/_version.py", "meshfeed/_src/server.py", "go/go.mod",
                 "go/go.sum", "go/cmd/meshfeed/main.go", "go/cmd/meshfeed/version.go", "go/loader/doc.go",
                 "go/internal/ntcopy/ntcopy_amd64.s"):  # assembly too
        assert f"{top}/{want}" in names, f"{want} missing from {sd.name}"
    go_files = [n for n in names if n.startswith(f"{top}/go/") and n.endswith(".go")]
    assert not [n for n in go_files if n.endswith("_test.go")], "no Go tests in the sdist"
    assert not [n for n in names if "_bin" in n], "an sdist carries no binary"
    assert not [n for n in names if n.startswith(f"{top}/tests/")], "the tests need the repository"


def _env_without_go(**extra) -> dict:
    """The environment less Go, the repository's bin/ and meshfeed's variables."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("MESHFEED_BIN", "MESHFEED_FAKEGCS", "PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "GO")}
    keep = []
    for d in os.environ.get("PATH", "").split(os.pathsep):
        if not d or pathlib.Path(d).resolve().is_relative_to(ROOT):
            continue
        if any(os.path.exists(os.path.join(d, exe)) for exe in ("go", "meshfeed")):
            continue
        keep.append(d)
    env["PATH"] = os.pathsep.join(keep)
    env.update(extra)
    return env


def test_sdist_without_go_says_what_to_do(dist, tmp_path):
    env = _env_without_go()
    assert shutil.which("go", path=env["PATH"]) is None
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
                        "--no-cache-dir", "--disable-pip-version-check", "-w", str(tmp_path), str(sdist_of(dist))],
                       capture_output=True, text=True, env=env, cwd=tmp_path)
    out = r.stdout + r.stderr
    assert r.returncode != 0, out
    for want in ("needs\nGo 1.26 or newer", "https://go.dev/dl/", "pip install --only-binary meshfeed meshfeed",
                 "MESHFEED_BUILD_BINARY=0"):
        assert want.replace("\n", " ") in re.sub(r"\s+", " ", out), f"{want!r} missing from:\n{out}"
    # ... and the way out it names builds a pure wheel without a binary.
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
                        "--no-cache-dir", "--disable-pip-version-check", "-w", str(tmp_path), str(sdist_of(dist))],
                       capture_output=True, text=True, env=dict(env, MESHFEED_BUILD_BINARY="0"), cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    whl = tmp_path / f"meshfeed-{VERSION}-py3-none-any.whl"
    with zipfile.ZipFile(whl) as z:
        assert BIN not in z.namelist()
        assert "Root-Is-Purelib: true" in z.read(f"meshfeed-{VERSION}.dist-info/WHEEL").decode()


# What runs in the fresh environment: the Loader over a dataset that the bundled
# `meshfeed gen` wrote, and where everything came from.
USER_SCRIPT = textwrap.dedent("""
    import json, os, sys, sysconfig
    import jax, numpy as np
    from jax.sharding import NamedSharding, PartitionSpec as P
    import meshfeed
    from meshfeed._src.server import bundled_binary, find_binary

    mesh = jax.make_mesh((8,), ("data",))
    ids, exes = [], set()
    with meshfeed.Loader(sys.argv[1], global_batch_size=200, sharding=NamedSharding(mesh, P("data")),
                         columns=["id", "features"], last_batch="drop", num_epochs=1) as loader:
        for batch in loader:
            exes.add(os.path.realpath(f"/proc/{loader.server_pid}/exe"))
            assert batch["features"].shape == (200, 4), batch["features"].shape
            ids.extend(np.asarray(batch["id"]).tolist())
    print(json.dumps({"meshfeed": meshfeed.__file__, "version": meshfeed.__version__,
                      "find_binary": find_binary(), "bundled": str(bundled_binary()),
                      "server_exe": sorted(exes), "ids": ids, "sys_path": sys.path,
                      "site": [sysconfig.get_path("purelib"), sysconfig.get_path("platlib")]}))
""")


def test_installed_wheel_runs_without_the_repository(dist):
    arch = {"amd64": "x86_64", "arm64": "aarch64"}.get(platform.machine().lower(), platform.machine().lower())
    if arch not in ARCHES:
        pytest.fail(f"no wheel is built for this machine ({platform.machine()}); make wheel builds {list(ARCHES)}")
    whl = wheel_of(dist, arch)
    base = pathlib.Path(tempfile.mkdtemp(prefix="meshfeed-wheel-"))
    try:
        assert not base.resolve().is_relative_to(ROOT)
        venv, work = base / "venv", base / "work"
        work.mkdir()
        env = _env_without_go(XLA_FLAGS="--xla_force_host_platform_device_count=8", JAX_PLATFORMS="cpu")
        env["PATH"] = os.pathsep.join([str(venv / "bin"), env["PATH"]])  # as `activate` would

        def run(*cmd, check=True, timeout=300):
            r = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, env=env, cwd=work,
                               timeout=timeout)
            if check:
                assert r.returncode == 0, f"{cmd} exited {r.returncode}:\n{r.stdout}\n{r.stderr}"
            return r

        run(sys.executable, "-m", "venv", venv)
        # Only the wheel's declared dependencies, at the versions `make test` runs with
        # (pip's cache has them): everything of .venv but meshfeed itself, as constraints.
        frozen = subprocess.run([sys.executable, "-m", "pip", "freeze", "--exclude-editable"],
                                capture_output=True, text=True, check=True).stdout.splitlines()
        (base / "constraints.txt").write_text(
            "\n".join(line for line in frozen if line and not line.lower().startswith("meshfeed")) + "\n")
        py = venv / "bin" / "python"
        run(py, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "-c", base / "constraints.txt",
            whl, timeout=900)
        run(py, "-m", "pip", "check")
        site = pathlib.Path(run(py, "-c", "import sysconfig; print(sysconfig.get_path('platlib'))").stdout.strip())
        bundled = site / BIN
        assert bundled.is_file() and os.access(bundled, os.X_OK), f"{bundled}: not installed executable"

        mf = venv / "bin" / "meshfeed"
        r = run(mf, "--help")
        for want in ("serve", "plan", "bench", f"The binary ({bundled})"):
            assert want in r.stdout, f"{want!r} missing from meshfeed --help:\n{r.stdout}"
        assert run(py, "-m", "meshfeed", "--help").stdout == r.stdout
        assert run("meshfeed", "version").stdout == f"meshfeed {VERSION}\n"  # found on PATH, like a user types it
        run(venv / "bin" / "meshfeed-bench", "--help")
        r = run(mf, "no-such-command", check=False)
        assert r.returncode == 2 and "unknown command" in r.stderr, r
        run(mf, "gen", "--out", "data", "--rows", "1000", "--files", "2", "--row-group-rows", "100",
            "--features", "4")
        plan = json.loads(run(mf, "plan", "--json", "--data", "data", "--global-batch-size", "320", "--mesh",
                              "data=8", "--batch-axes", "data", "--last-batch", "drop").stdout)
        assert (plan["num_rows"], plan["steps_per_epoch"], plan["dropped_rows"]) == (1000, 3, 40), plan

        (work / "user.py").write_text(USER_SCRIPT)
        got = json.loads(run(py, "user.py", str(work / "data" / "*.parquet")).stdout.strip().splitlines()[-1])
        assert pathlib.Path(got["meshfeed"]).is_relative_to(site), f"imported {got['meshfeed']}, not from {site}"
        assert got["version"] == VERSION
        assert got["find_binary"] == got["bundled"] == str(bundled)
        assert got["server_exe"] == [str(bundled.resolve())], f"the server ran {got['server_exe']}, not {bundled}"
        assert sorted(got["ids"]) == list(range(1000)), "5 steps of 200 rows: every row once"
        assert not [p for p in got["sys_path"] if p and pathlib.Path(p).resolve().is_relative_to(ROOT)], got["sys_path"]
    finally:
        shutil.rmtree(base, ignore_errors=True)
