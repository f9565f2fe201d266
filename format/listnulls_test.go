package format

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
)

// Lists of numbers whose elements hold nulls ([[1, null, 3]]), beside empty
// and null lists, written by arrow-go (which records no definition level
// histograms: the loader learns of the nulls from the pages). Without a fill
// or validity: ErrNull naming file, row group and column; with a fill: the
// fill where the null elements were, null lists empty; with validity: what
// arrow-go's reader reads, nulls included.
func TestListNullElements(t *testing.T) {
	seed := testSeed(t)
	rng := rand.New(rand.NewPCG(seed, 3))
	mem := memory.NewGoAllocator()
	lb := array.NewListBuilder(mem, arrow.PrimitiveTypes.Int32)
	vb := lb.ValueBuilder().(*array.Int32Builder)
	const rows = 300
	type row struct {
		null bool
		vals []*int32
	}
	want := make([]row, rows)
	for i := range want {
		switch k := rng.IntN(10); {
		case k == 0 && i > 0:
			want[i].null = true
			lb.AppendNull()
			continue
		case k == 1:
			lb.Append(true) // empty
			continue
		}
		lb.Append(true)
		for j := 1 + rng.IntN(4); j > 0; j-- {
			if rng.IntN(4) == 0 || (i == 0 && j == 1) {
				vb.AppendNull()
				want[i].vals = append(want[i].vals, nil)
			} else {
				v := int32(rng.IntN(1000))
				vb.Append(v)
				want[i].vals = append(want[i].vals, &v)
			}
		}
	}
	arr := lb.NewArray()
	sch := arrow.NewSchema([]arrow.Field{{Name: "l", Type: arrow.ListOf(arrow.PrimitiveTypes.Int32), Nullable: true}}, nil)
	rec := array.NewRecordBatch(sch, []arrow.Array{arr}, rows)
	arr.Release()
	defer rec.Release()
	dir := t.TempDir()
	ctx := context.Background()
	for _, v2 := range []bool{false, true} {
		name := fmt.Sprintf("v2=%v", v2)
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(dir, name+".parquet")
			props := []parquet.WriterProperty{parquet.WithMaxRowGroupLength(100), parquet.WithDataPageSize(256), parquet.WithDictionaryDefault(false)}
			if v2 {
				props = append(props, parquet.WithDataPageVersion(parquet.DataPageV2))
			}
			writeParquet(t, path, rec, props...)

			// No fill, no validity: the null element is an error, naming
			// file, row group and column, never a value.
			ds, err := openDS(t, path, nil, testOptions())
			if err != nil {
				t.Fatal(err)
			}
			_, err = ds.ReadRowGroup(ctx, 0, 0, mem)
			if !errors.Is(err, ErrNull) || !strings.Contains(err.Error(), path+` row group 0 column "l"`) || !strings.Contains(err.Error(), "give the column a fill value") {
				t.Fatalf("seed %d: null element without a fill: %v", seed, err)
			}

			// A fill: the fill where the null elements were, null lists empty.
			ds, err = openDS(t, path, nil, fillOptions(map[string]float64{"l": -7}))
			if err != nil {
				t.Fatal(err)
			}
			r := 0
			for rg := range ds.Files[0].RowGroups {
				b, err := ds.ReadRowGroup(ctx, 0, rg, mem)
				if err != nil {
					t.Fatalf("seed %d: row group %d with a fill: %v", seed, rg, err)
				}
				l := b.Column(0).(*array.List)
				vals := l.ListValues().(*array.Int32)
				for i := 0; i < l.Len(); i, r = i+1, r+1 {
					lo, hi := l.ValueOffsets(i)
					var got, exp []string
					for k := lo; k < hi; k++ {
						got = append(got, fmt.Sprint(vals.Value(int(k))))
					}
					for _, v := range want[r].vals {
						if v == nil {
							exp = append(exp, "-7")
						} else {
							exp = append(exp, fmt.Sprint(*v))
						}
					}
					if l.IsNull(i) || fmt.Sprint(got) != fmt.Sprint(exp) {
						t.Fatalf("seed %d: row %d with a fill: %v (null %v), want %v", seed, r, got, l.IsNull(i), exp)
					}
				}
				b.Release()
			}

			// Validity: what arrow-go reads.
			ds, err = openDS(t, path, nil, validityOptions())
			if err != nil {
				t.Fatal(err)
			}
			f, err := os.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			pr, err := file.NewParquetReader(f)
			if err != nil {
				t.Fatal(err)
			}
			fr, err := pqarrow.NewFileReader(pr, pqarrow.ArrowReadProperties{}, mem)
			if err != nil {
				t.Fatal(err)
			}
			for rg := range ds.Files[0].RowGroups {
				b, err := ds.ReadRowGroup(ctx, 0, rg, mem)
				if err != nil {
					t.Fatalf("seed %d: row group %d with validity: %v", seed, rg, err)
				}
				tbl, err := fr.RowGroup(rg).ReadTable(ctx, []int{0})
				if err != nil {
					t.Fatal(err)
				}
				ref, err := array.Concatenate(tbl.Column(0).Data().Chunks(), mem)
				if err != nil {
					t.Fatal(err)
				}
				if got := b.Column(0); !array.Equal(got, ref) {
					t.Fatalf("seed %d: row group %d with validity: %v, arrow-go reads %v", seed, rg, got, ref)
				}
				ref.Release()
				tbl.Release()
				b.Release()
			}
		})
	}
}

// TestStringPagesAfterNulls: a string column whose first pages hold nulls
// and whose later pages hold none, nulls kept as validity: every value of
// the later pages is a value (their rows were nulls: the validity bitmap
// was set only up to the first page with nulls), dictionary-encoded or
// plain, data pages v1 and v2; equal to arrow-go's read.
func TestStringPagesAfterNulls(t *testing.T) {
	mem := memory.NewGoAllocator()
	sb := array.NewStringBuilder(mem)
	const rows = 200
	for i := 0; i < rows; i++ {
		if i < 40 && i%3 == 0 {
			sb.AppendNull()
		} else {
			sb.Append(fmt.Sprintf("v%d", i%17))
		}
	}
	arr := sb.NewArray()
	sch := arrow.NewSchema([]arrow.Field{{Name: "s", Type: arrow.BinaryTypes.String, Nullable: true}}, nil)
	rec := array.NewRecordBatch(sch, []arrow.Array{arr}, rows)
	arr.Release()
	defer rec.Release()
	ctx := context.Background()
	dir := t.TempDir()
	for _, dict := range []bool{false, true} {
		for _, v2 := range []bool{false, true} {
			path := filepath.Join(dir, fmt.Sprintf("dict%v_v2%v.parquet", dict, v2))
			props := []parquet.WriterProperty{parquet.WithDictionaryDefault(dict), parquet.WithDataPageSize(1), parquet.WithBatchSize(10)}
			if v2 {
				props = append(props, parquet.WithDataPageVersion(parquet.DataPageV2))
			}
			writeParquet(t, path, rec, props...)
			ds, err := openDS(t, path, nil, validityOptions())
			if err != nil {
				t.Fatal(err)
			}
			b, err := ds.ReadRowGroup(ctx, 0, 0, mem)
			if err != nil {
				t.Fatal(err)
			}
			got := b.Column(0).(*array.String)
			for i := 0; i < rows; i++ {
				if null := i < 40 && i%3 == 0; got.IsNull(i) != null || (!null && got.Value(i) != fmt.Sprintf("v%d", i%17)) {
					t.Fatalf("%s: row %d: %q (null %v)", path, i, got.Value(i), got.IsNull(i))
				}
			}
			b.Release()
		}
	}
}
