"""Smoke tests of ``python -m meshfeed bench`` on the session's small dataset
(1000 rows in 2 files): the figures it reports are present and consistent
with the run's own arithmetic. No Ray, Grain or matplotlib needed."""

import json
import os
import subprocess
import sys

import pytest

from conftest import ROWS

KEYS = ("utilization", "rows_per_second", "bytes_per_second", "wait_p50_ms", "wait_p99_ms",
        "time_to_first_batch_s", "peak_rss_bytes")


def bench(tmp_path, binary, *args, check=True):
    out = tmp_path / "bench.json"
    env = dict(os.environ, MESHFEED_BIN=binary)
    r = subprocess.run([sys.executable, "-m", "meshfeed", "bench", *args, "--json", str(out), "--no-progress"],
                       capture_output=True, text=True, env=env, timeout=300)
    if check:
        assert r.returncode == 0, f"bench failed ({r.returncode}):\n{r.stdout}\n{r.stderr}"
        return json.loads(out.read_text()), r
    return None, r


def test_sleep_step_report(tmp_path, binary, glob):
    B, steps, ms = 80, 8, 5.0
    rep, r = bench(tmp_path, binary, glob, "--global-batch-size", str(B), "--mesh", "data=8",
                   "--steps", str(steps), "--step", "sleep", "--step-ms", str(ms))
    for k in KEYS:
        assert k in rep, f"key {k} missing from {sorted(rep)}"
    assert "accelerator utilization" in r.stdout and "time to first batch" in r.stdout
    assert rep["steps"] == steps and rep["measured_steps"] == steps - 1
    assert rep["rows"] == (steps - 1) * B  # the first step is not measured
    assert rep["total_rows"] == steps * B
    assert 0 < rep["utilization"] <= 1
    # Each measured step sleeps ms: the time computing is at least that, and
    # utilization is that time over the measured wall time.
    assert rep["compute_s"] >= (steps - 1) * ms / 1e3
    assert rep["utilization"] == pytest.approx(min(1.0, rep["compute_s"] / rep["wall_s"]), rel=1e-9)
    assert rep["wall_s"] >= rep["compute_s"] + rep["wait_s"] * 0.99
    assert rep["rows_per_second"] == pytest.approx(rep["rows"] / rep["wall_s"], rel=1e-9)
    assert rep["rows_per_second"] < B / (ms / 1e3)  # cannot beat one batch per sleep
    assert rep["bytes_per_second"] > 0 and rep["bytes"] > rep["rows"]  # id alone is 8 bytes a row
    assert 0 <= rep["wait_p50_ms"] <= rep["wait_p99_ms"] <= rep["wait_max_ms"]
    assert rep["time_to_first_batch_s"] > 0
    assert rep["peak_rss_client_bytes"] > 0 and rep["peak_rss_server_bytes"] > 0
    assert rep["peak_rss_bytes"] == rep["peak_rss_client_bytes"] + rep["peak_rss_server_bytes"]
    assert rep["cpu_seconds_per_gb"] > 0
    # The server the bench starts serves shared memory; what it sent by
    # reference is part of what was delivered.
    assert rep["transport"] == "shm" and 0 <= rep["in_place_bytes"] <= rep["total_bytes"]


def test_epoch_drops_remainder(tmp_path, binary, glob):
    B = 320  # 1000 rows: 3 full steps, 40 rows dropped
    rep, _ = bench(tmp_path, binary, glob, "-B", str(B), "--epochs", "1", "--columns", "id,label",
                   "--shuffle-window", "200", "--x64")
    assert rep["steps"] == ROWS // B and rep["steps_per_epoch"] == ROWS // B
    assert rep["total_rows"] == (ROWS // B) * B
    assert rep["total_bytes"] == (ROWS // B) * B * (8 + 4)  # int64 id + int32 label
    assert rep["step"] == "none"


def test_compute_step_is_calibrated(tmp_path, binary, glob):
    rep, _ = bench(tmp_path, binary, glob, "-B", "80", "--steps", "4", "--step", "compute", "--step-ms", "5")
    assert rep["step"] == "compute" and rep["step_iterations"] >= 1
    assert rep["step_ms_measured"] > 0
    assert 0 < rep["utilization"] <= 1


def test_gcs_emulator(tmp_path, binary, glob):
    B = 200  # divides the 1000 rows: every row is delivered
    rep, r = bench(tmp_path, binary, glob, "-B", str(B), "--epochs", "1", "--gcs-emulator")
    assert rep["storage"] == "fake GCS"
    assert all(u.startswith("gs://") for u in rep["uris"]), rep["uris"]
    assert rep["total_rows"] == ROWS and rep["steps"] == ROWS // B


@pytest.mark.parametrize("args,want", [
    (["--mesh", "data=3"], "needs 3 devices"),
    (["--mesh", "data"], "want NAME=SIZE"),
    (["--steps", "0"], "--steps must be >= 1"),
    (["--mesh", "data=8", "--batch-axes", "model"], "no mesh axis 'model'"),
    (["--chips-per-host", "4"], "--chips-per-host needs --topology"),
])
def test_bad_arguments(tmp_path, binary, glob, args, want):
    _, r = bench(tmp_path, binary, glob, "-B", "80", *args, check=False)
    assert r.returncode != 0, f"bench {args} = exit 0, want an error"
    assert want in r.stderr, f"bench {args}: stderr {r.stderr!r}, want {want!r}"

