"""The build step pyproject.toml cannot declare: compile the Go server into the
wheel.

A wheel built here carries ``meshfeed/_bin/meshfeed``, a static Go binary
(``CGO_ENABLED=0``), and is tagged for its platform and any Python 3, the way
wheels that ship a compiled program are (ruff, uv):
``py3-none-manylinux_2_17_x86_64.manylinux2014_x86_64``. The binary links no
libc, so the manylinux2014 (glibc 2.17) claim holds on any Linux.

Environment:
  MESHFEED_WHEEL_ARCH=x86_64|aarch64  the Linux target (Go cross-compiles);
                                      default: this machine
  MESHFEED_BUILD_BINARY=0             no binary: a py3-none-any wheel whose
                                      users set $MESHFEED_BIN or
                                      ServerOptions(binary=)
  GO                                  the go command (default: go on PATH)

The Go sources are the repository's (``..``) in a checkout, and ``go/`` in an
sdist, which this file's sdist step fills with the files ``cmd/meshfeed``
needs. The version is ``meshfeed/_version.py``'s, also given to the binary.
"""

from __future__ import annotations

import json
import os
import pathlib
import platform
import re
import shutil
import subprocess
import sys

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

try:
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:  # setuptools < 70.1
    from wheel.bdist_wheel import bdist_wheel

HERE = pathlib.Path(__file__).resolve().parent
BIN_REL = pathlib.Path("meshfeed", "_bin", "meshfeed")
GO_PKG = "./cmd/meshfeed"
GO_MODULE = "github.com/meshfeed/meshfeed"
GO_MIN = "1.26"

# wheel arch -> (GOARCH, platform tag)
ARCHES = {
    "x86_64": ("amd64", "manylinux_2_17_x86_64.manylinux2014_x86_64"),
    "aarch64": ("arm64", "manylinux_2_17_aarch64.manylinux2014_aarch64"),
}

NO_GO = f"""
meshfeed: building this package compiles its server, a Go program, and needs
Go {GO_MIN} or newer: no `go` was found (looked at $GO, then PATH).
Do one of:
  - install Go (https://go.dev/dl/), put it on PATH (or set GO=/path/to/go), retry;
  - install a prebuilt wheel instead, which carries the server:
      pip install --only-binary meshfeed meshfeed
    (or the wheel that `make wheel` writes to dist/ in a checkout);
  - build without the server: MESHFEED_BUILD_BINARY=0 pip install ...; the
    package then needs $MESHFEED_BIN (or ServerOptions(binary=)) naming a meshfeed binary.
"""


def version() -> str:
    text = (HERE / "meshfeed" / "_version.py").read_text()
    m = re.search(r'^__version__ = "([^"]+)"$', text, re.M)
    if not m:
        raise SystemExit("meshfeed/_version.py: no line `__version__ = \"X.Y.Z\"`")
    return m.group(1)


def target() -> tuple[str | None, str | None, str | None] | None:
    """(GOOS, GOARCH, platform tag) of the binary to bundle; None: no binary.
    (None, None, None): this machine, tagged as setuptools tags it."""
    if os.environ.get("MESHFEED_BUILD_BINARY", "1") == "0":
        return None
    arch = os.environ.get("MESHFEED_WHEEL_ARCH")
    if arch:
        if arch not in ARCHES:
            raise SystemExit(f"MESHFEED_WHEEL_ARCH={arch!r}: want one of {', '.join(ARCHES)}")
        return ("linux", *ARCHES[arch])
    machine = {"amd64": "x86_64", "arm64": "aarch64"}.get(platform.machine().lower(), platform.machine().lower())
    if sys.platform.startswith("linux") and machine in ARCHES:
        return ("linux", *ARCHES[machine])
    return (None, None, None)


def go_command() -> str:
    go = os.environ.get("GO") or shutil.which("go")
    if not go or not shutil.which(go):
        raise SystemExit(NO_GO)
    return go


def go_source() -> pathlib.Path:
    """The Go module: go/ (an sdist) or the repository around pyclient/."""
    for d in (HERE / "go", HERE.parent):
        mod = d / "go.mod"
        if mod.is_file() and re.search(rf"^module {re.escape(GO_MODULE)}$", mod.read_text(), re.M):
            return d
    raise SystemExit(f"meshfeed: the Go sources of the server are missing (no go.mod of {GO_MODULE} in "
                     f"{HERE / 'go'} or {HERE.parent}); build from a checkout of the repository or from its sdist")


def go_build(out: pathlib.Path, goos: str | None, goarch: str | None) -> None:
    go, src = go_command(), go_source()
    env = dict(os.environ, CGO_ENABLED="0")
    if goos:
        env.update(GOOS=goos, GOARCH=goarch)
    out.parent.mkdir(parents=True, exist_ok=True)
    cmd = [go, "build", "-trimpath", "-buildvcs=false", "-ldflags", f"-s -w -X main.version={version()}",
           "-o", str(out), GO_PKG]
    print(f"meshfeed: {' '.join(cmd)} (in {src}, GOOS={goos or 'host'} GOARCH={goarch or 'host'} CGO_ENABLED=0)",
          file=sys.stderr)
    r = subprocess.run(cmd, cwd=src, env=env)
    if r.returncode != 0:
        raise SystemExit(f"meshfeed: `go build {GO_PKG}` failed (status {r.returncode}), see above; "
                         f"it needs Go {GO_MIN}+ and the Go module proxy (or a filled module cache)")
    out.chmod(0o755)


class BuildPy(build_py):
    """build_py, plus the Go binary at meshfeed/_bin/meshfeed (not for editable installs)."""

    def run(self):
        super().run()
        out = pathlib.Path(self.build_lib).resolve() / BIN_REL
        if out.exists():
            out.unlink()  # never a binary left from another target's build
        t = target()
        if self.editable_mode or t is None:
            return
        go_build(out, t[0], t[1])


class BinaryDistribution(Distribution):
    """Platform-specific when it carries the binary: files at the wheel's root,
    installed into platlib (Root-Is-Purelib: false)."""

    def has_ext_modules(self):
        return target() is not None


class BdistWheel(bdist_wheel):
    """The tag: any Python 3, no ABI, the binary's platform."""

    def get_tag(self):
        t = target()
        if t is None:
            return "py3", "none", "any"
        if t[2] is not None:
            return "py3", "none", t[2]
        return "py3", "none", super().get_tag()[2]


class Sdist(sdist):
    """sdist, plus the Go sources the binary needs, under go/."""

    def make_release_tree(self, base_dir, files):
        super().make_release_tree(base_dir, files)
        src, dst = go_source(), pathlib.Path(base_dir) / "go"
        for rel in go_files(src):
            (dst / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src / rel, dst / rel)


def go_files(src: pathlib.Path) -> list[pathlib.Path]:
    """go.mod, go.sum, and every non-test .go file, assembly file (and its
    headers) and embedded file of the main module's packages that
    cmd/meshfeed imports (for every Linux target)."""
    files = {pathlib.Path("go.mod"), pathlib.Path("go.sum")}
    for goarch, _ in ARCHES.values():
        env = dict(os.environ, CGO_ENABLED="0", GOOS="linux", GOARCH=goarch)
        r = subprocess.run([go_command(), "list", "-deps", "-json", GO_PKG], cwd=src, env=env,
                           capture_output=True, text=True)
        if r.returncode != 0:
            raise SystemExit(f"meshfeed sdist: go list {GO_PKG} failed:\n{r.stderr}")
        dec, text, i = json.JSONDecoder(), r.stdout, 0
        while i < len(text):
            while i < len(text) and text[i].isspace():
                i += 1
            if i == len(text):
                break
            pkg, i = dec.raw_decode(text, i)
            if not (pkg.get("Module") or {}).get("Main"):
                continue
            d = pathlib.Path(pkg["Dir"]).relative_to(src)
            files.update(d / f.name for f in (src / d).glob("*.go") if not f.name.endswith("_test.go"))
            files.update(d / f for f in pkg.get("EmbedFiles", []) + pkg.get("SFiles", []) + pkg.get("HFiles", []))
    return sorted(files)


setup(distclass=BinaryDistribution, cmdclass={"build_py": BuildPy, "bdist_wheel": BdistWheel, "sdist": Sdist})
