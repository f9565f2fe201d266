package transport

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"testing"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/float16"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// concatSchema is the schema of the slices of the virtual concatenation
// tests: the common step columns, and the pad mask when mask is set.
func concatSchema(k int, mask bool) *arrow.Schema {
	fields := []arrow.Field{
		{Name: "features", Type: arrow.FixedSizeListOf(int32(k), arrow.PrimitiveTypes.Float32)},
		{Name: "label", Type: arrow.PrimitiveTypes.Int32},
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "half", Type: arrow.FixedWidthTypes.Float16},
	}
	if mask {
		fields = append(fields, arrow.Field{Name: "mask", Type: arrow.FixedWidthTypes.Boolean})
	}
	return arrow.NewSchema(fields, nil)
}

// concatParent builds n rows of concatSchema(k, false) (no nulls) from rng.
func concatParent(mem memory.Allocator, rng *rand.Rand, n, k int) arrow.RecordBatch {
	b := array.NewRecordBuilder(mem, concatSchema(k, false))
	defer b.Release()
	fsl := b.Field(0).(*array.FixedSizeListBuilder)
	vals := fsl.ValueBuilder().(*array.Float32Builder)
	for range n {
		fsl.Append(true)
		for range k {
			vals.Append(rng.Float32())
		}
		b.Field(1).(*array.Int32Builder).Append(rng.Int32())
		b.Field(2).(*array.Int64Builder).Append(rng.Int64())
		b.Field(3).(*array.Float16Builder).Append(float16.New(rng.Float32()))
	}
	return b.NewRecordBatch()
}

// freshMask builds a boolean column of n random rows, offset 0.
func freshMask(mem memory.Allocator, rng *rand.Rand, n int) arrow.Array {
	b := array.NewBooleanBuilder(mem)
	defer b.Release()
	for range n {
		b.Append(rng.IntN(2) == 0)
	}
	return b.NewArray()
}

// concatPart returns rows [off, off+n) of parent as a record of schema,
// with a fresh mask of n rows appended when schema has one.
func concatPart(mem memory.Allocator, rng *rand.Rand, schema *arrow.Schema, parent arrow.RecordBatch, off, n int) arrow.RecordBatch {
	sl := parent.NewSlice(int64(off), int64(off+n))
	defer sl.Release()
	cols := slices.Clone(sl.Columns())
	if schema.NumFields() > len(cols) {
		m := freshMask(mem, rng, n)
		defer m.Release()
		cols = append(cols, m)
	}
	return array.NewRecordBatch(schema, cols, int64(n))
}

// concatenated returns parts concatenated column by column with
// array.Concatenate: the record the stock writer is compared on.
func concatenated(t *testing.T, mem memory.Allocator, schema *arrow.Schema, parts []arrow.RecordBatch) arrow.RecordBatch {
	t.Helper()
	cols := make([]arrow.Array, schema.NumFields())
	var rows int64
	for _, p := range parts {
		rows += p.NumRows()
	}
	for j := range cols {
		arrs := make([]arrow.Array, len(parts))
		for i, p := range parts {
			arrs[i] = p.Column(j)
		}
		c, err := array.Concatenate(arrs, mem)
		if err != nil {
			t.Fatalf("array.Concatenate column %d: %v", j, err)
		}
		defer c.Release()
		cols[j] = c
	}
	return array.NewRecordBatch(schema, cols, rows)
}

// multiFrameBytes encodes m as the zero-copy writer does and returns the
// frame's bytes and whether the body was sent virtually (not from a built
// concatenation). The frame's release must run once it is freed.
func multiFrameBytes(t *testing.T, mem memory.Allocator, m *multiRecord, appMeta []byte) ([]byte, bool) {
	t.Helper()
	payload, body, err := m.payload([]ipc.Option{ipc.WithAllocator(mem)})
	if err != nil {
		t.Fatalf("multiRecord.payload: %v", err)
	}
	var released atomic.Int32
	f, err := newFrameBody(payload, body, appMeta, func() { released.Add(1) })
	if err != nil {
		t.Fatalf("newFrameBody: %v", err)
	}
	got := f.bufs.Materialize()
	if f.size != len(got) {
		t.Errorf("frame size %d, want %d", f.size, len(got))
	}
	f.free()
	if n := released.Load(); n != 1 {
		t.Errorf("release ran %d times after free, want 1", n)
	}
	return got, body != nil
}

// compareMulti checks that the frame of the virtual concatenation of parts
// is byte for byte the stock writer's message for the concatenated record,
// and that m's columns are that record's. It takes over parts.
func compareMulti(t *testing.T, mem memory.Allocator, name string, schema *arrow.Schema, parts []arrow.RecordBatch) {
	t.Helper()
	want := concatenated(t, mem, schema, parts)
	defer want.Release()
	m := newMultiRecord(schema, parts, mem)
	if m == nil {
		for _, p := range parts {
			p.Release()
		}
		t.Fatalf("%s: newMultiRecord = nil, want a virtual concatenation", name)
	}
	defer m.Release()
	if m.NumRows() != want.NumRows() || recordBytes(m) != recordBytes(want) {
		t.Errorf("%s: %d rows, %d bytes; want %d, %d", name, m.NumRows(), recordBytes(m), want.NumRows(), recordBytes(want))
	}
	for _, appMeta := range [][]byte{nil, []byte(`{"epoch":1,"step":7,"slices":[0,1],"real_rows":[8,8]}`)} {
		wantBytes := stockBytes(t, mem, want, appMeta)
		got, virtual := multiFrameBytes(t, mem, m, appMeta)
		if !virtual {
			t.Errorf("%s: the encoder's layout differed and the slices were concatenated", name)
		}
		if !bytes.Equal(got, wantBytes) {
			i := 0
			for i < len(got) && i < len(wantBytes) && got[i] == wantBytes[i] {
				i++
			}
			t.Errorf("%s (app_metadata %q): frame = %d bytes, stock = %d bytes, first difference at byte %d", name, appMeta, len(got), len(wantBytes), i)
		}
	}
	// The columns, built on demand, are the concatenation.
	if !array.RecordEqual(m, want) {
		t.Errorf("%s: the multiRecord's columns differ from the concatenated record", name)
	}
}

// TestMultiRecordBytes compares the virtual concatenation of random slices
// (random offsets into random parents; fixed_size_list<float32>, int32,
// int64, float16 and a fresh boolean mask of a multiple of 8 rows) with the
// stock writer's encoding of the concatenated record.
func TestMultiRecordBytes(t *testing.T) {
	seed := testSeed(t)
	rng := rand.New(rand.NewPCG(seed, 1))
	mem := checkedMem(t)
	for trial := range 40 {
		k := 1 + rng.IntN(24)
		withMask := rng.IntN(3) > 0
		schema := concatSchema(k, withMask)
		d := 2 + rng.IntN(4)
		var b int
		switch {
		case withMask:
			b = 8 * (1 + rng.IntN(400))
		case trial%2 == 0:
			b = 1 + rng.IntN(60) // odd lengths: padding after every column
		default:
			b = 1 + rng.IntN(3000)
		}
		parents := make([]arrow.RecordBatch, 1+rng.IntN(3))
		for i := range parents {
			parents[i] = concatParent(mem, rng, b+rng.IntN(6000), k)
		}
		parts := make([]arrow.RecordBatch, d)
		desc := ""
		for i := range parts {
			p := parents[rng.IntN(len(parents))]
			off := rng.IntN(int(p.NumRows()) - b + 1)
			parts[i] = concatPart(mem, rng, schema, p, off, b)
			desc += fmt.Sprintf(" [%d,+%d)", off, b)
		}
		compareMulti(t, mem, fmt.Sprintf("trial %d (k=%d mask=%v):%s", trial, k, withMask, desc), schema, parts)
		for _, p := range parents {
			p.Release()
		}
	}
}

// TestMultiRecordBorrows checks that the frame of a virtual concatenation
// hands gRPC the slices' own buffers: the body of each large column is the
// parents' bytes at the slices' offsets, not a copy.
func TestMultiRecordBorrows(t *testing.T) {
	mem := checkedMem(t)
	rng := rand.New(rand.NewPCG(3, 4))
	const k, b = 16, 4096 // 256 KiB of features and 32 KiB of ids a slice
	schema := concatSchema(k, true)
	parent := concatParent(mem, rng, 3*b, k)
	defer parent.Release()
	offs := []int{5, b + 3, 2 * b}
	parts := make([]arrow.RecordBatch, len(offs))
	for i, off := range offs {
		parts[i] = concatPart(mem, rng, schema, parent, off, b)
	}
	m := newMultiRecord(schema, parts, mem)
	if m == nil {
		t.Fatal("newMultiRecord = nil")
	}
	payload, body, err := m.payload([]ipc.Option{ipc.WithAllocator(mem)})
	if err != nil || body == nil {
		t.Fatalf("payload: body %v, %v", body != nil, err)
	}
	var released atomic.Int32
	f, err := newFrameBody(payload, body, nil, func() { released.Add(1); m.Release() })
	if err != nil {
		t.Fatal(err)
	}
	feats := parent.Column(0).(*array.FixedSizeList).ListValues().(*array.Float32).Float32Values()
	ids := parent.Column(2).(*array.Int64).Int64Values()
	want := map[unsafe.Pointer]string{}
	for _, off := range offs {
		want[unsafe.Pointer(&feats[off*k])] = fmt.Sprintf("features at row %d", off)
		want[unsafe.Pointer(&ids[off])] = fmt.Sprintf("ids at row %d", off)
	}
	for _, buf := range f.bufs {
		delete(want, unsafe.Pointer(unsafe.SliceData(buf.ReadOnlyData())))
	}
	if len(want) > 0 {
		t.Errorf("the frame does not borrow %v (a copy crept in)", want)
	}
	f.free()
	if released.Load() != 1 {
		t.Errorf("release ran %d times, want 1", released.Load())
	}
}

// TestMultiRecordFallback: steps whose columns cannot be concatenated
// without moving bytes are not virtual; a layout the encoder disagrees with
// falls back to the built concatenation, still byte-identical.
func TestMultiRecordFallback(t *testing.T) {
	mem := checkedMem(t)
	rng := rand.New(rand.NewPCG(5, 6))
	parent := concatParent(mem, rng, 200, 4)
	defer parent.Release()
	masked := concatSchema(4, true)
	plain := concatSchema(4, false)
	mixed := mixedRecord(mem, rng, 300)
	defer mixed.Release()
	one := func(rec arrow.RecordBatch, i int) arrow.RecordBatch {
		return array.NewRecordBatch(arrow.NewSchema([]arrow.Field{rec.Schema().Field(i)}, nil), []arrow.Array{rec.Column(i)}, rec.NumRows())
	}
	cases := []struct {
		name  string
		parts func() []arrow.RecordBatch
	}{
		{"one slice", func() []arrow.RecordBatch {
			return []arrow.RecordBatch{concatPart(mem, rng, plain, parent, 0, 16)}
		}},
		{"mask of 12 rows", func() []arrow.RecordBatch {
			return []arrow.RecordBatch{concatPart(mem, rng, masked, parent, 0, 12), concatPart(mem, rng, masked, parent, 12, 12)}
		}},
		{"mask at bit offset 3", func() []arrow.RecordBatch {
			a := concatPart(mem, rng, masked, parent, 0, 19)
			defer a.Release()
			return []arrow.RecordBatch{a.NewSlice(3, 19), concatPart(mem, rng, masked, parent, 20, 16)}
		}},
		{"zero rows", func() []arrow.RecordBatch {
			return []arrow.RecordBatch{concatPart(mem, rng, plain, parent, 0, 0), concatPart(mem, rng, plain, parent, 5, 0)}
		}},
		{"strings", func() []arrow.RecordBatch {
			r := one(mixed, 4) // str, with nulls
			defer r.Release()
			return []arrow.RecordBatch{r.NewSlice(0, 100), r.NewSlice(150, 300)}
		}},
		{"int64 with nulls", func() []arrow.RecordBatch {
			r := one(mixed, 0)
			defer r.Release()
			return []arrow.RecordBatch{r.NewSlice(0, 100), r.NewSlice(150, 300)}
		}},
		{"list", func() []arrow.RecordBatch {
			r := one(mixed, 3)
			defer r.Release()
			return []arrow.RecordBatch{r.NewSlice(10, 100), r.NewSlice(100, 300)}
		}},
		{"uint16 beside a struct", func() []arrow.RecordBatch {
			s := arrow.NewSchema([]arrow.Field{mixed.Schema().Field(1), mixed.Schema().Field(6)}, nil)
			r := array.NewRecordBatch(s, []arrow.Array{mixed.Column(1), mixed.Column(6)}, mixed.NumRows())
			defer r.Release()
			return []arrow.RecordBatch{r.NewSlice(0, 100), r.NewSlice(100, 300)}
		}},
	}
	for _, c := range cases {
		parts := c.parts()
		schema := parts[0].Schema()
		if m := newMultiRecord(schema, parts, mem); m != nil {
			t.Errorf("newMultiRecord(%q) = a virtual concatenation, want nil", c.name)
			m.Release()
			continue
		}
		// The pipeline's path for these: the records concatenated.
		got, err := concatRecords(schema, parts, mem)
		if err != nil {
			t.Errorf("concatRecords(%q): %v", c.name, err)
		} else {
			want := concatenated(t, mem, schema, parts)
			if !array.RecordEqual(got, want) {
				t.Errorf("concatRecords(%q) differs from array.Concatenate", c.name)
			}
			compareFrame(t, mem, c.name, got)
			want.Release()
			got.Release()
		}
		for _, p := range parts {
			p.Release()
		}
	}

	// A body layout the encoder does not share (here: one piece too many)
	// makes payload send the concatenation instead.
	parts := []arrow.RecordBatch{concatPart(mem, rng, masked, parent, 0, 64), concatPart(mem, rng, masked, parent, 100, 64)}
	want := concatenated(t, mem, masked, parts)
	defer want.Release()
	m := newMultiRecord(masked, parts, mem)
	if m == nil {
		t.Fatal("newMultiRecord = nil")
	}
	defer m.Release()
	m.bufs[1] = append(m.bufs[1], []byte{1, 2, 3})
	got, virtual := multiFrameBytes(t, mem, m, nil)
	if virtual {
		t.Error("a layout that differs from the encoder's was sent virtually")
	}
	if !bytes.Equal(got, stockBytes(t, mem, want, nil)) {
		t.Error("the fallback frame differs from the stock writer's message")
	}
}
