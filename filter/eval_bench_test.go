package filter

import (
	"fmt"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// BenchmarkEval evaluates one term on a 100,000-row row group's filter
// column (values scattered in [0, 1000), 1% null): int32, float64 and a
// dictionary of strings; rows per second in MB/s of the column's values.
//
//	go test ./filter -run '^$' -bench Eval -benchmem
func BenchmarkEval(b *testing.B) {
	const n = 100_000
	mem := memory.NewGoAllocator()
	ib := array.NewInt32Builder(mem)
	fb := array.NewFloat64Builder(mem)
	sb := array.NewDictionaryBuilder(mem, &arrow.DictionaryType{IndexType: arrow.PrimitiveTypes.Int32, ValueType: arrow.BinaryTypes.String}).(*array.BinaryDictionaryBuilder)
	x := uint32(1)
	for i := range n {
		x = x*1664525 + 1013904223
		v := int32(x>>8) % 1000
		if i%100 == 7 {
			ib.AppendNull()
			fb.AppendNull()
			sb.AppendNull()
			continue
		}
		ib.Append(v)
		fb.Append(float64(v) / 10)
		_ = sb.AppendString(fmt.Sprintf("lang%d", v%50))
	}
	cols := []arrow.Array{ib.NewArray(), fb.NewArray(), sb.NewArray()}
	schema := arrow.NewSchema([]arrow.Field{{Name: "label", Type: arrow.PrimitiveTypes.Int32, Nullable: true},
		{Name: "score", Type: arrow.PrimitiveTypes.Float64, Nullable: true}, {Name: "lang", Type: cols[2].DataType(), Nullable: true}}, nil)
	rec := array.NewRecordBatch(schema, cols, n)
	defer rec.Release()
	for _, tc := range []struct{ name, filters string }{
		{"int32-lt", `[["label", "<", 100]]`},
		{"int32-in", `[["label", "in", [1, 5, 700, 999]]]`},
		{"float64-ge", `[["score", ">=", 90.5]]`},
		{"dict-string-eq", `[["lang", "==", "lang7"]]`},
		{"two-terms-or", `[[["label", "<", 100], ["score", ">", 5]], [["lang", "in", ["lang1", "lang2"]]]]`},
	} {
		p, err := Parse([]byte(tc.filters))
		if err != nil {
			b.Fatal(err)
		}
		bd, err := Bind(p, schema)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(n * 4)
			for b.Loop() {
				if _, err := bd.Eval(rec); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
