"""Tokenization speed side by side: meshfeed's tokenize package against the
`tokenizers` library (Rust) single-threaded and tiktoken (byte-level BPE),
on the same corpus and the same trained tokenizer.json files, in one run.

    .venv/bin/python benchmarks/tokenize_sidebyside.py [--docs 2000] [--rounds 3]

The corpus is `meshfeed gen-text` over the Python standard library (documents
of 100 to 20,000 characters with other scripts, emoji and odd whitespace); the
tokenizers are trained by testdata/tokenizer_families.py on its first 400
documents (T5's Unigram on 100). Both are cached under --dir.

meshfeed is timed by `meshfeed tokenize --summary` (encoding only, after the
Parquet read) with GOMAXPROCS=1 --workers 1, and with 2; the libraries are
timed in this process, one thread (RAYON_NUM_THREADS=1,
TOKENIZERS_PARALLELISM=false), on the texts already in Python. Each figure is
the best of --rounds, the engines alternating within a round. Token counts are
checked equal. Prints a Markdown table of MB/s of UTF-8 text per CPU second
(process CPU time: on a shared, loaded machine it moves far less than wall
time) and per wall second; the two-core speed-up can only be wall time.
"""

from __future__ import annotations

import os

os.environ["RAYON_NUM_THREADS"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"

import argparse  # noqa: E402
import json  # noqa: E402
import pathlib  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import sysconfig  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import pyarrow.parquet as pq  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "testdata"))

import tiktoken  # noqa: E402
import tiktoken.load  # noqa: E402
import tokenizers  # noqa: E402
import tokenizer_families as families  # noqa: E402


def meshfeed_encode(binary: str, tok: pathlib.Path, data: pathlib.Path, workers: int) -> tuple[float, float, int]:
    env = dict(os.environ, GOMAXPROCS=str(workers))
    p = subprocess.run([binary, "tokenize", "--tokenizer", str(tok), "--column", "text", "--summary",
                        "--workers", str(workers), str(data)], env=env, capture_output=True, text=True, check=True)
    s = json.loads(p.stdout)
    return s["encode_seconds"], s["encode_cpu_seconds"], s["tokens"]


def timed(fn) -> tuple[float, float, int]:
    t0, c0 = time.perf_counter(), time.process_time()
    n = fn()
    return time.perf_counter() - t0, time.process_time() - c0, n


def tiktoken_encoding(file: str, family: str) -> tiktoken.Encoding:
    with tempfile.TemporaryDirectory() as d:
        bpe, enc = families.tiktoken_files(file, d)
        ranks = tiktoken.load.data_gym_to_mergeable_bpe_ranks(bpe, enc)
    added = [t["content"] for t in json.loads(file)["added_tokens"]]
    return tiktoken.Encoding(f"bench-{family}", pat_str=families.BYTE_LEVEL[family], mergeable_ranks=ranks,
                             special_tokens={c: len(ranks) + i for i, c in enumerate(added)})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--docs", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--families", default="gpt2,llama3,qwen2,llama2,bert,t5")
    ap.add_argument("--dir", default=str(ROOT / ".cache" / "bench-tokenize"))
    ap.add_argument("--binary", default=os.environ.get("MESHFEED_BIN", str(ROOT / "bin" / "meshfeed")))
    args = ap.parse_args()
    d = pathlib.Path(args.dir) / f"docs{args.docs}-seed{args.seed}"
    data = d / "text"
    if not data.exists():
        subprocess.run([args.binary, "gen-text", "--out", str(data), "--source", sysconfig.get_paths()["stdlib"],
                        "--docs", str(args.docs), "--seed", str(args.seed)], check=True)
    texts = pq.read_table(data).column("text").to_pylist()
    mb = sum(len(t.encode()) for t in texts) / 1e6
    print(f"corpus: {len(texts)} documents, {mb:.2f} MB of UTF-8 text; {args.rounds} rounds, best of each\n")
    print("| tokenizer.json | meshfeed 1 core | tokenizers 1 thread | tiktoken 1 thread "
          "| meshfeed / tokenizers | meshfeed / tiktoken | meshfeed 2 cores, wall | 2 cores / 1 core, wall "
          "| CPU, 2 workers / 1 |")
    print("|---|---|---|---|---|---|---|---|---|")
    for fam in args.families.split(","):
        path = d / f"{fam}.json"
        if not path.exists():
            path.write_text(families.FAMILIES[fam](texts[:100 if fam == "t5" else 400]), encoding="utf-8")
        file = path.read_text(encoding="utf-8")
        ref = tokenizers.Tokenizer.from_file(str(path))
        tt = tiktoken_encoding(file, fam) if fam in families.BYTE_LEVEL else None
        wall: dict[str, float] = {}
        cpu: dict[str, float] = {}
        counts: dict[str, int] = {}

        def note(name: str, r: tuple[float, float, int]) -> None:
            wall[name] = min(wall.get(name, float("inf")), r[0])
            cpu[name] = min(cpu.get(name, float("inf")), r[1])
            counts[name] = r[2]

        for _ in range(args.rounds):
            note("m1", meshfeed_encode(args.binary, path, data, 1))
            note("m2", meshfeed_encode(args.binary, path, data, 2))
            note("hf", timed(lambda: sum(len(e.ids) for e in ref.encode_batch(texts))))
            if tt is not None:
                note("tt", timed(lambda: sum(len(tt.encode(t, allowed_special="all")) for t in texts)))
        assert counts["m1"] == counts["m2"] == counts["hf"], counts

        def both(k: str) -> str:
            return f"{mb / cpu[k]:.1f} ({mb / wall[k]:.1f})"

        def ratio(a: str, b: str) -> str:
            return f"{cpu[b] / cpu[a]:.1f}x ({wall[b] / wall[a]:.1f}x)"

        print(f"| {fam} | {both('m1')} | {both('hf')} | {both('tt') if tt else '-'} | {ratio('m1', 'hf')} | "
              f"{ratio('m1', 'tt') if tt else '-'} | {mb / wall['m2']:.1f} | {wall['m1'] / wall['m2']:.2f}x | {cpu['m2'] / cpu['m1']:.2f}x |", flush=True)
    print("\nMB/s per CPU second (per wall second); ratios likewise. The last column is the CPU time of"
          " two workers over one's: the parallel encoder's overhead (1.00x: none).")


if __name__ == "__main__":
    main()
