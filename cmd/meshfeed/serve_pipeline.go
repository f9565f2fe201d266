package main

import (
	"context"

	"github.com/meshfeed/meshfeed/feed"
	"github.com/meshfeed/meshfeed/objstore"
)

// newPipelineBackend builds the real backend (feed: loader, batching and
// shape) for `serve --backend pipeline`. Its errors reach the client with the
// codes of feed's ErrorCodes, which the server applies itself. store adds
// options for the remote stores (--s3-* flags, --azure-endpoint) and the
// disk cache of --cache-dir.
func newPipelineBackend(ctx context.Context, readAhead, mapCache int64, store ...objstore.MuxOption) (*feed.Pipeline, error) {
	return feed.NewPipeline(ctx, feed.WithReadAhead(readAhead),
		feed.WithStoreOptions(append([]objstore.MuxOption{objstore.WithLocalOptions(mapCacheOptions(mapCache)...)}, store...)...))
}

// azureStoreOptions are the Azure store's options of --azure-endpoint (none
// when it is empty: the endpoint of the credentials, or Azure's).
func azureStoreOptions(endpoint string) []objstore.MuxOption {
	if endpoint == "" {
		return nil
	}
	return []objstore.MuxOption{objstore.WithAzureOptions(objstore.WithAzureEndpoint(endpoint))}
}
