package feed

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/meshfeed/meshfeed/objstore"
	"github.com/meshfeed/meshfeed/tokenize"
)

// byteLevelChar is GPT-2's stand-in character for byte b (bytes_to_unicode).
func byteLevelChar(b int) string {
	if (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF) {
		return string(rune(b))
	}
	n := 0
	for c := 0; c < b; c++ {
		if !((c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE && c <= 0xFF)) {
			n++
		}
	}
	return string(rune(256 + n))
}

// testTokenizerJSON builds a small byte-level BPE tokenizer.json (GPT-2's
// pre-tokenizer, every byte in the vocabulary, a few merges) with <s> and
// </s> as special tokens that its post-processor puts around every text;
// variant changes the merges, so that two files give different ids.
func testTokenizerJSON(variant int) []byte {
	vocab := map[string]int{}
	for b := range 256 {
		vocab[byteLevelChar(b)] = b
	}
	merges := [][2]string{{"Ġ", "t"}, {"h", "e"}, {"Ġt", "he"}, {"i", "n"}, {"e", "r"}, {"Ġ", "a"}, {"o", "n"}, {"a", "t"}}
	if variant == 1 {
		merges = [][2]string{{"e", "r"}, {"o", "n"}, {"Ġ", "a"}}
	}
	for _, m := range merges {
		vocab[m[0]+m[1]] = len(vocab)
	}
	n := len(vocab)
	doc := map[string]any{
		"version": "1.0", "truncation": nil, "padding": nil, "normalizer": nil, "decoder": nil,
		"added_tokens": []any{
			map[string]any{"id": n, "content": "<s>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true},
			map[string]any{"id": n + 1, "content": "</s>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true},
		},
		"pre_tokenizer": map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
		"post_processor": map[string]any{
			"type":   "TemplateProcessing",
			"single": []any{map[string]any{"SpecialToken": map[string]any{"id": "<s>", "type_id": 0}}, map[string]any{"Sequence": map[string]any{"id": "A", "type_id": 0}}, map[string]any{"SpecialToken": map[string]any{"id": "</s>", "type_id": 0}}},
			"pair":   []any{map[string]any{"Sequence": map[string]any{"id": "A", "type_id": 0}}},
			"special_tokens": map[string]any{
				"<s>":  map[string]any{"id": "<s>", "ids": []int{n}, "tokens": []string{"<s>"}},
				"</s>": map[string]any{"id": "</s>", "ids": []int{n + 1}, "tokens": []string{"</s>"}},
			},
		},
		"model": map[string]any{"type": "BPE", "dropout": nil, "unk_token": nil, "continuing_subword_prefix": nil, "end_of_word_suffix": nil,
			"fuse_unk": false, "byte_fallback": false, "ignore_merges": false, "vocab": vocab, "merges": merges},
	}
	data, err := json.Marshal(doc)
	if err != nil {
		panic(err)
	}
	return data
}

// writeTokenizer writes testTokenizerJSON(variant) under dir.
func writeTokenizer(t testing.TB, dir string, variant int) string {
	t.Helper()
	path := filepath.Join(dir, "tokenizer.json")
	if variant != 0 {
		path = filepath.Join(dir, "tokenizer-"+string(rune('0'+variant))+".json")
	}
	if err := os.WriteFile(path, testTokenizerJSON(variant), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestTokenizerCacheParsesEachContentOnce(t *testing.T) {
	dir := t.TempDir()
	a := writeTokenizer(t, dir, 0)
	b := filepath.Join(dir, "copy.json")
	if err := os.WriteFile(b, testTokenizerJSON(0), 0o644); err != nil {
		t.Fatal(err)
	}
	store, err := objstore.NewStore(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	c := NewTokenizerCache(2)
	var wg sync.WaitGroup
	toks := make([]*tokenize.Tokenizer, 8)
	sums := make([]string, 8)
	for i := range toks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			uri := a
			if i%2 == 1 {
				uri = b
			}
			var err error
			if toks[i], sums[i], err = c.Get(context.Background(), store, uri); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if got := c.Parses(); got != 1 {
		t.Errorf("8 concurrent Gets of two copies of one file parsed %d times, want 1", got)
	}
	for i := range toks {
		if toks[i] != toks[0] || sums[i] != toks[0].Hash() {
			t.Fatalf("Get %d = %p %s, want the one tokenizer %p %s", i, toks[i], sums[i], toks[0], toks[0].Hash())
		}
	}
	other := writeTokenizer(t, dir, 1)
	tk, sum, err := c.Get(context.Background(), store, other)
	if err != nil || sum == sums[0] || tk == toks[0] || c.Parses() != 2 {
		t.Errorf("Get(other file) = %p %s %v (parses %d), want another tokenizer", tk, sum, err, c.Parses())
	}
	// Missing and malformed files: errors naming the file.
	if _, _, err := c.Get(context.Background(), store, filepath.Join(dir, "missing.json")); !errors.Is(err, objstore.ErrNotFound) || !strings.Contains(err.Error(), "missing.json") {
		t.Errorf("Get(missing) = %v, want ErrNotFound naming it", err)
	}
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte(`{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": [["a", "zz"]]}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.Get(context.Background(), store, bad); !errors.Is(err, tokenize.ErrMalformed) || !strings.Contains(err.Error(), "bad.json") || !strings.Contains(err.Error(), "model.merges[0]") {
		t.Errorf("Get(malformed) = %v, want ErrMalformed naming the file and model.merges[0]", err)
	}
}

func TestTokenizeStringsMatchesEncode(t *testing.T) {
	tk, err := tokenize.Parse("t.json", testTokenizerJSON(0))
	if err != nil {
		t.Fatal(err)
	}
	texts := []string{"the cat sat on the mat", "", "héllo wörld ünïcode 日本語 🙂", "other\n\tthe  whitespace  ", "at at at"}
	for _, large := range []bool{false, true} {
		for _, workers := range []int{1, 3} {
			for _, special := range []bool{true, false} {
				mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
				var arr arrow.Array
				valid := []bool{true, true, false, true, true}
				if large {
					b := array.NewLargeStringBuilder(mem)
					b.AppendValues(texts, valid)
					arr = b.NewArray()
					b.Release()
				} else {
					b := array.NewStringBuilder(mem)
					b.AppendValues(texts, valid)
					arr = b.NewArray()
					b.Release()
				}
				out, err := TokenizeStrings(tk, arr, special, workers, mem)
				if err != nil {
					t.Fatal(err)
				}
				list := out.(*array.List)
				if !arrow.TypeEqual(list.DataType(), TokenType) || list.Len() != len(texts) || list.NullN() != 1 {
					t.Fatalf("TokenizeStrings = %s of %d rows, %d nulls; want %s of %d rows, 1 null", list.DataType(), list.Len(), list.NullN(), TokenType, len(texts))
				}
				ids := list.ListValues().(*array.Int32).Int32Values()
				for i, s := range texts {
					lo, hi := list.ValueOffsets(i)
					got := ids[lo:hi]
					var want []int32
					if valid[i] {
						want, _ = tk.Encode(s, special)
					}
					if !slices.Equal(got, want) || list.IsNull(i) == valid[i] {
						t.Errorf("large=%v workers=%d special=%v row %d (%q): ids %v null %v, want %v null %v", large, workers, special, i, s, got, list.IsNull(i), want, !valid[i])
					}
				}
				out.Release()
				arr.Release()
				mem.AssertSize(t, 0)
			}
		}
	}
}

func TestTokenizeStringsInvalidUTF8(t *testing.T) {
	tk, err := tokenize.Parse("t.json", testTokenizerJSON(0))
	if err != nil {
		t.Fatal(err)
	}
	b := array.NewStringBuilder(memory.DefaultAllocator)
	b.AppendValues([]string{"fine", "also fine", "ab\xffcd", "x\xfe"}, []bool{true, false, true, true})
	arr := b.NewArray()
	defer arr.Release()
	_, err = TokenizeStrings(tk, arr, true, 2, memory.DefaultAllocator)
	var te *TextError
	if !errors.As(err, &te) || te.Row != 2 || te.Byte != 2 || !errors.Is(err, tokenize.ErrInvalidUTF8) {
		t.Errorf("TokenizeStrings(invalid UTF-8 in row 2 at byte 2) = %v, want a TextError row 2 byte 2", err)
	}
	ints := array.NewInt32Builder(memory.DefaultAllocator)
	ints.Append(1)
	ia := ints.NewArray()
	defer ia.Release()
	if _, err := TokenizeStrings(tk, ia, true, 1, memory.DefaultAllocator); err == nil || !strings.Contains(err.Error(), "int32") {
		t.Errorf("TokenizeStrings(int32 array) = %v, want an error naming the type", err)
	}
}
