"""examples/batch_inference.py end to end: run as a script on 8 CPU devices
over a dataset whose row count is not a multiple of the batch size, and check
its predictions against the model computed with numpy from the files."""

import os
import pathlib
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from contract import expected_ids

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "examples" / "batch_inference.py"
ROWS, FILES, RG_ROWS, FEATURES, B, DEVICES, SEED = 1001, 2, 90, 16, 64, 8, 5


def weights(k, seed):
    """The recipe the script's docstring documents, written out again here."""
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal(k) / np.sqrt(k)).astype(np.float32)
    return w, np.float32(rng.standard_normal())


@pytest.fixture(scope="module")
def bi_dataset(tmp_path_factory, binary):
    out = tmp_path_factory.mktemp("bi") / "ds"
    subprocess.run([binary, "gen", "--out", str(out), "--rows", str(ROWS), "--files", str(FILES),
                    "--row-group-rows", str(RG_ROWS), "--features", str(FEATURES)], check=True,
                   capture_output=True, timeout=60)
    return out


def run_script(*args, timeout=120):
    env = dict(os.environ)
    env["XLA_FLAGS"] = " ".join(
        [f for f in env.get("XLA_FLAGS", "").split() if not f.startswith("--xla_force_host_platform_device_count")]
        + [f"--xla_force_host_platform_device_count={DEVICES}"])
    env["JAX_PLATFORMS"] = "cpu"
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], env=env, capture_output=True,
                          text=True, timeout=timeout, cwd=ROOT)


def test_predictions_every_row_once(bi_dataset, tmp_path):
    assert ROWS % B and ROWS % DEVICES  # the last step is padded
    out = tmp_path / "predictions.parquet"
    p = run_script("--data", bi_dataset, "--out", out, "--batch-size", B, "--seed", SEED)
    assert p.returncode == 0, p.stdout + p.stderr
    assert f"wrote {ROWS} predictions in {-(-ROWS // B)} steps on {DEVICES} devices" in p.stdout, p.stdout
    assert not (tmp_path / "predictions.parquet.tmp").exists()

    got = pq.read_table(out)
    assert got.schema.names == ["id", "prediction"]
    assert got.schema.field("id").type == pa.int64() and got.schema.field("prediction").type == pa.float32()
    ids = got.column("id").to_numpy()
    pred = got.column("prediction").to_numpy()

    # the input, read directly: files sorted by path, rows in file order
    files = sorted(bi_dataset.glob("*.parquet"))
    src = pa.concat_tables([pq.read_table(f, columns=["id", "features"]) for f in files])
    src_ids = src.column("id").to_numpy()
    feats = np.stack(src.column("features").to_numpy(zero_copy_only=False)).astype(np.float32)
    assert feats.shape == (ROWS, FEATURES)

    # every id exactly once
    assert len(ids) == ROWS and len(np.unique(ids)) == ROWS
    assert sorted(ids.tolist()) == sorted(src_ids.tolist())
    # in the loader's order: step by step, slice by slice (padding dropped)
    order = np.concatenate([pos[mask] for pos, mask in
                            (expected_ids(ROWS, B, DEVICES, s) for s in range(-(-ROWS // B)))])
    np.testing.assert_array_equal(ids, src_ids[order])

    # each prediction is the model applied to that row's features
    w, bias = weights(FEATURES, SEED)
    row_of = {int(i): k for k, i in enumerate(src_ids)}
    rows = np.array([row_of[int(i)] for i in ids])
    want = np.tanh(feats[rows].astype(np.float64) @ w.astype(np.float64) + np.float64(bias))
    np.testing.assert_allclose(pred, want, rtol=1e-5, atol=1e-6)
    assert np.std(pred) > 0.1  # not a constant: the features matter


def test_other_seed_other_predictions(bi_dataset, tmp_path):
    a, b = tmp_path / "a.parquet", tmp_path / "b.parquet"
    for out, seed in ((a, SEED), (b, SEED + 1)):
        p = run_script("--data", str(bi_dataset / "*.parquet"), "--out", out, "--batch-size", 128, "--seed", seed)
        assert p.returncode == 0, p.stdout + p.stderr
    ta, tb = pq.read_table(a), pq.read_table(b)
    np.testing.assert_array_equal(ta.column("id").to_numpy(), tb.column("id").to_numpy())
    assert not np.allclose(ta.column("prediction").to_numpy(), tb.column("prediction").to_numpy())


def test_batch_size_not_a_multiple_of_devices(bi_dataset, tmp_path):
    out = tmp_path / "p.parquet"
    p = run_script("--data", bi_dataset, "--out", out, "--batch-size", 60)
    assert p.returncode != 0
    assert "--batch-size 60: want a positive multiple of the 8 devices" in p.stderr, p.stderr
    assert not out.exists()
