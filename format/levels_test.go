package format

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	pq "github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
)

// Corrupt definition levels in a fixed_size_list column are refused, never
// delivered: the fast path checks v2 pages' levels (which num_nulls of 0
// used to stand for) as it checks v1 pages', and a level above the max is
// ErrCorrupt on every route (pyarrow: "Malformed levels"). The files are
// written here, one of their data pages' definition levels rewritten.
func TestCorruptDefinitionLevels(t *testing.T) {
	rec := fastRecord(0, 1000)
	defer rec.Release()
	type mutation struct {
		name string
		mut  func(def []byte) // def: the page's levels, one RLE run of all its values at the max
		want error            // nil: decoded, every value as written
	}
	muts := []mutation{
		{"level above the max", func(d []byte) { d[len(d)-1]++ }, ErrCorrupt},
		{"run shorter than the page", func(d []byte) { d[0] -= 16 }, ErrCorrupt},
		{"empty lists", func(d []byte) { d[len(d)-1] = 0 }, ErrNull}, // pyarrow: lists not of size 8
		{"run longer than the page", func(d []byte) { d[0] += 16 }, nil},
	}
	for _, variant := range []struct {
		name string
		v2   bool
		dict bool
	}{{"v1", false, false}, {"v2", true, false}, {"v1 dictionary", false, true}, {"v2 dictionary", true, true}} {
		for _, col := range []string{"features", "nfeatures"} {
			for _, m := range muts {
				t.Run(fmt.Sprintf("%s/%s/%s", variant.name, col, m.name), func(t *testing.T) {
					path := filepath.Join(t.TempDir(), "f.parquet")
					ver := pq.DataPageV1
					if variant.v2 {
						ver = pq.DataPageV2
					}
					writeFastFile(t, path, []arrow.RecordBatch{rec}, pq.WithCompression(compress.Codecs.Uncompressed),
						pq.WithDictionaryDefault(variant.dict), pq.WithDataPageVersion(ver), pq.WithDataPageSize(1<<10))
					def := corruptDefLevels(t, path, col, 2, m.mut)
					err := readAllOf(t, path, col)
					switch {
					case m.want == nil && err != nil:
						t.Fatalf("levels %x: read = %v, want the values written", def, err)
					case m.want == nil:
					case err == nil:
						t.Fatalf("levels %x: read gave no error, want %v", def, m.want)
					case !errors.Is(err, m.want):
						t.Fatalf("levels %x: read = %v, want %v", def, err, m.want)
					case !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "row group 0") || !strings.Contains(err.Error(), `"`+col+`"`):
						t.Fatalf("error %q does not name the file, row group and column", err)
					}
				})
			}
		}
	}
}

// corruptDefLevels rewrites, with mut, the definition levels of data page
// k (from 0) of column col in the file at path (uncompressed pages), and
// returns them as they were.
func corruptDefLevels(t *testing.T, path, col string, k int, mut func([]byte)) []byte {
	t.Helper()
	d := mustOpen(t, path, []string{col}, testOptions()).parquet()
	md := &d.pf.Metadata().RowGroups[0].Columns[d.cols[0].leaf].MetaData
	off, n := chunkRange(md)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	it := newPageIter(data[off:off+n], noLimits)
	var p pageHead
	for it.next(&p, true) {
		if p.kind != pageDataV1 && p.kind != pageDataV2 {
			continue
		}
		if k--; k >= 0 {
			continue
		}
		var def []byte
		if p.kind == pageDataV2 {
			v := p.v2()
			def = p.body[v.RepetitionLevelsByteLength : v.RepetitionLevelsByteLength+v.DefinitionLevelsByteLength]
		} else {
			rl := binary.LittleEndian.Uint32(p.body)
			dl := binary.LittleEndian.Uint32(p.body[4+rl:])
			def = p.body[8+rl : 8+rl+dl]
		}
		was := append([]byte(nil), def...)
		mut(def)
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		return was
	}
	t.Fatalf("column %q has no data page %d (%v)", col, k, it.Err())
	return nil
}

// readAllOf reads column col of the file at path and checks its values
// against the generators (fastRecord's) when the read succeeds.
func readAllOf(t *testing.T, path, col string) error {
	t.Helper()
	ctx := context.Background()
	f, err := openFile(t, path, []string{col}, testOptions())
	if err != nil {
		return err
	}
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	r, err := f.readRowGroup(ctx, 0, mem)
	if err != nil {
		return err
	}
	defer r.Release()
	checkColumn(t, col, r.Column(0).(*array.FixedSizeList), 0)
	return nil
}
