package feed

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/meshfeed/meshfeed/batching"
	"github.com/meshfeed/meshfeed/transport"
)

// TestConcatTokenizedAheadReleases: the documents a concatenated slice's
// reader tokenizes ahead (kept rows taken under filters) give the model's
// slices, whatever the read-ahead (one row group, or all of them), and
// every buffer of them is released: after whole epochs, and after a
// stream closed while its readers hold tokenized row groups not yet used.
func TestConcatTokenizedAheadReleases(t *testing.T) {
	dir := writeConcatText(t, 57, 2, 7)
	tokPath := letterTokenizer(t, true)
	keep := func(id int64) bool { return id >= 5 && (id < 14 || id > 29) && id != 40 }
	rgs, ids := modelKeptDocs(t, dir, tokPath, true, keep)
	cfg := batching.Config{GlobalBatch: 4, D: 2, Seed: 11, ShuffleRowGroups: true, Window: 3, Policy: batching.Pad}
	for _, readAhead := range []int64{1, 64 << 20} {
		mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
		p, err := NewPipeline(context.Background(), WithAllocator(mem), WithReadAhead(readAhead))
		if err != nil {
			t.Fatal(err)
		}
		req := concatRequest(dir, tokPath, 8, 4, 2, []int{0, 1}, transport.LastBatchPad, 3)
		req.Filters = json.RawMessage(`[["id", ">=", 5], ["id", "not in", [14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 40]]]`)
		checkConcatSteps(t, readConcatStream(t, p, req), rgs, ids, cfg, 8)
		mem.AssertSize(t, 0)
		if got := readConcatSteps(t, p, req, 2); len(got) != 4 {
			t.Errorf("read-ahead %d: 2 steps gave %d slices, want 4", readAhead, len(got))
		}
		mem.AssertSize(t, 0)
		p.Close()
	}
}

// TestConcatSizingHoldsARowGroup: the reservation of a concatenated stream
// counts the ids of one row group per slice beside its shuffle window (a
// slice holds the row group its oldest document came in), and with no
// window still that row group; the ids in flight as for tokenized columns,
// twice (the next epoch's readers open while the current's hold ids).
func TestConcatSizingHoldsARowGroup(t *testing.T) {
	dir := writeConcatText(t, 57, 2, 7)
	tokPath := letterTokenizer(t, true)
	p := newConcatPipeline(t)
	for _, window := range []int{0, 5} {
		pl, err := p.planFor(context.Background(), concatRequest(dir, tokPath, 8, 4, 2, []int{0, 1}, transport.LastBatchDrop, window))
		if err != nil {
			t.Fatal(err)
		}
		var maxRG float64
		for _, f := range pl.ds.Files {
			for _, m := range f.RowGroups {
				maxRG = max(maxRG, float64(m.Bytes+m.DecodedBytes))
			}
		}
		sz := p.sizeOf(pl)
		want := 2 * 4 * maxRG
		if window > 0 {
			cp := pl.concat.plan
			want += 2 * float64(window) * (4*float64(cp.Tokens())/float64(cp.N()) + 8)
		}
		if sz.window != want || sz.tokens != 2*tokensAhead(pl.toks, pl.ds, sz.readAhead) {
			t.Errorf("window %d: sizes %+v, want window %.0f (one row group of ids per slice) and the ids in flight twice (two epochs' readers)", window, sz, want)
		}
	}
}

// TestConcatOpensNextEpochAhead: once every slice's reader has handed out
// its epoch's row groups, the next epoch's readers are opened (so its
// first documents are tokenized before its first step), not past the last
// epoch; the stream's slices with it are the model's
// (TestConcatTokenizedAheadReleases, two epochs).
func TestConcatOpensNextEpochAhead(t *testing.T) {
	dir := writeConcatText(t, 57, 2, 7)
	tokPath := letterTokenizer(t, true)
	p := newConcatPipeline(t)
	ctx := context.Background()
	st, err := p.Open(ctx, concatRequest(dir, tokPath, 8, 4, 2, []int{0, 1}, transport.LastBatchPad, 3))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	cs, ok := st.(*concatStream)
	if !ok {
		t.Fatalf("Open returned %T, not a concatStream", st)
	}
	aheadIn := map[int]bool{}
	for {
		step, err := st.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("Next: %v", err)
		}
		if cs.ahead != nil {
			aheadIn[step.Meta.Epoch] = true
		}
		step.Release()
	}
	if !aheadIn[0] || aheadIn[1] {
		t.Errorf("next epoch's readers opened ahead in epochs %v, want in epoch 0 only (2 epochs)", aheadIn)
	}
}
