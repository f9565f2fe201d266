package datagen

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
)

func testSource() *TextSource {
	var sb strings.Builder
	for i := 0; sb.Len() < 1<<17; i++ {
		sb.WriteString("def f(x):\n    \"\"\"Return x plus one.\"\"\"\n    return x + 1\n\n")
	}
	return NewTextSource(sb.String())
}

// Documents are a pure function of (source, seed, id), valid UTF-8, within
// the length bounds in characters, and different seeds give different text.
func TestTextDoc(t *testing.T) {
	src := testSource()
	s := TextSpec{Docs: 200, Files: 1, RowGroupRows: 50, MinChars: 100, MaxChars: 3000, Seed: 7}
	spiced := 0
	for id := range int64(200) {
		d := src.TextDoc(s, id)
		if d != src.TextDoc(s, id) {
			t.Fatalf("TextDoc(%d) differs between calls", id)
		}
		n := utf8.RuneCountInString(d)
		if !utf8.ValidString(d) || n < s.MinChars || n > s.MaxChars {
			t.Fatalf("TextDoc(%d): %d characters (valid UTF-8 %v), want [%d, %d]", id, n, utf8.ValidString(d), s.MinChars, s.MaxChars)
		}
		if strings.IndexFunc(d, func(r rune) bool { return r > 0x7f }) >= 0 {
			spiced++
		}
	}
	if spiced < 50 {
		t.Errorf("%d of 200 documents hold non-ASCII text, want most", spiced)
	}
	s2 := s
	s2.Seed = 8
	if src.TextDoc(s, 3) == src.TextDoc(s2, 3) {
		t.Errorf("seeds 7 and 8 give the same document 3")
	}
}

func TestWriteText(t *testing.T) {
	dir := t.TempDir()
	s := TextSpec{Docs: 30, Files: 2, RowGroupRows: 7, MinChars: 100, MaxChars: 500, Seed: 1}
	src := testSource()
	files, err := WriteText(context.Background(), LocalCreator{}, dir, s, src)
	if err != nil || len(files) != 2 || files[0].Rows != 15 || files[1].FirstRow != 15 {
		t.Fatalf("WriteText = %+v, %v", files, err)
	}
	r, err := file.OpenParquetFile(filepath.Join(dir, "part-00001.parquet"), false)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if r.NumRowGroups() != 3 {
		t.Errorf("row groups = %d, want 3 (15 rows by 7)", r.NumRowGroups())
	}
	fr, err := pqarrow.NewFileReader(r, pqarrow.ArrowReadProperties{}, memory.DefaultAllocator)
	if err != nil {
		t.Fatal(err)
	}
	tbl, err := fr.ReadTable(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer tbl.Release()
	text := tbl.Column(1).Data().Chunk(0).(*array.String)
	if got, want := text.Value(0), src.TextDoc(s, 15); got != want {
		t.Errorf("part-00001 row 0 = %.40q..., want TextDoc(15) = %.40q...", got, want)
	}
	if err := (TextSpec{Docs: 1, Files: 2, RowGroupRows: 1, MinChars: 1, MaxChars: 1}).Validate(); err == nil {
		t.Errorf("Validate(files > docs) = nil")
	}
}
