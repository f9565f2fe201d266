"""The checked-in JAX vectors are exactly what testdata/jax_vectors.py writes.

The generator runs in a subprocess with its own XLA_FLAGS (it forces a CPU
device count before importing jax); this pytest process never imports jax.
"""

import json
import os
import pathlib
import subprocess
import sys

HERE = pathlib.Path(__file__).resolve().parent
SCRIPT = HERE / "jax_vectors.py"
VECTORS = HERE / "jax_vectors.json"
REGENERATE = ".venv/bin/python testdata/jax_vectors.py --out testdata/jax_vectors.json"


def test_generator_reproduces_checked_in_json(tmp_path):
    out = tmp_path / "jax_vectors.json"
    env = dict(os.environ)
    # A conflicting device count must not leak in; the script sets its own.
    env["XLA_FLAGS"] = "--xla_force_host_platform_device_count=3"
    env["JAX_PLATFORMS"] = "cpu"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--out", str(out)],
        env=env,
        cwd=HERE.parent,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, f"{SCRIPT.name} failed:\n{proc.stdout}\n{proc.stderr}"
    got = out.read_text(encoding="utf-8")
    want = VECTORS.read_text(encoding="utf-8")
    if got != want:
        got_cases = {c["name"]: c for c in json.loads(got)["cases"]}
        want_cases = {c["name"]: c for c in json.loads(want)["cases"]}
        differing = sorted(n for n in got_cases.keys() | want_cases.keys() if got_cases.get(n) != want_cases.get(n))
        raise AssertionError(
            f"{VECTORS.name} is stale or the generator is not deterministic; "
            f"cases that differ: {differing or '(metadata or formatting only)'}. "
            f"Regenerate with: {REGENERATE}"
        )


def test_checked_in_json_covers_the_spec():
    doc = json.loads(VECTORS.read_text(encoding="utf-8"))
    cases = doc["cases"]
    assert len(cases) >= 24, len(cases)
    names = [c["name"] for c in cases]
    assert len(set(names)) == len(names), "duplicate case names"
    kinds = {(len(c["shape"]), len(c["batch_axes"])) for c in cases}
    for want in [(1, 0), (1, 1), (2, 0), (2, 1), (2, 2), (3, 0), (3, 1), (3, 2)]:
        assert want in kinds, f"no case with a {want[0]}-D mesh and {want[1]} batch axes"
    specs = {c["partition_spec"] for c in cases}
    assert "P()" in specs and "P(None,)" in specs, specs
    # A batch spec whose first-listed axis is minor in the mesh.
    assert any(
        len(c["batch_axes"]) >= 2 and c["axes"].index(c["batch_axes"][0]) > c["axes"].index(c["batch_axes"][1])
        for c in cases
    )
    # Non-default device orders, and several B per mesh.
    assert any(c["build"] == "mesh" and c["devices"] != sorted(c["devices"]) for c in cases)
    assert len({c["B"] for c in cases}) > 3
    # JAX's refusal of a B that D does not divide is recorded too.
    assert any(c.get("error") == "IndivisibleError" for c in cases)
    assert sum("rows" in c for c in cases) >= 24
    for c in cases:
        assert c["process"] == [d // c["devices_per_process"] for d in c["devices"]], c["name"]
        if "error" in c:
            continue
        assert len(c["devices"]) == len(c["process"]) == len(c["rows"]), c["name"]
        for start, stop in c["rows"].values():
            assert 0 <= start < stop <= c["B"], c["name"]
