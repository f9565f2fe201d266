package loader

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"
	pq "github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
)

// Local files are decoded from mmap'd pages (WithMmap, default on) when the
// store is a Mapper, every mapping is released by the time the reader is
// closed, and stores that cannot map are read as before.

// mmapFile writes the fast-path test columns, 2500 rows in row groups of
// 1000, PLAIN pages v1, and returns its path.
func mmapFile(t *testing.T, codec compress.Compression) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "mmap.parquet")
	writeFastFile(t, path, fastRecordsOf(t), pq.WithCompression(codec), pq.WithDictionaryDefault(false), pq.WithMaxRowGroupLength(1000), pq.WithDataPageSize(2<<10))
	return path
}

// fastRecordsOf returns records of rows [0, 2500) in pieces of 1000,
// released when t ends.
func fastRecordsOf(t *testing.T) []arrow.RecordBatch {
	var recs []arrow.RecordBatch
	for first := 0; first < 2500; first += 1000 {
		rec := fastRecord(first, min(1000, 2500-first))
		t.Cleanup(rec.Release)
		recs = append(recs, rec)
	}
	return recs
}

var mmapCols = []string{"id", "label", "features", "nfeatures", "flag", "small", "maybe"}

// readAllChecked reads every row group of path through a RowGroupReader,
// checks every column against the generators and returns the reader's stats.
func readAllChecked(t *testing.T, store Store, path string, mem memory.Allocator, opts ...Option) (fetched, mapped int64) {
	t.Helper()
	ctx := context.Background()
	opts = append([]Option{WithColumns(mmapCols...), WithFill(map[string]float64{"maybe": -1}), WithFooterCache(nil)}, opts...)
	ds, err := Open(ctx, store, []string{path}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	r := ds.NewReader(ctx, ds.RowGroups(), mem)
	defer r.Close()
	first := 0
	for {
		rec, _, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		for i, name := range mmapCols {
			checkColumn(t, name, rec.Column(i), first)
		}
		first += int(rec.NumRows())
		rec.Release()
	}
	if first != 2500 {
		t.Fatalf("read %d rows, want 2500", first)
	}
	return r.Stats().FetchedBytes.Load(), r.Stats().MappedBytes.Load()
}

type plainStore struct{ Store } // hides LocalStore's Map

func TestMmapPath(t *testing.T) {
	path := mmapFile(t, compress.Codecs.Snappy)
	for _, tc := range []struct {
		name    string
		mmap    bool
		mapper  bool
		wantMap bool
	}{
		{"local", true, true, true},
		{"local_WithMmap(false)", false, true, false},
		{"non_mapper_store", true, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
			defer mem.AssertSize(t, 0)
			local := NewLocalStore()
			defer local.Close()
			var store Store = local
			if !tc.mapper {
				store = plainStore{local}
			}
			fetched, mapped := readAllChecked(t, store, path, mem, WithMmap(tc.mmap))
			if fetched == 0 {
				t.Fatalf("fetched 0 bytes")
			}
			want := int64(0)
			if tc.wantMap {
				want = fetched
			}
			if mapped != want {
				t.Errorf("MappedBytes = %d, want %d (FetchedBytes %d)", mapped, want, fetched)
			}
			if got := local.Stats().BytesMapped.Load(); got != want {
				t.Errorf("store BytesMapped = %d, want %d", got, want)
			}
			if tc.wantMap && local.Stats().Maps.Load() == 0 {
				t.Errorf("store Maps = 0, want > 0")
			}
			if n := local.liveMaps.Load(); n != 0 {
				t.Errorf("%d mappings live after the reader closed, want 0", n)
			}
		})
	}
}

func TestMmapThroughMux(t *testing.T) {
	path := mmapFile(t, compress.Codecs.Uncompressed)
	m, err := NewStore(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	fetched, mapped := readAllChecked(t, m, path, mem)
	if mapped == 0 || mapped != fetched {
		t.Errorf("MappedBytes = %d, want FetchedBytes %d", mapped, fetched)
	}
	if n := m.local.liveMaps.Load(); n != 0 {
		t.Errorf("%d mappings live after the reader closed, want 0", n)
	}
	_, _, err = m.Map(context.Background(), Object{URI: "s3://b/o"}, 0, 1)
	if !errors.Is(err, ErrUnsupported) {
		t.Errorf("Map(s3://b/o) = %v, want ErrUnsupported", err)
	}
}

func TestLocalStoreMap(t *testing.T) {
	ctx := context.Background()
	content := make([]byte, 3*os.Getpagesize()+123)
	for i := range content {
		content[i] = byte(i*7 + i>>8)
	}
	path := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path, content, 0o644); err != nil {
		t.Fatal(err)
	}
	s := NewLocalStore()
	defer s.Close()
	obj, err := s.Stat(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	size := int64(len(content))
	for _, tc := range []struct {
		off, n  int64
		wantErr error
	}{
		{0, size, nil},
		{1, 10, nil},
		{int64(os.Getpagesize()) - 3, 7, nil}, // straddles a page boundary
		{size - 1, 1, nil},
		{100, 0, nil},
		{size - 1, 2, io.ErrUnexpectedEOF},
		{size + 5, 1, io.ErrUnexpectedEOF},
	} {
		b, release, err := s.Map(ctx, obj, tc.off, tc.n)
		if tc.wantErr != nil {
			if !errors.Is(err, tc.wantErr) {
				t.Errorf("Map(%d, %d) = %v, want %v", tc.off, tc.n, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("Map(%d, %d) = %v, want nil", tc.off, tc.n, err)
			continue
		}
		if !bytes.Equal(b, content[tc.off:tc.off+tc.n]) {
			t.Errorf("Map(%d, %d) returned other bytes than the file's", tc.off, tc.n)
		}
		release()
	}
	if n := s.liveMaps.Load(); n != 0 {
		t.Errorf("%d mappings live after release, want 0", n)
	}
	// A replaced file is another version: Map refuses it, as ReadAt does.
	if err := os.WriteFile(path, content[:100], 0o644); err != nil {
		t.Fatal(err)
	}
	s.forget(path)
	if _, _, err := s.Map(ctx, obj, 0, 10); !errors.Is(err, ErrNotFound) {
		t.Errorf("Map of a replaced file = %v, want ErrNotFound", err)
	}
}

// A file truncated between mapping and decoding faults when the decoder
// touches it: that must be an error, not a crash, whether the row group was
// mapped for itself or is a window of a cached whole-file mapping.
func TestMmapTruncatedWhileMapped(t *testing.T) {
	for _, tc := range []struct {
		name     string
		opts     []LocalOption
		fileMaps int64
	}{
		{"range", nil, 0},
		{"map_cache", []LocalOption{WithMapCache(1 << 30)}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := mmapFile(t, compress.Codecs.Uncompressed)
			ctx := context.Background()
			store := NewLocalStore(tc.opts...)
			defer store.Close()
			ds, err := Open(ctx, store, []string{path}, WithColumns("id", "features"), WithFooterCache(nil))
			if err != nil {
				t.Fatal(err)
			}
			testHookFetched = func(Object) {
				if err := os.Truncate(path, 0); err != nil {
					t.Error(err)
				}
			}
			defer func() { testHookFetched = nil }()
			mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
			defer mem.AssertSize(t, 0)
			var st ReadStats
			rec, err := ds.readRowGroup(ctx, 0, 0, mem, &st)
			if err == nil {
				rec.Release()
				t.Fatal("reading a row group of a file truncated while mapped succeeded, want an error")
			}
			if st.MappedBytes.Load() == 0 {
				t.Fatal("the row group was not mapped")
			}
			if got := store.Stats().FileMaps.Load(); got != tc.fileMaps {
				t.Fatalf("%d whole-file mappings, want %d", got, tc.fileMaps)
			}
			if !errors.Is(err, ErrNotFound) {
				t.Errorf("error %v, want ErrNotFound", err)
			}
			t.Log(err)
			if n := store.liveMaps.Load(); n != 0 {
				t.Errorf("%d mappings live after a failed decode, want 0", n)
			}
		})
	}
}
