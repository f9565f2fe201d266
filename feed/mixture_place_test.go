package feed

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/meshfeed/meshfeed/internal/datagen"
	"github.com/meshfeed/meshfeed/internal/testseed"
	"github.com/meshfeed/meshfeed/transport"
)

func withoutPlace() Option { return func(c *pipelineConfig) { c.noPlace = true } }

// placedRequest is mixRequest with row groups shuffled but no shuffle
// window: a mixture whose slices are placed (newPlacer).
func placedRequest(dirs []string, w []float64, B, D int, sl []int, policy transport.LastBatch, stop transport.MixtureStop) *transport.Request {
	req := mixRequest(dirs, w, B, D, sl, policy, stop)
	for i := range req.Mixture.Sources {
		req.Mixture.Sources[i].Shuffle = transport.Shuffle{Enabled: i != 1}
	}
	return req
}

// openPlaced opens req's stream as the shared-memory wire does (OpenWith,
// where a mixture's slices may be placed) on a new Pipeline with opts; the
// caller closes both.
func openPlaced(t *testing.T, req *transport.Request, opts ...Option) (*Pipeline, transport.Stream) {
	t.Helper()
	p, err := NewPipeline(context.Background(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	st, err := p.OpenWith(context.Background(), req, p.cfg.mem)
	if err != nil {
		p.Close()
		t.Fatal(err)
	}
	return p, st
}

// readPlaced reads a whole mixture stream opened as the shared-memory wire
// opens it (OpenWith), checking whether its slices were placed (place)
// and, placed, that each step is one record per slice.
func readPlaced(t *testing.T, p *Pipeline, req *transport.Request, place bool) [][][]mixRow {
	t.Helper()
	st, err := p.OpenWith(context.Background(), req, p.cfg.mem)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if got := st.(*mixStream).place != nil; got != place {
		t.Fatalf("slices placed: %v, want %v", got, place)
	}
	if !place {
		return readMixSteps(t, st)
	}
	return readMixSteps(t, oneRecordPerSlice{t, st})
}

// oneRecordPerSlice fails the test at a step that is not one record per
// slice.
type oneRecordPerSlice struct {
	t *testing.T
	transport.Stream
}

func (o oneRecordPerSlice) Next(ctx context.Context) (transport.Step, error) {
	step, err := o.Stream.Next(ctx)
	if err == nil && len(step.Slices) != len(step.Meta.Slices) {
		o.t.Fatalf("step %d: %d records for %d slices: a placed step is one record per slice", step.Meta.Step, len(step.Slices), len(step.Meta.Slices))
	}
	return step, err
}

// TestMixturePlacedMatchesModel: where a mixture's slices are placed as
// their rows are decoded (fixed-width columns, no shuffle window, no
// padding), the stream is the model's, and the same as the parts path's
// (withoutPlace), for weights, stops and a random resume step; two
// processes serving half the slices each agree with one; an elastic resume
// onto D=8 is the contract's (mixElasticModel). Padding or a shuffle
// window keeps the parts path.
func TestMixturePlacedMatchesModel(t *testing.T) {
	seed := testseed.Get(t, 0, "")
	r := rand.New(rand.NewPCG(seed, 26))
	dirs := mixDirs(t)
	mem := checkedMem(t)
	p := newTestPipeline(t, mem)
	parts, err := NewPipeline(context.Background(), WithAllocator(mem), WithReadAhead(1<<16), withoutPlace())
	if err != nil {
		t.Fatal(err)
	}
	defer parts.Close()
	const B, D = 12, 4
	for _, tc := range []struct {
		w      []float64
		policy transport.LastBatch
		stop   transport.MixtureStop
	}{
		{[]float64{0.5, 0.3, 0.2}, transport.LastBatchDrop, transport.MixtureStop{Rule: "first_exhausted"}},
		{[]float64{1, 1, 1}, transport.LastBatchDrop, transport.MixtureStop{Rule: "all_exhausted"}},
		{[]float64{2, 0, 1}, transport.LastBatchRaise, transport.MixtureStop{Rule: "num_steps", NumSteps: 40}},
		{[]float64{0.7, 0.2, 0.1}, transport.LastBatchPad, transport.MixtureStop{Rule: "num_steps", NumSteps: 90}},
	} {
		name := fmt.Sprintf("seed %d %v/%s/%s", seed, tc.w, tc.policy, tc.stop.Rule)
		all := placedRequest(dirs, tc.w, B, D, []int{0, 1, 2, 3}, tc.policy, tc.stop)
		want := mixModel(t, p, all)
		got := readPlaced(t, p, all, true)
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("%s: the placed stream differs from the model:\n got %v\nwant %v", name, got, want)
		}
		if viaParts := readPlaced(t, parts, all, false); fmt.Sprint(viaParts) != fmt.Sprint(got) {
			t.Fatalf("%s: the placed stream differs from the parts path's", name)
		}
		// Flight's streams (Open) hand parts over, which it sends unjoined.
		st, err := p.Open(context.Background(), all)
		if err != nil {
			t.Fatal(err)
		}
		if st.(*mixStream).place != nil {
			t.Fatalf("%s: Open's stream places its slices", name)
		}
		if viaOpen := readMixSteps(t, st); fmt.Sprint(viaOpen) != fmt.Sprint(got) {
			t.Fatalf("%s: Open's stream differs from the placed one", name)
		}
		st.Close()
		k := r.IntN(len(got))
		resumed := placedRequest(dirs, tc.w, B, D, []int{0, 1, 2, 3}, tc.policy, tc.stop)
		resumed.Start.Step = k
		if tail := readPlaced(t, p, resumed, true); fmt.Sprint(tail) != fmt.Sprint(got[k:]) {
			t.Fatalf("%s: resumed at step %d: differs from the run", name, k)
		}
		lo := readPlaced(t, p, placedRequest(dirs, tc.w, B, D, []int{0, 1}, tc.policy, tc.stop), true)
		hi := readPlaced(t, p, placedRequest(dirs, tc.w, B, D, []int{2, 3}, tc.policy, tc.stop), true)
		for s := range got {
			if fmt.Sprint(append(slices.Clone(lo[s]), hi[s]...)) != fmt.Sprint(got[s]) {
				t.Fatalf("%s: step %d: two processes disagree with one", name, s)
			}
		}

		const D2 = 8
		old := placedRequest(dirs, tc.w, 16, D, []int{0, 1, 2, 3}, tc.policy, tc.stop)
		full := readPlaced(t, p, old, true)
		k = 1 + r.IntN(len(full)-1)
		next := placedRequest(dirs, tc.w, 16, D2, []int{0, 1, 2, 3, 4, 5, 6, 7}, tc.policy, tc.stop)
		next.Elastic = &transport.Elastic{FromSlices: D, Step: k}
		next.Start.Step = k
		if got, want := readPlaced(t, p, next, true), mixElasticModel(t, p, old, next, k); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("%s: elastic D=%d to %d at step %d: the placed stream differs from the model:\n got %v\nwant %v", name, D, D2, k, got, want)
		}
	}

	// Reweighted at a random step: from there the new weights' counts,
	// placed as the parts path gives them (TestMixtureReweight* hold that
	// one to the contract).
	full := readPlaced(t, p, placedRequest(dirs, []float64{0.5, 0.3, 0.2}, B, D, []int{0, 1, 2, 3}, transport.LastBatchDrop, transport.MixtureStop{Rule: "num_steps", NumSteps: 60}), true)
	k := 1 + r.IntN(50)
	rw := placedRequest(dirs, []float64{0.2, 0.2, 0.6}, B, D, []int{0, 1, 2, 3}, transport.LastBatchDrop, transport.MixtureStop{Rule: "num_steps", NumSteps: 60})
	at := make([]int64, 3)
	for _, st := range full[:k] {
		for _, x := range st[0] {
			at[x.src]++
		}
	}
	rw.Mixture.History = []transport.WeightSpan{{FromStep: 0, Weights: []float64{0.5, 0.3, 0.2}, Positions: []int64{0, 0, 0}}}
	rw.Mixture.WeightsFrom, rw.Mixture.WeightsFromPositions = k, at
	rw.Start.Step = k
	got := readPlaced(t, p, rw, true)
	if len(got) != 60-k {
		t.Fatalf("seed %d: reweighted at step %d: %d steps, want %d", seed, k, len(got), 60-k)
	}
	if viaParts := readPlaced(t, parts, rw, false); fmt.Sprint(viaParts) != fmt.Sprint(got) {
		t.Fatalf("seed %d: reweighted at step %d: the placed stream differs from the parts path's", seed, k)
	}

	// Padding (first_exhausted, pad) and a shuffle window keep the parts.
	padded := placedRequest(dirs, []float64{0.5, 0.3, 0.2}, B, D, []int{0, 1, 2, 3}, transport.LastBatchPad, transport.MixtureStop{Rule: "first_exhausted"})
	if got, want := readPlaced(t, p, padded, false), mixModel(t, p, padded); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("padded: the stream differs from the model")
	}
	windowed := mixRequest(dirs, []float64{1, 1, 1}, B, D, []int{0, 1, 2, 3}, transport.LastBatchDrop, transport.MixtureStop{Rule: "all_exhausted"})
	readPlaced(t, p, windowed, false)
}

// TestMixturePlacedColumns reads three snappy sources with features in
// pieces (a small read-ahead) placed and as parts: every column of every
// step is equal, the placed steps one record per slice.
func TestMixturePlacedColumns(t *testing.T) {
	var dirs []string
	for i, rows := range []int64{9000, 6000, 7500} {
		s := datagen.DefaultSpec()
		s.Rows, s.Files, s.RowGroupRows, s.Features, s.Seed = rows, 2, 2048, 8, uint64(i+1)
		s.Compression, s.Dictionary, s.PageBytes = datagen.CompressionSnappy, false, 8<<10
		if i == 1 {
			s.Compression = datagen.CompressionNone
		}
		dirs = append(dirs, writeDataset(t, s))
	}
	_, req := mixtureAndOne(dirs, 96, 4, 200)
	req.Mixture.SourceColumn = "source"
	req.Mixture.Sources[0].Weight, req.Mixture.Sources[2].Weight = 2, 0.5
	read := func(place bool) []arrow.RecordBatch {
		opts := []Option{WithAllocator(checkedMem(t)), WithReadAhead(256 << 10)}
		if !place {
			opts = append(opts, withoutPlace())
		}
		p, st := openPlaced(t, req, opts...)
		defer p.Close()
		defer st.Close()
		if got := st.(*mixStream).place != nil; got != place {
			t.Fatalf("slices placed: %v, want %v", got, place)
		}
		var out []arrow.RecordBatch
		eachStep(t, st, 200, func(step transport.Step) {
			if place && len(step.Slices) != len(step.Meta.Slices) {
				t.Fatalf("step %d: %d records for %d slices", step.Meta.Step, len(step.Slices), len(step.Meta.Slices))
			}
			if place {
				oneBlock(t, step)
			}
			out = append(out, sliceRecords(t, step)...)
		})
		return out
	}
	placed, viaParts := read(true), read(false)
	defer releaseAll(placed)
	defer releaseAll(viaParts)
	if len(placed) != 200*4 || len(viaParts) != len(placed) {
		t.Fatalf("%d placed slices, %d as parts, want %d", len(placed), len(viaParts), 200*4)
	}
	for j := range placed {
		if !array.RecordEqual(placed[j], viaParts[j]) {
			t.Fatalf("slice %d of step %d differs placed and as parts:\n%v\n%v", j%4, j/4, placed[j], viaParts[j])
		}
	}
}

// oneBlock fails the test unless the values of every column of every
// slice of step (placed) lie in one allocation, each at a multiple of 64
// bytes from its start and none overlapping another: a step is one
// allocation, whose columns the shared-memory wire sends by reference from
// its arena where the step's bytes reach the arena's minimum (a column of
// a few KiB would otherwise be allocated elsewhere and copied).
func oneBlock(t *testing.T, step transport.Step) {
	t.Helper()
	var whole *memory.Buffer
	type span struct{ lo, hi int }
	var spans []span
	for k, rec := range step.Slices {
		for c, col := range rec.Columns() {
			d := col.Data()
			if len(d.Children()) == 1 {
				d = d.Children()[0]
			}
			buf := d.Buffers()[1]
			if whole == nil {
				whole = buf
			}
			if buf != whole {
				t.Fatalf("step %d slice %d: column %q is not a view of the step's one allocation", step.Meta.Step, k, rec.ColumnName(c))
			}
			w := d.DataType().(arrow.FixedWidthDataType).BitWidth()
			lo, hi := d.Offset()*w/8, (d.Offset()+d.Len())*w/8
			if d.Offset()*w%(64*8) != 0 {
				t.Fatalf("step %d slice %d: column %q starts %d bits into the step's allocation, not a multiple of 64 bytes", step.Meta.Step, k, rec.ColumnName(c), d.Offset()*w)
			}
			for _, o := range spans {
				if lo < o.hi && o.lo < hi {
					t.Fatalf("step %d slice %d: column %q overlaps another in the step's allocation", step.Meta.Step, k, rec.ColumnName(c))
				}
			}
			spans = append(spans, span{lo, hi})
		}
	}
}

// TestMixturePlacedAhead reads a skewed mixture (weights 0.96/0.03/0.01:
// the small sources' pieces hold few rows a step) placed, and after each
// step counts the slices allocated ahead: their bytes stay within the
// read-ahead budget the cursors share (a piece spans the same steps
// whatever its source's weight), and the stream equals the parts path's.
func TestMixturePlacedAhead(t *testing.T) {
	var dirs []string
	for i := range 3 {
		s := datagen.DefaultSpec()
		s.Rows, s.Files, s.RowGroupRows, s.Features, s.Seed = 20000, 1, 4096, 16, uint64(i+1)
		s.Compression, s.Dictionary, s.PageBytes = datagen.CompressionSnappy, false, 16<<10
		dirs = append(dirs, writeDataset(t, s))
	}
	const B, D, steps, readAhead = 256, 4, 300, 1 << 20
	_, req := mixtureAndOne(dirs, B, D, steps)
	req.Mixture.SourceColumn = "source"
	for i, w := range []float64{0.96, 0.03, 0.01} {
		req.Mixture.Sources[i].Weight = w
	}
	read := func(opts ...Option) (ids string, most int) {
		p, st := openPlaced(t, req, append([]Option{WithAllocator(checkedMem(t)), WithReadAhead(readAhead)}, opts...)...)
		defer p.Close()
		defer st.Close()
		var all []string
		eachStep(t, st, steps, func(step transport.Step) {
			for _, rec := range sliceRecords(t, step) {
				all = append(all, fmt.Sprint(rec.Column(0).(*array.Int64).Int64Values(), rec.Column(3).(*array.Int32).Int32Values()))
				rec.Release()
			}
			if pl := st.(*mixStream).place; pl != nil {
				pl.mu.Lock()
				most = max(most, len(pl.steps)*len(pl.ds))
				pl.mu.Unlock()
			}
		})
		return fmt.Sprint(all), most
	}
	placed, most := read()
	viaParts, _ := read(withoutPlace())
	if placed != viaParts {
		t.Fatal("the placed stream differs from the parts path's")
	}
	sliceBytes := int64(B/D) * (8 + 4 + 16*4)
	t.Logf("at most %d slices placed ahead (%d bytes; read-ahead %d)", most, int64(most)*sliceBytes, readAhead)
	if most == 0 {
		t.Fatal("no slice placed ahead: the test checks nothing")
	}
	if int64(most)*sliceBytes > readAhead {
		t.Errorf("%d slices placed ahead, %d bytes: over the read-ahead budget of %d", most, int64(most)*sliceBytes, readAhead)
	}
}

// TestMixturePlacedClosedEarly closes placed streams after a random number
// of steps, some of their steps still held: every slice placed ahead, every
// piece and step comes back to the allocator (checkedMem), and a step held
// past Close keeps its bytes.
func TestMixturePlacedClosedEarly(t *testing.T) {
	seed := testseed.Get(t, 0, "")
	r := rand.New(rand.NewPCG(seed, 27))
	var dirs []string
	for i := range 3 {
		s := datagen.DefaultSpec()
		s.Rows, s.Files, s.RowGroupRows, s.Features, s.Seed = 6000, 1, 2048, 8, uint64(i+1)
		s.Compression, s.Dictionary, s.PageBytes = datagen.CompressionSnappy, false, 8<<10
		dirs = append(dirs, writeDataset(t, s))
	}
	_, req := mixtureAndOne(dirs, 128, 4, 120)
	for range 4 {
		mem := checkedMem(t)
		p, st := openPlaced(t, req, WithAllocator(mem), WithReadAhead(256<<10))
		if st.(*mixStream).place == nil {
			t.Fatal("slices not placed")
		}
		n := r.IntN(100)
		var held transport.Step
		for k := 0; k <= n; k++ {
			step, err := st.Next(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			held.Release()
			held = step
		}
		want := fmt.Sprint(held.Slices[0].Column(0).(*array.Int64).Int64Values())
		st.Close()
		if got := fmt.Sprint(held.Slices[0].Column(0).(*array.Int64).Int64Values()); got != want {
			t.Fatalf("seed %d: a step held past Close changed", seed)
		}
		held.Release()
		p.Close()
	}
}
