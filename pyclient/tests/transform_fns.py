"""Transforms for test_transform.py, in a module of their own that imports
only NumPy: worker processes import it (not the test module, which
imports jax)."""

import os

import numpy as np


def noisy(batch, rng):
    """Every input column, plus ``noise`` (one normal draw per row from
    ``rng``) and ``x`` = features + noise, float32."""
    noise = rng.standard_normal(len(batch["id"])).astype(np.float32)
    out = dict(batch)
    out["noise"] = noise
    out["x"] = batch["features"] + noise[:, None]
    return out


def ids_and_pid(batch, rng):
    """``id`` doubled, and the process id that ran the function."""
    n = len(batch["id"])
    return {"twice": batch["id"] * 2, "pid": np.full(n, os.getpid(), np.int64)}


def drop_mask(batch, rng):
    """Only ``id``: the pad mask is left out (the loader adds it back)."""
    return {"id": batch["id"]}


def raise_on_id(batch, rng, bad=0):
    """Raises ValueError on the step that holds id ``bad``."""
    if (batch["id"] == bad).any():
        raise ValueError(f"bad row {bad} in this step")
    return {"id": batch["id"]}


def short(batch, rng):
    """One row too few in ``id``."""
    return {"label": batch["label"], "id": batch["id"][:-1]}


def strings(batch, rng):
    """A NumPy string array (not placeable)."""
    return {"id": batch["id"], "name": batch["id"].astype(str)}


def not_a_dict(batch, rng):
    return [batch["id"]]


def wider_later(batch, rng, at=0):
    """``x`` float32, float64 from the step that holds id ``at`` on."""
    x = batch["features"]
    return {"x": x.astype(np.float64) if (batch["id"] == at).any() else x}


def keep_id(batch, rng):
    """``id`` as it came (an input returned unchanged) and a new ``twice``."""
    return {"id": batch["id"], "twice": batch["id"] * 2}


def to_bfloat16(batch, rng):
    """``features`` as bfloat16 (a dtype NumPy knows only through ml_dtypes)."""
    import ml_dtypes
    return {"f": batch["features"].astype(ml_dtypes.bfloat16)}


def shout(batch, rng):
    """A string column (a pyarrow array in the batch) upper-cased, and ``id``."""
    import pyarrow.compute as pc
    return {"id": batch["id"], "name": pc.utf8_upper(batch["name"]), "name_len": pc.utf8_length(batch["name"])
            .to_numpy(zero_copy_only=False).astype("int32")}


def packed_tokens(batch, rng, key="tokens"):
    """A packed column's step: ``key`` plus 1, its segment ids as they
    came (an input returned unchanged), and ``<key>_count``, the tokens per
    packed row (each from its own row)."""
    toks, seg = batch[key], batch[key + "_segment_ids"]
    return {key: toks + 1, key + "_segment_ids": seg, key + "_count": (seg > 0).sum(axis=1).astype(np.int32)}


def row_sums(batch, rng):
    """Each column's per-row sum, float64 (``<key>_sum``): a function of
    every input value, for checks that a worker read the right bytes."""
    return {k + "_sum": np.asarray(v, np.float64).reshape(len(v), -1).sum(axis=1) for k, v in batch.items()}
