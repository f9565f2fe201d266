package tokenize

import "maps"

// TokenID returns the id of a token as tokenizer.json spells it: an added
// token's content or an entry of the model's vocabulary (byte-level entries
// in their stand-in characters, "Ġthe"). Callers look up an end-of-document
// token this way.
func (t *Tokenizer) TokenID(tok string) (int32, bool) {
	if id, ok := t.addedIDs[tok]; ok {
		return id, true
	}
	return t.model.tokenID(tok)
}

// SpecialTokens returns the added tokens marked special, content to id.
func (t *Tokenizer) SpecialTokens() map[string]int32 { return maps.Clone(t.specialIDs) }

// Affixes returns the ids the post-processor puts before and after every
// encoded text when special tokens are added (BOS, [CLS] ... [SEP]).
func (t *Tokenizer) Affixes() (prefix, suffix []int32) {
	return append([]int32(nil), t.prefix...), append([]int32(nil), t.suffix...)
}

func (m *bpe) tokenID(tok string) (int32, bool) {
	if m.byteLevel {
		b, ok := unByteLevel(tok)
		if !ok {
			return 0, false
		}
		tok = b
	}
	id, ok := m.vocab[tok]
	return id, ok
}

func (m *wordPiece) tokenID(tok string) (int32, bool) {
	id, ok := m.vocab[tok]
	return id, ok
}

func (m *unigram) tokenID(tok string) (int32, bool) {
	id, ok := m.vocab[tok]
	return id, ok
}

func (m *bpe) size() int       { return m.vocabSize }
func (m *wordPiece) size() int { return len(m.vocab) }
func (m *unigram) size() int   { return len(m.pieces) }
