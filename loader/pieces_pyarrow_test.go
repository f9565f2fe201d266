package loader_test

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/meshfeed/meshfeed/loader"
	"github.com/meshfeed/meshfeed/objstore"
)

// TestPyarrowFilesInPieces reads every good file pyarrow wrote in pieces of
// random sizes (RowGroupRef row ranges) and compares each row with pyarrow's
// values, as TestPyarrowFiles does for whole row groups. The files of
// streamedPyarrow are streamed: every piece decodes pages of its own.
func TestPyarrowFilesInPieces(t *testing.T) {
	streamedPyarrow := map[string]bool{
		"list_v1_pages.parquet": true, // a list column in v1 pages without an offset index
	}
	seed := testSeed(t)
	r := rand.New(rand.NewPCG(seed, seed^0x9a7e))
	m := readManifest(t)
	store := objstore.NewLocalStore()
	defer store.Close()
	ctx := context.Background()
	for _, f := range m.Files {
		if f.Kind != "good" || strings.HasPrefix(f.Name, "mismatch") {
			continue
		}
		t.Run(f.Name, func(t *testing.T) {
			exp, ds := openExpected(ctx, t, store, f.Name, f.Expect)
			mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
			defer mem.AssertSize(t, 0)
			var refs []loader.RowGroupRef
			firstRow := map[int]int64{}
			var at int64
			for _, ref := range ds.RowGroups() {
				firstRow[ref.Index] = at
				at += ref.Rows
				for s := int64(0); s < ref.Rows; {
					e := min(ref.Rows, s+int64(r.IntN(7)+1))
					p := ref
					p.Start, p.End = s, e
					refs = append(refs, p)
					s = e
				}
			}
			rd := ds.NewReader(ctx, refs, mem)
			defer rd.Close()
			for {
				rec, ref, err := rd.Next()
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				row := int(firstRow[ref.Index] + ref.Start)
				for _, c := range exp.Columns {
					idx := rec.Schema().FieldIndices(c.Name)
					if len(idx) != 1 {
						t.Fatalf("column %q missing from %v", c.Name, rec.Schema())
					}
					col := rec.Column(idx[0])
					if int64(col.Len()) != ref.End-ref.Start {
						t.Fatalf("row group %d rows [%d, %d) column %q: %d rows", ref.Index, ref.Start, ref.End, c.Name, col.Len())
					}
					for i := 0; i < col.Len(); i++ {
						want := canonical(t, c.Values[row+i])
						if want == "null" && c.Encoding != "string" && c.Encoding != "hex" {
							want = "0"
						}
						if got := render(t, col, i, c.Encoding); got != want {
							t.Fatalf("row group %d rows [%d, %d) column %q row %d = %s, want %s", ref.Index, ref.Start, ref.End, c.Name, row+i, got, want)
						}
					}
				}
				rec.Release()
			}
			if st := rd.Stats(); streamedPyarrow[f.Name] && st.Pages.Load() < st.Pieces.Load() {
				t.Errorf("%d pages decoded by %d pieces: the file's columns were not streamed", st.Pages.Load(), st.Pieces.Load())
			}
		})
	}
	for _, f := range m.Files {
		delete(streamedPyarrow, f.Name)
	}
	for name := range streamedPyarrow {
		t.Errorf("%s not in the manifest", name)
	}
}
