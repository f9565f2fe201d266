package feed

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/meshfeed/meshfeed/internal/datagen"
	"github.com/meshfeed/meshfeed/loader"
	"github.com/meshfeed/meshfeed/objstore"
	"github.com/meshfeed/meshfeed/transport"
)

// mixtureAndOne returns a request for one dataset of dirs' files and one for
// the mixture of dirs as sources of weight 1 stopping after steps steps,
// both of global batch B over D slices, all of them, last batch dropped.
func mixtureAndOne(dirs []string, B, D, steps int) (single, mix *transport.Request) {
	var all []int
	for d := range D {
		all = append(all, d)
	}
	single = &transport.Request{Version: transport.Version, GlobalBatchSize: B, NumSlices: D, Slices: all,
		LastBatch: transport.LastBatchDrop, Epochs: 1}
	mix = &transport.Request{Version: transport.Version, GlobalBatchSize: B, NumSlices: D, Slices: all,
		LastBatch: transport.LastBatchDrop, Mixture: &transport.Mixture{Stop: transport.MixtureStop{Rule: "num_steps", NumSteps: steps}}}
	for _, d := range dirs {
		single.Datasets = append(single.Datasets, d+"/*.parquet")
		mix.Mixture.Sources = append(mix.Mixture.Sources, transport.MixtureSource{Datasets: []string{d + "/*.parquet"}, Weight: 1})
	}
	return single, mix
}

// eachStep reads st to its end, calling f with each step before releasing
// it, and fails t unless it had steps steps.
func eachStep(t *testing.T, st transport.Stream, steps int, f func(transport.Step)) {
	t.Helper()
	for n := 0; ; n++ {
		step, err := st.Next(context.Background())
		if errors.Is(err, io.EOF) {
			if n != steps {
				t.Fatalf("%d steps, want %d", n, steps)
			}
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		f(step)
		step.Release()
	}
}

// openOne opens req's stream on a new Pipeline with opts; the caller
// closes both.
func openOne(t *testing.T, req *transport.Request, opts ...Option) (*Pipeline, transport.Stream) {
	t.Helper()
	p, err := NewPipeline(context.Background(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	st, err := p.Open(context.Background(), req)
	if err != nil {
		p.Close()
		t.Fatal(err)
	}
	return p, st
}

// TestMixturePiecesBound holds mixturePieces to its memory bound: a
// cursor's reader in flight plus the two pieces its cutter holds stay
// within one and a half shares (what pieces of a quarter of the share with
// the whole share in flight held), and a piece has at least one row.
func TestMixturePiecesBound(t *testing.T) {
	for _, c := range []struct {
		share, whole int64
		perRow       float64
	}{
		{22369621, 0, 536}, {1 << 20, 0, 152}, {1 << 20, 1 << 18, 152}, {1 << 20, 0, 3 << 20}, {1 << 20, 2 << 20, 100},
	} {
		rows, budget := mixturePieces(c.share, c.perRow, c.whole)
		piece := int64(float64(rows)*c.perRow + 0.5)
		if rows < 1 {
			t.Errorf("%+v: pieces of %d rows", c, rows)
		}
		avail := c.share - c.whole
		if bound := int64(mixtureHold * float64(c.share)); avail >= 2*piece && budget+2*piece > bound+2 {
			t.Errorf("%+v: %d rows a piece (%d bytes), %d in flight: %d bytes held, over one and a half shares (%d)",
				c, rows, piece, budget, budget+2*piece, bound)
		}
		if budget < piece {
			t.Errorf("%+v: reader budget %d under one piece (%d bytes)", c, budget, piece)
		}
	}
}

// TestMixtureMapsLikeOneDataset reads three sources as a mixture (1:1:1)
// and as one dataset of the same files, B and D, under a read-ahead where
// each of the mixture's 12 cursors reads half a row group (as in
// BenchmarkMixture, at a smaller scale), and counts the bytes the readers
// mapped: each reader maps a row group's chunks once for all its pieces of
// it and populates each page once, when a piece first decodes it, so the
// bytes mapped count the pages each reader touched: the mixture's 12
// readers touch the pages at 12 ranges' edges twice (once per cursor whose
// range they cut), the single dataset's 4 at 4 and its row groups'. With a
// mapping per piece and column (before windows), pieces of half a cursor's
// share mapped 9.5% more than the single dataset here and pieces of a
// quarter 30% more; pieces of a step's take would map several times more.
// (Peak memory is BenchmarkMixture's: at this scale it is a few pieces,
// and which of them are held at once depends on timing.) Both read without
// the fetch share of edge pages (withoutEdgeShare), which serves pages
// that are read, not mapped.
func TestMixtureMapsLikeOneDataset(t *testing.T) {
	var dirs []string
	for i := range 3 {
		s := datagen.DefaultSpec()
		s.Rows, s.Files, s.RowGroupRows, s.Features, s.Seed = 8192, 1, 4096, 16, uint64(i+1)
		s.Compression, s.Dictionary, s.PageBytes = datagen.CompressionNone, false, 32<<10 // 8 pages of features a row group
		dirs = append(dirs, writeDataset(t, s))
	}
	const B, D, steps = 512, 4, 48
	single, mix := mixtureAndOne(dirs, B, D, steps)
	run := func(req *transport.Request) (mapped, peak int64) {
		mem := &peakAllocator{Allocator: memory.NewGoAllocator()}
		p, st := openOne(t, req, WithAllocator(mem), WithReadAhead(12<<20), withoutEdgeShare())
		defer p.Close()
		eachStep(t, st, steps, func(transport.Step) {})
		st.Close()
		sr, ok := p.cfg.store.(objstore.StatsReporter)
		if !ok {
			t.Fatal("the pipeline's store reports no stats")
		}
		if sr.Stats().Maps.Load() == 0 {
			t.Fatal("nothing was mapped: the test measures nothing (mmap off?)")
		}
		return sr.Stats().BytesMapped.Load(), mem.peak.Load()
	}
	oneMapped, onePeak := run(single)
	mixMapped, mixPeak := run(mix)
	t.Logf("bytes mapped: single dataset %d, mixture %d (%+.1f%%); peak bytes held: %d, %d (%+.1f%%)",
		oneMapped, mixMapped, 100*float64(mixMapped-oneMapped)/float64(oneMapped),
		onePeak, mixPeak, 100*float64(mixPeak-onePeak)/float64(onePeak))
	if float64(mixMapped) > 1.15*float64(oneMapped) {
		t.Errorf("the mixture mapped %d bytes, the single dataset %d: its cursors read in more, smaller pieces than their share allows", mixMapped, oneMapped)
	}
}

// readsLeft returns how many of st's readers' reads (row groups or pieces)
// are not decoded yet: a single dataset's slices' or a mixture's cursors'.
func readsLeft(t *testing.T, st transport.Stream) int64 {
	var left int64
	count := func(rd *loader.RowGroupReader, reads int) {
		if rd != nil {
			left += int64(reads) - rd.Stats().RowGroups.Load() - rd.Stats().Pieces.Load()
		}
	}
	switch s := st.(type) {
	case *pipelineStream:
		for _, sc := range s.slices {
			count(sc.rd, len(sc.refs))
		}
	case *mixStream:
		for _, row := range s.curs {
			for _, mc := range row {
				count(mc.rd, len(mc.segs))
			}
		}
	default:
		t.Fatalf("stream %T: neither a dataset's nor a mixture's", st)
	}
	return left
}

// TestMixtureHoldsLikeOneDataset reads three sources as a mixture (1:1:1)
// and as one dataset of the same files, B and D (BenchmarkMixture's shape at
// a smaller scale), under a read-ahead larger than the data: each reads all
// of it ahead, and once every reader has decoded all it reads (counted by
// the readers, not timed), holding the first step, the mixture holds no
// more than 10% over the single dataset (#26: peak memory within 10%).
// Both hold the data decoded once: a piece of uncompressed primitive pages
// copies its rows alone (before, each reader kept its row group's narrow
// pages decoded whole, and the mixture's 12 readers held +2.9%). Under a
// read-ahead smaller than the data: TestMixtureHoldsWithinItsReservation
// and BenchmarkMixture.
func TestMixtureHoldsLikeOneDataset(t *testing.T) {
	var dirs []string
	for i := range 3 {
		s := datagen.DefaultSpec()
		s.Rows, s.Files, s.RowGroupRows, s.Features, s.Seed = 8192, 1, 4096, 64, uint64(i+1)
		s.Compression, s.Dictionary = datagen.CompressionNone, false
		dirs = append(dirs, writeDataset(t, s))
	}
	const B, D, steps = 512, 4, 48
	single, mix := mixtureAndOne(dirs, B, D, steps)
	held := func(req *transport.Request) int64 {
		mem := &peakAllocator{Allocator: memory.NewGoAllocator()}
		p, st := openOne(t, req, WithAllocator(mem), WithReadAhead(64<<20))
		defer p.Close()
		defer st.Close()
		step, err := st.Next(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		defer step.Release()
		deadline := time.Now().Add(time.Minute)
		for readsLeft(t, st) > 0 {
			if time.Now().After(deadline) {
				t.Fatalf("%d reads not decoded after a minute, with a read-ahead larger than the data", readsLeft(t, st))
			}
			time.Sleep(time.Millisecond)
		}
		return mem.cur.Load()
	}
	one, m := held(single), held(mix)
	data := int64(3 * 8192 * (8 + 4 + 4*64)) // id, label, features[64]
	t.Logf("held with every read decoded: single dataset %d bytes, mixture %d (%+.1f%%); the data decoded: %d", one, m, 100*float64(m-one)/float64(one), data)
	if one < data {
		t.Fatalf("the single dataset holds %d bytes with every read decoded, under the %d bytes of its data: the test measures too early", one, data)
	}
	if float64(m) > 1.1*float64(one) {
		t.Errorf("the mixture holds %d bytes, the single dataset %d for the same data (%+.1f%%): over 10%%", m, one, 100*float64(m-one)/float64(one))
	}
}

// TestMixtureHoldsWithinItsReservation reads three sources as a mixture
// (1:1:1) under a read-ahead smaller than the data (BenchmarkMixture's
// shape at a smaller scale, 32 KiB pages), the consumer holding the step
// before the one it takes (as a transport does), and holds the most bytes
// held at any time to what one dataset's rule allows: the cursors of each
// slice split the slice's share (stepPieces), so their pieces and readers
// in flight stay within one read-ahead (half of it decoded, for these
// uncompressed files), plus two steps. The peak is counted by the
// allocator, not timed: which bytes are held at once moves with timing,
// the bound does not. The single dataset of the same files is read the
// same way and logged beside it. Before pieces on the steps' ends, the
// mixture held 1,081,344 to 1,327,104 bytes here (its cursors cut half an
// even share each, up to one and a half read-aheads, and kept their
// primitive columns' pages decoded whole), over this bound.
func TestMixtureHoldsWithinItsReservation(t *testing.T) {
	var dirs []string
	for i := range 3 {
		s := datagen.DefaultSpec()
		s.Rows, s.Files, s.RowGroupRows, s.Features, s.Seed = 8192, 1, 4096, 64, uint64(i+1)
		s.Compression, s.Dictionary, s.PageBytes = datagen.CompressionNone, false, 32<<10
		dirs = append(dirs, writeDataset(t, s))
	}
	const B, D, steps, readAhead = 512, 4, 48, 1 << 20
	single, mix := mixtureAndOne(dirs, B, D, steps)
	peak := func(req *transport.Request) int64 {
		mem := &peakAllocator{Allocator: memory.NewGoAllocator()}
		p, st := openOne(t, req, WithAllocator(mem), WithReadAhead(readAhead))
		defer p.Close()
		defer st.Close()
		var prev transport.Step
		for n := 0; ; n++ {
			step, err := st.Next(context.Background())
			if errors.Is(err, io.EOF) {
				if n != steps {
					t.Fatalf("%d steps, want %d", n, steps)
				}
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			prev.Release()
			prev = step
		}
		prev.Release()
		return mem.peak.Load()
	}
	const rowBytes = 8 + 4 + 4*64              // id, label, features[64] decoded
	data := int64(3 * 8192 * rowBytes)         // every row decoded
	stepBytes := int64(B) * (rowBytes + 4 + 1) // a step: rows, source and mask columns
	// The files are uncompressed: a piece charges the read-ahead its
	// fetched bytes (mapped, not allocated) and as many decoded, so at most
	// half of what the cursors may charge is allocated.
	bound := int64(readAhead/2) + 2*stepBytes
	one, m := peak(single), peak(mix)
	t.Logf("peak held under a %d-byte read-ahead: single dataset %d bytes, mixture %d (%+.1f%%); the mixture's bound %d; the data decoded %d",
		readAhead, one, m, 100*float64(m-one)/float64(one), bound, data)
	if m > bound {
		t.Errorf("the mixture held %d bytes at once, over its bound of %d (half of the read-ahead of %d decoded for its cursors' pieces and readers, two steps of %d): its cursors read ahead past their shares",
			m, bound, readAhead, stepBytes)
	}
	if m >= data {
		t.Fatalf("the mixture held %d bytes, its whole data decoded is %d: the read-ahead does not bind, the test measures nothing", m, data)
	}
}

// smallMixSources writes three sources of 8,192 rows of id, label and
// features[64] (uncompressed, row groups of 4,096 rows, 32 KiB pages):
// BenchmarkMixture's shape at a smaller scale.
func smallMixSources(t *testing.T) []string {
	var dirs []string
	for i := range 3 {
		s := datagen.DefaultSpec()
		s.Rows, s.Files, s.RowGroupRows, s.Features, s.Seed = 8192, 1, 4096, 64, uint64(i+1)
		s.Compression, s.Dictionary, s.PageBytes = datagen.CompressionNone, false, 32<<10
		dirs = append(dirs, writeDataset(t, s))
	}
	return dirs
}

// TestMixturePiecesEndOnSteps opens a mixture (1:1:1, B=512, D=4) under a
// read-ahead smaller than the data (1 MiB for 6.6 MB decoded) and counts
// how its cursors' readers are cut, not timed: every piece a cursor's
// reader reads ends where a step's take of its source ends (the
// composition's C_i(k)) or where its row group does, so that a step's
// take lies in one piece; and the cursors of a slice together hold what
// one slice's share allows (their budgets in flight plus the two pieces
// each cutter holds), or three pieces each where a step's take is more
// than a quarter of a cursor's share (the single dataset's slices hold
// three slices' pieces then). Cut on an even share (half a cursor's share
// a piece, before pieces on steps), the pieces ended mid-step and the
// cursors of a slice held one and a half slices' shares.
func TestMixturePiecesEndOnSteps(t *testing.T) {
	dirs := smallMixSources(t)
	const B, D, steps, readAhead = 512, 4, 48, 1 << 20
	_, req := mixtureAndOne(dirs, B, D, steps)
	p, st := openOne(t, req, WithAllocator(memory.NewGoAllocator()), WithReadAhead(readAhead))
	defer p.Close()
	defer st.Close()
	s := st.(*mixStream)
	ends := make([]map[int64]bool, len(s.mp.srcs)) // C_i(k) of every step
	w := s.mp.mix.Composition().Walk()
	counts := make([]int64, len(ends))
	for i := range ends {
		ends[i] = map[int64]bool{0: true}
	}
	for k := 0; k < steps; k++ {
		if err := w.Next(counts); err != nil {
			t.Fatal(err)
		}
		for i := range ends {
			ends[i][w.Cum()[i]] = true
		}
	}
	for k := range s.mp.slices {
		var held, pieces int64
		for i := range s.curs {
			mc := s.curs[i][k]
			if mc.piece <= 0 {
				t.Fatalf("source %d slice %d: its reader's pieces are not cut on the steps", i, mc.d)
			}
			var pos int64 // the cursor's sequence: it starts at step 0
			for j, g := range mc.segs {
				pos += g.Len()
				if j+1 < len(mc.segs) && mc.segs[j+1].RowGroup == g.RowGroup && mc.segs[j+1].Start == g.End && !ends[i][pos] {
					t.Errorf("source %d slice %d: piece %d (row group %d rows [%d, %d)) ends at row %d of the cursor's sequence, inside a step's take", i, mc.d, j, g.RowGroup, g.Start, g.End, pos)
				}
			}
			held += mc.budget + 2*mc.piece
			pieces += 3 * mc.piece
		}
		if bound := max(s.share, pieces); held > bound+bound/100 {
			t.Errorf("slice %d: its cursors may hold %d bytes (in flight and held), over one slice's share of %d (or three pieces each, %d)", s.mp.slices[k], held, s.share, pieces)
		}
	}
}

// TestMixtureStepsAcrossReaders reads a mixture whose cursors' readers are
// given pieces for three steps at a time (aheadSteps; each then starts a
// new reader where the last stopped) and checks every step against the
// same mixture read with the default: the same rows in the same order.
func TestMixtureStepsAcrossReaders(t *testing.T) {
	dirs := smallMixSources(t)
	const B, D, steps, readAhead = 512, 4, 48, 1 << 20
	_, req := mixtureAndOne(dirs, B, D, steps)
	read := func() []transport.Step {
		p, st := openOne(t, req, WithAllocator(memory.NewGoAllocator()), WithReadAhead(readAhead))
		defer p.Close()
		defer st.Close()
		var out []transport.Step
		for {
			step, err := st.Next(context.Background())
			if errors.Is(err, io.EOF) {
				return out
			}
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, step)
		}
	}
	want := read()
	defer func(n int) { aheadSteps = n }(aheadSteps)
	aheadSteps = 3
	got := read()
	if len(got) != steps || len(want) != steps {
		t.Fatalf("%d and %d steps, want %d", len(got), len(want), steps)
	}
	for k := range got {
		a, b := sliceRecords(t, got[k]), sliceRecords(t, want[k])
		for d := range a {
			if !array.RecordEqual(a[d], b[d]) {
				t.Errorf("step %d slice %d differs with readers of 3 steps from the default's", k, d)
			}
			a[d].Release()
			b[d].Release()
		}
		got[k].Release()
		want[k].Release()
	}
}

// withoutSnap makes the pipeline's mixture readers keep their pieces' ends
// where the cursors cut them (no loader.WithReaderSnapPieces).
func withoutSnap() Option { return func(c *pipelineConfig) { c.noSnap = true } }

// TestMixtureSnappedPiecesMatchModel reads a mixture of snappy sources
// whose cursors' pieces (a few steps' takes under a small read-ahead) are
// smaller than a page: their readers move the pieces' ends to page breaks
// (loader.WithReaderSnapPieces), so a record a reader returns covers
// several of the cursor's pieces or parts of them, and the cursor pushes
// what it covers. The steps equal the model's, as they do with the pieces
// read as cut, and the cursors read fewer records than the pieces they
// were cut (one each without).
func TestMixtureSnappedPiecesMatchModel(t *testing.T) {
	var dirs []string
	for i, rows := range []int64{12000, 8000, 10000} {
		s := datagen.DefaultSpec()
		s.Rows, s.Files, s.RowGroupRows, s.Features, s.Seed = rows, 1, 4096, 4, uint64(i+1)
		// Pages of 1,024 ids: the writer checks a page's size after each
		// batch of 1,024 rows.
		s.Compression, s.Dictionary, s.PageBytes = datagen.CompressionSnappy, false, 1<<10
		dirs = append(dirs, writeDataset(t, s))
	}
	req := mixRequest(dirs, []float64{0.5, 0.3, 0.2}, 256, 4, []int{0, 1, 2, 3}, transport.LastBatchPad,
		transport.MixtureStop{Rule: "first_exhausted"})
	for _, snap := range []bool{true, false} {
		opts := []Option{WithAllocator(checkedMem(t)), WithReadAhead(1 << 16)}
		if !snap {
			opts = append(opts, withoutSnap())
		}
		p, err := NewPipeline(context.Background(), opts...)
		if err != nil {
			t.Fatal(err)
		}
		want := mixModel(t, p, req)
		st, err := p.Open(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		got := readMixSteps(t, st)
		var pieces, segs int
		for _, row := range st.(*mixStream).curs {
			for _, mc := range row {
				pieces += mc.reads
				segs += mc.done
			}
		}
		st.Close()
		p.Close()
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("snap %v: the stream differs from the model:\n got %v\nwant %v", snap, got, want)
		}
		t.Logf("snap %v: %d records read for %d pieces cut", snap, pieces, segs)
		if snap && pieces >= segs {
			t.Errorf("snapped: %d records read for %d pieces cut: no piece was joined to the next", pieces, segs)
		}
		if !snap && pieces != segs {
			t.Errorf("not snapped: %d records read for %d pieces cut", pieces, segs)
		}
	}
}

// withoutGate makes the pipeline's mixture readers start each piece as soon
// as their budget allows (no loader.WithReaderGate).
func withoutGate() Option { return func(c *pipelineConfig) { c.noGate = true } }

// TestMixtureGateHoldsLess reads a mixture of three snappy sources with a
// consumer slower than the readers (each step held 2 ms), its cursors'
// readers gated (pieceGate: a piece starts once its cursor has less than
// half a piece ahead of it) and not: the steps are the same, and after
// each step the pieces the readers had decoded and not yet handed over
// (decoded ahead, each held in memory) are fewer gated, on average over the
// steps: ungated, every cursor's reader decodes its next piece as soon as
// it hands one over and holds it until its cursor gets there. Gated, a
// waiting gate is woken about once per piece (when it may open), not at
// every step: the readers wait at their gates most of the time here, so a
// gate woken at every step would be woken a dozen times a step.
func TestMixtureGateHoldsLess(t *testing.T) {
	var dirs []string
	for i := range 3 {
		s := datagen.DefaultSpec()
		s.Rows, s.Files, s.RowGroupRows, s.Features, s.Seed = 65536, 1, 65536, 16, uint64(i+1)
		s.Compression, s.Dictionary, s.PageBytes = datagen.CompressionSnappy, false, 16<<10
		dirs = append(dirs, writeDataset(t, s))
	}
	// A cursor's stream is 16,384 rows of one row group, read in pieces of
	// a few pages; 300 steps take 12,800 of them.
	const B, D, steps = 512, 4, 300
	_, mix := mixtureAndOne(dirs, B, D, steps)
	var wakes, pieces int64
	run := func(opts ...Option) (ids string, ahead float64) {
		p, st := openOne(t, mix, append([]Option{WithAllocator(checkedMem(t)), WithReadAhead(4 << 20)}, opts...)...)
		defer p.Close()
		defer st.Close()
		var all []string
		var sum int64
		eachStep(t, st, steps, func(step transport.Step) {
			for _, rec := range step.Slices {
				all = append(all, fmt.Sprint(rec.Column(0).(*array.Int64).Int64Values()))
			}
			time.Sleep(2 * time.Millisecond) // the readers do what they may meanwhile
			for _, row := range st.(*mixStream).curs {
				for _, mc := range row {
					sum += mc.rd.Stats().Pieces.Load() - int64(mc.reads)
				}
			}
		})
		wakes, pieces = 0, 0
		for _, row := range st.(*mixStream).curs {
			for _, mc := range row {
				if mc.gate != nil {
					wakes += mc.gate.wakes.Load()
				}
				pieces += mc.rd.Stats().Pieces.Load()
			}
		}
		return fmt.Sprint(all), float64(sum) / steps
	}
	ungatedIDs, ungated := run(withoutGate())
	gatedIDs, gated := run()
	if gatedIDs != ungatedIDs {
		t.Fatal("the gated stream's steps differ from the ungated one's")
	}
	t.Logf("pieces decoded ahead after a step, on average: gated %.2f, ungated %.2f (12 cursors)", gated, ungated)
	if ungated < 6 {
		t.Fatalf("ungated, %.2f pieces decoded ahead on average: the readers did not read ahead, the test checks nothing", ungated)
	}
	if gated > ungated*3/4 {
		t.Errorf("gated, %.2f pieces decoded ahead on average, ungated %.2f: the gate does not hold pieces back", gated, ungated)
	}
	t.Logf("gated: %d gate wakeups for %d pieces over %d steps", wakes, pieces, steps)
	if pieces < 24 {
		t.Fatalf("gated, %d pieces: too few for the wakeups to tell anything", pieces)
	}
	if wakes > pieces+pieces/4 {
		t.Errorf("gated: %d gate wakeups for %d pieces: the gates are woken when they may not open", wakes, pieces)
	}
}
