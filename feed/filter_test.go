package feed

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/meshfeed/meshfeed/filter"
	"github.com/meshfeed/meshfeed/internal/datagen"
	"github.com/meshfeed/meshfeed/transport"
)

// filterSpec: 12,000 rows in 2 files of 1,000-row row groups; id is sorted
// (statistics rule row groups out), label is Label(seed, id) in [0, 1000)
// (scattered).
func filterSpec() datagen.Spec {
	s := datagen.DefaultSpec()
	s.Rows, s.Files, s.RowGroupRows, s.Features, s.Seed, s.PageBytes = 12000, 2, 1000, 8, 5, 4<<10
	return s
}

func filterRequest(dir, filters string, d int) *transport.Request {
	sl := make([]int, d)
	for i := range sl {
		sl[i] = i
	}
	return &transport.Request{Version: transport.Version, Datasets: []string{dir + "/*.parquet"}, GlobalBatchSize: 8 * d,
		Columns: []transport.Column{{Name: "id"}, {Name: "features"}}, NumSlices: d, Slices: sl,
		LastBatch: transport.LastBatchPad, Epochs: 1, Filters: json.RawMessage(filters)}
}

// streamIDs streams req and returns the real rows' ids of each slice in
// order (streams are contiguous in dataset order without shuffling, so
// their concatenation is the rows kept in dataset order), and the number
// of steps.
func streamIDs(t *testing.T, p *Pipeline, req *transport.Request) ([][]int64, int) {
	t.Helper()
	ctx := context.Background()
	st, err := p.Open(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	out := make([][]int64, len(req.Slices))
	steps := 0
	for {
		step, err := st.Next(ctx)
		if errors.Is(err, io.EOF) {
			return out, steps
		}
		if err != nil {
			t.Fatal(err)
		}
		steps++
		for i, rec := range step.Slices {
			ids := rec.Column(0).(*array.Int64).Int64Values()
			out[i] = append(out[i], ids[:step.Meta.RealRows[i]]...)
		}
		step.Release()
	}
}

func newFilterPipeline(t *testing.T, readAhead int64, mem memory.Allocator) *Pipeline {
	t.Helper()
	p, err := NewPipeline(context.Background(), WithReadAhead(readAhead), WithCacheTTL(0), WithAllocator(mem))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// TestFilterPrunesByStatistics: on a sorted column, the row groups the
// statistics rule out are never read and those they keep whole are not
// evaluated; the rows delivered are exactly the kept ones, in order; N and
// steps count them; a second plan takes the selections from the store.
func TestFilterPrunesByStatistics(t *testing.T) {
	dir := writeDataset(t, filterSpec())
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	p := newFilterPipeline(t, 1<<30, mem)
	req := filterRequest(dir, `[["id", ">=", 9000], ["id", "<", 10500]]`, 2)
	info, err := p.Info(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	fs := p.FilterStats()
	if info.NumRows != 1500 || info.StepsPerEpoch != (1500+15)/16 {
		t.Errorf("Info: %d rows, %d steps, want 1500 rows, %d steps", info.NumRows, info.StepsPerEpoch, (1500+15)/16)
	}
	if got := [3]int64{fs.Pruned.Load(), fs.Whole.Load(), fs.Evaluated.Load()}; got != [3]int64{10, 1, 1} {
		t.Errorf("row groups pruned, whole, evaluated = %v, want [10 1 1] (12 row groups of 1,000 rows: 9000..9999 whole, 10000..10499 half of one)", got)
	}
	ids, _ := streamIDs(t, p, req)
	all := slices.Concat(ids...)
	want := make([]int64, 0, 1500)
	for i := int64(9000); i < 10500; i++ {
		want = append(want, i)
	}
	if !slices.Equal(all, want) {
		t.Errorf("delivered %d ids (%v...), want 9000..10499", len(all), all[:min(len(all), 5)])
	}
	if fs.Cached.Load() == 0 || fs.Planned.Load() != 2 {
		t.Errorf("files planned %d, from the store %d: want 2 planned once, then from the store", fs.Planned.Load(), fs.Cached.Load())
	}
}

// TestFilterPiecesAgreeWithWholeRowGroups: a scattered filter, read in
// pieces under a small budget (pieces of kept rows map to physical row
// ranges), delivers exactly what reading whole row groups does, and both
// are the rows kept in dataset order, with and without a shuffle window.
func TestFilterPiecesAgreeWithWholeRowGroups(t *testing.T) {
	spec := filterSpec()
	dir := writeDataset(t, spec)
	var want []int64
	for id := range spec.Rows {
		if l := datagen.Label(spec.Seed, id); l < 300 || l == 999 {
			want = append(want, id)
		}
	}
	filters := `[[["label", "<", 300]], [["label", "==", 999]]]`
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	whole := newFilterPipeline(t, 1<<30, mem)
	pieces := newFilterPipeline(t, 64<<10, mem)
	req := filterRequest(dir, filters, 4)
	pl, err := pieces.planFor(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if pl.pieces.pieceRows == 0 || pl.pieces.pieceRows >= 1000 {
		t.Fatalf("the small budget's plan reads pieces of %d rows: want pieces smaller than a row group", pl.pieces.pieceRows)
	}
	a, na := streamIDs(t, whole, req)
	b, nb := streamIDs(t, pieces, req)
	if got := slices.Concat(a...); !slices.Equal(got, want) {
		t.Fatalf("whole row groups: %d ids delivered, want the %d kept by label < 300 or == 999", len(got), len(want))
	}
	if na != nb || !slices.EqualFunc(a, b, slices.Equal) {
		t.Fatalf("pieces deliver other rows than whole row groups (%d and %d steps)", nb, na)
	}
	if whole.FilterStats().Evaluated.Load() != 12 {
		t.Errorf("%d row groups evaluated, want all 12 (label is scattered)", whole.FilterStats().Evaluated.Load())
	}
	req.Shuffle, req.Seed = transport.Shuffle{Enabled: true, Window: 40}, 3
	a, _ = streamIDs(t, whole, req)
	b, _ = streamIDs(t, pieces, req)
	if !slices.EqualFunc(a, b, slices.Equal) {
		t.Errorf("shuffled: pieces deliver other rows than whole row groups")
	}
	got := slices.Concat(a...)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("shuffled: %d ids delivered, want the same %d rows kept", len(got), len(want))
	}
}

// TestFilterBadInput: a filter that does not fit the dataset fails when the
// request is planned, as InvalidArgument, naming the column and the file.
func TestFilterBadInput(t *testing.T) {
	dir := writeDataset(t, filterSpec())
	p := newFilterPipeline(t, 1<<30, memory.NewGoAllocator())
	for _, tc := range []struct {
		filters string
		want    []string
	}{
		{`[["nope", "==", 1]]`, []string{`"nope"`, "part-00000", "not found"}},
		{`[["id", "==", "7"]]`, []string{`"id"`, "part-00000", "string"}},
		{`[["label", "~", 1]]`, []string{`"label"`, `"~"`, "unknown"}},
		{`[["features", "==", 1]]`, []string{`"features"`, "part-00000", "not supported"}},
		{`[]`, []string{"empty"}},
		{`{"a": 1}`, []string{"list"}},
	} {
		_, err := p.Info(context.Background(), filterRequest(dir, tc.filters, 1))
		if err == nil || !(errors.Is(err, transport.ErrBadRequest) || errors.Is(err, filter.ErrInvalid)) {
			t.Errorf("filters %s: error %v, want InvalidArgument", tc.filters, err)
			continue
		}
		if missing := containsAll(err.Error(), tc.want...); len(missing) > 0 {
			t.Errorf("filters %s: error %q, want it to name %v", tc.filters, err, tc.want)
		}
	}
	_, err := p.Info(context.Background(), filterRequest(dir, `[["id", "<", 0]]`, 1))
	if err == nil || !strings.Contains(err.Error(), "no rows") {
		t.Errorf("a filter keeping nothing: %v, want an error saying the filters keep no rows", err)
	}
}

// TestTakeRuns: one run is a view; several are taken into new arrays, every
// column type of the dataset included.
func TestTakeRuns(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	b := array.NewRecordBuilder(mem, arrow.NewSchema([]arrow.Field{
		{Name: "i", Type: arrow.PrimitiveTypes.Int64},
		{Name: "s", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "l", Type: arrow.FixedSizeListOf(2, arrow.PrimitiveTypes.Float32)},
		{Name: "v", Type: arrow.ListOf(arrow.PrimitiveTypes.Int32)},
	}, nil))
	defer b.Release()
	for i := range 10 {
		b.Field(0).(*array.Int64Builder).Append(int64(i))
		if i%3 == 0 {
			b.Field(1).AppendNull()
		} else {
			b.Field(1).(*array.StringBuilder).Append(strings.Repeat("x", i))
		}
		lb := b.Field(2).(*array.FixedSizeListBuilder)
		lb.Append(true)
		lb.ValueBuilder().(*array.Float32Builder).AppendValues([]float32{float32(i), -float32(i)}, nil)
		vb := b.Field(3).(*array.ListBuilder)
		vb.Append(true)
		for j := range i % 4 {
			vb.ValueBuilder().(*array.Int32Builder).Append(int32(i*10 + j))
		}
	}
	rec := b.NewRecordBatch()
	defer rec.Release()
	view, err := takeRuns(rec, []filter.Run{{Lo: 2, Hi: 6}}, mem)
	if err != nil {
		t.Fatal(err)
	}
	if want := rec.NewSlice(2, 6); !array.RecordEqual(view, want) {
		t.Errorf("one run: %v, want rows 2..5", view)
	} else {
		want.Release()
	}
	view.Release()
	// Rows 0, 4, 5, 6 and 9 of rec, taken from rec and from a slice of it
	// (its arrays have an offset).
	checkTake(t, rec, rec, []filter.Run{{Lo: 0, Hi: 1}, {Lo: 4, Hi: 7}, {Lo: 9, Hi: 10}}, []int64{0, 4, 5, 6, 9}, mem)
	part := rec.NewSlice(3, 10)
	defer part.Release()
	checkTake(t, rec, part, []filter.Run{{Lo: 1, Hi: 4}, {Lo: 6, Hi: 7}}, []int64{4, 5, 6, 9}, mem)
}

// checkTake checks that takeRuns(in, runs) holds the rows of rec.
func checkTake(t *testing.T, rec, in arrow.RecordBatch, runs []filter.Run, rows []int64, mem memory.Allocator) {
	t.Helper()
	got, err := takeRuns(in, runs, mem)
	if err != nil {
		t.Fatal(err)
	}
	defer got.Release()
	if got.NumRows() != int64(len(rows)) {
		t.Fatalf("takeRuns(%v) has %d rows, want %d", runs, got.NumRows(), len(rows))
	}
	for i, row := range rows {
		one := rec.NewSlice(row, row+1)
		g := got.NewSlice(int64(i), int64(i+1))
		if !array.RecordEqual(g, one) {
			t.Errorf("row %d of the taken record is not row %d of the input", i, row)
		}
		one.Release()
		g.Release()
	}
}
