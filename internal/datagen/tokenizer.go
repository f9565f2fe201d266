package datagen

import "encoding/json"

// LetterTokenizer returns a tokenizer.json for tests: a character-level
// WordPiece over the ASCII letters (each letter one token, lowercased;
// words split on whitespace; anything else [UNK]), with [CLS] and [SEP]
// around every text (BertProcessing). With sepSpecial, [SEP] is also an
// added special token, so that a caller looking for an end-of-document
// token among the special tokens finds it.
func LetterTokenizer(sepSpecial bool) []byte {
	vocab := map[string]int{"[UNK]": 0, "[CLS]": 1, "[SEP]": 2}
	for c := 'a'; c <= 'z'; c++ {
		vocab[string(c)] = len(vocab)
		vocab["##"+string(c)] = len(vocab)
	}
	model, _ := json.Marshal(map[string]any{"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
		"max_input_chars_per_word": 100, "vocab": vocab})
	added := "[]"
	if sepSpecial {
		added = `[{"id": 2, "content": "[SEP]", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true}]`
	}
	return []byte(`{"version": "1.0", "truncation": null, "padding": null, "added_tokens": ` + added + `, "normalizer": {"type": "Lowercase"},
		"pre_tokenizer": {"type": "WhitespaceSplit"}, "post_processor": {"type": "BertProcessing", "sep": ["[SEP]", 2], "cls": ["[CLS]", 1]},
		"decoder": null, "model": ` + string(model) + `}`)
}
