package main

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/meshfeed/meshfeed/feed"
	"github.com/meshfeed/meshfeed/internal/datagen"
	"github.com/meshfeed/meshfeed/manifest"
	"github.com/meshfeed/meshfeed/objstore"
	"github.com/meshfeed/meshfeed/tokcount"
	"github.com/meshfeed/meshfeed/tokenize"
	"github.com/meshfeed/meshfeed/transport"
)

// meshfeed index stores every row's token count (with and without special
// tokens, two facts side by side) in the dataset's manifest, and a request
// packing the column by concatenation then plans from it without
// tokenizing, to the steps planning from the footers (counting) gives.
func TestIndexCommand(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	spec := datagen.TextSpec{Docs: 31, Files: 2, RowGroupRows: 6, MinChars: 1, MaxChars: 200, Seed: 4}
	src := datagen.NewTextSource(strings.Repeat("Pack my box with five dozen liquor jugs. ", 3000))
	if _, err := datagen.WriteText(ctx, datagen.LocalCreator{}, dir, spec, src); err != nil {
		t.Fatal(err)
	}
	tokPath := letterTokenizer(t)
	tok, err := tokenize.Load(tokPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{}, {"--add-special-tokens=false"}} {
		if err := runIndex(ctx, append(append([]string{"--tokenizer", tokPath, "--column", "text"}, args...), dir+"/*.parquet")); err != nil {
			t.Fatalf("index %v: %v", args, err)
		}
	}
	store, err := objstore.NewStore(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	m, err := manifest.Read(ctx, store, dir+"/_meshfeed_manifest.parquet")
	if err != nil {
		t.Fatal(err)
	}
	row := int64(0)
	for _, f := range m.Files {
		var counts [2]*tokcount.Counts
		for k, special := range []bool{true, false} {
			b, ok := m.Fact(f.Object(), tokcount.FactKind, tokcount.Key{Tokenizer: tok.Hash(), Column: "text", AddSpecial: special}.String())
			if !ok {
				t.Fatalf("%s: no token counts (special %v)", f.URI, special)
			}
			if counts[k], err = tokcount.Decode(b); err != nil {
				t.Fatal(err)
			}
		}
		for g, rg := range counts[0].RowGroups {
			for i, n := range rg {
				ids, _ := tok.Encode(src.TextDoc(spec, row), true)
				if int(n) != len(ids) || int(counts[1].RowGroups[g][i]) != len(ids)-2 {
					t.Fatalf("%s row %d: counts %d and %d, want %d and %d", f.URI, row, n, counts[1].RowGroups[g][i], len(ids), len(ids)-2)
				}
				row++
			}
		}
	}
	if row != spec.Docs {
		t.Fatalf("the manifest counts %d rows, want %d", row, spec.Docs)
	}
	var steps [2]int64
	for k, mf := range []string{"auto", "off"} {
		p, err := feed.NewPipeline(ctx)
		if err != nil {
			t.Fatal(err)
		}
		req := &transport.Request{Version: transport.Version, Datasets: []string{dir + "/*.parquet"}, GlobalBatchSize: 2, NumSlices: 2, Slices: []int{0, 1},
			LastBatch: transport.LastBatchDrop, Manifest: mf, Columns: []transport.Column{{Name: "text", Tokenizer: tokPath, Length: 16, Pack: feed.PackConcat, EODToken: "[SEP]"}}}
		info, err := p.Info(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		steps[k] = info.StepsPerEpoch
		st := p.TokenCountStats()
		want := [][3]int64{{2, 0, 0}, {0, 0, 2}}[k]
		if got := [3]int64{st.Stored.Load(), st.Cached.Load(), st.Counted.Load()}; !slices.Equal(got[:], want[:]) {
			t.Errorf("manifest %s: files stored/cached/counted %v, want %v", mf, got, want)
		}
		p.Close()
	}
	if steps[0] != steps[1] {
		t.Errorf("steps per epoch from the index %d, counted %d", steps[0], steps[1])
	}
}
