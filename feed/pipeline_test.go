package feed

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"google.golang.org/grpc/codes"

	"github.com/meshfeed/meshfeed/batching"
	"github.com/meshfeed/meshfeed/internal/datagen"
	"github.com/meshfeed/meshfeed/loader"
	"github.com/meshfeed/meshfeed/objstore"
	"github.com/meshfeed/meshfeed/objstore/objstoretest"
	"github.com/meshfeed/meshfeed/shape"
	"github.com/meshfeed/meshfeed/transport"
)

// pipeSpec is the dataset of most pipeline tests: N=103 rows in 3 files of row
// groups of 7 rows (the last of each file shorter), 3 features.
func pipeSpec() datagen.Spec {
	s := datagen.DefaultSpec()
	s.Rows, s.Files, s.RowGroupRows, s.Features, s.Seed = 103, 3, 7, 3, 5
	return s
}

// writeDataset writes spec into a new directory and returns the directory.
func writeDataset(t *testing.T, spec datagen.Spec) string {
	t.Helper()
	dir := t.TempDir()
	if _, err := datagen.Write(context.Background(), datagen.LocalCreator{}, dir, spec); err != nil {
		t.Fatalf("datagen.Write: %v", err)
	}
	return dir
}

// startPipeline serves a Pipeline over bufconn with roots allowed. mem (may be
// nil) allocates the pipeline's records.
func startPipeline(t *testing.T, mem memory.Allocator, roots []string, popts ...Option) *testServer {
	t.Helper()
	popts = append([]Option{
		WithAllocator(mem),
		WithLoaderOptions(loader.WithDecodeWorkers(2)),
	}, popts...)
	p, err := NewPipeline(context.Background(), popts...)
	if err != nil {
		t.Fatalf("NewPipeline: %v", err)
	}
	t.Cleanup(func() { p.Close() })
	return startServer(t, viaBufconn, p, []transport.Option{transport.WithAllowedRoots(roots...)})
}

// pstep is one received step of a pipeline stream.
type pstep struct {
	meta     transport.StepMeta
	rows     int
	ids      []int64
	labels   []int32
	features [][]float32
	mask     []bool
	schema   *arrow.Schema
	rec      arrow.RecordBatch // retained only when keep is set
}

// readSteps reads a whole DoGet stream; with keep, each step's record is
// retained (released at cleanup).
func readSteps(t *testing.T, ctx context.Context, c flight.Client, req *transport.Request, keep bool) ([]pstep, error) {
	t.Helper()
	stream, err := c.DoGet(ctx, ticket(t, req))
	if err != nil {
		return nil, err
	}
	rdr, err := flight.NewRecordReader(stream)
	if err != nil {
		return nil, err
	}
	defer rdr.Release()
	var steps []pstep
	for rdr.Next() {
		rec := rdr.RecordBatch()
		var st pstep
		if err := json.Unmarshal(rdr.LatestAppMetadata(), &st.meta); err != nil {
			t.Fatalf("app_metadata %q: %v", rdr.LatestAppMetadata(), err)
		}
		st.rows = int(rec.NumRows())
		st.schema = rec.Schema()
		for i, f := range rec.Schema().Fields() {
			switch col := rec.Column(i).(type) {
			case *array.Int64:
				if f.Name == "id" {
					st.ids = slices.Clone(col.Int64Values())
				}
			case *array.Int32:
				if f.Name == "label" {
					st.labels = slices.Clone(col.Int32Values())
				}
			case *array.FixedSizeList:
				if f.Name != "features" {
					continue
				}
				vals, ok := col.ListValues().(*array.Float32)
				if !ok {
					continue
				}
				n := int(col.DataType().(*arrow.FixedSizeListType).Len())
				for r := 0; r < col.Len(); r++ {
					st.features = append(st.features, slices.Clone(vals.Float32Values()[(col.Offset()+r)*n:(col.Offset()+r+1)*n]))
				}
			case *array.Boolean:
				for r := 0; r < col.Len(); r++ {
					st.mask = append(st.mask, col.Value(r))
				}
			}
		}
		if keep {
			rec.Retain()
			st.rec = rec
			t.Cleanup(rec.Release)
		}
		steps = append(steps, st)
	}
	if err := rdr.Err(); err != nil && !errors.Is(err, io.EOF) {
		return steps, err
	}
	return steps, nil
}

// refModel computes the contract of DESIGN.md independently of the pipeline:
// the epoch sequence of ids (row groups in the order the plan gives for the
// epoch; their ids from datagen's file plan), D contiguous streams (the first
// N mod D one row longer), each permuted window by window with the plan's
// window permutation, and slice d of step s = rows [s*b, (s+1)*b) of stream d
// (-1 for padding).
type refModel struct {
	spec   datagen.Spec
	plan   *batching.Plan
	rgIDs  [][2]int64 // first id and rows of each row group, in dataset order
	n      int64
	B, D   int
	w      int64
	policy batching.Policy
}

func newRefModel(t *testing.T, spec datagen.Spec, req *transport.Request) *refModel {
	t.Helper()
	fps, err := spec.Plan()
	if err != nil {
		t.Fatal(err)
	}
	m := &refModel{spec: spec, B: req.GlobalBatchSize, D: req.NumSlices, w: int64(req.Shuffle.Window)}
	var rgs []batching.RowGroup
	for fi, fp := range fps {
		first := fp.FirstRow
		for ri, rows := range fp.RowGroups {
			m.rgIDs = append(m.rgIDs, [2]int64{first, rows})
			rgs = append(rgs, batching.RowGroup{File: fi, Index: ri, Rows: rows})
			first += rows
		}
	}
	m.n = spec.Rows
	m.policy, err = batching.ParsePolicy(string(req.LastBatch))
	if err != nil {
		t.Fatal(err)
	}
	// The plan is used only for its row group order and window permutations
	// (seeded draws); everything else is recomputed here.
	m.plan, err = batching.NewPlan(rgs, batching.Config{GlobalBatch: m.B, D: m.D, Seed: req.Seed,
		ShuffleRowGroups: req.Shuffle.Enabled, Window: m.w, Policy: m.policy})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// steps returns the steps per epoch.
func (m *refModel) steps() int {
	if m.policy == batching.Pad {
		return int((m.n + int64(m.B) - 1) / int64(m.B))
	}
	return int(m.n / int64(m.B))
}

// epoch returns, per step, the B ids of the global batch (-1: padding).
func (m *refModel) epoch(e int) [][]int64 {
	var seq []int64
	order := m.plan.RowGroupOrder(e)
	for _, g := range order {
		for i := int64(0); i < m.rgIDs[g][1]; i++ {
			seq = append(seq, m.rgIDs[g][0]+i)
		}
	}
	if int64(len(seq)) != m.n {
		panic(fmt.Sprintf("sequence of %d ids, want %d", len(seq), m.n))
	}
	b := int64(m.B / m.D)
	q, r := m.n/int64(m.D), m.n%int64(m.D)
	streams := make([][]int64, m.D)
	var at int64
	for d := range m.D {
		l := q
		if int64(d) < r {
			l++
		}
		s := slices.Clone(seq[at : at+l])
		at += l
		if m.w > 0 {
			p := slices.Clone(s)
			for k := 0; int64(k)*m.w < l; k++ {
				for i, j := range m.plan.WindowPerm(e, d, k) {
					p[int64(k)*m.w+int64(i)] = s[int64(k)*m.w+int64(j)]
				}
			}
			s = p
		}
		streams[d] = s
	}
	out := make([][]int64, m.steps())
	for st := range out {
		for d := range m.D {
			for i := int64(st) * b; i < int64(st+1)*b; i++ {
				if i < int64(len(streams[d])) {
					out[st] = append(out[st], streams[d][i])
				} else {
					out[st] = append(out[st], -1)
				}
			}
		}
	}
	return out
}

// pipeRequest is a request over dir's Parquet files.
func pipeRequest(dir string, B, D int, slices []int, policy transport.LastBatch) *transport.Request {
	return &transport.Request{Version: transport.Version, Datasets: []string{dir + "/*.parquet"}, GlobalBatchSize: B, NumSlices: D,
		Slices: slices, LastBatch: policy, Epochs: 2, Seed: 11}
}

// TestPipelineSlicesMatchContract: clients serving different slice sets
// reconstruct the same global batches as one client with every slice, and
// those equal the contract's model; every row is delivered once per epoch,
// and labels and features are datagen's functions of the id.
func TestPipelineSlicesMatchContract(t *testing.T) {
	spec := pipeSpec()
	dir := writeDataset(t, spec)
	mem := checkedMem(t)
	ts := startPipeline(t, mem, []string{dir})
	const B, D = 8, 4
	b := B / D
	splits := [][][]int{{{0, 1, 2, 3}}, {{0, 1}, {2, 3}}, {{0}, {1}, {2}, {3}}, {{1, 3}, {0}, {2}}}
	shuffles := []transport.Shuffle{{}, {Enabled: true}, {Enabled: true, Window: 10}}
	for _, policy := range []transport.LastBatch{transport.LastBatchDrop, transport.LastBatchPad} {
		for _, sh := range shuffles {
			t.Run(fmt.Sprintf("%s/shuffle=%v/W=%d", policy, sh.Enabled, sh.Window), func(t *testing.T) {
				base := pipeRequest(dir, B, D, []int{0, 1, 2, 3}, policy)
				base.Shuffle = sh
				model := newRefModel(t, spec, base)
				want := [][][]int64{model.epoch(0), model.epoch(1)}
				if sh.Enabled && slices.Equal(slices.Concat(want[0]...), slices.Concat(want[1]...)) {
					t.Errorf("shuffled epochs 0 and 1 have the same order")
				}
				for _, split := range splits {
					// got[epoch][step][slice] = ids
					got := make([][][][]int64, 2)
					for e := range got {
						got[e] = make([][][]int64, model.steps())
						for s := range got[e] {
							got[e][s] = make([][]int64, D)
						}
					}
					for _, sl := range split {
						req := *base
						req.Slices = sl
						steps, err := readSteps(t, context.Background(), ts.Client, &req, false)
						if err != nil {
							t.Fatalf("slices %v: %v", sl, err)
						}
						if len(steps) != 2*model.steps() {
							t.Fatalf("slices %v: %d steps, want %d", sl, len(steps), 2*model.steps())
						}
						for i, st := range steps {
							e, s := i/model.steps(), i%model.steps()
							if st.meta.Epoch != e || st.meta.Step != s || !slices.Equal(st.meta.Slices, sl) {
								t.Fatalf("slices %v message %d: meta %+v, want epoch %d step %d slices %v", sl, i, st.meta, e, s, sl)
							}
							if st.rows != len(sl)*b || len(st.ids) != st.rows {
								t.Fatalf("slices %v step %d: %d rows (%d ids), want %d", sl, i, st.rows, len(st.ids), len(sl)*b)
							}
							for j, d := range sl {
								ids := st.ids[j*b : (j+1)*b]
								got[e][s][d] = ids
								real := 0
								for r, id := range want[e][s][d*b : (d+1)*b] {
									if id >= 0 {
										real++
										checkRow(t, spec, st, j*b+r, id)
									}
								}
								if st.meta.RealRows[j] != real {
									t.Errorf("slices %v epoch %d step %d slice %d: real_rows %d, want %d", sl, e, s, d, st.meta.RealRows[j], real)
								}
								if policy == transport.LastBatchPad {
									for r := range b {
										if st.mask[j*b+r] != (r < real) {
											t.Fatalf("slices %v epoch %d step %d slice %d row %d: mask %v, want %v", sl, e, s, d, r, st.mask[j*b+r], r < real)
										}
										if r >= real && (ids[r] != 0 || st.labels[j*b+r] != 0) {
											t.Errorf("padding row: id %d label %d, want zeros", ids[r], st.labels[j*b+r])
										}
									}
								} else if st.mask != nil {
									t.Fatalf("a mask column with last_batch=%s", policy)
								}
							}
						}
					}
					for e := range 2 {
						seen := map[int64]int{}
						for s := range model.steps() {
							glob := slices.Concat(got[e][s]...)
							for i, id := range want[e][s] {
								if id >= 0 && glob[i] != id {
									t.Fatalf("split %v epoch %d step %d: ids %v, want %v", split, e, s, glob, want[e][s])
								}
								if id >= 0 {
									seen[id]++
								}
							}
						}
						wantRows := spec.Rows
						if policy == transport.LastBatchDrop {
							wantRows -= spec.Rows % B
						}
						if int64(len(seen)) != wantRows {
							t.Errorf("split %v epoch %d: %d distinct ids, want %d", split, e, len(seen), wantRows)
						}
						for id, n := range seen {
							if n != 1 || id < 0 || id >= spec.Rows {
								t.Errorf("split %v epoch %d: id %d delivered %d times", split, e, id, n)
							}
						}
					}
				}
			})
		}
	}
}

// checkRow checks that row r of st holds id with datagen's label and features.
func checkRow(t *testing.T, spec datagen.Spec, st pstep, r int, id int64) {
	t.Helper()
	if st.ids[r] != id {
		return // reported by the caller's comparison of ids
	}
	if got, want := st.labels[r], datagen.Label(spec.Seed, id); got != want {
		t.Fatalf("id %d: label %d, want %d", id, got, want)
	}
	wantF := make([]float32, spec.Features)
	datagen.Features(spec.Seed, id, wantF)
	if !slices.Equal(st.features[r], wantF) {
		t.Fatalf("id %d: features %v, want %v", id, st.features[r], wantF)
	}
}

// TestPipelineInfo: GetFlightInfo answers the plan and the schema (with the
// mask column under pad) computed independently.
func TestPipelineInfo(t *testing.T) {
	spec := pipeSpec()
	dir := writeDataset(t, spec)
	ts := startPipeline(t, nil, []string{dir})
	for _, tc := range []struct {
		policy          transport.LastBatch
		steps, drop, pd int64
	}{
		{transport.LastBatchDrop, 103 / 8, 103 % 8, 0},
		{transport.LastBatchPad, (103 + 7) / 8, 0, 13*8 - 103},
	} {
		req := pipeRequest(dir, 8, 4, []int{1}, tc.policy)
		info, err := ts.Client.GetFlightInfo(context.Background(), cmdDescriptor(t, req))
		if err != nil {
			t.Fatalf("%s: GetFlightInfo: %v", tc.policy, err)
		}
		var pi transport.PlanInfo
		if err := json.Unmarshal(info.AppMetadata, &pi); err != nil {
			t.Fatal(err)
		}
		want := transport.PlanInfo{NumRows: 103, StepsPerEpoch: tc.steps, DroppedRows: tc.drop, PaddedRows: tc.pd}
		// No manifest beside the data: planned from the footers, saying why.
		if pi.Manifest != "" || !strings.Contains(pi.ManifestReason, "no manifest at") || pi.PlanRequests < 1 {
			t.Errorf("%s: plan %+v, want the footers, the reason and the requests counted", tc.policy, pi)
		}
		pi.ManifestReason, pi.PlanRequests = "", 0
		if !reflect.DeepEqual(pi, want) {
			t.Errorf("%s: plan %+v, want %+v", tc.policy, pi, want)
		}
		sch, err := flight.DeserializeSchema(info.Schema, memory.DefaultAllocator)
		if err != nil {
			t.Fatal(err)
		}
		names := []string{"id", "label", "features"}
		if tc.policy == transport.LastBatchPad {
			names = append(names, "valid")
		}
		var got []string
		for _, f := range sch.Fields() {
			got = append(got, f.Name)
		}
		if !slices.Equal(got, names) {
			t.Errorf("%s: schema fields %v, want %v", tc.policy, got, names)
		}
	}
}

// TestPipelineErrors: the pipeline's errors reach the client with the status
// codes of docs/PROTOCOL.md and name the values involved.
func TestPipelineErrors(t *testing.T) {
	spec := pipeSpec()
	dir := writeDataset(t, spec)
	ts := startPipeline(t, nil, []string{dir})
	raise := pipeRequest(dir, 8, 2, []int{0}, transport.LastBatchRaise)
	missing := pipeRequest(dir, 8, 2, []int{0}, transport.LastBatchDrop)
	missing.Datasets = []string{dir + "/nothing-*.parquet"}
	badCol := pipeRequest(dir, 8, 2, []int{0}, transport.LastBatchDrop)
	badCol.Columns = []transport.Column{{Name: "id"}, {Name: "nope"}}
	packPad := pipeRequest(dir, 8, 2, []int{0}, transport.LastBatchPad)
	packPad.Columns = []transport.Column{{Name: "tokens", Length: 8, PackRatio: 2}}
	badShape := pipeRequest(dir, 8, 2, []int{0}, transport.LastBatchDrop)
	badShape.Columns = []transport.Column{{Name: "label", DType: "bfloat16"}}
	past := pipeRequest(dir, 8, 2, []int{0}, transport.LastBatchDrop)
	past.Start = transport.Position{Step: 12}
	tooFew := pipeRequest(dir, 128, 2, []int{0}, transport.LastBatchDrop)
	maskClash := pipeRequest(dir, 8, 2, []int{0}, transport.LastBatchPad)
	maskClash.MaskColumn = "label"
	for _, tc := range []struct {
		name    string
		req     *transport.Request
		doGet   bool
		code    codes.Code
		message []string
	}{
		{"raise", raise, false, codes.FailedPrecondition, []string{"N=103", "B=8", "remainder of 7"}},
		{"raise/doget", raise, true, codes.FailedPrecondition, []string{"N=103", "B=8", "remainder of 7"}},
		{"missing", missing, false, codes.NotFound, []string{"nothing-*.parquet"}},
		{"column", badCol, false, codes.InvalidArgument, []string{`"nope"`}},
		{"pack+pad", packPad, false, codes.InvalidArgument, []string{"pack_ratio", "pad"}},
		{"shape", badShape, false, codes.InvalidArgument, []string{`"label"`, "bfloat16"}},
		{"start past end", past, true, codes.FailedPrecondition, []string{"start step 12", "12 steps"}},
		{"no steps", tooFew, false, codes.FailedPrecondition, []string{"103", "128"}},
		{"mask clash", maskClash, false, codes.InvalidArgument, []string{`"label"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			if tc.doGet {
				_, err = readSteps(t, context.Background(), ts.Client, tc.req, false)
			} else {
				_, err = ts.Client.GetFlightInfo(context.Background(), cmdDescriptor(t, tc.req))
			}
			checkStatus(t, tc.name, err, tc.code, tc.message)
		})
	}
}

// TestPipelineResume: a stream starting at (epoch 1, step k) equals the tail
// of an uninterrupted 2-epoch stream, for shuffled and windowed plans.
func TestPipelineResume(t *testing.T) {
	spec := pipeSpec()
	dir := writeDataset(t, spec)
	ts := startPipeline(t, checkedMem(t), []string{dir})
	for _, sh := range []transport.Shuffle{{}, {Enabled: true, Window: 9}} {
		for _, policy := range []transport.LastBatch{transport.LastBatchDrop, transport.LastBatchPad} {
			req := pipeRequest(dir, 6, 2, []int{0, 1}, policy)
			req.Shuffle = sh
			full, err := readSteps(t, context.Background(), ts.Client, req, false)
			if err != nil {
				t.Fatal(err)
			}
			steps := len(full) / 2
			for _, k := range []int{0, 1, 5, steps - 1} {
				r := *req
				r.Start = transport.Position{Epoch: 1, Step: k}
				tail, err := readSteps(t, context.Background(), ts.Client, &r, false)
				if err != nil {
					t.Fatalf("%s W=%d start %d: %v", policy, sh.Window, k, err)
				}
				want := full[steps+k:]
				if len(tail) != len(want) {
					t.Fatalf("%s W=%d start %d: %d steps, want %d", policy, sh.Window, k, len(tail), len(want))
				}
				for i := range tail {
					if !slices.Equal(tail[i].ids, want[i].ids) || !slices.Equal(tail[i].mask, want[i].mask) ||
						tail[i].meta.Step != want[i].meta.Step || tail[i].meta.Epoch != 1 ||
						!slices.Equal(tail[i].meta.RealRows, want[i].meta.RealRows) {
						t.Fatalf("%s W=%d start %d: step %d = %+v %v, want %+v %v", policy, sh.Window, k, i,
							tail[i].meta, tail[i].ids, want[i].meta, want[i].ids)
					}
				}
			}
		}
	}
}

// bf16ToFloat32 widens bfloat16 bits.
func bf16ToFloat32(u uint16) float32 { return math.Float32frombits(uint32(u) << 16) }

// TestPipelineShaping: features cast to bfloat16 (uint16 with the dtype
// metadata), tokens padded to a static length with a length column.
func TestPipelineShaping(t *testing.T) {
	spec := pipeSpec()
	spec.Tokens, spec.TokensMin, spec.TokensMax = true, 0, 9
	dir := writeDataset(t, spec)
	mem := checkedMem(t)
	ts := startPipeline(t, mem, []string{dir})
	const L = 5
	req := pipeRequest(dir, 8, 2, []int{0, 1}, transport.LastBatchPad)
	req.Epochs = 1
	req.Columns = []transport.Column{
		{Name: "id"},
		{Name: "features", DType: "bfloat16"},
		{Name: "tokens", Length: L, Overflow: "truncate", Fill: json.RawMessage("-1")},
	}
	steps, err := readSteps(t, context.Background(), ts.Client, req, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(steps) != 13 {
		t.Fatalf("%d steps, want 13", len(steps))
	}
	info, err := ts.Client.GetFlightInfo(context.Background(), cmdDescriptor(t, req))
	if err != nil {
		t.Fatal(err)
	}
	infoSchema, err := flight.DeserializeSchema(info.Schema, memory.DefaultAllocator)
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, st := range steps {
		rec := st.rec
		if !rec.Schema().Equal(infoSchema) {
			t.Fatalf("record schema %v differs from GetFlightInfo's %v", rec.Schema(), infoSchema)
		}
		var names []string
		for _, f := range rec.Schema().Fields() {
			names = append(names, f.Name)
		}
		if want := []string{"id", "features", "tokens", "tokens_length", "valid"}; !slices.Equal(names, want) {
			t.Fatalf("fields %v, want %v", names, want)
		}
		ff := rec.Schema().Field(1)
		if v, _ := ff.Metadata.GetValue(shape.DTypeMetadataKey); v != "bfloat16" {
			t.Fatalf("features metadata %v, want %s=bfloat16", ff.Metadata, shape.DTypeMetadataKey)
		}
		feat := rec.Column(1).(*array.FixedSizeList)
		fvals, ok := feat.ListValues().(*array.Uint16)
		if !ok {
			t.Fatalf("features elements are %v, want uint16 (bfloat16 bits)", feat.ListValues().DataType())
		}
		tok, ok := rec.Column(2).(*array.FixedSizeList)
		if !ok || tok.DataType().(*arrow.FixedSizeListType).Len() != L {
			t.Fatalf("tokens is %v, want fixed_size_list[%d]", rec.Column(2).DataType(), L)
		}
		tvals := tok.ListValues().(*array.Int32).Int32Values()
		lens := rec.Column(3).(*array.Int32).Int32Values()
		for r := range st.rows {
			if !st.mask[r] {
				continue
			}
			seen++
			id := st.ids[r]
			want := make([]float32, spec.Features)
			datagen.Features(spec.Seed, id, want)
			for j, w := range want {
				got := bf16ToFloat32(fvals.Value((feat.Offset()+r)*spec.Features + j))
				if math.Abs(float64(got-w)) > math.Abs(float64(w))/128+1e-30 {
					t.Fatalf("id %d feature %d: bfloat16 %v, want about %v", id, j, got, w)
				}
			}
			toks := datagen.Tokens(spec.Seed, id, spec.TokensMin, spec.TokensMax)
			if int(lens[r]) != min(len(toks), L) {
				t.Fatalf("id %d: tokens_length %d, want min(%d, %d)", id, lens[r], len(toks), L)
			}
			row := tvals[(tok.Offset()+r)*L : (tok.Offset()+r+1)*L]
			for k := range L {
				w := int32(-1)
				if k < len(toks) {
					w = toks[k]
				}
				if row[k] != w {
					t.Fatalf("id %d: tokens %v, want prefix of %v filled with -1", id, row, toks)
				}
			}
		}
	}
	if seen != 103 {
		t.Errorf("%d real rows, want 103", seen)
	}
}

// TestPipelineGCS: the same contract over the in-process GCS emulator.
func TestPipelineGCS(t *testing.T) {
	spec := pipeSpec()
	store := objstoretest.StartFakeGCS(t, "bucket")
	if _, err := datagen.Write(context.Background(), store, "gs://bucket/train/ds", spec); err != nil {
		t.Fatalf("datagen.Write to fake GCS: %v", err)
	}
	mem := checkedMem(t)
	ts := startPipeline(t, mem, []string{"gs://bucket/train"}, WithStore(store))
	req := pipeRequest("gs://bucket/train/ds", 8, 2, []int{0, 1}, transport.LastBatchPad)
	req.Shuffle = transport.Shuffle{Enabled: true, Window: 5}
	model := newRefModel(t, spec, req)
	steps, err := readSteps(t, context.Background(), ts.Client, req, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(steps) != 2*model.steps() {
		t.Fatalf("%d steps, want %d", len(steps), 2*model.steps())
	}
	for i, st := range steps {
		e, s := i/model.steps(), i%model.steps()
		want := model.epoch(e)[s]
		for r, id := range want {
			if id < 0 {
				if st.mask[r] {
					t.Fatalf("epoch %d step %d row %d: padding row marked real", e, s, r)
				}
				continue
			}
			if st.ids[r] != id || !st.mask[r] {
				t.Fatalf("epoch %d step %d: ids %v, want %v", e, s, st.ids, want)
			}
			checkRow(t, spec, st, r, id)
		}
	}
	missing := *req
	missing.Datasets = []string{"gs://bucket/train/none/*.parquet"}
	_, err = ts.Client.GetFlightInfo(context.Background(), cmdDescriptor(t, &missing))
	checkStatus(t, "GetFlightInfo(missing gs:// glob)", err, codes.NotFound, []string{"gs://bucket/train/none"})
}

// TestPipelineCancel: cancelling an unbounded stream mid-way stops the
// pipeline's readers (no goroutine left) and releases every record.
func TestPipelineCancel(t *testing.T) {
	spec := pipeSpec()
	dir := writeDataset(t, spec)
	mem := checkedMem(t)
	p, err := NewPipeline(context.Background(), WithAllocator(mem),
		WithLoaderOptions(loader.WithDecodeWorkers(2)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	tb := &tracking{Backend: p}
	ts := startServer(t, viaBufconn, tb, []transport.Option{transport.WithAllowedRoots(dir)})
	// Warm the connection up so its goroutines are in the baseline.
	if _, err := ts.Client.GetFlightInfo(context.Background(), cmdDescriptor(t, pipeRequest(dir, 4, 2, []int{0}, transport.LastBatchPad))); err != nil {
		t.Fatal(err)
	}
	base := runtimeNumGoroutine()
	for n, sl := range [][]int{{0, 1}, {1}} {
		req := pipeRequest(dir, 4, 2, sl, transport.LastBatchPad)
		req.Epochs = 0 // unbounded
		req.Shuffle = transport.Shuffle{Enabled: true, Window: 6}
		ctx, cancel := context.WithCancel(context.Background())
		stream, err := ts.Client.DoGet(ctx, ticket(t, req))
		if err != nil {
			t.Fatal(err)
		}
		rdr, err := flight.NewRecordReader(stream)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 40 { // past the first epoch boundary (26 steps)
			if !rdr.Next() {
				t.Fatalf("slices %v: stream ended at step %d: %v", sl, i, rdr.Err())
			}
		}
		cancel()
		for rdr.Next() {
		}
		rdr.Release()
		waitFor(t, "stream closed", func() bool { return tb.closed.Load() == int64(n+1) })
	}
	checkGoroutines(t, base, 0)
	waitFor(t, "the pipeline's allocator to be empty", func() bool { return mem.CurrentAlloc() == 0 })
}

// TestPipelineStreamDirect drives a transport.Stream without the server: Close in the
// middle of an epoch releases everything, and Next after Close fails.
func TestPipelineStreamDirect(t *testing.T) {
	spec := pipeSpec()
	dir := writeDataset(t, spec)
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	p, err := NewPipeline(context.Background(), WithAllocator(mem), WithCacheTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	req := pipeRequest(dir, 8, 4, []int{0, 2, 3}, transport.LastBatchDrop)
	st, err := p.Open(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		step, err := st.Next(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if meta := step.Meta; step.Rows() != 6 || !slices.Equal(meta.Slices, []int{0, 2, 3}) {
			t.Errorf("step %+v: %d rows, want 6", meta, step.Rows())
		}
		step.Release()
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := st.Next(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Next(cancelled ctx) = %v, want context.Canceled", err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Next(context.Background()); err == nil || !strings.Contains(err.Error(), "after Close") {
		t.Errorf("Next after Close = %v, want an error", err)
	}
}

// readLog is an objstore.Store that records every ReadAt.
type readLog struct {
	objstore.Store
	mu    sync.Mutex
	reads []readAt
}

type readAt struct {
	uri     string
	off, to int64
}

func (s *readLog) ReadAt(ctx context.Context, obj objstore.Object, p []byte, off int64) error {
	s.mu.Lock()
	s.reads = append(s.reads, readAt{obj.URI, off, off + int64(len(p))})
	s.mu.Unlock()
	return s.Store.ReadAt(ctx, obj, p, off)
}

// rowGroupsRead returns the row groups (dataset order) whose column chunks
// any logged read overlapped.
func (s *readLog) rowGroupsRead(ds *loader.Dataset) map[int]bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[int]bool{}
	for g, ref := range ds.RowGroups() {
		f := ds.Files[ref.File]
		for _, c := range f.RowGroups[ref.Index].Chunks {
			for _, r := range s.reads {
				if r.uri == f.Object.URI && r.off < c.Offset+c.Length && c.Offset < r.to {
					out[g] = true
				}
			}
		}
	}
	return out
}

// TestPipelineReadsOnlyItsRowGroups: a client reads only the row groups that
// hold the rows of its own slices from its start step on (invariants 3 and
// 5), derived from the contract's model (W = 0: the row groups holding the
// delivered ids).
func TestPipelineReadsOnlyItsRowGroups(t *testing.T) {
	spec := pipeSpec()
	dir := writeDataset(t, spec)
	local, err := objstore.NewStore(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer local.Close()
	for _, tc := range []struct {
		B       int
		slices  []int
		start   transport.Position
		shuffle bool
	}{
		{8, []int{1}, transport.Position{}, false},
		{8, []int{1}, transport.Position{Epoch: 0, Step: 5}, false},
		{8, []int{0, 3}, transport.Position{Epoch: 1, Step: 3}, true},
		// epoch 1's row groups differ from epoch 0's: its first step's are read ahead
		{8, []int{0, 3}, transport.Position{Epoch: 0, Step: 3}, true},
		// transport.Stream 2 is ids 52..77 but delivers 52..75: the row group of
		// 76..82 must not be read.
		{12, []int{2}, transport.Position{}, false},
	} {
		log := &readLog{Store: local}
		p, err := NewPipeline(context.Background(), WithStore(log))
		if err != nil {
			t.Fatal(err)
		}
		req := pipeRequest(dir, tc.B, 4, tc.slices, transport.LastBatchDrop)
		req.Start, req.Shuffle.Enabled = tc.start, tc.shuffle
		pl, err := p.planFor(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		// Planning read the footers (here: whole small files); count only
		// what the stream reads.
		log.mu.Lock()
		log.reads = nil
		log.mu.Unlock()
		model := newRefModel(t, spec, req)
		// Row groups holding the ids this client gets in its first epoch
		// (want), and in the next one (which the stream reads ahead into
		// once the first epoch's reads are done: allowed, not required).
		groups := func(epoch, from, to int) map[int]bool {
			out := map[int]bool{}
			for s := from; s < to; s++ {
				b := tc.B / 4
				for _, d := range tc.slices {
					for _, id := range model.epoch(epoch)[s][d*b : (d+1)*b] {
						for g, r := range model.rgIDs {
							if id >= r[0] && id < r[0]+r[1] {
								out[g] = true
							}
						}
					}
				}
			}
			return out
		}
		want := groups(tc.start.Epoch, tc.start.Step, model.steps())
		allowed, ahead := map[int]bool{}, map[int]bool{}
		if tc.start.Epoch+1 < req.Epochs {
			allowed = groups(tc.start.Epoch+1, 0, model.steps())
			// Read ahead: the next epoch's first step is read before it is asked for.
			ahead = groups(tc.start.Epoch+1, 0, 1)
		}
		maps.Copy(allowed, want)
		st, err := p.Open(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		for range model.steps() - tc.start.Step {
			step, err := st.Next(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			step.Release()
		}
		// Give read-ahead the time to fetch what it might (wrongly, or the
		// next epoch's first row groups).
		time.Sleep(50 * time.Millisecond)
		got := log.rowGroupsRead(pl.ds)
		for g := range want {
			if !got[g] {
				t.Errorf("slices %v from %+v: read row groups %v, want all of %v", tc.slices, tc.start, sortedKeys(got), sortedKeys(want))
				break
			}
		}
		for g := range ahead {
			if !got[g] {
				t.Errorf("slices %v from %+v: read row groups %v by the end of the epoch, want the next epoch's first step's %v read ahead",
					tc.slices, tc.start, sortedKeys(got), sortedKeys(ahead))
				break
			}
		}
		for g := range got {
			if !allowed[g] {
				t.Errorf("slices %v from %+v: read row groups %v, want only %v (this epoch's %v, then the next one's)",
					tc.slices, tc.start, sortedKeys(got), sortedKeys(allowed), sortedKeys(want))
				break
			}
		}
		st.Close()
		p.Close()
	}
}

func sortedKeys(m map[int]bool) []int {
	return slices.Sorted(maps.Keys(m))
}

// TestPipelinePacking: packed slices have PackedRows(b, ratio) rows each,
// real_rows counts them, every source token arrives once; a list longer than
// Length under "reject" fails the stream with FailedPrecondition naming the
// column.
func TestPipelinePacking(t *testing.T) {
	spec := pipeSpec()
	spec.Tokens, spec.TokensMin, spec.TokensMax = true, 1, 3
	dir := writeDataset(t, spec)
	ts := startPipeline(t, checkedMem(t), []string{dir})
	const L = 8
	req := pipeRequest(dir, 8, 2, []int{0, 1}, transport.LastBatchDrop)
	req.Epochs = 1
	req.Columns = []transport.Column{{Name: "tokens", Length: L, PackRatio: 2}}
	steps, err := readSteps(t, context.Background(), ts.Client, req, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(steps) != 103/8 {
		t.Fatalf("%d steps, want %d", len(steps), 103/8)
	}
	// Model: W = 0, no shuffle: slice d of step s is ids d*52+4s .. +4 (stream
	// lengths 52 and 51), packed into ceil(4/2) = 2 rows.
	for s, st := range steps {
		if st.rows != 4 || !slices.Equal(st.meta.RealRows, []int{2, 2}) {
			t.Fatalf("step %d: %d rows, real_rows %v; want 4 rows, [2 2]", s, st.rows, st.meta.RealRows)
		}
		names := []string{}
		for _, f := range st.schema.Fields() {
			names = append(names, f.Name)
		}
		if !slices.Equal(names, []string{"tokens", "tokens_segment_ids", "tokens_positions"}) {
			t.Fatalf("fields %v", names)
		}
		tok := st.rec.Column(0).(*array.FixedSizeList)
		seg := st.rec.Column(1).(*array.FixedSizeList)
		tv := tok.ListValues().(*array.Int32).Int32Values()[tok.Offset()*L:]
		sv := seg.ListValues().(*array.Int32).Int32Values()[seg.Offset()*L:]
		for d := range 2 {
			var want, got []int32
			for id := int64(d*52 + 4*s); id < int64(d*52+4*s+4); id++ {
				want = append(want, datagen.Tokens(spec.Seed, id, spec.TokensMin, spec.TokensMax)...)
			}
			for k := d * 2 * L; k < (d+1)*2*L; k++ {
				if sv[k] != 0 {
					got = append(got, tv[k])
				}
			}
			slices.Sort(want)
			slices.Sort(got)
			if !slices.Equal(got, want) {
				t.Fatalf("step %d slice %d: packed tokens %v, want those of ids %d..%d: %v", s, d, got, d*52+4*s, d*52+4*s+3, want)
			}
		}
	}
	long := *req
	long.Columns = []transport.Column{{Name: "tokens", Length: 2}}
	_, err = readSteps(t, context.Background(), ts.Client, &long, false)
	checkStatus(t, "DoGet(tokens longer than length)", err, codes.FailedPrecondition, []string{`"tokens"`, "row", "epoch 0 step 0 slice 0"})
}

// BenchmarkPipelineStep measures one step of the direct transport.Stream (no server):
// one slice (handed through) against four (one concatenation), with B rows of
// 64 float32 features. bytes/op is the step record's size.
func BenchmarkPipelineStep(b *testing.B) {
	spec := datagen.DefaultSpec()
	spec.Rows, spec.RowGroupRows, spec.Features = 1<<15, 4096, 64
	dir := b.TempDir()
	if _, err := datagen.Write(context.Background(), datagen.LocalCreator{}, dir, spec); err != nil {
		b.Fatal(err)
	}
	for _, n := range []int{1, 4} {
		b.Run(fmt.Sprintf("slices=%d", n), func(b *testing.B) {
			p, err := NewPipeline(context.Background())
			if err != nil {
				b.Fatal(err)
			}
			defer p.Close()
			req := &transport.Request{Version: transport.Version, Datasets: []string{dir + "/*.parquet"}, GlobalBatchSize: 4096, NumSlices: 4,
				Slices: []int{0, 1, 2, 3}[:n], LastBatch: transport.LastBatchDrop}
			st, err := p.Open(context.Background(), req)
			if err != nil {
				b.Fatal(err)
			}
			defer st.Close()
			b.ReportAllocs()
			b.SetBytes(int64(n) * 1024 * (8 + 4 + 64*4))
			for b.Loop() {
				step, err := st.Next(context.Background())
				if err != nil {
					b.Fatal(err)
				}
				step.Release()
			}
		})
	}
}

// With a map cache (serve --map-cache), streams read local files through
// whole-file mappings that outlive them: the rows are the contract's, and a
// second stream maps nothing new.
func TestPipelineMapCache(t *testing.T) {
	spec := pipeSpec()
	dir := writeDataset(t, spec)
	mem := checkedMem(t)
	p, err := NewPipeline(context.Background(), WithAllocator(mem),
		WithStoreOptions(objstore.WithLocalOptions(objstore.WithMapCache(1<<30))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	ts := startServer(t, viaBufconn, p, []transport.Option{transport.WithAllowedRoots(dir)})
	const B, D = 8, 4
	b := B / D
	req := pipeRequest(dir, B, D, []int{0, 1, 2, 3}, transport.LastBatchDrop)
	req.Shuffle = transport.Shuffle{Enabled: true}
	model := newRefModel(t, spec, req)
	stats := p.cfg.store.(objstore.StatsReporter).Stats()
	for stream := range 2 {
		steps, err := readSteps(t, context.Background(), ts.Client, req, false)
		if err != nil {
			t.Fatalf("stream %d: %v", stream, err)
		}
		if len(steps) != 2*model.steps() {
			t.Fatalf("stream %d: %d steps, want %d", stream, len(steps), 2*model.steps())
		}
		for i, st := range steps {
			want := model.epoch(i / model.steps())[i%model.steps()]
			for r, id := range want {
				if st.ids[r] != id {
					t.Fatalf("stream %d step %d: ids %v, want %v", stream, i, st.ids, want)
				}
				checkRow(t, spec, st, r, id)
			}
			if st.rows != D*b {
				t.Fatalf("stream %d step %d: %d rows, want %d", stream, i, st.rows, D*b)
			}
		}
		if got := stats.FileMaps.Load(); got != int64(spec.Files) {
			t.Errorf("after stream %d: %d whole-file mappings, want %d (one per file, kept between streams)", stream, got, spec.Files)
		}
		if stats.Maps.Load() == 0 {
			t.Errorf("after stream %d: no Map calls; the pipeline did not read through mappings", stream)
		}
	}
}
