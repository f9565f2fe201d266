package format

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// An Arrow IPC file with a dictionary-encoded column (what pyarrow writes for
// a dictionary_encode()d or categorical column) is refused at the footer as
// unsupported, naming the column and what to do; not reported as a corrupt file.
func TestIPCDictionaryRefusedByName(t *testing.T) {
	mem := memory.NewGoAllocator()
	dt := &arrow.DictionaryType{IndexType: arrow.PrimitiveTypes.Int32, ValueType: arrow.BinaryTypes.String}
	sch := arrow.NewSchema([]arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int64}, {Name: "lang", Type: dt}}, nil)
	ids := array.NewInt64Builder(mem)
	ids.AppendValues([]int64{1, 2, 3}, nil)
	db := array.NewDictionaryBuilder(mem, dt).(*array.BinaryDictionaryBuilder)
	for _, s := range []string{"en", "de", "en"} {
		if err := db.AppendString(s); err != nil {
			t.Fatal(err)
		}
	}
	rec := array.NewRecordBatch(sch, []arrow.Array{ids.NewArray(), db.NewArray()}, 3)
	defer rec.Release()
	var buf bytes.Buffer
	w, err := ipc.NewFileWriter(&buf, ipc.WithSchema(sch), ipc.WithAllocator(mem))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(rec); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	_, err = openBytes("mem://d.arrow", buf.Bytes(), nil, testOptions())
	if err == nil {
		t.Fatal("a dictionary-encoded IPC file was accepted")
	}
	if !errors.Is(err, ErrUnsupported) || errors.Is(err, ErrCorrupt) {
		t.Fatalf("want ErrUnsupported (not ErrCorrupt), got %v", err)
	}
	for _, want := range []string{"mem://d.arrow", `"lang"`, "dictionary", "cast"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
}
