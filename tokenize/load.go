package tokenize

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"os"

	"golang.org/x/text/unicode/norm"
)

// Load reads a tokenizer.json from a local path.
func Load(path string) (*Tokenizer, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("tokenize: %w", err)
	}
	return Parse(path, data)
}

// Parse builds a Tokenizer from the bytes of a tokenizer.json; name (a path
// or URI) prefixes its errors. Every component is checked here: one meshfeed
// does not implement is an ErrUnsupported error naming it and its JSON path,
// for example `tokenizer.json: normalizer.normalizers[2]: type "Precompiled"
// is not supported`.
func Parse(name string, data []byte) (*Tokenizer, error) {
	var doc struct {
		AddedTokens   []json.RawMessage `json:"added_tokens"`
		Normalizer    json.RawMessage   `json:"normalizer"`
		PreTokenizer  json.RawMessage   `json:"pre_tokenizer"`
		Model         json.RawMessage   `json:"model"`
		PostProcessor json.RawMessage   `json:"post_processor"`
		Truncation    json.RawMessage   `json:"truncation"`
		Padding       json.RawMessage   `json:"padding"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("tokenize: %s: %w: %v", name, ErrMalformed, err)
	}
	buildBMPClass()
	p := &parser{name: name}
	t := &Tokenizer{}
	sum := sha256.Sum256(data)
	t.hash = hex.EncodeToString(sum[:])
	if !isNull(doc.Truncation) {
		return nil, p.unsupported("truncation", "truncation (set it to null: meshfeed's Column length and overflow truncate)")
	}
	if !isNull(doc.Padding) {
		return nil, p.unsupported("padding", "padding (set it to null: meshfeed's Column length and fill pad)")
	}
	var err error
	if t.normalizer, err = p.normalizer("normalizer", doc.Normalizer); err != nil {
		return nil, err
	}
	byteLevel := false
	if t.pre, err = p.preTokenizer("pre_tokenizer", doc.PreTokenizer, &byteLevel); err != nil {
		return nil, err
	}
	if t.model, err = p.model("model", doc.Model, byteLevel); err != nil {
		return nil, err
	}
	toks, err := p.addedTokens(doc.AddedTokens)
	if err != nil {
		return nil, err
	}
	toks = assignAddedIDs(toks, t.model)
	var raw, normed []*addedToken
	for i, tk := range toks {
		if tk.normalized {
			normed = append(normed, &toks[i].addedToken)
		} else {
			raw = append(raw, &toks[i].addedToken)
		}
	}
	t.added = newAddedSet(raw, func(a *addedToken) string { return a.content })
	t.addedNorm = newAddedSet(normed, func(a *addedToken) string {
		if t.normalizer == nil {
			return a.content
		}
		return string(t.normalizer.normalize(nil, a.content))
	})
	t.addedIDs, t.specialIDs = map[string]int32{}, map[string]int32{}
	for _, tk := range toks {
		t.addedIDs[tk.content] = tk.id
		if tk.special {
			t.specialIDs[tk.content] = tk.id
		}
	}
	if t.prefix, t.suffix, err = p.postProcessor("post_processor", doc.PostProcessor, t.addedIDs); err != nil {
		return nil, err
	}
	return t, nil
}

// assignAddedIDs gives added tokens the ids the reference gives them when it
// reads a file, whatever the file says: the model's id of the same token if
// it has one, else the next id from the model's vocabulary size on, in file
// order. A repeated content keeps its first id and takes the later flags.
func assignAddedIDs(toks []addedEntry, m model) []addedEntry {
	next := int32(m.size())
	byContent := map[string]int{}
	var out []addedEntry
	for _, tk := range toks {
		if i, ok := byContent[tk.content]; ok {
			tk.id = out[i].id
			out[i] = tk
			continue
		}
		if id, ok := m.tokenID(tk.content); ok {
			tk.id = id
		} else {
			tk.id = next
			next++
		}
		byContent[tk.content] = len(out)
		out = append(out, tk)
	}
	return out
}

// Hash is the SHA-256 of the tokenizer.json bytes, in hex.
func (t *Tokenizer) Hash() string { return t.hash }

type parser struct{ name string }

func (p *parser) errorf(path string, sentinel error, format string, args ...any) error {
	return fmt.Errorf("tokenize: %s: %s: %w: %s", p.name, path, sentinel, fmt.Sprintf(format, args...))
}

func (p *parser) unsupported(path, what string) error {
	return fmt.Errorf("tokenize: %s: %s: %s is %w by meshfeed", p.name, path, what, ErrUnsupported)
}

func (p *parser) unsupportedType(path, typ string) error {
	return fmt.Errorf("tokenize: %s: %s: type %q is %w by meshfeed", p.name, path, typ, ErrUnsupported)
}

func isNull(m json.RawMessage) bool {
	m = bytes.TrimSpace(m)
	return len(m) == 0 || string(m) == "null"
}

// object decodes a component into a map of its fields and returns its type.
func (p *parser) object(path string, raw json.RawMessage) (map[string]json.RawMessage, string, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, "", p.errorf(path, ErrMalformed, "not an object: %v", err)
	}
	var typ string
	if t, ok := m["type"]; ok {
		if err := json.Unmarshal(t, &typ); err != nil {
			return nil, "", p.errorf(path+".type", ErrMalformed, "%v", err)
		}
	}
	return m, typ, nil
}

// field decodes m[key] into v; a missing or null field leaves v as it is.
func (p *parser) field(path string, m map[string]json.RawMessage, key string, v any) error {
	raw, ok := m[key]
	if !ok || isNull(raw) {
		return nil
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return p.errorf(path+"."+key, ErrMalformed, "%v", err)
	}
	return nil
}

// pattern decodes a Split or Replace pattern: {"String": s} or {"Regex": r}.
func (p *parser) pattern(path string, m map[string]json.RawMessage) (lit string, regex string, isRegex bool, err error) {
	var pat struct {
		String *string `json:"String"`
		Regex  *string `json:"Regex"`
	}
	if err := p.field(path, m, "pattern", &pat); err != nil {
		return "", "", false, err
	}
	switch {
	case pat.String != nil:
		return *pat.String, "", false, nil
	case pat.Regex != nil:
		return "", *pat.Regex, true, nil
	}
	return "", "", false, p.errorf(path+".pattern", ErrMalformed, "want {\"String\": ...} or {\"Regex\": ...}")
}

// normalizer parses a normalizer (nil for null).
//
// Length: one short case per normalizer type, a table best read in one place.
func (p *parser) normalizer(path string, raw json.RawMessage) (normalizer, error) {
	if isNull(raw) {
		return nil, nil
	}
	m, typ, err := p.object(path, raw)
	if err != nil {
		return nil, err
	}
	switch typ {
	case "Sequence":
		var items []json.RawMessage
		if err := p.field(path, m, "normalizers", &items); err != nil {
			return nil, err
		}
		var q normSequence
		for i, it := range items {
			n, err := p.normalizer(fmt.Sprintf("%s.normalizers[%d]", path, i), it)
			if err != nil {
				return nil, err
			}
			if n != nil {
				q.steps = append(q.steps, n)
			}
		}
		if len(q.steps) == 0 {
			return nil, nil
		}
		if len(q.steps) == 1 {
			return q.steps[0], nil
		}
		return q, nil
	case "NFC":
		return unicodeForm{norm.NFC}, nil
	case "NFD":
		return unicodeForm{norm.NFD}, nil
	case "NFKC":
		return unicodeForm{norm.NFKC}, nil
	case "NFKD":
		return unicodeForm{norm.NFKD}, nil
	case "Lowercase":
		return lowercase{}, nil
	case "StripAccents":
		return stripAccents{}, nil
	case "Strip":
		st := strip{left: true, right: true}
		if err := p.field(path, m, "strip_left", &st.left); err != nil {
			return nil, err
		}
		if err := p.field(path, m, "strip_right", &st.right); err != nil {
			return nil, err
		}
		return st, nil
	case "Prepend":
		var pr prepend
		if err := p.field(path, m, "prepend", &pr.prefix); err != nil {
			return nil, err
		}
		return pr, nil
	case "Replace":
		lit, re, isRe, err := p.pattern(path, m)
		if err != nil {
			return nil, err
		}
		if isRe {
			return nil, p.unsupported(path+".pattern", fmt.Sprintf("Replace with the regex %q", re))
		}
		rp := replace{pattern: lit}
		if err := p.field(path, m, "content", &rp.content); err != nil {
			return nil, err
		}
		if lit == "" {
			return nil, p.unsupported(path+".pattern", "Replace with an empty pattern")
		}
		return rp, nil
	case "BertNormalizer":
		b := bertNormalizer{clean: true, chinese: true, lowercase: true}
		var sa *bool
		for k, v := range map[string]*bool{"clean_text": &b.clean, "handle_chinese_chars": &b.chinese, "lowercase": &b.lowercase} {
			if err := p.field(path, m, k, v); err != nil {
				return nil, err
			}
		}
		if err := p.field(path, m, "strip_accents", &sa); err != nil {
			return nil, err
		}
		b.stripAccents = b.lowercase
		if sa != nil {
			b.stripAccents = *sa
		}
		return b, nil
	case "":
		return nil, p.errorf(path, ErrMalformed, "no \"type\"")
	}
	return nil, p.unsupportedType(path, typ)
}

// preTokenizer parses a pre-tokenizer into a flat list of steps (a Sequence
// is flattened). byteLevel is set when a ByteLevel step is present; it must
// be the last step, since later steps would see its mapped characters.
//
// Length: one short case per pre-tokenizer type, a table best read in one place.
func (p *parser) preTokenizer(path string, raw json.RawMessage, isByteLevel *bool) ([]preTokenizer, error) {
	var steps []preTokenizer
	var add func(path string, raw json.RawMessage) error
	add = func(path string, raw json.RawMessage) error {
		if isNull(raw) {
			return nil
		}
		m, typ, err := p.object(path, raw)
		if err != nil {
			return err
		}
		if *isByteLevel {
			return p.unsupported(path, fmt.Sprintf("a %s step after ByteLevel", typ))
		}
		switch typ {
		case "Sequence":
			var items []json.RawMessage
			if err := p.field(path, m, "pretokenizers", &items); err != nil {
				return err
			}
			for i, it := range items {
				if err := add(fmt.Sprintf("%s.pretokenizers[%d]", path, i), it); err != nil {
					return err
				}
			}
		case "ByteLevel":
			b := byteLevel{addPrefixSpace: true, useRegex: true}
			if err := p.field(path, m, "add_prefix_space", &b.addPrefixSpace); err != nil {
				return err
			}
			if err := p.field(path, m, "use_regex", &b.useRegex); err != nil {
				return err
			}
			steps = append(steps, b)
			*isByteLevel = true
		case "Split":
			st, err := p.splitStep(path, m)
			if err != nil {
				return err
			}
			steps = append(steps, st)
		case "Whitespace":
			steps = append(steps, spanSplit{spans: whitespaceSpans, behavior: behRemoved})
		case "WhitespaceSplit":
			steps = append(steps, spanSplit{spans: func(s string, sp []span) []span { return charSpans(s, isWhitespace, sp) }, behavior: behRemoved})
		case "BertPreTokenizer":
			steps = append(steps,
				spanSplit{spans: func(s string, sp []span) []span { return charSpans(s, isWhitespace, sp) }, behavior: behRemoved},
				spanSplit{spans: func(s string, sp []span) []span { return charSpans(s, isPunct, sp) }, behavior: behIsolated})
		case "Punctuation":
			beh := behIsolated
			var behName string
			if err := p.field(path, m, "behavior", &behName); err != nil {
				return err
			}
			if behName != "" {
				b, ok := behaviorNames[behName]
				if !ok {
					return p.errorf(path+".behavior", ErrMalformed, "unknown behavior %q", behName)
				}
				beh = b
			}
			steps = append(steps, spanSplit{spans: func(s string, sp []span) []span { return charSpans(s, isPunct, sp) }, behavior: beh})
		case "Digits":
			var individual bool
			if err := p.field(path, m, "individual_digits", &individual); err != nil {
				return err
			}
			beh := behContiguous
			if individual {
				beh = behIsolated
			}
			steps = append(steps, spanSplit{spans: func(s string, sp []span) []span { return charSpans(s, isNumeric, sp) }, behavior: beh})
		case "Metaspace":
			ms, err := p.metaspaceStep(path, m)
			if err != nil {
				return err
			}
			steps = append(steps, ms)
		case "":
			return p.errorf(path, ErrMalformed, "no \"type\"")
		default:
			return p.unsupportedType(path, typ)
		}
		return nil
	}
	if err := add(path, raw); err != nil {
		return nil, err
	}
	return steps, nil
}

// splitStep parses a Split pre-tokenizer: a string pattern with any behavior,
// or one of the known regexes with behavior Isolated.
func (p *parser) splitStep(path string, m map[string]json.RawMessage) (preTokenizer, error) {
	lit, re, isRe, err := p.pattern(path, m)
	if err != nil {
		return nil, err
	}
	var behName string
	var inv bool
	if err := p.field(path, m, "behavior", &behName); err != nil {
		return nil, err
	}
	if err := p.field(path, m, "invert", &inv); err != nil {
		return nil, err
	}
	beh, ok := behaviorNames[behName]
	if !ok {
		return nil, p.errorf(path+".behavior", ErrMalformed, "unknown behavior %q", behName)
	}
	if isRe {
		kind, ok := knownPatterns[re]
		if !ok {
			return nil, p.unsupported(path+".pattern", fmt.Sprintf("the Split regex %q (meshfeed implements the GPT-2, Llama 3 and Qwen 2 patterns exactly, not general regexes)", re))
		}
		if beh != behIsolated || inv {
			return nil, p.unsupported(path, fmt.Sprintf("Split of a regex with behavior %s and invert %v (only Isolated, not inverted)", behName, inv))
		}
		return patternSplit{kind}, nil
	}
	return spanSplit{spans: func(s string, sp []span) []span { return literalSpans(s, lit, sp) }, behavior: beh, invert: inv}, nil
}

// metaspaceStep parses a Metaspace pre-tokenizer (older files say
// add_prefix_space instead of prepend_scheme).
func (p *parser) metaspaceStep(path string, m map[string]json.RawMessage) (preTokenizer, error) {
	ms := metaspace{replacement: "▁", scheme: prependAlways, splitWords: true}
	if err := p.field(path, m, "replacement", &ms.replacement); err != nil {
		return nil, err
	}
	if err := p.field(path, m, "split", &ms.splitWords); err != nil {
		return nil, err
	}
	var scheme string
	if err := p.field(path, m, "prepend_scheme", &scheme); err != nil {
		return nil, err
	}
	switch scheme {
	case "", "always":
		var aps *bool
		if err := p.field(path, m, "add_prefix_space", &aps); err != nil {
			return nil, err
		}
		if scheme == "" && aps != nil && !*aps {
			ms.scheme = prependNever
		}
	case "first":
		ms.scheme = prependFirst
	case "never":
		ms.scheme = prependNever
	default:
		return nil, p.errorf(path+".prepend_scheme", ErrMalformed, "unknown prepend_scheme %q", scheme)
	}
	if ms.replacement == "" {
		return nil, p.errorf(path+".replacement", ErrMalformed, "empty replacement")
	}
	return ms, nil
}

// template returns the special tokens a TemplateProcessing puts around $A.
func (p *parser) template(path string, raw json.RawMessage) (prefix, suffix []int32, err error) {
	var tp struct {
		Single []struct {
			SpecialToken *struct {
				ID string `json:"id"`
			} `json:"SpecialToken"`
			Sequence *struct {
				ID string `json:"id"`
			} `json:"Sequence"`
		} `json:"single"`
		SpecialTokens map[string]struct {
			IDs []int64 `json:"ids"`
		} `json:"special_tokens"`
	}
	if err := json.Unmarshal(raw, &tp); err != nil {
		return nil, nil, p.errorf(path, ErrMalformed, "%v", err)
	}
	seen := false
	for i, piece := range tp.Single {
		switch {
		case piece.Sequence != nil:
			if seen || piece.Sequence.ID != "A" {
				return nil, nil, p.unsupported(fmt.Sprintf("%s.single[%d]", path, i), "a single template with a sequence other than one $A")
			}
			seen = true
		case piece.SpecialToken != nil:
			st, ok := tp.SpecialTokens[piece.SpecialToken.ID]
			if !ok {
				return nil, nil, p.errorf(fmt.Sprintf("%s.single[%d]", path, i), ErrMalformed, "special token %q is not in special_tokens", piece.SpecialToken.ID)
			}
			for _, id := range st.IDs {
				if seen {
					suffix = append(suffix, int32(id))
				} else {
					prefix = append(prefix, int32(id))
				}
			}
		default:
			return nil, nil, p.errorf(fmt.Sprintf("%s.single[%d]", path, i), ErrMalformed, "want SpecialToken or Sequence")
		}
	}
	return prefix, suffix, nil
}

func isPunct(r rune) bool   { return class(r)&clsPunct != 0 }
func isNumeric(r rune) bool { return class(r)&clsN != 0 }

type addedEntry struct {
	addedToken
	normalized bool
}

func (p *parser) addedTokens(items []json.RawMessage) ([]addedEntry, error) {
	out := make([]addedEntry, 0, len(items))
	for i, it := range items {
		path := fmt.Sprintf("added_tokens[%d]", i)
		var a struct {
			ID         *int64 `json:"id"`
			Content    string `json:"content"`
			SingleWord bool   `json:"single_word"`
			Lstrip     bool   `json:"lstrip"`
			Rstrip     bool   `json:"rstrip"`
			Normalized *bool  `json:"normalized"`
			Special    bool   `json:"special"`
		}
		if err := json.Unmarshal(it, &a); err != nil {
			return nil, p.errorf(path, ErrMalformed, "%v", err)
		}
		if a.ID == nil || *a.ID < 0 || *a.ID > math.MaxInt32 {
			return nil, p.errorf(path+".id", ErrMalformed, "missing or out of range")
		}
		if a.Content == "" {
			continue
		}
		e := addedEntry{addedToken: addedToken{id: int32(*a.ID), content: a.Content, singleWord: a.SingleWord,
			lstrip: a.Lstrip, rstrip: a.Rstrip, special: a.Special}, normalized: !a.Special}
		if a.Normalized != nil {
			e.normalized = *a.Normalized
		}
		out = append(out, e)
	}
	return out, nil
}

// postProcessor returns the ids a post-processor puts before and after a single sequence.
func (p *parser) postProcessor(path string, raw json.RawMessage, added map[string]int32) (prefix, suffix []int32, err error) {
	if isNull(raw) {
		return nil, nil, nil
	}
	m, typ, err := p.object(path, raw)
	if err != nil {
		return nil, nil, err
	}
	pair := func(key string) (int32, error) {
		var v [2]json.RawMessage
		if err := p.field(path, m, key, &v); err != nil {
			return 0, err
		}
		var id int64
		if err := json.Unmarshal(v[1], &id); err != nil {
			return 0, p.errorf(path+"."+key, ErrMalformed, "want [token, id]: %v", err)
		}
		return int32(id), nil
	}
	switch typ {
	case "Sequence":
		var items []json.RawMessage
		if err := p.field(path, m, "processors", &items); err != nil {
			return nil, nil, err
		}
		for i, it := range items {
			pre, suf, err := p.postProcessor(fmt.Sprintf("%s.processors[%d]", path, i), it, added)
			if err != nil {
				return nil, nil, err
			}
			prefix = append(append([]int32(nil), pre...), prefix...)
			suffix = append(suffix, suf...)
		}
		return prefix, suffix, nil
	case "ByteLevel":
		return nil, nil, nil
	case "BertProcessing", "RobertaProcessing":
		cls, err := pair("cls")
		if err != nil {
			return nil, nil, err
		}
		sep, err := pair("sep")
		if err != nil {
			return nil, nil, err
		}
		return []int32{cls}, []int32{sep}, nil
	case "TemplateProcessing":
		return p.template(path, raw)
	case "":
		return nil, nil, p.errorf(path, ErrMalformed, "no \"type\"")
	}
	return nil, nil, p.unsupportedType(path, typ)
}
