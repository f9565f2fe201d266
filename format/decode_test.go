package format

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
)

// The decoder (parquet-go pages into Arrow buffers) is checked against an
// independent reader: arrow-go's pqarrow on the same bytes. Files are written
// by arrow-go's writer (and by pyarrow, in pyarrow_test.go), never by the
// code under test.

// oracleRowGroup reads one row group of path with arrow-go's pqarrow.
func oracleRowGroup(t testing.TB, path string, rg int) arrow.Table {
	t.Helper()
	pf, err := file.OpenParquetFile(path, false)
	if err != nil {
		t.Fatal(err)
	}
	defer pf.Close()
	fr, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{}, memory.DefaultAllocator)
	if err != nil {
		t.Fatal(err)
	}
	idx := make([]int, pf.MetaData().Schema.NumColumns())
	for i := range idx {
		idx[i] = i
	}
	tbl, err := fr.ReadRowGroups(context.Background(), idx, []int{rg})
	if err != nil {
		t.Fatal(err)
	}
	return tbl
}

// valuesString renders a column as text; Arrow's renderings are exact for
// every decoded type (floats print shortest round-trip form).
func valuesString(t testing.TB, a arrow.Array) string {
	t.Helper()
	return a.String()
}

func oracleColumn(t testing.TB, tbl arrow.Table, name string) string {
	t.Helper()
	idx := tbl.Schema().FieldIndices(name)
	if len(idx) != 1 {
		t.Fatalf("oracle has no column %q", name)
	}
	ch := tbl.Column(idx[0]).Data()
	var parts []string
	for _, c := range ch.Chunks() {
		s := c.String()
		parts = append(parts, strings.TrimSuffix(strings.TrimPrefix(s, "["), "]"))
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// checkAgainstOracle decodes every row group of path and compares each
// column with pqarrow's reading. fill replaces nulls in the oracle text.
func checkAgainstOracle(t *testing.T, path string, fill map[string]float64) {
	t.Helper()
	ctx := context.Background()
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	ds, err := openDS(t, path, nil, fillOptions(fill))
	if err != nil {
		t.Fatal(err)
	}
	// Read every row group before comparing any: a decoded array that
	// aliased a recycled fetch buffer would be overwritten by later reads.
	var recs []arrow.RecordBatch
	defer func() {
		for _, r := range recs {
			r.Release()
		}
	}()
	for rg := range ds.Files[0].RowGroups {
		rec, err := ds.ReadRowGroup(ctx, 0, rg, mem)
		if err != nil {
			t.Fatalf("row group %d: %v", rg, err)
		}
		recs = append(recs, rec)
	}
	for rg, rec := range recs {
		want := oracleRowGroup(t, path, rg)
		if rec.NumRows() != want.NumRows() {
			t.Errorf("row group %d: %d rows, want %d", rg, rec.NumRows(), want.NumRows())
		}
		for i, f := range rec.Schema().Fields() {
			got := valuesString(t, rec.Column(i))
			exp := oracleColumn(t, want, f.Name)
			if v, ok := fill[f.Name]; ok {
				exp = strings.ReplaceAll(exp, "(null)", fmt.Sprint(v))
			}
			if got != exp {
				t.Errorf("%s row group %d column %q:\n got %.300s\nwant %.300s", filepath.Base(path), rg, f.Name, got, exp)
			}
		}
		want.Release()
	}
}

func TestDecodeMatchesArrowGo(t *testing.T) {
	seed := testSeed(t)
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(seed, 1))
	rec := testRecord(t, rng, 3000, true)
	defer rec.Release()

	codecs := map[string]compress.Compression{
		"none": compress.Codecs.Uncompressed, "snappy": compress.Codecs.Snappy, "zstd": compress.Codecs.Zstd,
		"gzip": compress.Codecs.Gzip, "lz4raw": compress.Codecs.Lz4Raw,
	}
	for name, codec := range codecs {
		for _, dict := range []bool{false, true} {
			for _, v2 := range []bool{false, true} {
				label := fmt.Sprintf("%s_dict%v_v2%v", name, dict, v2)
				t.Run(label, func(t *testing.T) {
					path := filepath.Join(dir, label+".parquet")
					version := parquet.DataPageV1
					if v2 {
						version = parquet.DataPageV2
					}
					writeParquet(t, path, rec,
						parquet.WithCompression(codec),
						parquet.WithDictionaryDefault(dict),
						parquet.WithDataPageVersion(version),
						parquet.WithMaxRowGroupLength(700), // uneven last row group
						parquet.WithDataPageSize(4<<10),    // several pages per chunk
					)
					checkAgainstOracle(t, path, map[string]float64{"maybe": -1})
				})
			}
		}
	}
}
