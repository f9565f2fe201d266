package main

import (
	"context"

	"github.com/meshfeed/meshfeed/feed"
	"github.com/meshfeed/meshfeed/objstore"
)

// newPipelineBackend builds the real backend (feed: loader, batching and
// shape) for `serve --backend pipeline`. Its errors reach the client with the
// codes of feed's ErrorCodes, which the server applies itself.
// storeOpts add to the store's options (the disk cache of --cache-dir).
func newPipelineBackend(ctx context.Context, readAhead, mapCache int64, storeOpts ...objstore.MuxOption) (*feed.Pipeline, error) {
	return feed.NewPipeline(ctx, feed.WithReadAhead(readAhead),
		feed.WithStoreOptions(append([]objstore.MuxOption{objstore.WithLocalOptions(mapCacheOptions(mapCache)...)}, storeOpts...)...))
}
