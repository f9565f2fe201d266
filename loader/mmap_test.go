package loader

import (
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

	"github.com/meshfeed/meshfeed/objstore"
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
func readAllChecked(t *testing.T, store objstore.Store, path string, mem memory.Allocator, opts ...Option) (fetched, mapped int64) {
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

type plainStore struct{ objstore.Store } // hides LocalStore's Map

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
			local := objstore.NewLocalStore()
			defer local.Close()
			var store objstore.Store = local
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
			if n := local.Stats().LiveMaps.Load(); n != 0 {
				t.Errorf("%d mappings live after the reader closed, want 0", n)
			}
		})
	}
}

func TestMmapThroughMux(t *testing.T) {
	path := mmapFile(t, compress.Codecs.Uncompressed)
	m, err := objstore.NewStore(context.Background())
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
	if n := m.Stats().LiveMaps.Load(); n != 0 {
		t.Errorf("%d mappings live after the reader closed, want 0", n)
	}
	_, _, err = m.Map(context.Background(), objstore.Object{URI: "s3://b/o"}, 0, 1)
	if !errors.Is(err, objstore.ErrUnsupported) {
		t.Errorf("Map(s3://b/o) = %v, want objstore.ErrUnsupported", err)
	}
}

// A file truncated between mapping and decoding faults when the decoder
// touches it: that must be an error, not a crash, whether the row group was
// mapped for itself or is a window of a cached whole-file mapping.
func TestMmapTruncatedWhileMapped(t *testing.T) {
	for _, tc := range []struct {
		name     string
		opts     []objstore.LocalOption
		fileMaps int64
	}{
		{"range", nil, 0},
		{"map_cache", []objstore.LocalOption{objstore.WithMapCache(1 << 30)}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := mmapFile(t, compress.Codecs.Uncompressed)
			ctx := context.Background()
			store := objstore.NewLocalStore(tc.opts...)
			defer store.Close()
			ds, err := Open(ctx, store, []string{path}, WithColumns("id", "features"), WithFooterCache(nil))
			if err != nil {
				t.Fatal(err)
			}
			testHookFetched = func(objstore.Object) {
				if err := os.Truncate(path, 0); err != nil {
					t.Error(err)
				}
			}
			defer func() { testHookFetched = nil }()
			mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
			defer mem.AssertSize(t, 0)
			var st ReadStats
			rec, err := ds.readRowGroup(ctx, 0, 0, mem, &st, nil)
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
			if n := store.Stats().LiveMaps.Load(); n != 0 {
				t.Errorf("%d mappings live after a failed decode, want 0", n)
			}
		})
	}
}
