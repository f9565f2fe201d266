package main

import (
	"context"
	"strings"
	"testing"

	"github.com/meshfeed/meshfeed/internal/datagen"
	"github.com/meshfeed/meshfeed/tokenize"
)

// plan --tokenizer reports each tokenized column's tokenizer SHA-256 (as
// GetFlightInfo does) and refuses a column that is not text, naming it.
func TestPlanTokenizer(t *testing.T) {
	dir := t.TempDir()
	spec := datagen.TextSpec{Docs: 20, Files: 1, RowGroupRows: 5, MinChars: 10, MaxChars: 50, Seed: 3}
	src := datagen.NewTextSource(strings.Repeat("The quick brown fox jumps over the lazy dog; ", 2000))
	if _, err := datagen.WriteText(context.Background(), datagen.LocalCreator{}, dir, spec, src); err != nil {
		t.Fatal(err)
	}
	tokPath := letterTokenizer(t)
	tok, err := tokenize.Load(tokPath)
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"--data", dir, "--global-batch-size", "4", "--mesh", "data=2", "--batch-axes", "data"}
	out, err := planRunRaw(t, append(args, "--json", "--tokenizer", "text="+tokPath)...)
	if err != nil || !strings.Contains(out, `"text": "`+tok.Hash()+`"`) {
		t.Errorf("plan --json --tokenizer text=... = %v\n%s\nwant tokenizers {text: %s}", err, out, tok.Hash())
	}
	out, err = planRunRaw(t, append(args, "--tokenizer", "text="+tokPath)...)
	if err != nil || !strings.Contains(out, `column "text": sha256 `+tok.Hash()) {
		t.Errorf("plan --tokenizer text=... = %v\n%s\nwant the tokenizer's line", err, out)
	}
	_, err = planRunRaw(t, append(args, "--tokenizer", "id="+tokPath)...)
	if err == nil || !strings.Contains(err.Error(), `column "id"`) || !strings.Contains(err.Error(), "not a string") {
		t.Errorf("plan --tokenizer id=... = %v, want an error naming the column and its type", err)
	}
}
