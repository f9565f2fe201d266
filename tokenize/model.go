package tokenize

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"unicode/utf8"
)

// byteChar is GPT-2's table from a byte to the character that stands for it
// in byte-level vocabularies; charByte is its inverse.
var (
	byteChar [256]rune
	charByte = map[rune]byte{}
)

func init() {
	n := 0
	for b := 0; b < 256; b++ {
		if b >= '!' && b <= '~' || b >= 0xA1 && b <= 0xAC || b >= 0xAE && b <= 0xFF {
			byteChar[b] = rune(b)
		} else {
			byteChar[b] = rune(256 + n)
			n++
		}
		charByte[byteChar[b]] = byte(b)
	}
}

// unByteLevel maps a byte-level token back to its bytes; ok is false when a
// character is not in the table (such a token can never be produced from text).
func unByteLevel(tok string) (string, bool) {
	var sb strings.Builder
	for _, r := range tok {
		b, ok := charByte[r]
		if !ok {
			return "", false
		}
		sb.WriteByte(b)
	}
	return sb.String(), true
}

func (p *parser) model(path string, raw json.RawMessage, byteLevel bool) (model, error) {
	if isNull(raw) {
		return nil, p.errorf(path, ErrMalformed, "missing")
	}
	m, typ, err := p.object(path, raw)
	if err != nil {
		return nil, err
	}
	if typ == "" {
		// Old files omit the type; the fields tell.
		switch {
		case m["merges"] != nil:
			typ = "BPE"
		case m["max_input_chars_per_word"] != nil:
			typ = "WordPiece"
		case m["unk_id"] != nil:
			typ = "Unigram"
		}
	}
	if byteLevel && typ != "BPE" {
		return nil, p.unsupported(path, fmt.Sprintf("a %s model under a ByteLevel pre-tokenizer", typ))
	}
	switch typ {
	case "BPE":
		return p.bpe(path, m, byteLevel)
	case "WordPiece":
		return p.wordPiece(path, m)
	case "Unigram":
		return p.unigram(path, m)
	case "":
		return nil, p.errorf(path, ErrMalformed, "no \"type\"")
	}
	return nil, p.unsupportedType(path, typ)
}

func (p *parser) vocabMap(path string, m map[string]json.RawMessage) (map[string]int32, error) {
	var v map[string]int64
	if err := p.field(path, m, "vocab", &v); err != nil {
		return nil, err
	}
	out := make(map[string]int32, len(v))
	for k, id := range v {
		if id < 0 || id > math.MaxInt32 {
			return nil, p.errorf(path+".vocab", ErrMalformed, "token %q has id %d", k, id)
		}
		out[k] = int32(id)
	}
	return out, nil
}

// Length: one field after another of the BPE model, each checked.
func (p *parser) bpe(path string, m map[string]json.RawMessage, byteLevel bool) (model, error) {
	vocab, err := p.vocabMap(path, m)
	if err != nil {
		return nil, err
	}
	var cfg struct {
		Dropout      *float64
		Unk          *string
		Prefix       *string
		Suffix       *string
		FuseUnk      bool
		ByteFallback bool
		IgnoreMerges bool
	}
	for k, v := range map[string]any{"dropout": &cfg.Dropout, "unk_token": &cfg.Unk, "continuing_subword_prefix": &cfg.Prefix,
		"end_of_word_suffix": &cfg.Suffix, "fuse_unk": &cfg.FuseUnk, "byte_fallback": &cfg.ByteFallback, "ignore_merges": &cfg.IgnoreMerges} {
		if err := p.field(path, m, k, v); err != nil {
			return nil, err
		}
	}
	if cfg.Dropout != nil && *cfg.Dropout != 0 {
		return nil, p.unsupported(path+".dropout", fmt.Sprintf("BPE dropout %v (random encodings)", *cfg.Dropout))
	}
	if cfg.Prefix != nil && *cfg.Prefix != "" {
		return nil, p.unsupported(path+".continuing_subword_prefix", "a BPE continuing_subword_prefix")
	}
	if cfg.Suffix != nil && *cfg.Suffix != "" {
		return nil, p.unsupported(path+".end_of_word_suffix", "a BPE end_of_word_suffix")
	}
	b := &bpe{unk: -1, fuseUnk: cfg.FuseUnk, ignoreMerges: cfg.IgnoreMerges, byteLevel: byteLevel, cache: newWordCache()}
	if cfg.Unk != nil {
		id, ok := vocab[*cfg.Unk]
		if !ok {
			return nil, p.errorf(path+".unk_token", ErrMalformed, "unk_token %q is not in the vocabulary", *cfg.Unk)
		}
		b.unk = id
	}
	for i := range b.fallback {
		b.fallback[i] = -1
		b.byteIDs[i] = -1
		if cfg.ByteFallback {
			if id, ok := vocab[fmt.Sprintf("<0x%02X>", i)]; ok {
				b.fallback[i] = id
				b.hasFallback = true
			}
		}
	}
	merges, err := p.merges(path, m)
	if err != nil {
		return nil, err
	}
	b.merges = newPairTable(len(merges))
	for rank, mg := range merges {
		a, ok1 := vocab[mg[0]]
		c, ok2 := vocab[mg[1]]
		n, ok3 := vocab[mg[0]+mg[1]]
		if !ok1 || !ok2 || !ok3 {
			return nil, p.errorf(fmt.Sprintf("%s.merges[%d]", path, rank), ErrMalformed, "merge %q %q: a token is not in the vocabulary", mg[0], mg[1])
		}
		b.merges.put(uint64(uint32(a))<<32|uint64(uint32(c)), uint64(rank)<<32|uint64(uint32(n)))
	}
	b.vocab = vocab
	b.vocabSize = len(vocab)
	if !byteLevel && splitsAtMetaspace(vocab) {
		b.boundary = "▁"
	}
	if byteLevel {
		bv := make(map[string]int32, len(vocab))
		for tok, id := range vocab {
			if s, ok := unByteLevel(tok); ok {
				bv[s] = id
			}
		}
		b.vocab = bv
		for i := range 256 {
			if id, ok := bv[string([]byte{byte(i)})]; ok {
				b.byteIDs[i] = id
			}
		}
	}
	return b, nil
}

// merges reads "a b" strings (older files) or ["a", "b"] pairs.
func (p *parser) merges(path string, m map[string]json.RawMessage) ([][2]string, error) {
	var raw []json.RawMessage
	if err := p.field(path, m, "merges", &raw); err != nil {
		return nil, err
	}
	out := make([][2]string, len(raw))
	for i, r := range raw {
		var s string
		if json.Unmarshal(r, &s) == nil {
			a, b, ok := strings.Cut(s, " ")
			if !ok {
				return nil, p.errorf(fmt.Sprintf("%s.merges[%d]", path, i), ErrMalformed, "%q is not two tokens", s)
			}
			out[i] = [2]string{a, b}
			continue
		}
		var pr []string
		if err := json.Unmarshal(r, &pr); err != nil || len(pr) != 2 {
			return nil, p.errorf(fmt.Sprintf("%s.merges[%d]", path, i), ErrMalformed, "want \"a b\" or [\"a\", \"b\"]")
		}
		out[i] = [2]string{pr[0], pr[1]}
	}
	return out, nil
}

func (p *parser) wordPiece(path string, m map[string]json.RawMessage) (model, error) {
	vocab, err := p.vocabMap(path, m)
	if err != nil {
		return nil, err
	}
	w := &wordPiece{vocab: vocab, prefix: "##", maxChars: 100}
	unk := "[UNK]"
	for k, v := range map[string]any{"unk_token": &unk, "continuing_subword_prefix": &w.prefix, "max_input_chars_per_word": &w.maxChars} {
		if err := p.field(path, m, k, v); err != nil {
			return nil, err
		}
	}
	id, ok := vocab[unk]
	if !ok {
		return nil, p.errorf(path+".unk_token", ErrMalformed, "unk_token %q is not in the vocabulary", unk)
	}
	w.unk = id
	return w, nil
}

func (p *parser) unigram(path string, m map[string]json.RawMessage) (model, error) {
	var items [][2]json.RawMessage
	if err := p.field(path, m, "vocab", &items); err != nil {
		return nil, err
	}
	u := &unigram{unk: -1, vocab: make(map[string]int32, len(items)), minScore: math.Inf(1)}
	for i, it := range items {
		var piece string
		if json.Unmarshal(it[0], &piece) != nil {
			return nil, p.errorf(fmt.Sprintf("%s.vocab[%d]", path, i), ErrMalformed, "want [piece, score]")
		}
		score, err := serdeFloat(bytes.TrimSpace(it[1]))
		if err != nil {
			return nil, p.errorf(fmt.Sprintf("%s.vocab[%d][1]", path, i), ErrMalformed, "%v", err)
		}
		if !utf8.ValidString(piece) {
			return nil, p.errorf(fmt.Sprintf("%s.vocab[%d]", path, i), ErrMalformed, "piece is not UTF-8")
		}
		u.pieces = append(u.pieces, piece)
		u.scores = append(u.scores, score)
		// A repeated piece means its last id, as in the reference's map.
		u.vocab[piece] = int32(i)
		u.minScore = math.Min(u.minScore, score)
	}
	var unk *int64
	if err := p.field(path, m, "unk_id", &unk); err != nil {
		return nil, err
	}
	if unk != nil {
		if *unk < 0 || *unk >= int64(len(items)) {
			return nil, p.errorf(path+".unk_id", ErrMalformed, "%d is outside the vocabulary (%d pieces)", *unk, len(items))
		}
		u.unk = int32(*unk)
	} else {
		return nil, p.unsupported(path+".unk_id", "a Unigram model without unk_id")
	}
	if err := p.field(path, m, "byte_fallback", &u.byteFB); err != nil {
		return nil, err
	}
	for i := range u.fallback {
		u.fallback[i] = -1
		if id, ok := u.vocab[fmt.Sprintf("<0x%02X>", i)]; ok {
			u.fallback[i] = id
		}
	}
	u.trie = newTrie(u.pieces)
	return u, nil
}
