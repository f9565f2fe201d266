package loader_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"

	"github.com/meshfeed/meshfeed/loader"
	"github.com/meshfeed/meshfeed/objstore"
	"github.com/parquet-go/parquet-go/deprecated"
	"github.com/parquet-go/parquet-go/encoding/thrift"
	"github.com/parquet-go/parquet-go/format"
)

// memStore is a Store over one in-memory object, for fuzzing.
type memStore struct {
	uri  string
	data []byte
}

func (m *memStore) obj() objstore.Object {
	return objstore.Object{URI: m.uri, Size: int64(len(m.data)), ModTime: time.Unix(1, 0)}
}
func (m *memStore) List(ctx context.Context, prefix string) ([]objstore.Object, error) {
	if strings.HasPrefix(m.uri, prefix) {
		return []objstore.Object{m.obj()}, nil
	}
	return nil, nil
}
func (m *memStore) Stat(ctx context.Context, uri string) (objstore.Object, error) {
	if uri != m.uri {
		return objstore.Object{}, fmt.Errorf("%s: %w", uri, loader.ErrNotFound)
	}
	return m.obj(), nil
}
func (m *memStore) ReadAt(ctx context.Context, o objstore.Object, p []byte, off int64) error {
	if off < 0 || off+int64(len(p)) > int64(len(m.data)) {
		return fmt.Errorf("%s: read [%d, %d) past %d bytes: %w", o.URI, off, off+int64(len(p)), len(m.data), io.ErrUnexpectedEOF)
	}
	copy(p, m.data[off:])
	return nil
}
func (m *memStore) Close() error { return nil }

// fuzzOpen plans and decodes data as a file named name: it must end in a
// classified error or in exactly the footer's rows, never a panic or a leak.
func fuzzOpen(t *testing.T, name string, data []byte) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st := &memStore{uri: "/fuzz/" + name, data: data}
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	failed := false
	defer func() {
		// arrow-go's IPC reader can panic half-way through a corrupt
		// compressed body; the loader frees what it saw allocated, but the
		// byte count is only asserted where every decode succeeded or the
		// file is Parquet.
		if !failed || !strings.HasSuffix(name, ".arrow") {
			mem.AssertSize(t, 0)
		}
	}()
	classified := func(err error) bool {
		for _, s := range []error{loader.ErrCorrupt, loader.ErrUnsupported, loader.ErrNull, loader.ErrSchemaMismatch} {
			if errors.Is(err, s) {
				return true
			}
		}
		return false
	}
	ds, err := loader.Open(ctx, st, []string{st.uri}, loader.WithFooterCache(nil), loader.WithMaxRowGroupBytes(64<<20))
	if err != nil {
		if !classified(err) || !strings.Contains(err.Error(), st.uri) {
			t.Fatalf("Open: unclassified or unnamed error: %v", err)
		}
		return
	}
	whole := map[int]bool{} // row groups that decode whole
	for rg, meta := range ds.Files[0].RowGroups {
		rec, err := ds.ReadRowGroup(ctx, 0, rg, mem)
		if err != nil {
			failed = true
			if !classified(err) || !strings.Contains(err.Error(), st.uri) {
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
	// decode grew). Arrow IPC batches too: a corrupt batch that decodes
	// whole must not panic when sliced into pieces (arrow-go checks its
	// offsets in NewSlice by panicking).
	var refs []loader.RowGroupRef
	for _, ref := range ds.RowGroups() {
		if !whole[ref.Index] {
			continue
		}
		for s := int64(0); s < ref.Rows; s += ref.Rows/3 + 1 {
			p := ref
			p.Start, p.End = s, min(ref.Rows, s+ref.Rows/3+1)
			refs = append(refs, p)
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
			failed = true
			if !classified(err) || !strings.Contains(err.Error(), st.uri) {
				t.Fatalf("pieces: unclassified or unnamed error: %v", err)
			}
			break
		}
		if rec.NumRows() != ref.End-ref.Start {
			t.Errorf("row group %d rows [%d, %d): decoded %d rows", ref.Index, ref.Start, ref.End, rec.NumRows())
		}
		rec.Release()
	}
}

// TestCorruptionNeverCrashes mutates every test file at random (bytes set,
// bits flipped, truncations) and decodes the result: each must end in a
// classified error naming the file, or in the footer's rows; never a panic,
// a hang or an out-of-memory crash. It found the allocation guards in
// fbcheck.go and pagecheck.go. Replay with -loader.seed=N.
func TestCorruptionNeverCrashes(t *testing.T) {
	seed := testSeed(t)
	rng := rand.New(rand.NewPCG(seed, 11))
	n := 400
	if testing.Short() {
		n = 100
	}
	// Besides pyarrow's files, files of our own writer whose list columns
	// have no empty list, so the list fast path sees corrupt levels too.
	var written []string
	rec := testRecord(t, rand.New(rand.NewPCG(seed, 12)), 300, true)
	defer rec.Release()
	for _, codec := range []compress.Compression{compress.Codecs.Uncompressed, compress.Codecs.Snappy} {
		for _, version := range []parquet.DataPageVersion{parquet.DataPageV1, parquet.DataPageV2} {
			path := filepath.Join(t.TempDir(), fmt.Sprintf("lists_%s_v%d.parquet", codec, version))
			writeParquet(t, path, rec, parquet.WithCompression(codec), parquet.WithDictionaryDefault(false),
				parquet.WithDataPageVersion(version), parquet.WithMaxRowGroupLength(150), parquet.WithDataPageSize(1<<10))
			written = append(written, path)
		}
	}
	for _, pattern := range []string{"*.parquet", "*.arrow"} {
		paths, _ := filepath.Glob(filepath.Join(pyarrowDir, pattern))
		if len(paths) == 0 {
			t.Fatalf("no files match %s", pattern)
		}
		if pattern == "*.parquet" {
			paths = append(paths, written...)
		}
		for i := 0; i < n; i++ {
			b, err := os.ReadFile(paths[rng.IntN(len(paths))])
			if err != nil {
				t.Fatal(err)
			}
			for k := rng.IntN(8) + 1; k > 0 && len(b) > 0; k-- {
				switch rng.IntN(3) {
				case 0:
					b[rng.IntN(len(b))] = byte(rng.IntN(256))
				case 1:
					b = b[:rng.IntN(len(b))]
				default:
					b[rng.IntN(len(b))] ^= 1 << rng.IntN(8)
				}
			}
			fuzzOpen(t, "f"+pattern[1:], b)
		}
	}
}

// TestMapOnALeaf: a footer whose schema puts the MAP annotation on a leaf
// (found by TestCorruptionNeverCrashes, seed 93: parquet-go panics on the
// leaf's Kind) opens to a classified error naming the file, or decodes,
// never panics.
func TestMapOnALeaf(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(pyarrowDir, "codec_none.parquet"))
	if err != nil {
		t.Fatal(err)
	}
	n := len(b)
	if n < 12 || string(b[n-4:]) != "PAR1" {
		t.Fatalf("codec_none.parquet: no Parquet trailer")
	}
	flen := int(binary.LittleEndian.Uint32(b[n-8 : n-4]))
	var md format.FileMetaData
	var proto thrift.CompactProtocol
	if err := thrift.Unmarshal(&proto, b[n-8-flen:n-8], &md); err != nil {
		t.Fatal(err)
	}
	edited := 0
	for i := range md.Schema {
		if md.Schema[i].Type.Valid { // a leaf
			md.Schema[i].ConvertedType = thrift.New(deprecated.Map)
			md.Schema[i].LogicalType = format.LogicalType{Value: &format.MapType{}}
			edited++
		}
	}
	if edited == 0 {
		t.Fatal("no leaf in the schema")
	}
	footer, err := thrift.Marshal(&proto, &md)
	if err != nil {
		t.Fatal(err)
	}
	out := append(append([]byte{}, b[:n-8-flen]...), footer...)
	out = binary.LittleEndian.AppendUint32(out, uint32(len(footer)))
	out = append(out, "PAR1"...)
	fuzzOpen(t, "map_leaf.parquet", out)
}
