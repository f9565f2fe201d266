package format

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"
)

// The footer fuzzers: a file's bytes at random must open to a classified
// error naming the file, or decode to exactly the footer's rows, whole and
// in pieces, never a panic or a leak. (loader's TestCorruptionNeverCrashes
// mutates the test files and reads them through a RowGroupReader.)

// pyarrowDir holds pyarrow's test files (testdata/gen_pyarrow.py).
var pyarrowDir = func() string {
	p, err := filepath.Abs("../testdata/pyarrow")
	if err != nil {
		panic(err)
	}
	return p
}()

// fuzzOpen opens and decodes data as a file named name: it must end in a
// classified error or in exactly the footer's rows, never a panic or a leak.
func fuzzOpen(t *testing.T, name string, data []byte) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	uri := "/fuzz/" + name
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	failed := false
	defer func() {
		// arrow-go's IPC reader can panic half-way through a corrupt
		// compressed body; the decoder frees what it saw allocated, but the
		// byte count is only asserted where every decode succeeded or the
		// file is Parquet.
		if !failed || !strings.HasSuffix(name, ".arrow") {
			mem.AssertSize(t, 0)
		}
	}()
	classified := func(err error) bool {
		for _, s := range []error{ErrCorrupt, ErrUnsupported, ErrNull} {
			if errors.Is(err, s) {
				return true
			}
		}
		return false
	}
	o := testOptions()
	o.MaxBytes = 64 << 20
	f, err := openBytes(uri, data, nil, o)
	if err != nil {
		if !classified(err) || !strings.Contains(err.Error(), uri) {
			t.Fatalf("Open: unclassified or unnamed error: %v", err)
		}
		return
	}
	whole := map[int]bool{} // row groups that decode whole
	for rg, meta := range f.rgs {
		rec, err := f.readRowGroup(ctx, rg, mem)
		if err != nil {
			failed = true
			if !classified(err) || !strings.Contains(err.Error(), uri) {
				t.Fatalf("row group %d: unclassified or unnamed error: %v", rg, err)
			}
			continue
		}
		if rec.NumRows() != meta.Rows {
			t.Errorf("row group %d: decoded %d rows, footer says %d", rg, rec.NumRows(), meta.Rows)
		}
		whole[rg] = true
		rec.Release()
	}
	// And the row groups that decode whole, in pieces (streamed columns
	// locate and decode their pages alone, v1 list pages by their levels).
	// Not the others: decoding a corrupt chunk again with parquet-go can
	// take seconds more each time (its pooled buffers keep what the failed
	// decode grew). Arrow IPC batches have no pieces of their own (loader
	// slices them).
	if _, ok := f.dec.(Ranged); !ok {
		return
	}
	for rg, meta := range f.rgs {
		if !whole[rg] {
			continue
		}
		var sh Shared
		for s := int64(0); s < meta.Rows; s += meta.Rows/3 + 1 {
			end := min(meta.Rows, s+meta.Rows/3+1)
			rec, err := f.readRange(ctx, rg, s, end, &sh, &Stats{}, mem)
			if err != nil {
				failed = true
				if !classified(err) || !strings.Contains(err.Error(), uri) {
					t.Fatalf("pieces: unclassified or unnamed error: %v", err)
				}
				break
			}
			if rec.NumRows() != end-s {
				t.Errorf("row group %d rows [%d, %d): decoded %d rows", rg, s, end, rec.NumRows())
			}
			rec.Release()
		}
		sh.Release()
	}
}

func addSeeds(f *testing.F, pattern string) {
	paths, _ := filepath.Glob(filepath.Join(pyarrowDir, pattern))
	if len(paths) == 0 {
		f.Fatalf("no seeds match %s", pattern)
	}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
		if len(b) > 16 {
			f.Add(b[:len(b)-len(b)/3]) // truncated
			c := append([]byte(nil), b...)
			c[len(c)-12] ^= 0x5A // inside the footer
			f.Add(c)
		}
	}
}

// FuzzParquetFooter: footer and metadata handling, seeded from testdata.
// Run: go test ./format -run '^$' -fuzz FuzzParquetFooter -fuzztime 60s
func FuzzParquetFooter(f *testing.F) {
	addSeeds(f, "*.parquet")
	f.Fuzz(func(t *testing.T, data []byte) { fuzzOpen(t, "f.parquet", data) })
}

// FuzzArrowIPCFooter: the IPC footer, block list and batch metadata.
// Run: go test ./format -run '^$' -fuzz FuzzArrowIPCFooter -fuzztime 60s
func FuzzArrowIPCFooter(f *testing.F) {
	addSeeds(f, "*.arrow")
	f.Fuzz(func(t *testing.T, data []byte) { fuzzOpen(t, "f.arrow", data) })
}
