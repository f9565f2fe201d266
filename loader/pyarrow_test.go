package loader_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/meshfeed/meshfeed/loader"
	"github.com/meshfeed/meshfeed/objstore"
)

// Files written by pyarrow (testdata/make_pyarrow_files.py), each with the
// values pyarrow read back, so the decoder is held to a second writer.

var pyarrowDir = func() string {
	p, err := filepath.Abs("../testdata/pyarrow")
	if err != nil {
		panic(err)
	}
	return p
}()

type pyManifest struct {
	Files []struct {
		Name   string `json:"name"`
		Kind   string `json:"kind"`
		Expect string `json:"expect"`
		Covers string `json:"covers"`
	} `json:"files"`
}

type pyExpect struct {
	NumRows   int64 `json:"num_rows"`
	RowGroups []struct {
		Rows int64 `json:"rows"`
	} `json:"row_groups"`
	RecordBatches []int64 `json:"record_batches"`
	Columns       []struct {
		Name     string            `json:"name"`
		Encoding string            `json:"encoding"`
		Values   []json.RawMessage `json:"values"`
	} `json:"columns"`
}

// openExpected reads pyarrow's expected values of file name (from expect)
// and opens it, columns holding nulls given a fill of 0 (numbers only; the
// null error itself is TestPyarrowNulls).
func openExpected(ctx context.Context, t *testing.T, store objstore.Store, name, expect string) (pyExpect, *loader.Dataset) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(pyarrowDir, expect))
	if err != nil {
		t.Fatal(err)
	}
	var exp pyExpect
	if err := json.Unmarshal(raw, &exp); err != nil {
		t.Fatal(err)
	}
	fill := map[string]float64{}
	for _, c := range exp.Columns {
		for _, v := range c.Values {
			if string(v) == "null" && c.Encoding != "string" && c.Encoding != "hex" {
				fill[c.Name] = 0
			}
		}
	}
	ds, err := loader.Open(ctx, store, []string{filepath.Join(pyarrowDir, name)}, loader.WithFill(fill))
	if err != nil {
		t.Fatal(err)
	}
	return exp, ds
}

func readManifest(t *testing.T) pyManifest {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(pyarrowDir, "MANIFEST.json"))
	if err != nil {
		t.Fatal(err)
	}
	var m pyManifest
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if len(m.Files) < 20 {
		t.Fatalf("manifest lists %d files, want the full set", len(m.Files))
	}
	return m
}

// render gives row i of a as JSON in the expectation's encoding.
func render(t *testing.T, a arrow.Array, i int, enc string) string {
	t.Helper()
	if a.IsNull(i) {
		return "null"
	}
	switch v := a.(type) {
	case *array.FixedSizeList:
		return renderList(t, v.ListValues(), int(v.Offset()+i)*int(v.DataType().(*arrow.FixedSizeListType).Len()), int(v.DataType().(*arrow.FixedSizeListType).Len()), enc)
	case *array.List:
		start, end := v.ValueOffsets(i)
		return renderList(t, v.ListValues(), int(start), int(end-start), enc)
	case *array.Boolean:
		return fmt.Sprint(v.Value(i))
	case *array.Int8:
		return fmt.Sprint(v.Value(i))
	case *array.Int16:
		return fmt.Sprint(v.Value(i))
	case *array.Int32:
		return fmt.Sprint(v.Value(i))
	case *array.Int64:
		return fmt.Sprint(v.Value(i))
	case *array.Uint8:
		return fmt.Sprint(v.Value(i))
	case *array.Uint16:
		return fmt.Sprint(v.Value(i))
	case *array.Uint32:
		return fmt.Sprint(v.Value(i))
	case *array.Uint64:
		return fmt.Sprint(v.Value(i))
	case *array.Float16:
		return fmt.Sprint(v.Value(i).Uint16())
	case *array.Float32:
		return fmt.Sprint(math.Float32bits(v.Value(i)))
	case *array.Float64:
		return fmt.Sprint(math.Float64bits(v.Value(i)))
	case *array.String:
		b, _ := json.Marshal(v.Value(i))
		return string(b)
	case *array.Binary:
		return `"` + hex.EncodeToString(v.Value(i)) + `"`
	}
	t.Fatalf("no rendering for %T", a)
	return ""
}

func renderList(t *testing.T, values arrow.Array, start, n int, enc string) string {
	parts := make([]string, n)
	for j := 0; j < n; j++ {
		parts[j] = render(t, values, start+j, enc)
	}
	return "[" + strings.Join(parts, ",") + "]"
}

// canonical re-marshals an expected JSON value without spaces.
func canonical(t *testing.T, raw json.RawMessage) string {
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		t.Fatal(err)
	}
	return buf.String()
}

func TestPyarrowFiles(t *testing.T) {
	m := readManifest(t)
	store := objstore.NewLocalStore()
	defer store.Close()
	ctx := context.Background()
	seen := 0
	for _, f := range m.Files {
		if f.Kind != "good" || strings.HasPrefix(f.Name, "mismatch") {
			continue
		}
		seen++
		t.Run(f.Name, func(t *testing.T) {
			exp, ds := openExpected(ctx, t, store, f.Name, f.Expect)
			mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
			defer mem.AssertSize(t, 0)
			if ds.NumRows() != exp.NumRows {
				t.Errorf("NumRows() = %d, want %d", ds.NumRows(), exp.NumRows)
			}
			var groups []int64
			for _, g := range exp.RowGroups {
				groups = append(groups, g.Rows)
			}
			if len(groups) == 0 {
				groups = exp.RecordBatches
			}
			if len(ds.Files[0].RowGroups) != len(groups) {
				t.Fatalf("%d row groups, want %d", len(ds.Files[0].RowGroups), len(groups))
			}
			row := 0
			for rg := range ds.Files[0].RowGroups {
				if got, want := ds.Files[0].RowGroups[rg].Rows, groups[rg]; got != want {
					t.Errorf("row group %d has %d rows, want %d", rg, got, want)
				}
				rec, err := ds.ReadRowGroup(ctx, 0, rg, mem)
				if err != nil {
					t.Fatalf("row group %d: %v", rg, err)
				}
				for _, c := range exp.Columns {
					idx := rec.Schema().FieldIndices(c.Name)
					if len(idx) != 1 {
						t.Fatalf("column %q missing from %v", c.Name, rec.Schema())
					}
					col := rec.Column(idx[0])
					for i := 0; i < col.Len(); i++ {
						want := canonical(t, c.Values[row+i])
						if want == "null" && c.Encoding != "string" && c.Encoding != "hex" {
							want = "0"
						}
						if got := render(t, col, i, c.Encoding); got != want {
							t.Errorf("row group %d column %q row %d = %s, want %s", rg, c.Name, row+i, got, want)
							break
						}
					}
				}
				row += int(rec.NumRows())
				rec.Release()
			}
		})
	}
	if seen < 20 {
		t.Errorf("checked %d good files, want at least 20", seen)
	}
}

func TestPyarrowNulls(t *testing.T) {
	store := objstore.NewLocalStore()
	defer store.Close()
	ctx := context.Background()
	p := filepath.Join(pyarrowDir, "nulls.parquet")
	_, err := loader.Open(ctx, store, []string{p})
	if !errors.Is(err, loader.ErrNull) || !strings.Contains(err.Error(), `"maybe"`) || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), "row group 0") {
		t.Errorf("Open(nulls) = %v, want ErrNull at plan time naming the file, row group 0 and column maybe", err)
	}
}

func TestPyarrowSchemaMismatch(t *testing.T) {
	store := objstore.NewLocalStore()
	defer store.Close()
	ctx := context.Background()
	a, b, order := filepath.Join(pyarrowDir, "mismatch_a.parquet"), filepath.Join(pyarrowDir, "mismatch_b.parquet"), filepath.Join(pyarrowDir, "mismatch_order.parquet")
	_, err := loader.Open(ctx, store, []string{a, b})
	if !errors.Is(err, loader.ErrSchemaMismatch) || !strings.Contains(err.Error(), "mismatch_a.parquet") || !strings.Contains(err.Error(), "mismatch_b.parquet") || !strings.Contains(err.Error(), `"label"`) {
		t.Errorf("Open(a, b) = %v, want ErrSchemaMismatch naming both files and label", err)
	}
	// The same columns in another order: projection is by name.
	ds, err := loader.Open(ctx, store, []string{a, order})
	if err != nil {
		t.Fatalf("Open(a, order) = %v, want nil", err)
	}
	if ds.Schema.Field(0).Name != ds.Files[0].Schema.Field(0).Name {
		t.Errorf("projected schema %v does not follow the first file's order", ds.Schema)
	}
}

func TestPyarrowBadFiles(t *testing.T) {
	m := readManifest(t)
	store := objstore.NewLocalStore()
	defer store.Close()
	ctx := context.Background()
	n := 0
	for _, f := range m.Files {
		if f.Kind != "bad" {
			continue
		}
		n++
		t.Run(f.Name, func(t *testing.T) {
			p := filepath.Join(pyarrowDir, f.Name)
			ds, err := loader.Open(ctx, store, []string{p}, loader.WithFooterCache(nil))
			if err == nil {
				for rg := range ds.Files[0].RowGroups {
					var rec arrow.RecordBatch
					if rec, err = ds.ReadRowGroup(ctx, 0, rg, memory.DefaultAllocator); err != nil {
						break
					}
					rec.Release()
				}
			}
			if !errors.Is(err, loader.ErrCorrupt) {
				t.Fatalf("%s (%s): got %v, want ErrCorrupt", f.Name, f.Covers, err)
			}
			if !strings.Contains(err.Error(), p) {
				t.Errorf("error %q does not name the file", err)
			}
		})
	}
	if n < 5 {
		t.Errorf("manifest has %d bad files, want at least 5", n)
	}
}
