package shape

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// BenchmarkCastBFloat16 casts float32 columns to bfloat16; bytes are input bytes.
func BenchmarkCastBFloat16(b *testing.B) {
	for _, size := range []int{64 << 10, 8 << 20} {
		b.Run(fmt.Sprintf("%dKiB", size>>10), func(b *testing.B) {
			rng := rand.New(rand.NewPCG(1, 2))
			vals := make([]float32, size/4)
			for i := range vals {
				vals[i] = float32(rng.NormFloat64())
			}
			arr := shapePrim(arrow.PrimitiveTypes.Float32, vals)
			defer arr.Release()
			to, _, _ := castTargetFor(arr.DataType(), BFloat16)
			mem := memory.NewGoAllocator()
			b.SetBytes(int64(size))
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				out, err := castArray("x", arr, to, mem)
				if err != nil {
					b.Fatal(err)
				}
				out.Release()
			}
		})
	}
}

// benchTokens returns list<int32> rows totalling about `tokens` tokens, row
// lengths uniform in [1, 2*mean).
func benchTokens(tokens, mean int) arrow.Array {
	rng := rand.New(rand.NewPCG(3, 4))
	var rows [][]int32
	for n := 0; n < tokens; {
		k := 1 + rng.IntN(2*mean-1)
		row := make([]int32, k)
		for j := range row {
			row[j] = int32(n + j)
		}
		rows = append(rows, row)
		n += k
	}
	return shapeList(arrow.PrimitiveTypes.Int32, rows)
}

// BenchmarkPadList pads a 1M-token list<int32> column to fixed length;
// bytes are input token bytes.
func BenchmarkPadList(b *testing.B) {
	for _, length := range []int{256, 1024} {
		b.Run(fmt.Sprintf("L=%d", length), func(b *testing.B) {
			list := benchTokens(1<<20, length/2)
			rec := shapeRecordB(list)
			defer rec.Release()
			s, err := NewShaper(rec.Schema(), []Column{{Name: "tokens", Length: length, Overflow: Truncate}})
			if err != nil {
				b.Fatal(err)
			}
			mem := memory.NewGoAllocator()
			b.SetBytes(4 << 20)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				out, err := s.Apply(rec, mem)
				if err != nil {
					b.Fatal(err)
				}
				out.Release()
			}
		})
	}
}

// BenchmarkPack packs 1M tokens into rows of L at a ratio that fits; bytes
// are input token bytes.
func BenchmarkPack(b *testing.B) {
	for _, length := range []int{512, 2048} {
		b.Run(fmt.Sprintf("L=%d", length), func(b *testing.B) {
			list := benchTokens(1<<20, length/4)
			defer list.Release()
			// Enough rows for first-fit: the token count over L, plus slack.
			rows := (1<<20)/length*5/4 + 2
			mem := memory.NewGoAllocator()
			b.SetBytes(4 << 20)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				tok, seg, pos, err := Pack(list, length, rows, Reject, Fill{}, mem)
				if err != nil {
					b.Fatal(err)
				}
				tok.Release()
				seg.Release()
				pos.Release()
			}
		})
	}
}

func shapeRecordB(list arrow.Array) arrow.RecordBatch {
	schema := arrow.NewSchema([]arrow.Field{{Name: "tokens", Type: list.DataType(), Nullable: true}}, nil)
	rec := array.NewRecordBatch(schema, []arrow.Array{list}, -1)
	list.Release()
	return rec
}
