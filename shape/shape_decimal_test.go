package shape

import (
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/arrow-go/v18/arrow/decimal256"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// TestDecimalToFloat32: a decimal column cast to float32 gets its scale
// applied (1.00 stored as 100 is 1.0, never 100), nulls kept.
func TestDecimalToFloat32(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	d128 := &arrow.Decimal128Type{Precision: 9, Scale: 2}
	b := array.NewDecimal128Builder(mem, d128)
	b.AppendValues([]decimal128.Num{decimal128.FromI64(100), decimal128.FromI64(-250), decimal128.FromI64(0), decimal128.FromI64(314)},
		[]bool{true, true, false, true})
	a128 := b.NewArray()
	b.Release()
	d256 := &arrow.Decimal256Type{Precision: 40, Scale: 3}
	b2 := array.NewDecimal256Builder(mem, d256)
	b2.AppendValues([]decimal256.Num{decimal256.FromI64(1500), decimal256.FromI64(-1), decimal256.FromI64(0), decimal256.FromI64(7)}, nil)
	a256 := b2.NewArray()
	b2.Release()
	for _, c := range []struct {
		arr  arrow.Array
		want []float32
	}{{a128, []float32{1, -2.5, 0, 3.14}}, {a256, []float32{1.5, -0.001, 0, 0.007}}} {
		to, conv, err := castTargetFor(c.arr.DataType(), Float32)
		if err != nil || !conv {
			t.Fatalf("castTargetFor(%s, float32) = %v, %v", c.arr.DataType(), conv, err)
		}
		got, err := castArray("price", c.arr, to, mem)
		if err != nil {
			t.Fatal(err)
		}
		f := got.(*array.Float32)
		for i, w := range c.want {
			if c.arr.IsNull(i) != f.IsNull(i) || (!f.IsNull(i) && f.Value(i) != w) {
				t.Errorf("%s row %d = %v (null %v), want %v (null %v)", c.arr.DataType(), i, f.Value(i), f.IsNull(i), w, c.arr.IsNull(i))
			}
		}
		got.Release()
		c.arr.Release()
	}
}
