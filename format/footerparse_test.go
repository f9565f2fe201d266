package format

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	pq "github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
)

// Planning parses each footer once (parquet-go's parse); arrow-go's parse is
// made only where it is needed. These tests hold that, and that the null
// counts and schemas planned without it are those arrow-go's parse gives.

// writeNullable writes an optional int32 column "x" (nulls at every third row
// when withNulls), a string column "s" and a list<int32> "l" (no null, no
// empty list: its statistics count 0 nulls), in two row groups.
func writeNullable(t *testing.T, path string, withNulls, storeSchema bool, props ...pq.WriterProperty) {
	t.Helper()
	mem := memory.NewGoAllocator()
	xb := array.NewInt32Builder(mem)
	sb := array.NewStringBuilder(mem)
	lb := array.NewListBuilder(mem, arrow.PrimitiveTypes.Int32)
	for i := 0; i < 40; i++ {
		lb.Append(true)
		for j := 0; j <= i%3; j++ {
			lb.ValueBuilder().(*array.Int32Builder).Append(int32(j))
		}
		if withNulls && i%3 == 1 {
			xb.AppendNull()
		} else {
			xb.Append(int32(i))
		}
		sb.Append(fmt.Sprint(i))
	}
	sch := arrow.NewSchema([]arrow.Field{{Name: "x", Type: arrow.PrimitiveTypes.Int32, Nullable: true}, {Name: "s", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "l", Type: arrow.ListOf(arrow.PrimitiveTypes.Int32), Nullable: true}}, nil)
	x, s, l := xb.NewArray(), sb.NewArray(), lb.NewArray()
	defer x.Release()
	defer s.Release()
	defer l.Release()
	tbl := array.NewTableFromSlice(sch, [][]arrow.Array{{x}, {s}, {l}})
	defer tbl.Release()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	aprops := pqarrow.NewArrowWriterProperties()
	if storeSchema {
		aprops = pqarrow.NewArrowWriterProperties(pqarrow.WithStoreSchema())
	}
	if err := pqarrow.WriteTable(tbl, f, 20, pq.NewWriterProperties(props...), aprops); err != nil {
		t.Fatal(err)
	}
}

// openFooters opens the files at paths (a directory: the files in it, by
// name) as loader.Open does, and returns their footers.
func openFooters(t *testing.T, paths []string, o Options) []*parquetFooter {
	t.Helper()
	var files []string
	for _, p := range paths {
		if st, err := os.Stat(p); err == nil && st.IsDir() {
			m, err := filepath.Glob(filepath.Join(p, "*"))
			if err != nil {
				t.Fatal(err)
			}
			sort.Strings(m)
			files = append(files, m...)
			continue
		}
		files = append(files, p)
	}
	var out []*parquetFooter
	for _, p := range files {
		out = append(out, mustOpen(t, p, nil, o).ft.(*parquetFooter))
	}
	return out
}

func parsedByArrowGo(p *parquetFooter) bool { return p.arrow.md != nil || p.arrow.err != nil }

func TestPlanParsesFootersOnce(t *testing.T) {
	dir := t.TempDir()
	// arrow-go's files with ARROW:schema, columns the primary decoder takes,
	// nulls kept as validity (what a Flight server plans): no arrow-go parse.
	var stored []string
	for i := range 3 {
		p := filepath.Join(dir, fmt.Sprintf("stored%d.parquet", i))
		writeNullable(t, p, i == 1, true)
		stored = append(stored, p)
	}
	for k, o := range []Options{validityOptions(), fillOptions(map[string]float64{"x": 0})} {
		for i, p := range openFooters(t, stored, o) {
			if parsedByArrowGo(p) {
				t.Errorf("%s (options %d): arrow-go parsed the footer", stored[i], k)
			}
		}
	}
	// Refusing nulls at Open needs no exact count: no arrow-go parse for a
	// writer whose zero null counts are ambiguous either.
	var other []string
	for i := range 2 {
		p := filepath.Join(dir, fmt.Sprintf("other%d.parquet", i))
		writeNullable(t, p, i == 1, true, pq.WithCreatedBy("impala version 4.0"))
		other = append(other, p)
	}
	for i, p := range openFooters(t, other, fillOptions(map[string]float64{"x": 0})) {
		if parsedByArrowGo(p) {
			t.Errorf("%s: arrow-go parsed the footer to plan without validity", other[i])
		}
	}
	// Without ARROW:schema, files of one schema: arrow-go derives it once.
	sub := filepath.Join(dir, "noschema")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	var paths []string
	for i := range 4 {
		p := filepath.Join(sub, fmt.Sprintf("f%d.parquet", i))
		// A created_by of its own: no other test's file shares the schema key.
		writeNullable(t, p, false, false, pq.WithCreatedBy("parquet-go version once-test"))
		paths = append(paths, p)
	}
	parsed := 0
	fs := openFooters(t, []string{sub}, validityOptions())
	for _, p := range fs {
		if parsedByArrowGo(p) {
			parsed++
		}
		if got, want := p.Schema().Field(0).Type, arrow.PrimitiveTypes.Int32; !arrow.TypeEqual(got, want) {
			t.Errorf("%s: planned %s, want %s", p.uri, got, want)
		}
	}
	if parsed > 1 {
		t.Errorf("arrow-go parsed %d of %d footers of one schema, want at most 1", parsed, len(fs))
	}
}

// TestNullCountsWithoutArrowGo: the null counts planned from parquet-go's
// parse equal arrow-go's, for a writer trusted to record every count and for
// one that is not (arrow-go's parse then decides), with and without
// statistics.
func TestNullCountsWithoutArrowGo(t *testing.T) {
	dir := t.TempDir()
	i := 0
	for _, writer := range []string{"parquet-go version 18.8.0", "impala version 4.0"} {
		for _, nulls := range []bool{false, true} {
			for _, stats := range []bool{false, true} {
				name := fmt.Sprintf("%s nulls=%v stats=%v", writer, nulls, stats)
				i++
				path := filepath.Join(dir, fmt.Sprintf("%d.parquet", i))
				writeNullable(t, path, nulls, true, pq.WithCreatedBy(writer), pq.WithStats(stats))
				p := openFooters(t, []string{path}, validityOptions())[0]
				type count struct {
					n     int64
					known bool
				}
				var got [2][2]count
				for rg := range 2 {
					for leaf := range 2 {
						got[rg][leaf].n, got[rg][leaf].known = p.chunkNulls(rg, leaf)
					}
				}
				if trusted := writer != "impala version 4.0"; trusted && stats && parsedByArrowGo(p) {
					t.Errorf("%s: arrow-go parsed the footer for null counts parquet-go's parse tells", name)
				}
				md, err := p.arrowMD()
				if err != nil {
					t.Fatal(err)
				}
				for rg := range 2 {
					for leaf := range 2 {
						cc, err := md.RowGroup(rg).ColumnChunk(leaf)
						if err != nil {
							t.Fatal(err)
						}
						st, _ := cc.Statistics()
						want := count{}
						if st != nil && st.HasNullCount() {
							want = count{st.NullCount(), true}
						}
						if got[rg][leaf] != want {
							t.Errorf("%s: row group %d leaf %d: %+v, arrow-go says %+v", name, rg, leaf, got[rg][leaf], want)
						}
						if stats && !want.known {
							t.Fatalf("%s: the writer recorded no null count: the case is not tested", name)
						}
						if nulls && leaf == 0 && stats && got[rg][leaf].n == 0 {
							t.Errorf("%s: row group %d: no nulls counted", name, rg)
						}
					}
				}
			}
		}
	}
}
