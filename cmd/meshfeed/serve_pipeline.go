package main

import (
	"context"

	"github.com/meshfeed/meshfeed/feed"
	"github.com/meshfeed/meshfeed/objstore"
)

// newPipelineBackend builds the real backend (feed: loader, batching and
// shape) for `serve --backend pipeline`. Its errors reach the client with the
// codes of feed's ErrorCodes, which the server applies itself.
// remote configures the remote stores (serve's --s3-* flags).
func newPipelineBackend(ctx context.Context, readAhead, mapCache int64, remote ...objstore.MuxOption) (*feed.Pipeline, error) {
	return feed.NewPipeline(ctx, feed.WithReadAhead(readAhead),
		feed.WithStoreOptions(append([]objstore.MuxOption{objstore.WithLocalOptions(mapCacheOptions(mapCache)...)}, remote...)...))
}
