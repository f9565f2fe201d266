package feed

import (
	"context"
	"errors"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/meshfeed/meshfeed/internal/datagen"
	"github.com/meshfeed/meshfeed/loader"
	"github.com/meshfeed/meshfeed/objstore"
	"github.com/meshfeed/meshfeed/tokenize"
	"github.com/meshfeed/meshfeed/transport"
)

// BenchmarkConcatIndex measures what building the token-count index costs
// against one epoch of concatenated packing, on the same dataset: "index"
// counts every row of the column (TokenCounts: read, tokenize on every
// core); "epoch" streams one epoch of packed rows of 2048 tokens (B=8, D=1)
// from a plan whose counts are already cached (the stream tokenizes every
// document again). Both report CPU seconds per run beside the wall time;
// their ratio is what a job pays once per dataset and tokenizer, against
// each epoch. The tokenizer is $MESHFEED_TOKENIZER (a tokenizer.json) and
// the text $MESHFEED_TEXT_SOURCE (a directory, as for tokenize's
// BenchmarkEncode); without them a character-level tokenizer over a
// repeated sentence. $MESHFEED_DOCS sets the documents (default 2000, of
// 100 to 20,000 characters).
func BenchmarkConcatIndex(b *testing.B) {
	ctx := context.Background()
	tokPath := os.Getenv("MESHFEED_TOKENIZER")
	if tokPath == "" {
		tokPath = letterTokenizer(b, true)
	}
	tok, err := tokenize.Load(tokPath)
	if err != nil {
		b.Fatal(err)
	}
	src := datagen.NewTextSource(strings.Repeat("The quick brown fox jumps over the lazy dog and a zebra. ", 1<<12))
	if dir := os.Getenv("MESHFEED_TEXT_SOURCE"); dir != "" {
		if src, err = datagen.LoadTextSource(dir); err != nil {
			b.Fatal(err)
		}
	}
	spec := datagen.DefaultTextSpec()
	if v := os.Getenv("MESHFEED_DOCS"); v != "" {
		if spec.Docs, err = strconv.ParseInt(v, 10, 64); err != nil {
			b.Fatalf("MESHFEED_DOCS=%q: %v", v, err)
		}
	}
	dir := b.TempDir()
	if _, err := datagen.WriteText(ctx, datagen.LocalCreator{}, dir, spec, src); err != nil {
		b.Fatal(err)
	}
	store, err := objstore.NewStore(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer store.Close()
	ds, err := loader.Open(ctx, store, []string{dir + "/*.parquet"}, loader.WithColumns("text"))
	if err != nil {
		b.Fatal(err)
	}
	var tokens int64
	b.Run("index", func(b *testing.B) {
		cpu0 := cpuTime()
		for b.Loop() {
			counts, err := TokenCounts(ctx, ds, tok, "text", true)
			if err != nil {
				b.Fatal(err)
			}
			tokens = 0
			for _, c := range counts {
				tokens += c.Tokens()
			}
		}
		b.ReportMetric((cpuTime()-cpu0).Seconds()/float64(b.N), "cpu-s/op")
		b.ReportMetric(float64(tokens), "tokens")
	})
	b.Run("epoch", func(b *testing.B) {
		p, err := NewPipeline(ctx)
		if err != nil {
			b.Fatal(err)
		}
		defer p.Close()
		req := &transport.Request{Version: transport.Version, Datasets: []string{dir + "/*.parquet"}, GlobalBatchSize: 8, NumSlices: 1, Slices: []int{0},
			LastBatch: transport.LastBatchPad, Epochs: 1, Columns: []transport.Column{{Name: "text", Tokenizer: tokPath, Length: 2048, Pack: PackConcat, EODToken: eodOf(tok)}}}
		if _, err := p.Info(ctx, req); err != nil { // counts the tokens once: cached for the runs
			b.Fatal(err)
		}
		cpu0 := cpuTime()
		var steps int
		start := time.Now()
		for b.Loop() {
			steps = drainStream(b, p, req)
		}
		b.ReportMetric((cpuTime()-cpu0).Seconds()/float64(b.N), "cpu-s/op")
		b.ReportMetric(float64(steps), "steps")
		b.ReportMetric(float64(tokens)*float64(b.N)/time.Since(start).Seconds(), "tokens/s")
	})
}

// eodOf names a token of tok to end documents with: its own end token if
// it has one of the usual ones, else [SEP].
func eodOf(tok *tokenize.Tokenizer) string {
	for _, c := range eodCandidates {
		if _, ok := tok.SpecialTokens()[c]; ok {
			return c
		}
	}
	return "[SEP]"
}

// drainStream reads every step of req and returns how many there were.
func drainStream(b *testing.B, p *Pipeline, req *transport.Request) int {
	ctx := context.Background()
	st, err := p.Open(ctx, req)
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	n := 0
	for {
		step, err := st.Next(ctx)
		if errors.Is(err, io.EOF) {
			return n
		}
		if err != nil {
			b.Fatal(err)
		}
		step.Release()
		n++
	}
}
