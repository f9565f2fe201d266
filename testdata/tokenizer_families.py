"""Tokenizer files of each family meshfeed implements, trained here with the
`tokenizers` library's own trainers, so that tests and benchmarks compare
meshfeed with the reference on files nobody hand-wrote.

Each builder takes an iterable of training texts and returns the
tokenizer.json text. The families and what makes them what they are:

- ``gpt2``: byte-level BPE, ByteLevel pre-tokenizer with its regex (GPT-2, RoBERTa).
- ``llama3``: byte-level BPE, Split with the Llama 3 regex then ByteLevel
  without regex, ``ignore_merges`` (Llama 3); ``qwen2`` is the same with single digits.
- ``llama2``: SentencePiece-style BPE with ``<0xNN>`` byte fallback and
  fused unknowns, normalizer Prepend("▁") + Replace(" ", "▁") (Llama 2, Mistral 7B).
- ``metaspace_bpe``: the same model with the Metaspace pre-tokenizer
  (prepend_scheme "first") instead of the normalizer (newer Llama 2 files).
- ``bert``: WordPiece with BertNormalizer and BertPreTokenizer (BERT uncased).
- ``t5``: Unigram with NFKC and Metaspace (T5 without its precompiled charsmap).
"""

from __future__ import annotations

import json
from typing import Callable, Iterable

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

VOCAB = 4000

LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                  r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
                 r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""

BYTE_TOKENS = [f"<0x{b:02X}>" for b in range(256)]


def gpt2(texts: Iterable[str], vocab: int = VOCAB) -> str:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=True)
    tr = trainers.BpeTrainer(vocab_size=vocab, special_tokens=["<|endoftext|>"],
                             initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, tr)
    return tok.to_str()


def _llama3_like(texts: Iterable[str], pattern: str) -> str:
    tok = Tokenizer(models.BPE(ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"]
    tr = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=specials,
                             initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, tr)
    bos = "<|begin_of_text|>"
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single=f"{bos} $A", pair=f"{bos} $A {bos} $B",
                                      special_tokens=[(bos, tok.token_to_id(bos))]),
    ])
    return tok.to_str()


def llama3(texts: Iterable[str]) -> str:
    return _llama3_like(texts, LLAMA3_PATTERN)


def qwen2(texts: Iterable[str]) -> str:
    return _llama3_like(texts, QWEN2_PATTERN)


def _sentencepiece_bpe(texts: Iterable[str]) -> Tokenizer:
    """BPE trained on Metaspace words with <unk>, <s>, </s> and the 256 byte tokens
    at the front of the vocabulary (as Llama 2's), byte fallback and fused unknowns."""
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=True)
    tr = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=["<unk>", "<s>", "</s>"] + BYTE_TOKENS,
                             limit_alphabet=300, show_progress=False)
    tok.train_from_iterator(texts, tr)
    return tok


def _llama2_file(tok: Tokenizer, *, normalizer: bool) -> str:
    """The trained file laid out as Llama 2's: byte tokens in the model's vocabulary
    only (not added tokens), BOS added by a template."""
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", tok.token_to_id("<s>"))])
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()])
    doc = json.loads(tok.to_str())
    doc["added_tokens"] = [t for t in doc["added_tokens"] if t["content"] not in BYTE_TOKENS]
    if normalizer:
        doc["normalizer"] = {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": "▁"},
            {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]}
        doc["pre_tokenizer"] = None
    else:
        doc["pre_tokenizer"] = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": False}
    return json.dumps(doc, ensure_ascii=False)


def llama2(texts: Iterable[str]) -> str:
    return _llama2_file(_sentencepiece_bpe(texts), normalizer=True)


def metaspace_bpe(texts: Iterable[str]) -> str:
    return _llama2_file(_sentencepiece_bpe(texts), normalizer=False)


def bert(texts: Iterable[str]) -> str:
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tr = trainers.WordPieceTrainer(vocab_size=VOCAB, special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"],
                                   show_progress=False)
    tok.train_from_iterator(texts, tr)
    tok.post_processor = processors.BertProcessing(("[SEP]", tok.token_to_id("[SEP]")),
                                                   ("[CLS]", tok.token_to_id("[CLS]")))
    tok.decoder = decoders.WordPiece()
    return tok.to_str()


def t5(texts: Iterable[str]) -> str:
    tok = Tokenizer(models.Unigram())
    tok.normalizer = normalizers.NFKC()
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always", split=True)
    tr = trainers.UnigramTrainer(vocab_size=VOCAB, special_tokens=["<pad>", "</s>", "<unk>"], unk_token="<unk>",
                                 show_progress=False)
    tok.train_from_iterator(texts, tr)
    tok.post_processor = processors.TemplateProcessing(
        single="$A </s>", pair="$A </s> $B </s>", special_tokens=[("</s>", tok.token_to_id("</s>"))])
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always", split=True)
    return tok.to_str()


def roberta(texts: Iterable[str]) -> str:
    """Byte-level BPE with a prefix space and RobertaProcessing (RoBERTa)."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
    tr = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"],
                             initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, tr)
    tok.post_processor = processors.RobertaProcessing(("</s>", tok.token_to_id("</s>")), ("<s>", tok.token_to_id("<s>")))
    return tok.to_str()


def wordpiece_mix(texts: Iterable[str]) -> str:
    """WordPiece behind the other normalizers and pre-tokenizers: NFD,
    Lowercase, StripAccents, Strip, Replace; WhitespaceSplit, Punctuation,
    a string Split, Digits."""
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]", max_input_chars_per_word=30))
    tok.normalizer = normalizers.Sequence([normalizers.NFD(), normalizers.Lowercase(), normalizers.StripAccents(),
                                           normalizers.Strip(), normalizers.Replace("``", '"')])
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Punctuation(behavior="merged_with_previous"),
        pre_tokenizers.Split("_", behavior="merged_with_next"), pre_tokenizers.Digits(individual_digits=True)])
    tr = trainers.WordPieceTrainer(vocab_size=VOCAB, special_tokens=["[UNK]", "[CLS]", "[SEP]"], show_progress=False)
    tok.train_from_iterator(texts, tr)
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", tok.token_to_id("[CLS]")), ("[SEP]", tok.token_to_id("[SEP]"))])
    return tok.to_str()


def whitespace_bpe(texts: Iterable[str]) -> str:
    """Non-byte-level BPE with the Whitespace pre-tokenizer, NFKC and an unk token, no fusing."""
    tok = Tokenizer(models.BPE(unk_token="[UNK]"))
    tok.normalizer = normalizers.NFKC()
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tr = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=["[UNK]"], limit_alphabet=150, show_progress=False)
    tok.train_from_iterator(texts, tr)
    return tok.to_str()


def unigram_mix(texts: Iterable[str]) -> str:
    """Unigram behind NFKD + Lowercase, WhitespaceSplit + Metaspace(prepend "first")."""
    tok = Tokenizer(models.Unigram())
    tok.normalizer = normalizers.Sequence([normalizers.NFKD(), normalizers.Lowercase()])
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Metaspace(prepend_scheme="first", split=True)])
    tr = trainers.UnigramTrainer(vocab_size=2000, special_tokens=["<unk>"], unk_token="<unk>", show_progress=False)
    tok.train_from_iterator(texts, tr)
    return tok.to_str()


def with_added(file: str, tokens: list[AddedToken]) -> str:
    """The file with more added tokens (ids after the vocabulary's)."""
    tok = Tokenizer.from_str(file)
    tok.add_tokens(tokens)
    return tok.to_str()


# Added tokens of every kind: raw and normalized, special or not, with
# single_word, lstrip and rstrip; their contents occur in the test corpus.
ADDED = [
    AddedToken("def", single_word=True, lstrip=True, rstrip=False, normalized=False),
    AddedToken("return", lstrip=False, rstrip=True, normalized=True),
    AddedToken("self", single_word=False, lstrip=True, rstrip=True, normalized=True),
    AddedToken("[SEP]", special=True, normalized=False),
    AddedToken("ION", normalized=True),
]


def gpt2_added(texts: Iterable[str]) -> str:
    return with_added(gpt2(texts), ADDED)


def llama2_added(texts: Iterable[str]) -> str:
    return with_added(llama2(texts), ADDED)


def bert_added(texts: Iterable[str]) -> str:
    return with_added(bert(texts), ADDED)


FAMILIES: dict[str, Callable[[Iterable[str]], str]] = {
    "gpt2": gpt2, "llama3": llama3, "qwen2": qwen2, "llama2": llama2,
    "metaspace_bpe": metaspace_bpe, "bert": bert, "t5": t5,
    "gpt2_added": gpt2_added, "llama2_added": llama2_added, "bert_added": bert_added,
    "roberta": roberta, "wordpiece_mix": wordpiece_mix, "whitespace_bpe": whitespace_bpe, "unigram_mix": unigram_mix,
}

# The byte-level BPE families, which tiktoken can load too.
BYTE_LEVEL = {"gpt2": GPT2_PATTERN, "llama3": LLAMA3_PATTERN, "qwen2": QWEN2_PATTERN}


def tiktoken_files(file: str, directory: str) -> tuple[str, str]:
    """Writes a byte-level BPE tokenizer.json's merges as GPT-2's vocab.bpe
    and an encoder.json, the files tiktoken's data_gym loader reads. The
    encoder numbers tokens as tiktoken ranks them (bytes in its order, then one
    per merge), which its loader checks; compare through the tokens' bytes."""
    import os

    doc = json.loads(file)
    merges = [m if isinstance(m, str) else " ".join(m) for m in doc["model"]["merges"]]
    printable = [b for b in range(256) if chr(b).isprintable() and chr(b) != " "]
    order = printable + [b for b in range(256) if b not in printable]
    byte_char = {b: c for b, c in zip(range(256), _bytes_to_unicode())}
    encoder = {byte_char[b]: i for i, b in enumerate(order)}
    for m in merges:
        encoder[m.replace(" ", "", 1)] = len(encoder)
    bpe, enc = os.path.join(directory, "vocab.bpe"), os.path.join(directory, "encoder.json")
    with open(bpe, "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n" + "\n".join(merges) + "\n")
    with open(enc, "w", encoding="utf-8") as f:
        json.dump(encoder, f, ensure_ascii=False)
    return bpe, enc


def _bytes_to_unicode() -> list[str]:
    """GPT-2's byte-to-character table, in byte order."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    table = dict(zip(bs, cs))
    return [chr(table[b]) for b in range(256)]


def from_tiktoken_ranks(ranks: dict[bytes, int], pattern: str, specials: dict[str, int]) -> str:
    """A byte-level BPE tokenizer.json from a tiktoken vocabulary: each token's
    merge is the last step of BPE on its bytes with the ranks below its own
    (how Llama 3's file was made from its tiktoken ranks), ids are ranks."""
    table = _bytes_to_unicode()

    def text(b: bytes) -> str:
        return "".join(table[x] for x in b)

    def last_merge(token: bytes, rank: int) -> tuple[bytes, bytes]:
        parts = [bytes([b]) for b in token]
        while len(parts) > 2:
            best = None
            for i in range(len(parts) - 1):
                r = ranks.get(parts[i] + parts[i + 1])
                if r is not None and r < rank and (best is None or r < best[0]):
                    best = (r, i)
            if best is None:
                break
            i = best[1]
            parts[i:i + 2] = [parts[i] + parts[i + 1]]
        assert len(parts) == 2, token
        return parts[0], parts[1]

    merges = []
    for token, rank in sorted(ranks.items(), key=lambda kv: kv[1]):
        if len(token) > 1:
            a, b = last_merge(token, rank)
            merges.append([text(a), text(b)])
    tok = Tokenizer(models.BPE(vocab={text(t): r for t, r in ranks.items()}, merges=[tuple(m) for m in merges],
                               ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False),
    ])
    tok.add_special_tokens([AddedToken(c, special=True, normalized=False) for c in sorted(specials, key=specials.get)])
    doc = json.loads(tok.to_str())
    for t in doc["added_tokens"]:
        t["id"] = specials[t["content"]]
    return json.dumps(doc, ensure_ascii=False)
