// Package tokenize answers: how does text become token ids, exactly as a
// tokenizer.json says? It reads the file the Hugging Face `tokenizers`
// library writes (Parse, Load) and encodes strings to the ids that
// `tokenizers.Tokenizer.from_file(f).encode(text, add_special_tokens=...).ids`
// gives (Encode, AppendEncode), or many rows at once into an Arrow-style
// values buffer and offsets on several goroutines (EncodeBatch). It knows
// nothing of datasets, columns or shapes: callers hand it strings.
//
// Implemented, checked against the reference by testdata/test_tokenize.py on
// files trained there:
//
//   - models: BPE (byte-level as GPT-2, RoBERTa, Llama 3 and Qwen 2 use it,
//     ignore_merges included; SentencePiece-style with <0xNN> byte fallback and
//     fused unknowns as Llama 2 and Mistral use it), WordPiece, Unigram;
//   - normalizers: NFC, NFD, NFKC, NFKD, Lowercase, Strip, StripAccents,
//     Replace (string pattern), Prepend, BertNormalizer, Sequence;
//   - pre-tokenizers: ByteLevel, Split (string patterns with any behavior; the
//     GPT-2, Llama 3/cl100k and Qwen 2 regexes, look-ahead included, as
//     hand-written scanners), Metaspace, Whitespace, WhitespaceSplit,
//     BertPreTokenizer, Digits, Punctuation, Sequence;
//   - post-processors: TemplateProcessing (single sequence), BertProcessing,
//     RobertaProcessing, ByteLevel, Sequence;
//   - added tokens, special or not, raw or normalized, with single_word,
//     lstrip and rstrip, split out before the model as the reference does.
//
// Anything else is refused by Parse with an ErrUnsupported error naming the
// component and its JSON path (`tokenizer.json: normalizer.normalizers[2]:
// type "Precompiled" is not supported by meshfeed`): other Split regexes,
// Replace with a regex, the Precompiled normalizer (T5's and XLM-R's
// SentencePiece charsmap), BPE dropout, continuing_subword_prefix and
// end_of_word_suffix in BPE, non-null truncation and padding (meshfeed shapes
// lists itself). Nothing is approximated.
//
// Why not a library: the Go ports of the reference use Go's regexp (no
// look-ahead, ASCII \s) or regexp2 (a backtracking engine, slow), and none is
// checked against the reference across model types; a cgo binding would make
// the binary non-static.
//
// # Caveats
//
//   - Text must be valid UTF-8 (ErrInvalidUTF8). The reference cannot be given
//     anything else: Python strings are Unicode, and pyarrow's to_pylist fails
//     on a Parquet string with invalid bytes. Callers name the row.
//   - Only ids: no offsets, attention masks or type ids.
//   - Character classes (\p{L}, \p{N}, \s, punctuation, case mapping) come
//     from Go's unicode tables; the reference uses Oniguruma's and Rust's. They
//     agree except for characters assigned in one Unicode version and not the
//     other.
//   - Added tokens get the ids the reference gives them when it reads a file,
//     not the ids the file lists: the model's id for a token it has, else the
//     next id after the vocabulary, in file order. Files the reference wrote
//     agree; hand-edited ones may not.
//   - Unigram scores are parsed as serde_json parses floats (not correctly
//     rounded), because ties between segmentations follow their last bits.
//   - A BPE model keeps one word cache for every goroutine that encodes with
//     it (at most 65,536 words of up to 256 bytes, emptied when full; lookups
//     take no lock), so a word is merged once however many workers meet it.
//     It is allocated at load: 1 MiB of slots and 4 MiB of record space.
//     Each goroutine that encodes holds a scratch area; idle ones are kept by
//     the Tokenizer for reuse.
package tokenize
