package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/meshfeed/meshfeed/internal/arrowmem"
	"github.com/meshfeed/meshfeed/loader"
	"github.com/meshfeed/meshfeed/objstore"
)

var readStdout io.Writer = os.Stdout

// runRead reads a whole dataset through the loader (footers, coalesced ranged
// reads, read-ahead, decode) and reports throughput: the loader alone, with
// no planning, cutting or network.
func runRead(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("read", flag.ContinueOnError)
	cols := stringList{}
	fs.Var(&cols, "columns", "comma-separated columns to read (default: all)")
	workers := fs.Int("workers", runtime.GOMAXPROCS(0), "row groups decoded at once")
	readAhead := fs.Int64("read-ahead", loader.DefaultReadAhead, "in-flight byte budget (compressed + decoded)")
	mapCache := fs.Int64("map-cache", 0, "keep local files of up to this many bytes in all mapped between reads (see objstore.WithMapCache); 0: off")
	cache := newCacheFlags(fs)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: meshfeed read [--columns a,b] [--workers N] [--read-ahead BYTES] [--map-cache BYTES] [--cache-dir DIR] URI...")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return fmt.Errorf("read: no dataset URI given")
	}
	if *readAhead < 0 {
		return fmt.Errorf("read: --read-ahead %d must be >= 0 (0 reads one row group at a time)", *readAhead)
	}
	_, cacheOpts, err := cache.open()
	if err != nil {
		return err
	}
	store, err := objstore.NewStore(ctx, append(cacheOpts, objstore.WithLocalOptions(mapCacheOptions(*mapCache)...))...)
	if err != nil {
		return err
	}
	defer store.Close()
	t0 := time.Now()
	ds, err := loader.Open(ctx, store, fs.Args(), loader.WithColumns(cols...), loader.WithDecodeWorkers(*workers))
	if err != nil {
		return err
	}
	planned := time.Since(t0)
	// Memory is bounded by configuration, not by the dataset: tell the Go
	// runtime the bound (read-ahead budget + two row groups + 64 MiB for the
	// program itself) so that garbage-collector headroom does not exceed it.
	// GOMEMLIMIT, when set, wins.
	if os.Getenv("GOMEMLIMIT") == "" {
		var largest int64
		for _, f := range ds.Files {
			for _, rg := range f.RowGroups {
				largest = max(largest, rg.DecodedBytes)
			}
		}
		debug.SetMemoryLimit(*readAhead + 2*largest + 64<<20)
	}
	t1 := time.Now()
	r := ds.NewReader(ctx, ds.RowGroups(), memory.DefaultAllocator, loader.WithReaderReadAhead(*readAhead))
	defer r.Close()
	var rows, decoded int64
	for {
		rec, _, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		rows += rec.NumRows()
		decoded += arrowmem.RecordBytes(rec)
		rec.Release()
	}
	el := time.Since(t1).Seconds()
	st := r.Stats()
	fmt.Fprintf(readStdout, "read %d rows in %d row groups of %d files: planning %.3fs, reading %.3fs\n",
		rows, st.RowGroups.Load(), len(ds.Files), planned.Seconds(), el)
	fmt.Fprintf(readStdout, "  %.0f rows/s, %.2f GB/s decoded Arrow bytes, %.2f GB/s fetched (%d ranged reads), %d workers\n",
		float64(rows)/el, float64(decoded)/el/1e9, float64(st.FetchedBytes.Load())/el/1e9, st.Fetches.Load(), *workers)
	if ss := store.Stats(); *cache.dir != "" {
		fmt.Fprintf(readStdout, "  cache: %d hits, %d misses, %d bytes saved, %d evictions, %d corrupt, %d write errors\n",
			ss.CacheHits.Load(), ss.CacheMisses.Load(), ss.CacheBytesSaved.Load(), ss.CacheEvictions.Load(), ss.CacheCorrupt.Load(), ss.CacheWriteErrors.Load())
	}
	return nil
}

// mapCacheOptions configures the local store for --map-cache: the cache,
// and room for many files' handles, which the cached mappings live with.
func mapCacheOptions(bytes int64) []objstore.LocalOption {
	if bytes <= 0 {
		return nil
	}
	return []objstore.LocalOption{objstore.WithMapCache(bytes), objstore.WithMaxOpenFiles(4096)}
}
