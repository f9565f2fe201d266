package format

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"

	pq "github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"

	"github.com/meshfeed/meshfeed/internal/arrowmem"
)

// poisonPool is a PoolAllocator whose freed buffers are filled with 0xAB
// before they can be handed out again: decoding into it sees dirty memory.
type poisonPool struct{ *arrowmem.PoolAllocator }

func poisonedPool() poisonPool { return poisonPool{arrowmem.NewPoolAllocator()} }

// Free poisons all of b (its capacity: what a reuse may hand out) and
// gives it back to the pool.
func (p poisonPool) Free(b []byte) {
	full := b[:cap(b)]
	for i := range full {
		full[i] = 0xAB
	}
	p.PoolAllocator.Free(b)
}

// Decoding into a pool that hands out dirty memory must give the same
// values as the generators, for every decode path (fast path, decodeChunk
// with dictionaries, fills, narrowing, booleans, the arrow-go fallback).
func TestDecodeIntoDirtyPool(t *testing.T) {
	for _, c := range []struct {
		name  string
		codec compress.Compression
		dict  bool
		v2    bool
		fast  bool // the fast path decodes id, label, features, nfeatures
	}{
		{"none", compress.Codecs.Uncompressed, false, false, true},
		{"snappy_v2", compress.Codecs.Snappy, false, true, true},
		{"zstd_dict", compress.Codecs.Zstd, true, false, false},
		{"lz4raw_fallback", compress.Codecs.Lz4Raw, false, false, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := mmapFile(t, c.codec)
			if c.dict || c.v2 {
				version := pq.DataPageV1
				if c.v2 {
					version = pq.DataPageV2
				}
				path = mmapFileWith(t, pq.WithCompression(c.codec), pq.WithDictionaryDefault(c.dict), pq.WithDataPageVersion(version))
			}
			pool := poisonedPool()
			// Several passes: from the second on, buffers come back dirty.
			before := fastChunks.Load()
			for pass := 0; pass < 3; pass++ {
				readAllChecked(t, path, pool)
			}
			if fast := fastChunks.Load() - before; (fast > 0) != c.fast {
				t.Errorf("fast path decoded %d chunks, want them %v", fast, map[bool]string{true: "> 0", false: "0"}[c.fast])
			}
			if pool.Reused() == 0 {
				t.Errorf("the pool never reused memory")
			}
			if n := pool.Allocated(); n != 0 {
				t.Errorf("pool Allocated() = %d after releasing every record, want 0", n)
			}
		})
	}
}

func mmapFileWith(t *testing.T, props ...pq.WriterProperty) string {
	t.Helper()
	recs := fastRecordsOf(t)
	path := fmt.Sprintf("%s/f.parquet", t.TempDir())
	writeFastFile(t, path, recs, append(props, pq.WithMaxRowGroupLength(1000), pq.WithDataPageSize(2<<10))...)
	return path
}

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

// readAllChecked decodes every row group of path into mem and checks every
// column against the generators.
func readAllChecked(t *testing.T, path string, mem memory.Allocator) {
	t.Helper()
	ctx := context.Background()
	f := mustOpen(t, path, mmapCols, fillOptions(map[string]float64{"maybe": -1}))
	first := 0
	for rg := range f.rgs {
		rec, err := f.readRowGroup(ctx, rg, mem)
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
}
