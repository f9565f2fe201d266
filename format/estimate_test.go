package format

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
)

// arrayBytes is the bytes of a's buffers as decoded: what holding it costs.
func arrayBytes(d arrow.ArrayData) int64 {
	var n int64
	for _, b := range d.Buffers() {
		if b != nil {
			n += int64(b.Len())
		}
	}
	for _, c := range d.Children() {
		n += arrayBytes(c)
	}
	return n
}

// TestDecodedBytesEstimate: the read-ahead cost of a row group
// (RowGroupMeta.DecodedBytes, from the footer alone) is at least what its
// projected columns decode to, on dictionary-heavy files where the encoded
// pages are a small fraction of the arrays (low-cardinality long strings,
// low-cardinality integers, a list of them, decimals stored in 4 bytes that
// decode to 16), compressed or not, with and
// without statistics; and, with statistics, within a factor of 8 of it (two
// values of very different lengths counted at the longer), so read-ahead is
// not starved.
func TestDecodedBytesEstimate(t *testing.T) {
	seed := testSeed(t)
	rng := rand.New(rand.NewPCG(seed, 13))
	const rows = 40000
	words := make([]string, 6)
	for i := range words {
		words[i] = strings.Repeat(string(rune('a'+i)), 20+rng.IntN(200))
	}
	mem := memory.NewGoAllocator()
	sb := array.NewStringBuilder(mem)
	kb := array.NewInt64Builder(mem)
	lb := array.NewListBuilder(mem, arrow.PrimitiveTypes.Int32)
	vb := lb.ValueBuilder().(*array.Int32Builder)
	nb := array.NewStringBuilder(mem)
	dtype := &arrow.Decimal128Type{Precision: 9, Scale: 2}
	db := array.NewDecimal128Builder(mem, dtype)
	for i := 0; i < rows; i++ {
		db.Append(decimal128.FromI64(int64(rng.IntN(5))))
		sb.Append(words[rng.IntN(len(words))])
		kb.Append(int64(rng.IntN(4)) << 40)
		lb.Append(true)
		for j := rng.IntN(5); j > 0; j-- {
			vb.Append(int32(rng.IntN(3)))
		}
		if rng.IntN(10) == 0 {
			nb.AppendNull()
		} else {
			nb.Append(words[rng.IntN(2)])
		}
	}
	sch := arrow.NewSchema([]arrow.Field{
		{Name: "s", Type: arrow.BinaryTypes.String},
		{Name: "k", Type: arrow.PrimitiveTypes.Int64},
		{Name: "l", Type: arrow.ListOf(arrow.PrimitiveTypes.Int32)},
		{Name: "maybe", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "d", Type: dtype},
	}, nil)
	cols := []arrow.Array{sb.NewArray(), kb.NewArray(), lb.NewArray(), nb.NewArray(), db.NewArray()}
	rec := array.NewRecordBatch(sch, cols, rows)
	defer rec.Release()
	for _, c := range cols {
		c.Release()
	}
	dir := t.TempDir()
	cases := map[string][]parquet.WriterProperty{
		"snappy":       {parquet.WithCompression(compress.Codecs.Snappy)},
		"uncompressed": {parquet.WithCompression(compress.Codecs.Uncompressed)},
		"nostats":      {parquet.WithCompression(compress.Codecs.Zstd), parquet.WithStats(false)},
	}
	ctx := context.Background()
	for name, props := range cases {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(dir, name+".parquet")
			writeParquet(t, path, rec, append(props, parquet.WithMaxRowGroupLength(rows/4), parquet.WithDictionaryDefault(true))...)
			for _, col := range []string{"s", "k", "l", "maybe", "d"} {
				ds, err := openDS(t, path, []string{col}, validityOptions())
				if err != nil {
					t.Fatal(err)
				}
				for ri, rg := range ds.Files[0].RowGroups {
					b, err := ds.ReadRowGroup(ctx, 0, ri, memory.NewGoAllocator())
					if err != nil {
						t.Fatal(err)
					}
					decoded := arrayBytes(b.Column(0).Data())
					b.Release()
					msg := fmt.Sprintf("seed %d, column %q, row group %d: estimate %d bytes, decoded %d", seed, col, ri, rg.DecodedBytes, decoded)
					if rg.DecodedBytes < decoded {
						t.Errorf("%s: under the decoded size", msg)
					}
					if limit := 8*decoded + 4096; name != "nostats" && rg.DecodedBytes > limit {
						t.Errorf("%s: over %d", msg, limit)
					}
				}
			}
		})
	}
}
