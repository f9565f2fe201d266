package batching

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// testSchema is the synthetic dataset: id is the global row number in dataset
// order; the other columns are functions of id, so a slice can be checked row by
// row whatever path (view, memcpy gather, concatenation, padding) built it.
var testSchema = arrow.NewSchema([]arrow.Field{
	{Name: "id", Type: arrow.PrimitiveTypes.Int64},
	{Name: "vec", Type: arrow.FixedSizeListOf(3, arrow.PrimitiveTypes.Float32)},
	{Name: "s", Type: arrow.BinaryTypes.String},
	{Name: "n", Type: arrow.PrimitiveTypes.Int32, Nullable: true}, // null when id % 7 == 3
	{Name: "flag", Type: arrow.FixedWidthTypes.Boolean},           // id % 3 == 0
}, nil)

// idOnlySchema has a single int64 column, for exact byte accounting.
var idOnlySchema = arrow.NewSchema([]arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int64}}, nil)

// makeRecord builds rows [first, first+n) of the synthetic dataset.
func makeRecord(mem memory.Allocator, sch *arrow.Schema, first, n int64) arrow.RecordBatch {
	bld := array.NewRecordBuilder(mem, sch)
	defer bld.Release()
	for i := first; i < first+n; i++ {
		bld.Field(0).(*array.Int64Builder).Append(i)
		if sch.NumFields() == 1 {
			continue
		}
		lb := bld.Field(1).(*array.FixedSizeListBuilder)
		lb.Append(true)
		vb := lb.ValueBuilder().(*array.Float32Builder)
		vb.AppendValues([]float32{float32(i), float32(i) + 0.5, -float32(i)}, nil)
		bld.Field(2).(*array.StringBuilder).Append(fmt.Sprintf("r%d", i))
		if i%7 == 3 {
			bld.Field(3).AppendNull()
		} else {
			bld.Field(3).(*array.Int32Builder).Append(int32(i))
		}
		bld.Field(4).(*array.BooleanBuilder).Append(i%3 == 0)
	}
	return bld.NewRecordBatch()
}

// checkSlice checks the shape, the consistency of every column with id, the
// zero padding and the mask of a slice, and returns the ids of its real rows.
func checkSlice(t *testing.T, rec arrow.RecordBatch, real, b int, mask string) []int64 {
	t.Helper()
	if rec.NumRows() != int64(b) {
		t.Fatalf("slice has %d rows, want b = %d", rec.NumRows(), b)
	}
	ncols := int(rec.NumCols())
	if mask != "" {
		if got := rec.Schema().Field(ncols - 1).Name; got != mask {
			t.Fatalf("last column = %q, want mask %q", got, mask)
		}
		m := rec.Column(ncols - 1).(*array.Boolean)
		for i := 0; i < b; i++ {
			if m.Value(i) != (i < real) {
				t.Fatalf("mask[%d] = %v, want %v (real %d)", i, m.Value(i), i < real, real)
			}
		}
		ncols--
	}
	ids := rec.Column(0).(*array.Int64)
	out := make([]int64, real)
	for i := 0; i < b; i++ {
		id := ids.Value(i)
		pad := i >= real
		if pad && id != 0 {
			t.Fatalf("padding row %d has id %d, want 0", i, id)
		}
		if i < real {
			out[i] = id
		}
		if ncols == 1 {
			continue
		}
		vec := rec.Column(1).(*array.FixedSizeList)
		vals := vec.ListValues().(*array.Float32)
		start, _ := vec.ValueOffsets(i)
		want := []float32{float32(id), float32(id) + 0.5, -float32(id)}
		if pad {
			want = []float32{0, 0, 0}
		}
		for j := 0; j < 3; j++ {
			if got := vals.Value(int(start) + j); got != want[j] {
				t.Fatalf("row %d (id %d) vec[%d] = %v, want %v", i, id, j, got, want[j])
			}
		}
		wantS := fmt.Sprintf("r%d", id)
		if pad {
			wantS = ""
		}
		if got := rec.Column(2).(*array.String).Value(i); got != wantS {
			t.Fatalf("row %d (id %d) s = %q, want %q", i, id, got, wantS)
		}
		n := rec.Column(3).(*array.Int32)
		wantNull := !pad && id%7 == 3
		if n.IsNull(i) != wantNull || (!wantNull && !pad && n.Value(i) != int32(id)) || (pad && n.Value(i) != 0) {
			t.Fatalf("row %d (id %d) n = %v (null %v), want %d (null %v)", i, id, n.Value(i), n.IsNull(i), id, wantNull)
		}
		if got := rec.Column(4).(*array.Boolean).Value(i); got != (!pad && id%3 == 0) {
			t.Fatalf("row %d (id %d) flag = %v", i, id, got)
		}
	}
	return out
}

// dataset is a synthetic dataset: row groups and the global id of their first row.
type dataset struct {
	rgs   []RowGroup
	first []int64
}

func newDataset(rows []int64, bytesPerRow int64) dataset {
	ds := dataset{rgs: make([]RowGroup, len(rows)), first: make([]int64, len(rows))}
	var n int64
	for i, r := range rows {
		ds.rgs[i] = RowGroup{File: i / 4, Index: i % 4, Rows: r, Bytes: r * bytesPerRow}
		ds.first[i] = n
		n += r
	}
	return ds
}

// streamRun is what one cutter produced.
type streamRun struct {
	ids      [][]int64 // per step from the start step: real ids
	reals    []int
	pushed   []Segment
	maxAlloc int // the allocator's peak CurrentAlloc during the run
	copied   int64
}

// runOptions tune runStream.
type runOptions struct {
	schema      *arrow.Schema
	segmentOnly func(i int) bool // push only the segment's rows for the i-th push
	cutterOpts  []CutterOption
	mask        string
}

// runStream drives a cutter over stream d from startStep the way a loader
// would: it builds a row group's record only when the cutter asks for it,
// pushes it, drops its own reference, and releases every slice after checking.
func runStream(t *testing.T, p *Plan, ds dataset, epoch, d, start int, mem *memory.CheckedAllocator, o runOptions) streamRun {
	t.Helper()
	if o.schema == nil {
		o.schema = testSchema
	}
	c, err := NewCutter(p, epoch, d, start, mem, append([]CutterOption{WithSchema(o.schema)}, o.cutterOpts...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Release()
	var r streamRun
	mask := ""
	if p.Config().Policy == Pad {
		mask = DefaultMaskColumn
		if o.mask != "" {
			mask = o.mask
		}
	}
	for guard := 0; ; guard++ {
		if guard > 1<<20 {
			t.Fatal("cutter does not progress")
		}
		rec, real, ok, err := c.Next()
		if err != nil {
			t.Fatalf("stream %d step %d: Next: %v", d, c.Step(), err)
		}
		r.maxAlloc = max(r.maxAlloc, mem.CurrentAlloc())
		if ok {
			if want := p.SliceReal(start+len(r.ids), d); real != want {
				t.Fatalf("stream %d step %d: real = %d, want %d", d, start+len(r.ids), real, want)
			}
			r.ids = append(r.ids, checkSlice(t, rec, real, p.SliceRows(), mask))
			r.reals = append(r.reals, real)
			rec.Release()
			continue
		}
		if c.Done() {
			break
		}
		seg, ok := c.Wants()
		if !ok {
			t.Fatalf("stream %d step %d: Next needs input but Wants has none", d, c.Step())
		}
		rg := ds.rgs[seg.RowGroup]
		var in arrow.RecordBatch
		if o.segmentOnly != nil && o.segmentOnly(len(r.pushed)) {
			in = makeRecord(mem, o.schema, ds.first[seg.RowGroup]+seg.Start, seg.Len())
		} else {
			in = makeRecord(mem, o.schema, ds.first[seg.RowGroup], rg.Rows)
		}
		if err := c.Push(in, seg); err != nil {
			t.Fatal(err)
		}
		in.Release()
		r.pushed = append(r.pushed, seg)
		r.maxAlloc = max(r.maxAlloc, mem.CurrentAlloc())
	}
	if got := start + len(r.ids); got != p.StepsPerEpoch() {
		t.Fatalf("stream %d produced steps %d..%d, want up to %d", d, start, got, p.StepsPerEpoch())
	}
	if _, ok := c.Wants(); ok {
		t.Errorf("stream %d from step %d: done but still wants a segment (pushed %v, stream %v, read end %d)", d, start, r.pushed, p.Stream(epoch, d), p.ReadEnd(d))
	}
	// Plan.SourceRow names the dataset row of every real row delivered.
	for j, ids := range r.ids {
		for i, id := range ids {
			g, row, ok := p.SourceRow(epoch, d, int64((start+j)*p.SliceRows()+i))
			if !ok || ds.first[g]+row != id {
				t.Fatalf("stream %d step %d row %d: SourceRow = (%d, %d, %v), but the cutter delivered row %d", d, start+j, i, g, row, ok, id)
			}
		}
	}
	// The read set a reader fetches for this cutter (Plan.StreamReads) is
	// exactly the row groups it asked for, in order.
	reads := p.StreamReads(Position{Epoch: epoch, Step: start}, d)
	if len(reads) != len(r.pushed) {
		t.Fatalf("stream %d from step %d: StreamReads = %v, but the cutter asked for %v", d, start, reads, r.pushed)
	}
	for i, g := range reads {
		if r.pushed[i].RowGroup != g {
			t.Fatalf("stream %d from step %d: StreamReads = %v, but the cutter asked for %v", d, start, reads, r.pushed)
		}
	}
	r.copied = c.CopiedBytes()
	return r
}

// TestSliceSchema: the mask column is appended under Pad only, and a
// dataset column of the mask's name is refused.
func TestSliceSchema(t *testing.T) {
	in := arrow.NewSchema([]arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int64}}, nil)
	for _, tc := range []struct {
		policy  Policy
		mask    string
		want    []string
		wantErr error
	}{
		{Drop, "valid", []string{"id"}, nil},
		{Raise, "valid", []string{"id"}, nil},
		{Pad, "valid", []string{"id", "valid"}, nil},
		{Pad, "m", []string{"id", "m"}, nil},
		{Pad, "id", nil, ErrMaskColumnExists},
	} {
		got, err := SliceSchema(in, tc.policy, tc.mask)
		if tc.wantErr != nil {
			if !errors.Is(err, tc.wantErr) {
				t.Errorf("SliceSchema(%v, %q) = %v, want %v", tc.policy, tc.mask, err, tc.wantErr)
			}
			continue
		}
		var names []string
		for _, f := range got.Fields() {
			names = append(names, f.Name)
		}
		if err != nil || !slices.Equal(names, tc.want) {
			t.Errorf("SliceSchema(%v, %q) = %v, %v; want fields %v", tc.policy, tc.mask, names, err, tc.want)
		}
		if tc.policy == Pad && got.Field(1).Type.ID() != arrow.BOOL {
			t.Errorf("SliceSchema(pad): mask type %v, want bool", got.Field(1).Type)
		}
	}
}

// expectedSlices computes, independently of the cutter, the real ids of every
// slice of an epoch: exp[step][d]. It uses the plan only for the row group order
// and the window permutations, which are pinned by golden tests.
func expectedSlices(p *Plan, ds dataset, epoch int) [][][]int64 {
	cfg := p.Config()
	var seq []int64
	for _, g := range p.RowGroupOrder(epoch) {
		for r := int64(0); r < ds.rgs[g].Rows; r++ {
			seq = append(seq, ds.first[g]+r)
		}
	}
	n := int64(len(seq))
	dd := int64(cfg.D)
	b := int64(cfg.GlobalBatch / cfg.D)
	exp := make([][][]int64, p.StepsPerEpoch())
	for i := range exp {
		exp[i] = make([][]int64, cfg.D)
	}
	var at int64
	for d := int64(0); d < dd; d++ {
		l := n / dd
		if d < n%dd {
			l++
		}
		stream := slices.Clone(seq[at : at+l])
		at += l
		if w := cfg.Window; w > 0 {
			perm := slices.Clone(stream)
			for k := int64(0); k*w < l; k++ {
				for i, src := range p.WindowPerm(epoch, int(d), int(k)) {
					perm[k*w+int64(i)] = stream[k*w+int64(src)]
				}
			}
			stream = perm
		}
		for s := range exp {
			lo, hi := min(int64(s)*b, l), min(int64(s+1)*b, l)
			exp[s][d] = stream[lo:hi]
		}
	}
	return exp
}

func TestCutterByHand(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	// Row groups of 3, 0, 5, 2 rows; D = 2, b = 2, pad: streams [0, 5) and
	// [5, 10); 3 steps; stream 0 step 2 has 1 real row, stream 1 too.
	ds := newDataset([]int64{3, 0, 5, 2}, 8)
	p, err := NewPlan(ds.rgs, Config{GlobalBatch: 4, D: 2, Policy: Pad})
	if err != nil {
		t.Fatal(err)
	}
	want := [][][]int64{{{0, 1}, {2, 3}, {4}}, {{5, 6}, {7, 8}, {9}}}
	for d := 0; d < 2; d++ {
		r := runStream(t, p, ds, 0, d, 0, mem, runOptions{})
		for s := range want[d] {
			if !slices.Equal(r.ids[s], want[d][s]) {
				t.Errorf("stream %d step %d ids = %v, want %v", d, s, r.ids[s], want[d][s])
			}
		}
	}
}

func TestCutterErrors(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	ds := newDataset([]int64{4, 4}, 8)
	p, err := NewPlan(ds.rgs, Config{GlobalBatch: 2, D: 1, Policy: Pad})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewCutter(p, 0, 1, 0, mem); !errors.Is(err, ErrInvalidPosition) {
		t.Errorf("NewCutter(stream 1 of 1) = %v, want ErrInvalidPosition", err)
	}
	if _, err := NewCutter(p, 0, 0, 5, mem); !errors.Is(err, ErrInvalidPosition) {
		t.Errorf("NewCutter(step 5 of 4) = %v, want ErrInvalidPosition", err)
	}
	c, err := NewCutter(p, 0, 0, 0, mem)
	if err != nil {
		t.Fatal(err)
	}
	rec := makeRecord(mem, testSchema, 4, 4)
	if err := c.Push(rec, Segment{RowGroup: 1, Start: 0, End: 4}); !errors.Is(err, ErrUnexpectedSegment) {
		t.Errorf("Push(row group 1 first) = %v, want ErrUnexpectedSegment", err)
	}
	short := makeRecord(mem, testSchema, 0, 3)
	if err := c.Push(short, Segment{RowGroup: 0, Start: 0, End: 4}); !errors.Is(err, ErrUnexpectedSegment) {
		t.Errorf("Push(3-row record for a 4-row group) = %v, want ErrUnexpectedSegment", err)
	}
	other := makeRecord(mem, idOnlySchema, 0, 4)
	if err := c.Push(other, Segment{RowGroup: 0, Start: 0, End: 4}); err != nil {
		t.Errorf("Push(first record) = %v", err)
	}
	if err := c.Push(rec, Segment{RowGroup: 1, Start: 0, End: 4}); !errors.Is(err, ErrSchemaMismatch) {
		t.Errorf("Push(other schema) = %v, want ErrSchemaMismatch", err)
	}
	c.Release()
	if _, _, _, err := c.Next(); !errors.Is(err, ErrCutterClosed) {
		t.Errorf("Next after Release = %v, want ErrCutterClosed", err)
	}
	for _, r := range []arrow.RecordBatch{rec, short, other} {
		r.Release()
	}
	// The data has a column named like the mask.
	c, _ = NewCutter(p, 0, 0, 0, mem, WithMaskColumn("id"))
	rec = makeRecord(mem, testSchema, 0, 4)
	if err := c.Push(rec, Segment{RowGroup: 0, Start: 0, End: 4}); !errors.Is(err, ErrMaskColumnExists) {
		t.Errorf("Push with mask column %q = %v, want ErrMaskColumnExists", "id", err)
	}
	rec.Release()
	c.Release()
}

// TestCutterAllPadding: N = 3, D = 4 under pad: stream 3 has no rows at all, so
// its only slice is padding, produced from the schema given by WithSchema.
func TestCutterAllPadding(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	ds := newDataset([]int64{3}, 8)
	p, err := NewPlan(ds.rgs, Config{GlobalBatch: 8, D: 4, Policy: Pad})
	if err != nil {
		t.Fatal(err)
	}
	r := runStream(t, p, ds, 0, 3, 0, mem, runOptions{cutterOpts: []CutterOption{WithSchema(testSchema), WithMaskColumn("m")}, mask: "m"})
	if len(r.ids) != 1 || len(r.ids[0]) != 0 || len(r.pushed) != 0 {
		t.Errorf("stream 3: ids %v pushed %v, want one all-padding slice and nothing read", r.ids, r.pushed)
	}
	c, _ := NewCutter(p, 0, 3, 0, mem)
	defer c.Release()
	if _, _, _, err := c.Next(); !errors.Is(err, ErrNoSchema) {
		t.Errorf("all-padding slice without schema: Next = %v, want an error asking for WithSchema", err)
	}
}

// TestCutterZeroCopy: W = 0, row groups a multiple of b: every slice is a view,
// nothing is copied and Next allocates no column memory.
func TestCutterZeroCopy(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	ds := newDataset([]int64{64, 32, 96}, 8)
	p, err := NewPlan(ds.rgs, Config{GlobalBatch: 32, D: 1, Policy: Drop})
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewCutter(p, 0, 0, 0, mem)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Release()
	var got []int64
	for !c.Done() {
		before := mem.CurrentAlloc()
		rec, real, ok, err := c.Next()
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			seg, _ := c.Wants()
			in := makeRecord(mem, idOnlySchema, ds.first[seg.RowGroup], ds.rgs[seg.RowGroup].Rows)
			if err := c.Push(in, seg); err != nil {
				t.Fatal(err)
			}
			in.Release()
			continue
		}
		if after := mem.CurrentAlloc(); after > before {
			t.Errorf("step %d: Next allocated %d bytes, want 0 (zero-copy view)", c.Step()-1, after-before)
		}
		got = append(got, checkSlice(t, rec, real, 32, "")...)
		rec.Release()
	}
	if c.CopiedBytes() != 0 {
		t.Errorf("CopiedBytes = %d, want 0", c.CopiedBytes())
	}
	for i, id := range got {
		if id != int64(i) {
			t.Fatalf("id %d = %d, want %d", i, id, i)
		}
	}
}

// TestCutterStraddle: with W = 0, exactly the slices that cross a row group
// boundary are copied, once: 8 bytes per row of the int64 column.
func TestCutterStraddle(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	rows := []int64{10, 3, 1, 20, 6}
	ds := newDataset(rows, 8)
	const b = 4
	p, err := NewPlan(ds.rgs, Config{GlobalBatch: b, D: 1, Policy: Drop})
	if err != nil {
		t.Fatal(err)
	}
	// Boundaries at 10, 13, 14, 34; slices [8,12) [12,16) [32,36) straddle.
	r := runStream(t, p, ds, 0, 0, 0, mem, runOptions{schema: idOnlySchema})
	if want := int64(3 * b * 8); r.copied != want {
		t.Errorf("CopiedBytes = %d, want %d (3 straddling slices of %d int64 rows)", r.copied, want, b)
	}
}

// fslInt16 builds a fixed_size_list<int16>[2] of 5 rows [i, -i]; row 2 is null;
// with childNull the second value of row 3 is null.
func fslInt16(mem memory.Allocator, childNull bool) arrow.Array {
	bld := array.NewFixedSizeListBuilder(mem, 2, arrow.PrimitiveTypes.Int16)
	defer bld.Release()
	vb := bld.ValueBuilder().(*array.Int16Builder)
	for i := int16(0); i < 5; i++ {
		if i == 2 {
			bld.AppendNull() // appends two child values itself
			continue
		}
		bld.Append(true)
		vb.AppendValues([]int16{i, -i}, []bool{true, !childNull || i != 3})
	}
	return bld.NewArray()
}

func TestGatherFixedSizeList(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	dt := arrow.FixedSizeListOf(2, arrow.PrimitiveTypes.Int16)
	for _, tt := range []struct {
		childNull bool
		want      string
	}{
		{true, `[[3 (null)] (null) [4 -4] [1 -1] [4 -4]]`}, // concatenation fallback
		{false, `[[3 -3] (null) [4 -4] [1 -1] [4 -4]]`},    // memcpy path
	} {
		arr := fslInt16(mem, tt.childNull)
		sl := array.NewSlice(arr, 1, 5) // offset 1: rows 1..4
		// sl rows 2, 3 (= arr rows 3, 4), sl row 1 (arr row 2, null), sl row 0, arr row 4.
		runs := []run{{src: 0, row: 2, n: 1}, {src: 0, row: 1, n: 1}, {src: 0, row: 3, n: 1}, {src: 0, row: 0, n: 1}, {src: 1, row: 4, n: 1}}
		got, err := gatherColumn(mem, dt, []arrow.Array{sl, arr}, runs, 5)
		if err != nil {
			t.Fatal(err)
		}
		if s := fmt.Sprint(got); s != tt.want {
			t.Errorf("gather (child nulls %v) = %s, want %s", tt.childNull, s, tt.want)
		}
		got.Release()
		sl.Release()
		arr.Release()
	}
	for _, tt := range []struct {
		dt arrow.DataType
		ok bool
	}{
		{dt, true},
		{arrow.PrimitiveTypes.Float64, true},
		{&arrow.FixedSizeBinaryType{ByteWidth: 16}, true},
		{arrow.FixedWidthTypes.Boolean, false},
		{arrow.BinaryTypes.String, false},
		{arrow.ListOf(arrow.PrimitiveTypes.Int8), false},
		{arrow.BinaryTypes.StringView, false},
		{arrow.StructOf(arrow.Field{Name: "a", Type: arrow.PrimitiveTypes.Int8}), false},
		{arrow.FixedSizeListOf(2, arrow.FixedSizeListOf(2, arrow.PrimitiveTypes.Int8)), false},
	} {
		if _, _, _, ok := fixedWidth(tt.dt); ok != tt.ok {
			t.Errorf("fixedWidth(%v) = %v, want %v", tt.dt, ok, tt.ok)
		}
	}
}

// runPieces drives a cutter over stream d from step start the way a
// piecewise reader would: it takes the cutter's Reads(maxRows), splits every
// range again at random rows (pieces of random sizes), and pushes each piece
// when Next asks for input, as the piece's rows alone or, at random, inside
// the whole row group's record. It returns the real ids per step and the
// most bytes held at once.
func runPieces(t *testing.T, r *rand.Rand, p *Plan, ds dataset, epoch, d, start int, maxRows int64, mem *memory.CheckedAllocator) ([][]int64, int) {
	t.Helper()
	c, err := NewCutter(p, epoch, d, start, mem, WithSchema(testSchema))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Release()
	reads := c.Reads(maxRows)
	var queue []Segment
	for _, s := range reads {
		if maxRows > 0 && s.Len() > maxRows {
			t.Fatalf("stream %d: Reads(%d) gave %v, longer than %d rows", d, maxRows, s, maxRows)
		}
		for s.Len() > 0 {
			n := r.Int64N(s.Len()) + 1
			queue = append(queue, Segment{RowGroup: s.RowGroup, Start: s.Start, End: s.Start + n})
			s.Start += n
		}
	}
	mask := ""
	if p.Config().Policy == Pad {
		mask = DefaultMaskColumn
	}
	var ids [][]int64
	peak := 0
	for guard := 0; ; guard++ {
		if guard > 1<<20 {
			t.Fatal("cutter does not progress")
		}
		rec, real, ok, err := c.Next()
		if err != nil {
			t.Fatalf("stream %d step %d: Next: %v", d, c.Step(), err)
		}
		peak = max(peak, mem.CurrentAlloc())
		if ok {
			ids = append(ids, checkSlice(t, rec, real, p.SliceRows(), mask))
			rec.Release()
			continue
		}
		if c.Done() {
			break
		}
		want, ok := c.Wants()
		if !ok || len(queue) == 0 {
			t.Fatalf("stream %d step %d: Next needs input, Wants = %v %v, %d pieces left", d, c.Step(), want, ok, len(queue))
		}
		seg := queue[0]
		queue = queue[1:]
		if seg.RowGroup != want.RowGroup || seg.End > want.End || seg.Start < want.Start {
			t.Fatalf("stream %d: piece %v is not inside what Wants names, %v", d, seg, want)
		}
		if r.IntN(4) == 0 {
			// Rows before the ones needed may come along: from the start
			// of what Wants names (before the first push of a segment, the
			// whole segment, which may start before the read start).
			seg.Start = want.Start
		}
		var in arrow.RecordBatch
		if r.IntN(4) == 0 {
			in = makeRecord(mem, testSchema, ds.first[seg.RowGroup], ds.rgs[seg.RowGroup].Rows)
		} else {
			in = makeRecord(mem, testSchema, ds.first[seg.RowGroup]+seg.Start, seg.Len())
		}
		if err := c.Push(in, seg); err != nil {
			t.Fatalf("stream %d: push %v: %v", d, seg, err)
		}
		in.Release()
		peak = max(peak, mem.CurrentAlloc())
	}
	if len(queue) != 0 {
		t.Fatalf("stream %d: done with %d pieces of Reads left: %v", d, len(queue), queue)
	}
	if _, ok := c.Wants(); ok {
		t.Fatalf("stream %d: done but still wants input", d)
	}
	return ids, peak
}

// TestCutterPieces: a cutter fed its rows in consecutive pieces of random
// sizes (random maxRows for Reads, then random cuts inside each range)
// delivers exactly the slices of the independent model, for random plans:
// every policy, W = 0 and W > 0, from step 0 and resumed at a random step.
// It also holds the memory bound in rows: one window or slice, two pieces
// (here at most two row groups), the carried and returned slices.
func TestCutterPieces(t *testing.T) {
	seed := testSeed(t)
	r := rand.New(rand.NewPCG(seed, seed^0x9ec5))
	iters := 150
	if testing.Short() {
		iters = 40
	}
	done := 0
	for it := 0; done < iters && it < 20*iters; it++ {
		rows := randomRows(r)
		var n int64
		for _, x := range rows {
			n += x
		}
		if n == 0 {
			continue
		}
		cfg := randomConfig(r, n)
		ds := newDataset(rows, 10)
		p, err := NewPlan(ds.rgs, cfg)
		if err != nil {
			continue // the plan's own errors are TestPlanProperties' business
		}
		done++
		mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
		epoch := r.IntN(3)
		exp := expectedSlices(p, ds, epoch)
		for d := 0; d < cfg.D; d++ {
			start := 0
			if r.IntN(3) == 0 {
				start = r.IntN(p.StepsPerEpoch() + 1)
			}
			maxRows := []int64{0, 1, int64(p.SliceRows()), int64(r.IntN(3*p.SliceRows()) + 1)}[r.IntN(4)]
			ids, _ := runPieces(t, r, p, ds, epoch, d, start, maxRows, mem)
			if len(ids) != p.StepsPerEpoch()-start {
				t.Fatalf("iter %d cfg %s stream %d from step %d: %d steps, want %d", it, fmtCfg(cfg), d, start, len(ids), p.StepsPerEpoch()-start)
			}
			for i, got := range ids {
				if s := start + i; !slices.Equal(got, exp[s][d]) {
					t.Fatalf("iter %d rows %s cfg %s stream %d (from step %d, maxRows %d) step %d = %v, want %v",
						it, fmtInts(rows), fmtCfg(cfg), d, start, maxRows, s, got, exp[s][d])
				}
			}
		}
		mem.AssertSize(t, 0)
	}
}

// TestCutterPiecesMemory: large row groups pushed in pieces of one slice
// hold about a slice (plus the window), not a row group.
func TestCutterPiecesMemory(t *testing.T) {
	ds := newDataset([]int64{2000, 3000, 2500}, 10)
	for _, w := range []int64{0, 40} {
		mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
		p, err := NewPlan(ds.rgs, Config{GlobalBatch: 32, D: 2, Window: w, Seed: 5, ShuffleRowGroups: true, Policy: Pad})
		if err != nil {
			t.Fatal(err)
		}
		perRow := maxBytesPerRow(mem, ds)
		// Pieces pushed as their own rows only: a whole row group's record
		// is a row group by definition.
		c, err := NewCutter(p, 0, 1, 0, mem, WithSchema(testSchema))
		if err != nil {
			t.Fatal(err)
		}
		queue := c.Reads(16)
		peak := 0
		for !c.Done() {
			rec, _, ok, err := c.Next()
			if err != nil {
				t.Fatal(err)
			}
			peak = max(peak, mem.CurrentAlloc())
			if ok {
				rec.Release()
				continue
			}
			seg := queue[0]
			queue = queue[1:]
			in := makeRecord(mem, testSchema, ds.first[seg.RowGroup]+seg.Start, seg.Len())
			if err := c.Push(in, seg); err != nil {
				t.Fatal(err)
			}
			in.Release()
		}
		c.Release()
		bound := (w + 2*16 + 2*16 + 16) * perRow
		if int64(peak) > bound+4096 {
			t.Errorf("W=%d: peak %d bytes, want <= %d (a row group is %d)", w, peak, bound, 2000*perRow)
		}
		mem.AssertSize(t, 0)
	}
}

// TestCutterPieceErrors: a piece that leaves a gap, repeats only rows
// already pushed, or runs past its segment is refused; Wants names the rest.
func TestCutterPieceErrors(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	ds := newDataset([]int64{10, 10}, 8)
	p, err := NewPlan(ds.rgs, Config{GlobalBatch: 4, D: 1, Policy: Drop})
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewCutter(p, 0, 0, 0, mem, WithSchema(idOnlySchema))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Release()
	push := func(s Segment) error {
		in := makeRecord(mem, idOnlySchema, ds.first[s.RowGroup]+s.Start, s.Len())
		defer in.Release()
		return c.Push(in, s)
	}
	g := p.Stream(0, 0)[0].RowGroup
	if err := push(Segment{RowGroup: g, Start: 2, End: 5}); !errors.Is(err, ErrUnexpectedSegment) {
		t.Fatalf("piece with a gap: %v, want ErrUnexpectedSegment", err)
	}
	if err := push(Segment{RowGroup: g, Start: 0, End: 3}); err != nil {
		t.Fatal(err)
	}
	if w, _ := c.Wants(); w != (Segment{RowGroup: g, Start: 3, End: 10}) {
		t.Fatalf("Wants after rows [0, 3) = %v, want rows [3, 10)", w)
	}
	if err := push(Segment{RowGroup: g, Start: 1, End: 3}); !errors.Is(err, ErrUnexpectedSegment) {
		t.Fatalf("piece of rows already pushed: %v, want ErrUnexpectedSegment", err)
	}
	if err := push(Segment{RowGroup: g, Start: 4, End: 6}); !errors.Is(err, ErrUnexpectedSegment) {
		t.Fatalf("piece with a gap: %v, want ErrUnexpectedSegment", err)
	}
	big := makeRecord(mem, idOnlySchema, 0, 12)
	defer big.Release()
	if err := c.Push(big, Segment{RowGroup: g, Start: 3, End: 15}); !errors.Is(err, ErrUnexpectedSegment) {
		t.Fatalf("piece past the segment: %v, want ErrUnexpectedSegment", err)
	}
	// Overlapping rows before the ones needed are trimmed.
	if err := push(Segment{RowGroup: g, Start: 1, End: 10}); err != nil {
		t.Fatalf("overlapping piece: %v", err)
	}
	if w, _ := c.Wants(); w.RowGroup == g {
		t.Fatalf("segment complete, but Wants = %v", w)
	}
}

// dirtyAllocator hands out AllocateUninitialized memory filled with garbage,
// as the server's shared-memory arena may, and counts those calls.
type dirtyAllocator struct {
	*memory.CheckedAllocator
	uninit int
}

func (d *dirtyAllocator) AllocateUninitialized(n int) []byte {
	d.uninit++
	b := d.Allocate(n)
	for i := range b {
		b[i] = 0xa5
	}
	return b
}

// The gather writes every byte of its values buffer, so it takes it
// uninitialized where the allocator offers that (no clearing per step), and
// the garbage in it never shows.
func TestGatherFixedUninitialized(t *testing.T) {
	mem := &dirtyAllocator{CheckedAllocator: memory.NewCheckedAllocator(memory.NewGoAllocator())}
	defer mem.AssertSize(t, 0)
	for _, idNull := range []bool{false, true} {
		bld := array.NewFixedSizeListBuilder(mem, 2, arrow.PrimitiveTypes.Int16)
		vb := bld.ValueBuilder().(*array.Int16Builder)
		for i := int16(0); i < 5; i++ {
			bld.Append(true)
			vb.AppendValues([]int16{i, -i}, nil)
		}
		arr := bld.NewArray()
		bld.Release()
		ids := array.NewInt64Builder(mem)
		ids.AppendValues([]int64{10, 11, 12, 13, 14}, []bool{true, true, !idNull, true, true})
		id := ids.NewArray()
		ids.Release()
		runs := []run{{src: 0, row: 4, n: 1}, {src: 0, row: 0, n: 2}, {src: 0, row: 3, n: 1}}
		before := mem.uninit
		got, err := gatherColumn(mem, arr.DataType(), []arrow.Array{arr}, runs, 4)
		if err != nil {
			t.Fatal(err)
		}
		gotID, err := gatherColumn(mem, id.DataType(), []arrow.Array{id}, runs, 4)
		if err != nil {
			t.Fatal(err)
		}
		if mem.uninit-before != 2 {
			t.Errorf("%d uninitialized values buffers, want 2 (one per column)", mem.uninit-before)
		}
		if s, want := fmt.Sprint(got), `[[4 -4] [0 0] [1 -1] [3 -3]]`; s != want {
			t.Errorf("gather = %s, want %s", s, want)
		}
		want := `[14 10 11 13]` // row 2, null when idNull, is not gathered
		if s := fmt.Sprint(gotID); s != want {
			t.Errorf("gather of ids = %s, want %s", s, want)
		}
		got.Release()
		gotID.Release()
		id.Release()
		arr.Release()
	}
}
