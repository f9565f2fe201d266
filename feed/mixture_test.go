package feed

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"google.golang.org/grpc/codes"

	"github.com/meshfeed/meshfeed/batching"
	"github.com/meshfeed/meshfeed/internal/datagen"
	"github.com/meshfeed/meshfeed/internal/testseed"
	"github.com/meshfeed/meshfeed/loader"
	"github.com/meshfeed/meshfeed/objstore"
	"github.com/meshfeed/meshfeed/transport"
)

// mixDirs writes three datasets of different sizes and row groups.
func mixDirs(t *testing.T) []string {
	var dirs []string
	for i, rows := range []int64{61, 103, 37} {
		s := datagen.DefaultSpec()
		s.Rows, s.Files, s.RowGroupRows, s.Features, s.Seed = rows, i+1, int64(5+2*i), 2, uint64(i+1)
		dirs = append(dirs, writeDataset(t, s))
	}
	return dirs
}

// mixRequest is a mixture of dirs with weights w.
func mixRequest(dirs []string, w []float64, B, D int, slices []int, policy transport.LastBatch, stop transport.MixtureStop) *transport.Request {
	m := &transport.Mixture{Stop: stop, SourceColumn: "source"}
	for i, d := range dirs {
		src := transport.MixtureSource{Datasets: []string{d + "/*.parquet"}, Weight: w[i],
			Columns: []transport.Column{{Name: "id"}, {Name: "label"}}, Rename: map[string]string{"label": "y"}}
		if i != 1 {
			src.Shuffle = transport.Shuffle{Enabled: true, Window: 3 * (i + 1)}
		}
		m.Sources = append(m.Sources, src)
	}
	return &transport.Request{Version: transport.Version, Mixture: m, GlobalBatchSize: B, NumSlices: D,
		Slices: slices, LastBatch: policy, Seed: 7}
}

// mixRow is one delivered row: source and id, or source -1 for padding.
type mixRow struct{ src, id int64 }

// readMixture reads a whole mixture stream from p, directly: per step, per
// requested slice, its rows.
func readMixture(t *testing.T, p *Pipeline, req *transport.Request) [][][]mixRow {
	t.Helper()
	st, err := p.Open(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	return readMixSteps(t, st)
}

// readMixSteps reads a mixture's stream to its end: per step, per requested
// slice, its rows.
func readMixSteps(t *testing.T, st transport.Stream) [][][]mixRow {
	t.Helper()
	var out [][][]mixRow
	for {
		step, err := st.Next(context.Background())
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		var sl [][]mixRow
		for k, rec := range sliceRecords(t, step) {
			ids := rec.Column(0).(*array.Int64)
			src := rec.Column(2).(*array.Int32)
			if rec.Schema().Field(1).Name != "y" || rec.Schema().Field(2).Name != "source" {
				t.Fatalf("schema %v, want id, y, source[, valid]", rec.Schema())
			}
			rows := make([]mixRow, rec.NumRows())
			for r := range rows {
				rows[r] = mixRow{int64(src.Value(r)), ids.Value(r)}
				if src.Value(r) < 0 {
					rows[r].id = -1
				}
			}
			real := 0
			for _, r := range rows {
				if r.src >= 0 {
					real++
				}
			}
			if real != step.Meta.RealRows[k] {
				t.Fatalf("step %d slice %d: %d real rows, meta says %d", step.Meta.Step, k, real, step.Meta.RealRows[k])
			}
			sl = append(sl, rows)
			rec.Release()
		}
		step.Release()
		out = append(out, sl)
	}
}

// mixModel computes the rows of every step and slice from batching alone:
// the sources' plans over their row groups (datagen ids count rows in
// dataset order), the mixture's counts and order.
func mixModel(t *testing.T, p *Pipeline, req *transport.Request) [][][]mixRow {
	t.Helper()
	mp, err := p.planMixture(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	m := mp.mix
	walk := m.Composition().Walk()
	counts := make([]int64, m.Sources())
	var out [][][]mixRow
	for s := 0; s < m.Steps(); s++ {
		pos := slices.Clone(walk.Cum())
		if err := walk.Next(counts); err != nil {
			t.Fatal(err)
		}
		var sl [][]mixRow
		for d := 0; d < req.NumSlices; d++ {
			var rows []mixRow
			for _, i := range m.Order(s, d) {
				src := mp.srcs[i]
				real := m.Real(s, int(i), d, pos[i], counts[i])
				for q := pos[i]; q < pos[i]+real; q++ {
					e, row := m.Locate(int(i), d, q)
					g, r, _ := src.plan.SourceRow(e, d, row)
					if sel := src.selection(g); sel != nil {
						r, _ = sel.Physical(r, r+1) // the plan numbers the kept rows
					}
					rows = append(rows, mixRow{int64(i), rowsBefore(src.ds, src.refs[g]) + r})
				}
			}
			for len(rows) < m.SliceRows() {
				rows = append(rows, mixRow{-1, -1})
			}
			sl = append(sl, rows)
		}
		out = append(out, sl)
	}
	return out
}

// rowsBefore is the dataset's rows before the row group ref, in file
// order (datagen's id of its first row).
func rowsBefore(ds *loader.Dataset, ref loader.RowGroupRef) int64 {
	var n int64
	for fi, f := range ds.Files[:ref.File+1] {
		for ri, rg := range f.RowGroups {
			if fi == ref.File && ri == ref.Index {
				return n
			}
			n += rg.Rows
		}
	}
	return n
}

func newTestPipeline(t *testing.T, mem memory.Allocator) *Pipeline {
	p, err := NewPipeline(context.Background(), WithAllocator(mem), WithReadAhead(1<<16))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// TestMixtureMatchesModel: a served mixture delivers exactly the model's
// rows; two processes serving half the slices each agree with one serving
// all; every row of each source is delivered once per source epoch; the
// per-step counts stay within one row per slice of the weights.
func TestMixtureMatchesModel(t *testing.T) {
	dirs := mixDirs(t)
	mem := checkedMem(t)
	p := newTestPipeline(t, mem)
	for _, tc := range []struct {
		w      []float64
		policy transport.LastBatch
		stop   transport.MixtureStop
	}{
		{[]float64{0.5, 0.3, 0.2}, transport.LastBatchPad, transport.MixtureStop{Rule: "first_exhausted"}},
		{[]float64{0.5, 0.3, 0.2}, transport.LastBatchDrop, transport.MixtureStop{Rule: "first_exhausted"}},
		{[]float64{1, 1, 1}, transport.LastBatchDrop, transport.MixtureStop{Rule: "all_exhausted"}},
		{[]float64{2, 0, 1}, transport.LastBatchRaise, transport.MixtureStop{Rule: "num_steps", NumSteps: 40}},
	} {
		name := fmt.Sprintf("%v/%s/%s", tc.w, tc.policy, tc.stop.Rule)
		const B, D = 12, 4
		all := mixRequest(dirs, tc.w, B, D, []int{0, 1, 2, 3}, tc.policy, tc.stop)
		want := mixModel(t, p, all)
		got := readMixture(t, p, all)
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("%s: the stream differs from the model:\n got %v\nwant %v", name, got, want)
		}
		lo := readMixture(t, p, mixRequest(dirs, tc.w, B, D, []int{0, 2}, tc.policy, tc.stop))
		hi := readMixture(t, p, mixRequest(dirs, tc.w, B, D, []int{1, 3}, tc.policy, tc.stop))
		for s := range got {
			if fmt.Sprint(lo[s][0], lo[s][1], hi[s][0], hi[s][1]) != fmt.Sprint(got[s][0], got[s][2], got[s][1], got[s][3]) {
				t.Fatalf("%s step %d: two processes disagree with one", name, s)
			}
		}
		// Once per source epoch: the first epoch's rows are distinct.
		seen := map[mixRow]int{}
		var delivered [3]int64
		for _, st := range got {
			for _, sl := range st {
				for _, r := range sl {
					if r.src >= 0 {
						seen[r]++
						delivered[r.src]++
					}
				}
			}
		}
		info, err := p.Info(context.Background(), all)
		if err != nil {
			t.Fatal(err)
		}
		for i, si := range info.Mixture.Sources {
			if si.DeliveredRows != delivered[i] {
				t.Errorf("%s: source %d delivered %d rows, Info says %d", name, i, delivered[i], si.DeliveredRows)
			}
			if tc.stop.Rule != "num_steps" {
				n := int64(0)
				for r, c := range seen {
					if r.src == int64(i) {
						n++
						if c > 1 && tc.stop.Rule == "first_exhausted" {
							t.Errorf("%s: source %d row %d delivered %d times", name, i, r.id, c)
						}
					}
				}
				if tc.stop.Rule == "all_exhausted" && n != si.Rows {
					t.Errorf("%s: all_exhausted: source %d delivered %d distinct rows of %d", name, i, n, si.Rows)
				}
			}
		}
		if info.StepsPerEpoch != int64(len(got)) {
			t.Errorf("%s: Info says %d steps, the stream has %d", name, info.StepsPerEpoch, len(got))
		}
	}
}

// TestMixtureResume: resuming at a random step gives exactly the rest of
// the uninterrupted run; resuming with new weights (reweight) keeps the
// steps before the switch, moves each source on from where it stood (no row
// of a source epoch repeats) and follows the new weights from there on.
func TestMixtureResume(t *testing.T) {
	seed := testseed.Get(t, 0, "")
	r := rand.New(rand.NewPCG(seed, 0))
	dirs := mixDirs(t)
	mem := checkedMem(t)
	p := newTestPipeline(t, mem)
	const B, D = 12, 4
	stop := transport.MixtureStop{Rule: "num_steps", NumSteps: 30}
	req := mixRequest(dirs, []float64{0.5, 0.3, 0.2}, B, D, []int{0, 1, 2, 3}, transport.LastBatchDrop, stop)
	full := readMixture(t, p, req)
	// k >= 1: a reweight at step 0 has no history (the client sends none;
	// spans must start after one another, so the server refuses one from 0).
	k := 1 + r.IntN(len(full)-1)
	req.Start.Step = k
	if got := readMixture(t, p, req); fmt.Sprint(got) != fmt.Sprint(full[k:]) {
		t.Fatalf("resumed at step %d: differs from the uninterrupted run", k)
	}
	// Reweight at k: source 2 only from k on.
	rw := mixRequest(dirs, []float64{0, 0, 1}, B, D, []int{0, 1, 2, 3}, transport.LastBatchDrop, stop)
	rw.Mixture.History = []transport.WeightSpan{{FromStep: 0, Weights: []float64{0.5, 0.3, 0.2}}}
	rw.Mixture.WeightsFrom = k
	whole := readMixture(t, p, rw)
	if fmt.Sprint(whole[:k]) != fmt.Sprint(full[:k]) {
		t.Fatalf("reweighted at %d: the steps before the switch changed", k)
	}
	rw.Start.Step = k
	after := readMixture(t, p, rw)
	if fmt.Sprint(after) != fmt.Sprint(whole[k:]) {
		t.Fatalf("reweighted run resumed at %d differs from the reweighted run", k)
	}
	seen := map[mixRow]bool{}
	for _, st := range full[:k] {
		for _, sl := range st {
			for _, x := range sl {
				seen[x] = true
			}
		}
	}
	for s, st := range after {
		for _, sl := range st {
			for _, x := range sl {
				if x.src != 2 {
					t.Fatalf("reweighted to source 2 only at step %d: step %d holds a row of source %d", k, k+s, x.src)
				}
			}
		}
	}
	// Source 2 continued from its position: per slice, its rows after the
	// switch are not rows it delivered before, until its first epoch ends
	// on that slice (37 rows over 4 slices: at least 9 per slice).
	for d := 0; d < D; d++ {
		var before int
		for _, st := range full[:k] {
			for _, x := range st[d] {
				if x.src == 2 {
					before++
				}
			}
		}
		fresh := 9 - before
		for _, st := range after {
			for _, x := range st[d] {
				if fresh <= 0 {
					break
				}
				if seen[x] {
					t.Fatalf("reweighted at step %d: slice %d replays row %v of source 2's first epoch", k, d, x)
				}
				fresh--
			}
		}
	}
}

// TestMixtureReweightRemovesSource: a ticket resuming at k without source 1
// (reweight: the history's spans carry the sources' positions) delivers,
// on every slice, sources 0 and 2 continuing exactly from the rows they
// had delivered before k (the uninterrupted run's next rows), none skipped
// or replayed; a start before the positions is refused.
func TestMixtureReweightRemovesSource(t *testing.T) {
	seed := testseed.Get(t, 0, "")
	r := rand.New(rand.NewPCG(seed, 1))
	dirs := mixDirs(t)
	p := newTestPipeline(t, checkedMem(t))
	const B, D = 12, 4
	stop := transport.MixtureStop{Rule: "num_steps", NumSteps: 30}
	all := []int{0, 1, 2, 3}
	full := readMixture(t, p, mixRequest(dirs, []float64{0.5, 0.3, 0.2}, B, D, all, transport.LastBatchDrop, stop))
	k := 1 + r.IntN(15)
	seq := func(steps [][][]mixRow, src int64, d int) []int64 {
		var out []int64
		for _, st := range steps {
			for _, x := range st[d] {
				if x.src == src {
					out = append(out, x.id)
				}
			}
		}
		return out
	}
	rw := mixRequest(dirs, []float64{0.6, 0, 0.4}, B, D, all, transport.LastBatchDrop, stop)
	rw.Mixture.Sources = slices.Delete(rw.Mixture.Sources, 1, 2)
	rw.Mixture.History = []transport.WeightSpan{{FromStep: 0, Weights: []float64{0.5, 0.2}, Positions: []int64{0, 0}}}
	rw.Mixture.WeightsFrom = k
	rw.Mixture.WeightsFromPositions = []int64{int64(len(seq(full[:k], 0, 0))), int64(len(seq(full[:k], 2, 0)))}
	rw.Start.Step = k
	after := readMixture(t, p, rw)
	if len(after) != 30-k {
		t.Fatalf("seed %d k %d: %d steps after the resume, want %d", seed, k, len(after), 30-k)
	}
	for j, old := range []int64{0, 2} {
		for d := range D {
			got, want := seq(after, int64(j), d), seq(full[k:], old, d)
			n := min(len(got), len(want))
			if n == 0 || !slices.Equal(got[:n], want[:n]) {
				t.Fatalf("seed %d k %d: source %d on slice %d continues with %v, the rows after those it delivered are %v", seed, k, old, d, got[:n], want[:n])
			}
		}
	}
	rw.Start.Step = k - 1
	if _, err := p.Open(context.Background(), rw); !errors.Is(err, batching.ErrInvalidPosition) || !strings.Contains(err.Error(), fmt.Sprintf("step %d is before step %d", k-1, k)) {
		t.Errorf("start before the positions: %v, want ErrInvalidPosition naming both steps", err)
	}
}

// TestMixtureBadInput: each bad mixture is refused when planned, naming the
// source.
func TestMixtureBadInput(t *testing.T) {
	dirs := mixDirs(t)
	mem := checkedMem(t)
	p := newTestPipeline(t, mem)
	first := transport.MixtureStop{Rule: "first_exhausted"}
	for _, tc := range []struct {
		name string
		edit func(*transport.Request)
		code codes.Code
		want []string
	}{
		{"all zero", func(r *transport.Request) {
			for i := range r.Mixture.Sources {
				r.Mixture.Sources[i].Weight = 0
			}
		}, codes.InvalidArgument, []string{"every weight is 0"}},
		{"no files", func(r *transport.Request) {
			r.Mixture.Sources[1].Datasets = []string{dirs[1] + "/nothing-*.parquet"}
		}, codes.NotFound, []string{"source 1", "nothing-*.parquet"}},
		{"renamed apart", func(r *transport.Request) {
			r.Mixture.Sources[2].Rename = nil
		}, codes.InvalidArgument, []string{"source 2", "source 0", `"label"`, `"y"`}},
		{"dtype apart", func(r *transport.Request) {
			r.Mixture.Sources[1].Columns[1].DType = "float32"
		}, codes.InvalidArgument, []string{"source 1", "source 0", `column "y"`, "float32", "int32"}},
		{"rename of a missing column", func(r *transport.Request) {
			r.Mixture.Sources[0].Rename = map[string]string{"text": "y"}
		}, codes.InvalidArgument, []string{"source 0", `no column "text"`}},
		{"source column clash", func(r *transport.Request) {
			r.Mixture.SourceColumn = "id"
		}, codes.InvalidArgument, []string{"source column", `"id"`}},
		{"raise with a partial step", func(r *transport.Request) {
			r.LastBatch = transport.LastBatchRaise
		}, codes.FailedPrecondition, []string{"partial step", "source"}},
		{"history of other sources", func(r *transport.Request) {
			r.Mixture.History = []transport.WeightSpan{{FromStep: 0, Weights: []float64{1, 1}}}
			r.Mixture.WeightsFrom = 3
		}, codes.InvalidArgument, []string{"history[0] has 2 weights for 3 sources"}},
		{"positions of other sources", func(r *transport.Request) {
			r.Mixture.History = []transport.WeightSpan{{FromStep: 0, Weights: []float64{1, 1, 1}, Positions: []int64{0, 0}}}
			r.Mixture.WeightsFrom = 3
		}, codes.InvalidArgument, []string{"history[0].positions has 2 positions for 3 sources"}},
		{"num_steps before the positions", func(r *transport.Request) {
			r.Mixture.Stop = transport.MixtureStop{Rule: "num_steps", NumSteps: 4}
			r.Mixture.History = []transport.WeightSpan{{FromStep: 0, Weights: []float64{1, 1, 1}}}
			r.Mixture.WeightsFrom, r.Mixture.WeightsFromPositions = 5, []int64{1, 1, 1}
		}, codes.FailedPrecondition, []string{"num_steps=4 is before step 5"}},
		{"switch before the positions", func(r *transport.Request) {
			r.Mixture.History = []transport.WeightSpan{{FromStep: 0, Weights: []float64{1, 1, 1}}}
			r.Mixture.WeightsFrom, r.Mixture.WeightsFromPositions = 5, []int64{1, 1, 1}
			r.Elastic, r.Start.Step = &transport.Elastic{FromSlices: 2, Step: 3}, 5
		}, codes.FailedPrecondition, []string{"elastic switch at step 3 is before step 5", "no span at the switch carries positions"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := mixRequest(dirs, []float64{0.5, 0.3, 0.2}, 12, 4, []int{0}, transport.LastBatchPad, first)
			tc.edit(req)
			var err error
			if err = req.Validate(); err == nil {
				_, err = p.Info(context.Background(), req)
			}
			if err == nil {
				t.Fatalf("planned, want an error")
			}
			code := codes.InvalidArgument
			if !errors.Is(err, transport.ErrBadRequest) {
				code = codes.Unknown
				for _, ec := range p.ErrorCodes() {
					if errors.Is(err, ec.Target) {
						code = ec.Code
						break
					}
				}
			}
			if code != tc.code || !containsAllStr(err.Error(), tc.want) {
				t.Errorf("%v (%v), want %v naming %q", err, code, tc.code, tc.want)
			}
		})
	}
}

func containsAllStr(s string, subs []string) bool {
	for _, x := range subs {
		if !strings.Contains(s, x) {
			return false
		}
	}
	return true
}

// TestMixtureServed: the ticket's mixture travels over Flight: the plan
// answer carries the mixture's steps and sources, DoGet its steps, and a
// source outside the server's roots is refused.
func TestMixtureServed(t *testing.T) {
	dirs := mixDirs(t)
	mem := checkedMem(t)
	ts := startPipeline(t, mem, dirs)
	req := mixRequest(dirs, []float64{0.5, 0.3, 0.2}, 12, 4, []int{0, 1, 2, 3}, transport.LastBatchPad, transport.MixtureStop{Rule: "first_exhausted"})
	ctx := context.Background()
	fi, err := ts.Client.GetFlightInfo(ctx, cmdDescriptor(t, req))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(fi.AppMetadata), `"mixture":{"sources":[{"rows":61`) {
		t.Errorf("plan answer %s: want the mixture's sources", fi.AppMetadata)
	}
	stream, err := ts.Client.DoGet(ctx, ticket(t, req))
	if err != nil {
		t.Fatal(err)
	}
	rdr, err := flight.NewRecordReader(stream)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for rdr.Next() {
		n++
	}
	rdr.Release()
	if fi.TotalRecords >= 0 && n == 0 {
		t.Errorf("no steps")
	}
	outside := mixRequest(append(slices.Clone(dirs[:2]), t.TempDir()), []float64{1, 1, 1}, 12, 4, []int{0}, transport.LastBatchPad, transport.MixtureStop{Rule: "first_exhausted"})
	_, err = ts.Client.GetFlightInfo(ctx, cmdDescriptor(t, outside))
	checkStatus(t, "GetFlightInfo outside the roots", err, codes.PermissionDenied, nil)
}

var _ = batching.Pad

// TestMixtureReadsOnlyItsRowGroups: a client serving one slice from a
// resumed step reads, of every source, exactly the row groups that hold
// that slice's rows of that source from that step on (invariant 3 per
// source), across the sources' epochs.
func TestMixtureReadsOnlyItsRowGroups(t *testing.T) {
	dirs := mixDirs(t)
	local, err := objstore.NewStore(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer local.Close()
	for _, start := range []int{0, 7} {
		log := &readLog{Store: local}
		p, err := NewPipeline(context.Background(), WithStore(log), WithAllocator(checkedMem(t)))
		if err != nil {
			t.Fatal(err)
		}
		req := mixRequest(dirs, []float64{0.5, 0.3, 0.2}, 12, 4, []int{1}, transport.LastBatchDrop,
			transport.MixtureStop{Rule: "num_steps", NumSteps: 30})
		for i := range req.Mixture.Sources {
			req.Mixture.Sources[i].Shuffle = transport.Shuffle{Enabled: i == 0} // row groups permuted, no windows
		}
		mp, err := p.planMixture(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		all := *req
		all.Slices = []int{0, 1, 2, 3}
		model := mixModel(t, p, &all)
		want := make([]map[int]bool, len(mp.srcs))
		for i := range want {
			want[i] = map[int]bool{}
		}
		for _, st := range model[start:] {
			for _, r := range st[1] {
				var first int64
				for g, ref := range mp.srcs[r.src].refs {
					if r.id >= first && r.id < first+ref.Rows {
						want[r.src][g] = true
					}
					first += ref.Rows
				}
			}
		}
		log.mu.Lock()
		log.reads = nil
		log.mu.Unlock()
		req.Start.Step = start
		st, err := p.Open(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		for n := start; n < 30; n++ {
			step, err := st.Next(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			step.Release()
		}
		st.Close()
		for i, src := range mp.srcs {
			got := log.rowGroupsRead(src.ds)
			if fmt.Sprint(sortedKeys(got)) != fmt.Sprint(sortedKeys(want[i])) {
				t.Errorf("start %d: %s: read row groups %v, want exactly %v", start, src.name, sortedKeys(got), sortedKeys(want[i]))
			}
		}
		p.Close()
	}
}
