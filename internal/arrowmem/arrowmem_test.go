package arrowmem

import (
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// DataBytes counts every buffer an array holds: its own, its children's and
// its dictionary's.
func TestDataBytes(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)

	ib := array.NewInt64Builder(mem)
	ib.AppendValues([]int64{1, 2, 3, 4}, nil)
	ints := ib.NewArray()
	ib.Release()
	defer ints.Release()

	lb := array.NewFixedSizeListBuilder(mem, 2, arrow.PrimitiveTypes.Int32)
	vb := lb.ValueBuilder().(*array.Int32Builder)
	for range 3 {
		lb.Append(true)
		vb.AppendValues([]int32{7, 8}, nil)
	}
	lists := lb.NewArray()
	lb.Release()
	defer lists.Release()

	dt := &arrow.DictionaryType{IndexType: arrow.PrimitiveTypes.Int8, ValueType: arrow.BinaryTypes.String}
	db := array.NewDictionaryBuilder(mem, dt).(*array.BinaryDictionaryBuilder)
	for _, s := range []string{"alpha", "beta", "alpha", "gamma", "beta"} {
		if err := db.AppendString(s); err != nil {
			t.Fatal(err)
		}
	}
	dict := db.NewArray().(*array.Dictionary)
	db.Release()
	defer dict.Release()

	own := func(d arrow.ArrayData) int64 {
		var n int64
		for _, b := range d.Buffers() {
			if b != nil {
				n += int64(b.Len())
			}
		}
		return n
	}
	for _, tc := range []struct {
		name string
		arr  arrow.Array
		want int64
	}{
		{"int64", ints, own(ints.Data())},
		{"fixed_size_list", lists, own(lists.Data()) + own(lists.Data().Children()[0])},
		{"dictionary", dict, own(dict.Data()) + own(dict.Dictionary().Data())},
	} {
		if got := DataBytes(tc.arr.Data()); got != tc.want || got == 0 {
			t.Errorf("DataBytes(%s) = %d, want %d", tc.name, got, tc.want)
		}
	}
	if own(dict.Dictionary().Data()) < int64(len("alphabetagamma")) {
		t.Fatalf("the dictionary holds %d bytes, want at least its strings", own(dict.Dictionary().Data()))
	}

	sch := arrow.NewSchema([]arrow.Field{{Name: "i", Type: ints.DataType()}, {Name: "d", Type: dict.DataType()}}, nil)
	rec := array.NewRecordBatch(sch, []arrow.Array{ints, dict}, int64(ints.Len()))
	defer rec.Release()
	if got, want := RecordBytes(rec), DataBytes(ints.Data())+DataBytes(dict.Data()); got != want {
		t.Errorf("RecordBytes = %d, want %d", got, want)
	}
}

func TestNewOverwriteBuffer(t *testing.T) {
	pool := NewPoolAllocator()
	pool.poison = func(b []byte) {
		for i := range b {
			b[i] = 0xAB
		}
	}
	b := NewOverwriteBuffer(pool, 100)
	if b.Len() != 100 {
		t.Fatalf("Len() = %d, want 100", b.Len())
	}
	b.Release()
	// From a pool: reused memory is not cleared (the caller writes it whole).
	b = NewOverwriteBuffer(pool, 100)
	if b.Bytes()[0] != 0xAB && !raceEnabled { // the race detector drops pooled items at random
		t.Errorf("reused overwrite buffer starts with %#x, want the poison 0xAB (not cleared)", b.Bytes()[0])
	}
	b.Release()
	// From an allocator that cannot skip clearing: cleared, as usual.
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	c := NewOverwriteBuffer(mem, 64)
	defer c.Release()
	if c.Len() != 64 {
		t.Errorf("Len() = %d, want 64", c.Len())
	}
	if n := pool.Allocated(); n != 0 {
		t.Errorf("pool Allocated() = %d after Release, want 0", n)
	}
}

func TestAllocateOverwrite(t *testing.T) {
	pool := NewPoolAllocator()
	pool.poison = func(b []byte) {
		for i := range b {
			b[i] = 0xAB
		}
	}
	pool.Free(AllocateOverwrite(pool, 100))
	// From a pool: reused memory is not cleared (the caller writes it whole).
	b := AllocateOverwrite(pool, 100)
	if len(b) != 100 {
		t.Fatalf("len = %d, want 100", len(b))
	}
	if b[0] != 0xAB && !raceEnabled { // the race detector drops pooled items at random
		t.Errorf("reused bytes start with %#x, want the poison 0xAB (not cleared)", b[0])
	}
	pool.Free(b)
	// From an allocator that cannot skip clearing: its Allocate, cleared.
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	c := AllocateOverwrite(mem, 64)
	if len(c) != 64 || mem.CurrentAlloc() != 64 {
		t.Errorf("len = %d, %d bytes allocated; want 64 from mem", len(c), mem.CurrentAlloc())
	}
	mem.Free(c)
}
