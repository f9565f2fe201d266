package main

import (
	"flag"
	"fmt"

	"github.com/meshfeed/meshfeed/objstore"
)

// defaultCacheSize is --cache-size's default.
const defaultCacheSize = 10 << 30

// cacheFlags are the --cache-dir and --cache-size flags of the commands that
// read remote data (serve, read, plan).
type cacheFlags struct {
	dir  *string
	size *int64
}

// newCacheFlags defines --cache-dir and --cache-size on fs.
func newCacheFlags(fs *flag.FlagSet) *cacheFlags {
	return &cacheFlags{
		dir: fs.String("cache-dir", "", "keep the bytes read from remote stores (gs://) in this directory, so that later epochs "+
			"and restarted servers read them from local disk (created if needed; see objstore.DiskCache); off when empty"),
		size: fs.Int64("cache-size", defaultCacheSize, "bytes the --cache-dir cache may hold; least recently used blocks are removed beyond it"),
	}
}

// open returns the cache the flags ask for (nil when --cache-dir is empty)
// and the store options that read remote objects through it.
func (f *cacheFlags) open() (*objstore.DiskCache, []objstore.MuxOption, error) {
	if *f.dir == "" {
		return nil, nil, nil
	}
	if *f.size <= 0 {
		return nil, nil, fmt.Errorf("--cache-size %d: want a positive number of bytes", *f.size)
	}
	c, err := objstore.NewDiskCache(*f.dir, *f.size)
	if err != nil {
		return nil, nil, fmt.Errorf("--cache-dir %s: %w", *f.dir, err)
	}
	return c, []objstore.MuxOption{objstore.WithDiskCache(c)}, nil
}
