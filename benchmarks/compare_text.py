"""The `text` workload of benchmarks/compare.py: raw text in Parquet to packed
token rows, meshfeed against what a JAX user writes today.

The dataset is `meshfeed gen-text` over the running Python's standard library
(documents of 100 to 20,000 characters); the tokenizer a byte-level BPE
tokenizer.json of the GPT-2 family (testdata/tokenizer_families.py `gpt2`,
VOCAB tokens), trained once on the first TRAIN_DOCS documents with the
`tokenizers` library and kept inside the dataset directory (where a local
meshfeed server may read it). Every loader delivers the epoch packed by
concatenate-then-split: documents in its order, each followed by the
end-of-text token, cut into rows of LENGTH tokens, as three int32 [B, LENGTH]
arrays `text`, `text_segment_ids` (the pieces of a row from 1, 0 on padding)
and `text_positions` (from 0 at each piece, a document continued from the
previous row included); only the epoch's last row is short, its last step
padded to B rows with padding rows.

  meshfeed   Loader(columns={"text": Column(tokenizer=PATH, length=LENGTH,
             pack="concat")}, last_batch="pad")
  plain      pyarrow iter_batches -> tokenizers encode_batch (all cores) ->
             numpy concatenate-then-split (ConcatSplit) -> jax
  Ray Data   read_parquet -> map_batches(tokenize; tasks) ->
             iter_batches -> the same numpy packing in the training process -> jax
  Grain      ParquetIterDataset -> map(tokenize one document) in worker
             processes (mp_prefetch) -> ConcatThenSplitIterDataset (Grain's own
             packing) -> batch -> device_put

What a run delivered is checked against a model computed from the same
tokenizer.json by `tokenizers` itself (expected()): the non-padding tokens, their
sum and sum of squares, the end-of-text tokens and the rows holding tokens over
the epoch, plus a count of layout violations (segment ids and positions that do
not follow the rules above, a new piece not after an end-of-text token, padding
that is not zero or not at a row's end after the last document). These sums do
not depend on the order documents arrive in (Ray's is not file order).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import time
from typing import Any, Iterator

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

LENGTH = 2048  # tokens per packed row
VOCAB = 32768  # the trained tokenizer's vocabulary (GPT-2's is 50,257)
TRAIN_DOCS = 2000  # documents the tokenizer is trained on
EOD = "<|endoftext|>"
READ_DOCS = 256  # documents per pyarrow / Ray batch handed to the tokenizer
KEYS = ("text", "text_segment_ids", "text_positions")
# The checksum's fields (compare.py prints them in this order).
CHECKSUM = ("tokens", "token sum", "token sum of squares", "end-of-text tokens", "rows with tokens",
            "layout violations")


def data_files(data: str) -> list[str]:
    """The dataset's Parquet files (not meshfeed's `_`-named manifests)."""
    return sorted(os.path.join(data, f) for f in os.listdir(data)
                  if f.endswith(".parquet") and not f.startswith(("_", ".")))


def tokenizer_path(data: str) -> str:
    """Where the trained tokenizer.json lives: inside the dataset directory
    (where a local server may read it), `_`-named so that no loader takes it
    for data."""
    return os.path.join(data, "_tokenizer.json")


def prepare(binary: str, data: str, docs: int, files: int, row_group_docs: int, seed: int = 1) -> dict:
    """Generates the corpus (unless data holds this one), trains the tokenizer
    once and returns what the runs need: the gen command, the tokenizer's
    path, hash and end-of-text id. The corpus is regenerated when its
    parameters change (a stamp file in data says which it holds)."""
    source = sysconfig.get_paths()["stdlib"]
    gen = [binary, "gen-text", "--out", data, "--source", source, "--docs", str(docs), "--files", str(files),
           "--row-group-rows", str(row_group_docs), "--seed", str(seed)]
    stamp_path = os.path.join(data, "_bench_text.json")
    stamp = {"gen": gen[2:], "vocab": VOCAB, "train_docs": TRAIN_DOCS}
    try:
        with open(stamp_path) as f:
            same = json.load(f) == stamp
    except (OSError, ValueError):
        same = False
    tok = tokenizer_path(data)
    if not same:
        shutil.rmtree(data, ignore_errors=True)
        subprocess.run(gen, check=True, stdout=subprocess.DEVNULL)
        import pyarrow.parquet as pq
        sys.path.insert(0, os.path.join(ROOT, "testdata"))
        import tokenizer_families
        texts = pq.read_table(data_files(data)[0], columns=["text"]).column("text").to_pylist()
        for f in data_files(data)[1:]:
            if len(texts) >= TRAIN_DOCS:
                break
            texts += pq.read_table(f, columns=["text"]).column("text").to_pylist()
        t0 = time.perf_counter()
        text = tokenizer_families.gpt2(texts[:TRAIN_DOCS], vocab=VOCAB)
        print(f"compare: text: trained {tok} in {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
        with open(tok, "w", encoding="utf-8") as f:
            f.write(text)
        with open(stamp_path, "w") as f:
            json.dump(stamp, f)
    from tokenizers import Tokenizer
    with open(tok, "rb") as f:
        sha = hashlib.sha256(f.read()).hexdigest()
    eod = Tokenizer.from_file(tok).token_to_id(EOD)
    if eod is None:
        raise SystemExit(f"{tok}: no {EOD} token; remove {data} and rerun")
    return {"gen": gen, "tokenizer": tok, "tokenizer_sha256": sha, "eod": eod}


def build_index(binary: str, data: str, tok: str) -> dict:
    """`meshfeed index` over the corpus, as a user storing the token-count
    index beside the data does once; returns its wall and CPU seconds (or
    why it could not run: a binary without the command)."""
    cmd = [binary, "index", "--tokenizer", tok, "--column", "text", data]
    t0 = time.perf_counter()
    r0 = os.times()
    p = subprocess.run(cmd, capture_output=True, text=True)
    r1 = os.times()
    out = {"command": " ".join(os.path.relpath(x, ROOT) if x.startswith(ROOT) else x for x in cmd),
           "seconds": time.perf_counter() - t0,
           "cpu_seconds": (r1.children_user - r0.children_user) + (r1.children_system - r0.children_system)}
    if p.returncode != 0:
        out["error"] = (p.stderr or p.stdout).strip()[-500:]
    return out


def expected(data: str, info: dict, rows_per_step: int) -> dict:
    """The checksum every loader must deliver, from `tokenizers` encoding
    every document (encode_batch, all cores; cached in the dataset directory
    by tokenizer hash): see CHECKSUM."""
    import numpy as np
    cache = os.path.join(data, f"_expected-{info['tokenizer_sha256'][:16]}.json")
    if os.path.exists(cache):
        with open(cache) as f:
            per = json.load(f)
    else:
        import pyarrow.parquet as pq
        from tokenizers import Tokenizer
        tok = Tokenizer.from_file(info["tokenizer"])
        eod = info["eod"]
        per = {"docs": 0, "ids": 0, "sum": 0, "sum2": 0, "eod_inside": 0}
        for f in data_files(data):
            for rb in pq.ParquetFile(f).iter_batches(batch_size=READ_DOCS, columns=["text"]):
                for e in tok.encode_batch(rb.column(0).to_pylist()):
                    ids = np.asarray(e.ids, np.int64)
                    per["docs"] += 1
                    per["ids"] += len(ids)
                    per["sum"] += int(ids.sum())
                    per["sum2"] += int((ids * ids).sum())
                    per["eod_inside"] += int((ids == eod).sum())
        with open(cache, "w") as f:
            json.dump(per, f)
    eod, d = info["eod"], per["docs"]
    tokens = per["ids"] + d
    rows = -(-tokens // LENGTH)
    steps = -(-rows // rows_per_step)
    return {"rows": steps * rows_per_step, "docs": d, "tokens": tokens, "packed_rows": rows, "steps": steps,
            "checksum": [tokens, per["sum"] + d * eod, per["sum2"] + d * eod * eod, d + per["eod_inside"], rows, 0],
            "features_sum": 0.0}


def make_acc(jax, jnp, eod: int):
    """The jitted per-step checksum (CHECKSUM) of a batch's three arrays."""
    @jax.jit
    def acc(ints, b):
        tok, seg, pos = b["text"], b["text_segment_ids"], b["text_positions"]
        real = seg > 0
        t64 = tok.astype(jnp.int64)
        is_eod = tok == eod
        ps, cs, pp, cp, pt = seg[:, :-1], seg[:, 1:], pos[:, :-1], pos[:, 1:], tok[:, :-1]
        same = (cs > 0) & (cs == ps) & (cp == pp + 1)
        new = (ps > 0) & (cs == ps + 1) & (cp == 0) & (pt == eod)
        pad = (cs == 0) & (tok[:, 1:] == 0) & (cp == 0) & ((ps == 0) | (pt == eod))
        first = ((seg[:, 0] == 1) | ((seg[:, 0] == 0) & (tok[:, 0] == 0))) & (pos[:, 0] == 0)
        bad = jnp.sum(~(same | new | pad)) + jnp.sum(~first)
        return ints + jnp.stack([jnp.sum(real), jnp.sum(jnp.where(real, t64, 0)), jnp.sum(jnp.where(real, t64 * t64, 0)),
                                 jnp.sum(real & is_eod), jnp.sum(real[:, 0]), bad]).astype(jnp.int64)
    return acc


class ConcatSplit:
    """Concatenate-then-split packing in numpy, as a user writes it: token
    ids with their end-of-text tokens appended go in (a flat int32 array and
    each document's length), steps of B rows of `length` tokens come out as
    (tokens, segment ids, positions), each int32 [B, length]."""

    def __init__(self, rows: int, length: int = LENGTH):
        import numpy as np
        self.np, self.rows, self.length = np, rows, length
        self.tok = np.zeros(0, np.int32)
        self.start = np.zeros(0, bool)  # True where a document starts

    def add(self, flat, lens) -> Iterator[tuple]:
        """Appends documents (flat: their ids, each ending with the end-of-text
        token; lens: their lengths) and yields every step now complete."""
        np = self.np
        starts = np.zeros(len(flat), bool)
        if len(lens):
            starts[np.concatenate(([0], np.cumsum(lens)[:-1]))] = True
        self.tok = np.concatenate((self.tok, flat))
        self.start = np.concatenate((self.start, starts))
        n = self.rows * self.length
        while len(self.tok) >= n:
            yield self._step(self.tok[:n], self.start[:n], n)
            self.tok, self.start = self.tok[n:], self.start[n:]

    def finish(self) -> Iterator[tuple]:
        """The last step: the remaining tokens, padded."""
        np = self.np
        n = len(self.tok)
        if n:
            size = self.rows * self.length
            tok = np.zeros(size, np.int32)
            start = np.zeros(size, bool)
            tok[:n], start[:n] = self.tok, self.start
            yield self._step(tok, start, n)
        self.tok, self.start = self.tok[:0], self.start[:0]

    def _step(self, tok, start, n: int) -> tuple:
        np = self.np
        shape = (self.rows, self.length)
        tok, start = tok.reshape(shape), start.reshape(shape).copy()
        start[:, 0] = True  # every row begins a piece
        col = np.arange(self.length, dtype=np.int32)
        valid = (np.arange(self.rows * self.length) < n).reshape(shape)
        seg = np.cumsum(start, axis=1, dtype=np.int32) * valid
        pos = (col - np.maximum.accumulate(np.where(start, col, 0), axis=1)) * valid
        return np.ascontiguousarray(tok), seg.astype(np.int32), pos.astype(np.int32)


def flat_ids(encodings, eod: int):
    """The ids of tokenizers Encodings, each followed by eod, as (flat int32,
    lengths)."""
    import numpy as np
    lens = np.fromiter((len(e.ids) + 1 for e in encodings), np.int64, len(encodings))
    flat = np.concatenate([np.asarray(e.ids + [eod], np.int32) for e in encodings]) if len(encodings) \
        else np.zeros(0, np.int32)
    return flat, lens


_RAY_TOKENIZERS: dict = {}  # path -> Tokenizer, loaded once per Ray worker process


def ray_tokenize(t, path: str, eod: int):
    """Ray Data map_batches function (tasks: an actor pool holding every core
    starves read_parquet's tasks on a small machine and hangs): a pyarrow
    batch of documents to a list<int32> column `ids`, each document's ids and
    the end-of-text token."""
    import numpy as np
    import pyarrow as pa
    tok = _RAY_TOKENIZERS.get(path)
    if tok is None:
        from tokenizers import Tokenizer
        tok = _RAY_TOKENIZERS[path] = Tokenizer.from_file(path)
    flat, lens = flat_ids(tok.encode_batch(t.column("text").to_pylist()), eod)
    offsets = np.concatenate(([0], np.cumsum(lens))).astype(np.int32)
    return pa.table({"ids": pa.ListArray.from_arrays(pa.array(offsets), pa.array(flat))})


class GrainTokenize:
    """Grain map: one document (a row dict) to {"text": its ids and the
    end-of-text token, int32}. The tokenizer loads lazily in each worker."""

    def __init__(self, path: str, eod: int):
        self.path, self.eod, self.tok = path, eod, None

    def __getstate__(self) -> dict:
        return {"path": self.path, "eod": self.eod, "tok": None}

    def __call__(self, r: dict) -> dict:
        import numpy as np
        if self.tok is None:
            from tokenizers import Tokenizer
            self.tok = Tokenizer.from_file(self.path)
        ids = self.tok.encode(r["text"]).ids
        ids.append(self.eod)
        return {"text": np.asarray(ids, np.int32)}


def pad_rows(b: dict, rows: int) -> dict:
    """A Grain batch of fewer than `rows` rows (the epoch's last) padded with
    padding rows (zeros)."""
    import numpy as np
    n = len(b["text"])
    if n == rows:
        return b
    return {k: np.concatenate((v, np.zeros((rows - n,) + v.shape[1:], v.dtype))) for k, v in b.items()}


def loader_iter(name: str, data: str, B: int, sharding, info: dict, grain_workers: int, setup: Any) -> tuple:
    """The iterator of steps (dicts of KEYS -> jax.Array) of loader `name`,
    and the meshfeed Loader to close (or None)."""
    import jax
    import numpy as np
    files = data_files(data)
    path, eod = info["tokenizer"], info["eod"]

    def put(steps):
        for tok, seg, pos in steps:
            yield {k: jax.make_array_from_process_local_data(sharding, v) for k, v in zip(KEYS, (tok, seg, pos))}

    if name == "meshfeed":
        import meshfeed
        col = meshfeed.Column(tokenizer=path, length=LENGTH, pack="concat")
        loader = meshfeed.Loader(data, global_batch_size=B, sharding=sharding, columns={"text": col},
                                 last_batch="pad", prefetch=2)
        return iter(loader), loader
    if name == "plain":
        import pyarrow.parquet as pq
        from tokenizers import Tokenizer
        tok = Tokenizer.from_file(path)

        def steps():
            pack = ConcatSplit(B)
            for f in files:
                for rb in pq.ParquetFile(f).iter_batches(batch_size=READ_DOCS, columns=["text"]):
                    yield from pack.add(*flat_ids(tok.encode_batch(rb.column(0).to_pylist()), eod))
            yield from pack.finish()
        return put(steps()), None
    if name == "ray":
        ds = setup.data.read_parquet(files, columns=["text"])
        ds = ds.map_batches(ray_tokenize, fn_kwargs={"path": path, "eod": eod}, batch_size=READ_DOCS,
                            batch_format="pyarrow")

        def steps():
            pack = ConcatSplit(B)
            for t in ds.iter_batches(batch_size=None, batch_format="pyarrow", prefetch_batches=2):
                ids = t.column("ids").combine_chunks()
                offs = ids.offsets.to_numpy()
                yield from pack.add(ids.values.to_numpy(), np.diff(offs))
            yield from pack.finish()
        return put(steps()), None
    if name == "grain":
        import absl.flags
        import grain
        absl.flags.FLAGS.mark_as_parsed()  # Grain's worker processes read absl flags
        ds = grain.experimental.ParquetIterDataset(files).map(GrainTokenize(path, eod))
        workers = grain_workers or os.cpu_count() or 1
        ds = ds.mp_prefetch(grain.MultiprocessingOptions(num_workers=min(workers, len(files))))
        ds = grain.experimental.ConcatThenSplitIterDataset(ds, length_struct={"text": LENGTH})
        ds = ds.batch(B, drop_remainder=False).map(lambda b: pad_rows(b, B))
        return iter(grain.experimental.device_put(ds, sharding)), None
    raise SystemExit(f"text: no loader {name!r} (want meshfeed, plain, ray or grain)")


def utilization_args(info: dict) -> list[str]:
    """`python -m meshfeed bench` arguments that make it deliver what the
    meshfeed loader above delivers."""
    return ["--columns", "text", "--length", f"text={LENGTH}", "--tokenizer", f"text={info['tokenizer']}",
            "--pack", "text=concat", "--last-batch", "pad"]


# -- the report ---------------------------------------------------------------

LABELS = {
    "meshfeed": 'meshfeed Column(tokenizer=, pack="concat")',
    "plain": "plain loop: iter_batches, encode_batch, numpy packing",
    "ray": "Ray Data map_batches (tokenize), numpy packing",
    "grain": "Grain map (tokenize) in workers, ConcatThenSplitIterDataset",
}
BASELINES = ("plain", "ray", "grain")
# The text workload's measure: non-padding tokens over the whole epoch, from
# building the pipeline (first batch included). Ray Data runs its read and
# map tasks ahead while the first batch is prepared (on a corpus this size,
# one read task and one map task tokenize every document before the first
# block comes out), so its rate after the first batch counts packing alone.
EPOCH = "tokens_per_second_with_first"
TABLE_HEAD = ("| loader | runs | tokens/s over the epoch, first batch included (median; min-max) | tokens/s after "
              "the first batch | rows/s | CPU s per M tokens | peak memory (PSS, all processes) | time to first batch "
              "| epoch tokens/s vs the best baseline |")


def verdict(ok: bool, how: str) -> str:
    """A target's verdict: met, or missed and how."""
    return "**met**" if ok else f"**missed** ({how})"


def dataset_paragraph(gen: str, s: dict, what: str, want: dict) -> str:
    """The text workload's dataset, packing and index, in a paragraph."""
    stdlib = sysconfig.get_paths()["stdlib"]
    gen = gen.replace(stdlib, "$STDLIB")
    out = (f"Dataset `{gen}` ($STDLIB: the standard library of Python {sys.version.split()[0]}): {s['rows']:,} "
           f"documents of {what}; {s['files']} files, row groups of {s['row_group_rows']:,} documents. Tokenizer: a "
           f"byte-level BPE tokenizer.json of the GPT-2 family ({VOCAB:,} tokens, `<|endoftext|>`) trained by "
           f"`tokenizers` on the first {min(s['rows'], TRAIN_DOCS):,} documents (testdata/tokenizer_families.py "
           f"`gpt2`). Every loader packs by concatenate-then-split (`<|endoftext|>` after every document) into "
           f"int32 `text`, `text_segment_ids`, `text_positions` [B, {LENGTH}]. Global batch {s['batch']:,} packed "
           f"rows")
    if want:
        out += (f"; the epoch is {want['tokens']:,} tokens (`tokenizers`' ids and one `<|endoftext|>` per "
                f"document) in {want['packed_rows']:,} packed rows, {want['steps']:,} steps (the last padded)")
    out += (". The loaders (benchmarks/compare_text.py): meshfeed `Column(tokenizer=PATH, length=2048, "
            "pack=\"concat\")`, `last_batch=\"pad\"`; the plain loop `iter_batches` of 256 documents, `tokenizers` "
            "`encode_batch` (all cores), numpy concatenate-then-split (`ConcatSplit`); Ray Data `map_batches` "
            "tokenizing (tasks), `iter_batches`, the same numpy packing; Grain `ParquetIterDataset` "
            "-> `map` (`encode` per document) in `mp_prefetch` worker processes (one per core) -> "
            "`ConcatThenSplitIterDataset` -> `batch` -> `device_put`. No loader shuffles. tokens/s counts "
            "non-padding tokens: over the epoch, from building the pipeline to the last step (the measure of the "
            "targets: Ray Data runs its read and map tasks ahead while its first batch is prepared, so on a corpus "
            "this size its rate after the first batch counts little but packing), and after the first batch. The "
            "utilization step is sized from meshfeed's rows/s after the first batch.")
    return out


def index_line(s: dict, loops: dict, want: dict) -> str:
    """What building meshfeed's token-count index cost against one epoch at
    meshfeed's free-loop rate ("" when it was not built)."""
    idx = s.get("index")
    if not idx:
        return ""
    if "error" in idx:
        return f"`{idx['command']}` failed: `{idx['error'].splitlines()[-1] if idx['error'] else ''}`."
    out = (f"meshfeed plans its steps from the token-count index in the dataset's manifest, built once before the "
           f"runs (as a user storing it beside the data does) by `{idx['command']}`: {idx['seconds']:.2f} s, "
           f"{idx['cpu_seconds']:.2f} CPU s")
    m = next((r for r in loops.get("free", []) if r["loader"] == "meshfeed" and "error" not in r), None)
    if m and want.get("tokens") and m["tokens_per_second"] > 0:
        epoch = want["tokens"] / m[EPOCH]
        out += (f", against {epoch:.2f} s for one epoch of meshfeed's free loop at its median tokens/s over the "
                f"epoch ({idx['seconds'] / epoch:.2f}x)")
    return out + "."


def row_name(label: str, r: dict) -> str:
    """A result table's loader cell (this table's and compare.py's): the
    label, with a note when the epoch was cut by the time cap or the
    loader's teardown failed."""
    return (f"{label}{' (partial epoch: time cap)' if r['partial'] else ''}"
            f"{' (teardown failed: exit status %d)' % r['teardown_exit_status'] if r.get('teardown_exit_status') else ''}")


def failed_row(label: str, error: str, line: int, width: int) -> str:
    """A result table's row of a loader that failed: line `line` of its error
    output, cut at `width` characters, in the third of the nine columns."""
    err = error.strip().splitlines()
    return f"| {label} | 0 | failed: {err[line][:width] if err else ''} | | | | | | |"


def _best_baseline(rows: list[dict], key: str = EPOCH) -> dict | None:
    ok = [r for r in rows if r["loader"] in BASELINES and "error" not in r]
    return max(ok, key=lambda r: r[key]) if ok else None


def fmt_table(rows: list[dict]) -> str:
    """One table of the text workload: a row per loader (medians)."""
    lines = [TABLE_HEAD, "|" + "---|" * 9]
    best = _best_baseline(rows)
    for r in rows:
        name = LABELS[r["loader"]]
        if "error" in r:
            lines.append(failed_row(name, r["error"], -1, 100))
            continue
        rng = (f"; {r[EPOCH + '_min']:,.0f}-{r[EPOCH + '_max']:,.0f}" if r["runs"] > 1 else "")
        ratio = f"{r[EPOCH] / best[EPOCH]:.2f}x" if best else ""
        lines.append(f"| {row_name(name, r)} | {r['runs']} | "
                     f"{r[EPOCH]:,.0f}{rng} | {r['tokens_per_second']:,.0f} | {r['rows_per_second']:,.1f} | "
                     f"{r['cpu_seconds_per_mtok']:.2f} | {r['peak_memory_bytes'] / 2**20:,.0f} MiB | "
                     f"{r['time_to_first_batch_s']:.2f} s | {ratio} |")
    return "\n".join(lines)


def targets(loops: dict, util: dict) -> list[str]:
    """The issue's text targets: meshfeed >= 2x the best baseline in tokens/s
    over the epoch in each loop (the ratio after the first batch beside it,
    without a verdict: see EPOCH); utilization >= 98% with the step at 80%
    of its rate."""
    lines = []
    for loop, rows in loops.items():
        m = next((r for r in rows if r["loader"] == "meshfeed" and "error" not in r), None)
        best = _best_baseline(rows)
        if m is None or best is None:
            lines.append(f"- {loop} loop, tokens/s over the epoch, meshfeed >= 2x the best baseline: not measured.")
            continue
        got = m[EPOCH] / best[EPOCH]
        after = _best_baseline(rows, "tokens_per_second")
        lines.append(f"- {loop} loop, tokens/s over the epoch, meshfeed >= 2x the best baseline "
                     f"({LABELS[best['loader']]}): {got:.2f}x, "
                     + verdict(got >= 2.0, f"{100 * (1 - got / 2.0):.0f}% short")
                     + f" (after the first batch, for the record: {m['tokens_per_second'] / after['tokens_per_second']:.2f}x "
                       f"{LABELS[after['loader']]}).")
    for kind, u in util.items():
        if "error" in u:
            continue
        lines.append(f"- utilization >= 98% with a {kind} step at 80% of meshfeed's rate over the epoch: "
                     f"{100 * u['utilization']:.2f}%, "
                     + verdict(u["utilization"] >= 0.98, f"{100 * (0.98 - u['utilization']):.2f} points short") + ".")
    return lines
