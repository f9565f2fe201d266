"""examples/demo_train.py end to end on the tiny test dataset: it trains, draws
progress on stderr, prints its report, and the loss falls."""

import json
import os
import re
import subprocess
import sys

from conftest import ROOT, ROWS


def test_demo_trains_and_reports(dataset, binary, tmp_path):
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=8", JAX_PLATFORMS="cpu",
               MESHFEED_BIN=str(binary))
    out_json = tmp_path / "report.json"
    # B=64 over 1000 rows: 16 steps per epoch, so 20 steps cross an epoch and use the padded last step.
    proc = subprocess.run([sys.executable, str(ROOT / "examples" / "demo_train.py"), "--data", str(dataset),
                           "--steps", "20", "--batch", "64", "--shuffle-window", "200", "--json", str(out_json)],
                          env=env, capture_output=True, timeout=120)
    out, err = proc.stdout.decode(), proc.stderr.decode()  # bytes: keep the carriage returns
    assert proc.returncode == 0, out + err
    for line in ("-- report", "steps ", "throughput ", "data wait ", "loss "):
        assert line in out, f"report line {line!r} missing:\n{out}"
    assert re.search(r"^steps\s+20 x 64 rows", out, re.M), out
    assert re.search(r"data wait\s+[\d.]+ s = [\d.]+% of that time", out), out
    m = re.search(r"^loss\s+first ([\d.]+)\s+last ([\d.]+)", out, re.M)
    assert m, out
    first, last = float(m.group(1)), float(m.group(2))
    assert last < 0.8 * first, f"loss did not fall: first {first}, last {last}\n{out}"
    assert f"{ROWS:,} rows" in out  # the header names the dataset's size
    # the progress bar: carriage-return redraws on stderr ending at the last step
    assert "\rstep 20/20 [" in err and "rows/s" in err, err

    report = json.loads(out_json.read_text())
    assert report["steps"] == 20
    # 20 steps of 64 rows with one padded step (1000 = 15*64 + 40): 24 padding rows
    assert report["rows"] == 20 * 64 - 24 and report["padded_rows"] == 24
    assert 0 <= report["data_wait_share"] <= 1.0
    assert report["loss_first"] == first or abs(report["loss_first"] - first) < 1e-4
