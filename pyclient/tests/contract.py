"""Expected values, derived independently of the client from docs/DESIGN.md
("The contract") and internal/datagen/values.go (the value functions)."""

import numpy as np

M64 = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15
TAG_LABEL = 0x6C6162656C000001
TAG_FEATURE = 0x6665617475720002
TAG_PIXEL = 0x706978656C000005


def mix64(x):
    x &= M64
    x ^= x >> 30
    x = (x * 0xBF58476D1CE4E5B9) & M64
    x ^= x >> 27
    x = (x * 0x94D049BB133111EB) & M64
    x ^= x >> 31
    return x


def row_base(seed, tag, i):
    return mix64(mix64(seed ^ tag) ^ (int(i) & M64))


def label(i, seed=0):
    return row_base(seed, TAG_LABEL, i) % 1000


def features(i, n, seed=0):
    base = row_base(seed, TAG_FEATURE, i)
    return [float(np.float32(((mix64(base + j * GOLDEN) >> 40) - (1 << 23)) / (1 << 23))) for j in range(n)]


def pixels(i, n, seed=0):
    base = row_base(seed, TAG_PIXEL, i)
    return [(mix64(base + (k // 8) * GOLDEN) >> (8 * (k % 8))) & 0xFF for k in range(n)]


def stream_range(n, D, d):
    """Stream d of D contiguous streams over n rows: lengths differ by at most one."""
    q, r = divmod(n, D)
    return d * q + min(d, r), q + (1 if d < r else 0)


def steps_per_epoch(n, B, policy):
    return -(-n // B) if policy == "pad" else n // B


def expected_ids(n, B, D, step):
    """(ids, mask) of global step `step` without shuffling; padding has id 0, mask False."""
    b = B // D
    ids, mask = [], []
    for d in range(D):
        start, length = stream_range(n, D, d)
        for r in range(step * b, (step + 1) * b):
            ids.append(start + r if r < length else 0)
            mask.append(r < length)
    return np.array(ids, dtype=np.int64), np.array(mask)
