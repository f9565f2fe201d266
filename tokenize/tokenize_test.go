package tokenize

import (
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/text/unicode/norm"
)

// Exactness against the reference library is tested end to end by
// testdata/test_tokenize.py on trained files; these tests pin each component
// on cases worked out by hand from the reference's definitions.

func pieces(kind patternKind, s string) []string {
	var out []string
	for i := 0; i < len(s); {
		j := kind.scan(s, i)
		out = append(out, s[i:j])
		i = j
	}
	return out
}

func TestScanners(t *testing.T) {
	cases := []struct {
		kind patternKind
		in   string
		want []string
	}{
		{patternGPT2, "Hello world", []string{"Hello", " world"}},
		{patternGPT2, "I'm here's", []string{"I", "'m", " here", "'s"}},
		{patternGPT2, "I'M", []string{"I", "'", "M"}},             // case-sensitive contractions
		{patternGPT2, "a  b", []string{"a", " ", " b"}},           // \s+(?!\S) leaves the last space to " b"
		{patternGPT2, "a \t\nb", []string{"a", " \t", "\n", "b"}}, // the last whitespace goes alone
		{patternGPT2, "x   ", []string{"x", "   "}},               // trailing whitespace stays whole
		{patternGPT2, "12ab ?!x", []string{"12", "ab", " ?!", "x"}},
		{patternGPT2, "a\u00a0b", []string{"a", "\u00a0", "b"}}, // NBSP is \s but not " "
		{patternGPT2, "''s", []string{"''", "s"}},
		{patternLlama3, "I'M here", []string{"I", "'M", " here"}},
		{patternLlama3, "12345", []string{"123", "45"}},
		{patternQwen2, "123", []string{"1", "2", "3"}},
		{patternLlama3, "(hello", []string{"(hello"}}, // one non-letter joins the word
		{patternLlama3, " ...\n\nx", []string{" ...\n\n", "x"}},
		{patternLlama3, "a \n \n  b", []string{"a", " \n \n", " ", " b"}},
		{patternLlama3, "\tb", []string{"\tb"}},
		{patternLlama3, "\r\nb", []string{"\r\n", "b"}},
		{patternLlama3, "'ſ", []string{"'ſ"}}, // (?i) folds ſ to s
	}
	for _, c := range cases {
		if got := pieces(c.kind, c.in); !slices.Equal(got, c.want) {
			t.Errorf("scan(%d, %q) = %q, want %q", c.kind, c.in, got, c.want)
		}
	}
}

// The reference's documentation example for SplitDelimiterBehavior.
func TestSplitBehaviors(t *testing.T) {
	in := "the-final--countdown"
	cases := map[behavior][]string{
		behRemoved:            {"the", "final", "countdown"},
		behIsolated:           {"the", "-", "final", "-", "-", "countdown"},
		behMergedWithPrevious: {"the-", "final-", "-", "countdown"},
		behMergedWithNext:     {"the", "-final", "-", "-countdown"},
		behContiguous:         {"the", "-", "final", "--", "countdown"},
	}
	for b, want := range cases {
		spans := charSpans(in, func(r rune) bool { return r == '-' }, nil)
		var got []string
		for _, w := range splitSpans(word{s: in}, spans, b, nil) {
			got = append(got, w.s)
		}
		if !slices.Equal(got, want) {
			t.Errorf("split(%q, behavior %d) = %q, want %q", in, b, got, want)
		}
		lit := literalSpans(in, "-", nil)
		if !slices.Equal(lit, spans) {
			t.Errorf("literalSpans(%q, \"-\") = %v, want %v", in, lit, spans)
		}
	}
}

func TestNormalizers(t *testing.T) {
	cases := []struct {
		n        normalizer
		in, want string
	}{
		{lowercase{}, "ÀbİΣ", "àbi\u0307σ"},
		{strip{left: true, right: true}, " \u00a0x y\t", "x y"},
		{strip{left: false, right: true}, " x ", " x"},
		{stripAccents{}, "e\u0301a", "ea"},
		{replace{" ", "▁"}, "a b  c", "a▁b▁▁c"},
		{prepend{"▁"}, "ab", "▁ab"},
		{prepend{"▁"}, "", ""},
		{unicodeForm{norm.NFC}, "e\u0301", "é"},
		{bertNormalizer{clean: true, chinese: true, stripAccents: true, lowercase: true}, "Héllo\x00\u200b\tW中国", "hello w 中  国 "}, // NUL and U+200B (Cf) removed, tab a space,
		{normSequence{[]normalizer{prepend{"▁"}, replace{" ", "▁"}}}, "a b", "▁a▁b"},
	}
	for _, c := range cases {
		if got := string(c.n.normalize(nil, c.in)); got != c.want {
			t.Errorf("%T.normalize(%q) = %q, want %q", c.n, c.in, got, c.want)
		}
	}
}

// tiny builds a tokenizer.json around a model, with optional parts.
func tiny(model string, extra string) []byte {
	return []byte(`{"version": "1.0", "truncation": null, "padding": null, "added_tokens": [], "normalizer": null,
		"pre_tokenizer": null, "post_processor": null, "decoder": null, "model": ` + model + extra + `}`)
}

const tinyBPE = `{"type": "BPE", "dropout": null, "unk_token": "<unk>", "continuing_subword_prefix": null,
	"end_of_word_suffix": null, "fuse_unk": true, "byte_fallback": true, "ignore_merges": false,
	"vocab": {"<unk>": 0, "a": 1, "b": 2, "c": 3, "ab": 4, "abc": 5, "<0xC3>": 6, "<0xA9>": 7, "▁": 8},
	"merges": [["a", "b"], ["ab", "c"]]}`

func mustParse(t *testing.T, data []byte) *Tokenizer {
	t.Helper()
	tk, err := Parse("tiny.json", data)
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

func TestBPEByHand(t *testing.T) {
	tk := mustParse(t, tiny(tinyBPE, ""))
	cases := []struct {
		in   string
		want []int32
	}{
		{"abcab", []int32{5, 4}},
		{"aab", []int32{1, 4}},
		{"é", []int32{6, 7}},    // byte fallback: C3 A9
		{"xyab", []int32{0, 4}}, // unknown characters fused into one <unk>
		{"x" + strings.Repeat("ab", 40) + "c", append(append([]int32{0}, slices.Repeat([]int32{4}, 39)...), 5)}, // the queue path (> 48 symbols)
		{"", nil},
	}
	for _, c := range cases {
		got, err := tk.Encode(c.in, true)
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("Encode(%q) = %v, %v; want %v", c.in, got, err, c.want)
		}
	}
}

func TestAddedTokensByHand(t *testing.T) {
	added := `, "added_tokens": [
		{"id": 10, "content": "<s>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true},
		{"id": 11, "content": "ab", "single_word": true, "lstrip": true, "rstrip": true, "normalized": false, "special": false}]`
	data := tiny(tinyBPE, added+`, "post_processor": {"type": "TemplateProcessing",
		"single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
		"pair": [], "special_tokens": {"<s>": {"id": "<s>", "ids": [10], "tokens": ["<s>"]}}}`)
	// The later keys replace the defaults of tiny's object.
	tk := mustParse(t, data)
	// The reference ignores the ids the file gives added tokens: "<s>" gets
	// the next id after the vocabulary's 9 entries, "ab" its vocabulary id
	// (the template keeps the 10 it spells out).
	cases := []struct {
		in      string
		special bool
		want    []int32
	}{
		{"c<s>c", false, []int32{3, 9, 3}},
		{"c", true, []int32{10, 3}},
		{"c  ab  c", false, []int32{3, 4, 3}}, // lstrip and rstrip take the spaces
		{"cab", false, []int32{3, 4}},         // single_word: "ab" inside a word is not the added token
	}
	for _, c := range cases {
		got, err := tk.Encode(c.in, c.special)
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("Encode(%q, %v) = %v, %v; want %v", c.in, c.special, got, err, c.want)
		}
	}
}

func TestWordPieceAndUnigramByHand(t *testing.T) {
	wp := mustParse(t, tiny(`{"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
		"max_input_chars_per_word": 5, "vocab": {"[UNK]": 0, "un": 1, "##aff": 2, "##able": 3, "a": 4}}`,
		`, "pre_tokenizer": {"type": "WhitespaceSplit"}`))
	if got, _ := wp.Encode("unaffable unable a toolong", false); !slices.Equal(got, []int32{0, 0, 4, 0}) {
		// "unaffable" has 9 characters > 5; "unable" has no "##ble"; "toolong" > 5
		t.Errorf("WordPiece = %v", got)
	}
	if got, _ := wp.Encode("unaff", false); !slices.Equal(got, []int32{1, 2}) {
		t.Errorf("WordPiece(unaff) = %v, want [1 2]", got)
	}
	un := mustParse(t, tiny(`{"type": "Unigram", "unk_id": 0, "byte_fallback": false,
		"vocab": [["<unk>", 0.0], ["a", -1.0], ["b", -1.0], ["ab", -1.5], ["abc", -5.0], ["c", -2.0]]}`, ""))
	// "abc": ab+c = -3.5 beats abc = -5 and a+b+c = -4; "xx" is one fused unk.
	if got, _ := un.Encode("abcxx", false); !slices.Equal(got, []int32{3, 5, 0}) {
		t.Errorf("Unigram = %v, want [3 5 0]", got)
	}
}

func TestRefusedNamingWhere(t *testing.T) {
	cases := []struct {
		extra    string
		sentinel error
		want     string
	}{
		{`, "normalizer": {"type": "Sequence", "normalizers": [{"type": "NFC"}, {"type": "Precompiled"}]}`, ErrUnsupported, `normalizer.normalizers[1]: type "Precompiled" is not supported`},
		{`, "pre_tokenizer": {"type": "Split", "pattern": {"Regex": "\\w+"}, "behavior": "Isolated", "invert": false}`, ErrUnsupported, `pre_tokenizer.pattern: the Split regex "\\w+"`},
		{`, "pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "ByteLevel"}, {"type": "Digits"}]}`, ErrUnsupported, `pre_tokenizer.pretokenizers[1]: a Digits step after ByteLevel`},
		{`, "post_processor": {"type": "Mystery"}`, ErrUnsupported, `post_processor: type "Mystery"`},
		{`, "truncation": {"max_length": 5}`, ErrUnsupported, `truncation:`},
		{`, "normalizer": {"typo": 1}`, ErrMalformed, `normalizer: malformed tokenizer.json: no "type"`},
	}
	for _, c := range cases {
		_, err := Parse("tiny.json", tiny(tinyBPE, c.extra))
		if !errors.Is(err, c.sentinel) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "tiny.json") {
			t.Errorf("Parse(%s) = %v, want %v naming %q", c.extra, err, c.sentinel, c.want)
		}
	}
	if _, err := Parse("x.json", []byte(`{"model": `)); !errors.Is(err, ErrMalformed) {
		t.Errorf("Parse(truncated) = %v, want ErrMalformed", err)
	}
	bad := strings.Replace(tinyBPE, `["ab", "c"]`, `["ab", "zz"]`, 1)
	if _, err := Parse("x.json", tiny(bad, "")); !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), "model.merges[1]") {
		t.Errorf("Parse(merge of unknown token) = %v, want ErrMalformed naming model.merges[1]", err)
	}
}

func TestInvalidUTF8(t *testing.T) {
	tk := mustParse(t, tiny(tinyBPE, ""))
	if _, err := tk.Encode("ab\xffc", false); !errors.Is(err, ErrInvalidUTF8) {
		t.Errorf("Encode(invalid) = %v, want ErrInvalidUTF8", err)
	}
	texts := []string{"ab", "a\xff"}
	if _, _, err := tk.EncodeBatch(nil, nil, 2, 2, false, func(i int) string { return texts[i] }); !errors.Is(err, ErrInvalidUTF8) || !strings.Contains(err.Error(), "row 1") {
		t.Errorf("EncodeBatch(invalid row 1) = %v", err)
	}
}

// Any number of workers gives the same values and offsets as Encode row by
// row: rows of a few bytes (one chunk), and rows of up to 10 KB with empty
// ones among them (chunks of many rows, of one row, shrinking at the end).
func TestEncodeBatchWorkers(t *testing.T) {
	tk := mustParse(t, tiny(tinyBPE, ""))
	var small, large []string
	for i := range 37 {
		small = append(small, strings.Repeat("abc", i%5)+strings.Repeat("é", i%3))
	}
	for i := range 300 {
		large = append(large, strings.Repeat("abc é", (i*7919)%2000*(i%4)/3))
	}
	for _, texts := range [][]string{small, large} {
		var want []int32
		wantOff := []int64{0}
		for _, s := range texts {
			ids, _ := tk.Encode(s, true)
			want = append(want, ids...)
			wantOff = append(wantOff, int64(len(want)))
		}
		for _, w := range []int{1, 2, 3, 8, 100} {
			got, off, err := tk.EncodeBatch(nil, []int64{0}, len(texts), w, true, func(i int) string { return texts[i] })
			if err != nil || !slices.Equal(got, want) || !slices.Equal(off, wantOff) {
				t.Errorf("%d rows, EncodeBatch(workers=%d): %d ids, %d offsets, %v; want %d ids, %d offsets (or they differ)",
					len(texts), w, len(got), len(off), err, len(want), len(wantOff))
			}
		}
	}
}

// serdeFloat is serde_json's parse: u64 significand, then one multiply or
// divide by an exact power of ten; for short inputs that is correctly rounded.
func TestSerdeFloat(t *testing.T) {
	for _, s := range []string{"0", "-0.0", "1.5", "-2.25e3", "12.0", "1e-5", "-3"} {
		want, _ := strconv.ParseFloat(s, 64)
		if got, err := serdeFloat([]byte(s)); err != nil || got != want {
			t.Errorf("serdeFloat(%s) = %v, %v; want %v", s, got, err, want)
		}
	}
	got, _ := serdeFloat([]byte("-9.074385043079877"))
	if want := -(float64(uint64(9074385043079877)) / 1e15); got != want {
		t.Errorf("serdeFloat(-9.074385043079877) = %v, want %v", got, want)
	}
	if got, _ := serdeFloat([]byte("123456789012345678901234")); got != float64(uint64(12345678901234567890))*1e4 {
		t.Errorf("serdeFloat(24 digits) = %v", got)
	}
	for _, s := range []string{"", "-", "01", "1.", "1e", "x", "1e400"} {
		if _, err := serdeFloat([]byte(s)); err == nil {
			t.Errorf("serdeFloat(%q) succeeded, want an error", s)
		}
	}
}

func TestCharClassPreTokenizers(t *testing.T) {
	sc := &scratch{}
	cases := []struct {
		name string
		p    preTokenizer
		in   string
		want []string
	}{
		{"Whitespace", spanSplit{spans: whitespaceSpans, behavior: behRemoved}, "Hey friend!  How are_you?!", []string{"Hey", "friend", "!", "How", "are_you", "?!"}},
		{"Digits", spanSplit{spans: func(s string, sp []span) []span { return charSpans(s, isNumeric, sp) }, behavior: behContiguous}, "ab123c4", []string{"ab", "123", "c", "4"}},
		{"Metaspace first", metaspace{replacement: "▁", scheme: prependFirst, splitWords: true}, "a b  c", []string{"▁a", "▁b", "▁", "▁c"}},
		{"ByteLevel prefix", byteLevel{addPrefixSpace: true, useRegex: true}, "a b", []string{" a", " b"}},
	}
	for _, c := range cases {
		var got []string
		for _, w := range c.p.split(sc, []word{{s: c.in, first: true}}, nil) {
			got = append(got, w.s)
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("%s(%q) = %q, want %q", c.name, c.in, got, c.want)
		}
	}
}

func TestVocabularyLookups(t *testing.T) {
	added := `, "added_tokens": [{"id": 9, "content": "<s>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true},
		{"id": 10, "content": "xyz", "single_word": false, "lstrip": false, "rstrip": false, "normalized": true, "special": false}]`
	post := `, "post_processor": {"type": "BertProcessing", "sep": ["<s>", 9], "cls": ["<s>", 9]}`
	tk := mustParse(t, tiny(tinyBPE, added+post))
	for tok, want := range map[string]int32{"<s>": 9, "xyz": 10, "abc": 5, "<0xC3>": 6} {
		if id, ok := tk.TokenID(tok); !ok || id != want {
			t.Errorf("TokenID(%q) = %d, %v; want %d", tok, id, ok, want)
		}
	}
	if _, ok := tk.TokenID("nope"); ok {
		t.Errorf("TokenID(nope) found")
	}
	if sp := tk.SpecialTokens(); len(sp) != 1 || sp["<s>"] != 9 {
		t.Errorf("SpecialTokens() = %v, want map[<s>:9]", sp)
	}
	if p, s := tk.Affixes(); !slices.Equal(p, []int32{9}) || !slices.Equal(s, []int32{9}) {
		t.Errorf("Affixes() = %v %v, want [9] [9]", p, s)
	}
	// Byte-level: entries are spelled in GPT-2's stand-in characters.
	bl := mustParse(t, tiny(`{"type": "BPE", "vocab": {"Ġ": 0, "a": 1, "Ġa": 2}, "merges": ["Ġ a"]}`,
		`, "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true}`))
	if id, ok := bl.TokenID("Ġa"); !ok || id != 2 {
		t.Errorf("byte-level TokenID(Ġa) = %d, %v; want 2", id, ok)
	}
	if got, _ := bl.Encode("a a", false); !slices.Equal(got, []int32{1, 2}) {
		t.Errorf("byte-level Encode(a a) = %v, want [1 2]", got)
	}
}

// The Basic Multilingual Plane table agrees with the range tables everywhere.
func TestBMPClassTable(t *testing.T) {
	buildBMPClass()
	for r := rune(0); r < 0x10000; r++ {
		if got, want := class(r), slowClass(r); got != want {
			t.Fatalf("class(%U) = %b, want %b", r, got, want)
		}
	}
}

// A piece repeated in a Unigram vocabulary means its last id and score (the
// reference keeps a map from piece to id, later entries replacing earlier).
func TestUnigramRepeatedPiece(t *testing.T) {
	un := mustParse(t, tiny(`{"type": "Unigram", "unk_id": 0, "byte_fallback": false,
		"vocab": [["<unk>", 0.0], ["a", -1.0], ["b", -1.0], ["a", -0.5]]}`, ""))
	if got, _ := un.Encode("ab", false); !slices.Equal(got, []int32{3, 2}) {
		t.Errorf("Encode(ab) = %v, want [3 2]", got)
	}
	if id, _ := un.TokenID("a"); id != 3 {
		t.Errorf("TokenID(a) = %d, want 3", id)
	}
}
