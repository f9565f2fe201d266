package format

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/parquet-go/parquet-go/encoding/thrift"
	pqformat "github.com/parquet-go/parquet-go/format"
)

// pageWalk is what a walk found: each page's offset, kind and value count,
// then how it ended.
func pageWalk(it *pageIter, whole bool) string {
	var out string
	var p pageHead
	for it.next(&p, whole) {
		out += fmt.Sprintf("%d:%d:%d ", p.at, p.kind, p.nvals)
	}
	switch {
	case it.Err() != nil && errors.Is(it.Err(), ErrCorrupt):
		out += "corrupt"
	case it.Err() != nil:
		out += "unclassified " + it.Err().Error()
	case it.short:
		out += "short"
	default:
		out += "end"
	}
	return out
}

// TestPageIter: the walk refuses corrupt headers with ErrCorrupt, and a walk
// through windows of any size finds the pages a walk of the whole chunk
// finds.
func TestPageIter(t *testing.T) {
	v1 := func(n int) []byte {
		return v1Page(t, pqformat.Uncompressed, n, append(levelSectionOf(rleRun(n, 1)), int64Plain(make([]int64, n)...)...))
	}
	dict := func() []byte {
		h := pqformat.PageHeader{Type: pqformat.DictionaryPage, UncompressedPageSize: 8, CompressedPageSize: 8}
		h.DictionaryPageHeader = thrift.New(pqformat.DictionaryPageHeader{NumValues: 1, Encoding: pqformat.Plain})
		return append(pageHeader(t, h), int64Plain(1)...)
	}
	header := func(mod func(h *pqformat.PageHeader)) []byte {
		h := pqformat.PageHeader{Type: pqformat.DataPageV2, UncompressedPageSize: 16, CompressedPageSize: 16}
		h.DataPageHeaderV2 = thrift.New(pqformat.DataPageHeaderV2{NumValues: 2, NumRows: 2, Encoding: pqformat.Plain})
		mod(&h)
		return append(pageHeader(t, h), int64Plain(1, 2)...)
	}
	cat := func(bs ...[]byte) []byte {
		var out []byte
		for _, b := range bs {
			out = append(out, b...)
		}
		return out
	}
	good := cat(dict(), v1(3), v2Page(t, pqformat.Uncompressed, 2, 0, rleRun(2, 1), int64Plain(1, 2)), v1(0), v1(5))
	lim := pageLimits{values: 10, bytes: 1 << 20}
	for _, tc := range []struct {
		name  string
		chunk []byte
		lim   pageLimits
		want  string // suffix of the walk
	}{
		{"pages", good, lim, "end"},
		{"values past the footer's", good, pageLimits{values: 9, bytes: 1 << 20}, "corrupt"},
		{"bytes past the limit", good, pageLimits{values: 10, bytes: 100}, "corrupt"},
		{"body past the chunk", good[:len(good)-1], lim, "corrupt"},
		{"header garbage", cat(v1(1), []byte{0xff, 0xff, 0xff}), lim, "corrupt"},
		{"negative compressed size", header(func(h *pqformat.PageHeader) { h.CompressedPageSize = -1 }), lim, "corrupt"},
		{"negative uncompressed size", header(func(h *pqformat.PageHeader) { h.UncompressedPageSize = -1 }), lim, "corrupt"},
		{"negative values", header(func(h *pqformat.PageHeader) { h.DataPageHeaderV2.V.NumValues = -1 }), lim, "corrupt"},
		{"levels past the page", header(func(h *pqformat.PageHeader) { h.DataPageHeaderV2.V.DefinitionLevelsByteLength = 17 }), lim, "corrupt"},
		{"negative level length", header(func(h *pqformat.PageHeader) { h.DataPageHeaderV2.V.RepetitionLevelsByteLength = -1 }), lim, "corrupt"},
		{"nulls past the values", header(func(h *pqformat.PageHeader) { h.DataPageHeaderV2.V.NumNulls = 3 }), lim, "corrupt"},
	} {
		got := pageWalk(newPageIter(tc.chunk, tc.lim), false)
		if len(got) < len(tc.want) || got[len(got)-len(tc.want):] != tc.want {
			t.Errorf("walk(%q) = %q, want it to end %q", tc.name, got, tc.want)
		}
	}
	// Windows: every window size, the walk resumed where it stopped.
	want := pageWalk(newPageIter(good, lim), true)
	if want == "end" {
		t.Fatal("no page found")
	}
	rng := rand.New(rand.NewPCG(fastSeed(t), 7))
	for trial := 0; trial < 200; trial++ {
		w := 1 + rng.IntN(len(good))
		it := newPageWindows(int64(len(good)), lim)
		var got string
		for win := w; it.pos < int64(len(good)); {
			end := min(int64(len(good)), it.pos+int64(win))
			it.window(good[it.pos:end], it.pos)
			before := it.pos
			walk := pageWalk(it, false)
			switch {
			case strings.HasSuffix(walk, "short"):
				got += strings.TrimSuffix(walk, "short")
			case strings.HasSuffix(walk, "end"):
				got += strings.TrimSuffix(walk, "end")
			default:
				t.Fatalf("window %d: %q", win, walk)
			}
			if it.pos == before {
				win *= 2 // a header longer than the window: read a larger one
			}
		}
		got += "end"
		if got != want {
			t.Fatalf("walk through windows of %d bytes = %q, want %q", w, got, want)
		}
	}
}
