package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/meshfeed/meshfeed/internal/datagen"
	"github.com/meshfeed/meshfeed/tokenize"
)

// A character-level WordPiece over ASCII letters: each letter is one token.
func letterTokenizer(t *testing.T) string {
	path := filepath.Join(t.TempDir(), "tokenizer.json")
	if err := os.WriteFile(path, datagen.LetterTokenizer(false), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// tokenize prints every row once, in dataset order, with the ids Encode
// gives; --no-special-tokens drops [CLS] and [SEP]; a non-string column is refused.
func TestTokenizeCommand(t *testing.T) {
	dir := t.TempDir()
	spec := datagen.TextSpec{Docs: 23, Files: 2, RowGroupRows: 5, MinChars: 100, MaxChars: 300, Seed: 3}
	var sb strings.Builder
	for sb.Len() < 1<<17 {
		sb.WriteString("The quick brown fox jumps over the lazy dog; ")
	}
	src := datagen.NewTextSource(sb.String())
	if _, err := datagen.WriteText(context.Background(), datagen.LocalCreator{}, dir, spec, src); err != nil {
		t.Fatal(err)
	}
	tokPath := letterTokenizer(t)
	tok, err := tokenize.Load(tokPath)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	old := tokenizeStdout
	tokenizeStdout = &buf
	t.Cleanup(func() { tokenizeStdout = old })
	for _, special := range []bool{true, false} {
		buf.Reset()
		args := []string{"--tokenizer", tokPath, "--column", "text", "--json", "--workers", "3"}
		if !special {
			args = append(args, "--no-special-tokens")
		}
		if err := runTokenize(context.Background(), append(args, dir)); err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
		if len(lines) != int(spec.Docs) {
			t.Fatalf("%d lines, want %d", len(lines), spec.Docs)
		}
		for i, line := range lines {
			var rec struct {
				Row int     `json:"row"`
				IDs []int32 `json:"ids"`
			}
			if err := json.Unmarshal([]byte(line), &rec); err != nil || rec.Row != i {
				t.Fatalf("line %d = %q: %v", i, line, err)
			}
			want, _ := tok.Encode(src.TextDoc(spec, int64(i)), special)
			if !slices.Equal(rec.IDs, want) {
				t.Fatalf("row %d (special %v) = %v, want %v", i, special, rec.IDs, want)
			}
			if special && (rec.IDs[0] != 1 || rec.IDs[len(rec.IDs)-1] != 2) {
				t.Fatalf("row %d lacks [CLS] ... [SEP]: %v", i, rec.IDs)
			}
		}
	}
	err = runTokenize(context.Background(), []string{"--tokenizer", tokPath, "--column", "id", dir})
	if err == nil || !strings.Contains(err.Error(), `column "id"`) || !strings.Contains(err.Error(), "not string") {
		t.Errorf("tokenize of the int64 column = %v, want a refusal naming it", err)
	}
	err = runTokenize(context.Background(), []string{"--tokenizer", filepath.Join(dir, "nope.json"), "--column", "text", dir})
	if err == nil || !strings.Contains(err.Error(), "nope.json") {
		t.Errorf("tokenize with a missing tokenizer = %v, want an error naming it", err)
	}
	if errors.Is(err, tokenize.ErrUnsupported) {
		t.Errorf("a missing file is not an unsupported component: %v", err)
	}
}
