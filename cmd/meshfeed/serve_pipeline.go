package main

import (
	"context"

	"github.com/meshfeed/meshfeed/loader"
	"github.com/meshfeed/meshfeed/transport"
)

// Wires the loader/batching pipeline into `serve --backend pipeline`. The
// pipeline's errors wrap transport's sentinels (see transport.Pipeline), so no
// extra transport.WithErrorCode rules are needed.
func init() {
	newPipelineBackend = func(ctx context.Context, readAhead, mapCache int64) (transport.Backend, error) {
		return transport.NewPipeline(ctx, transport.WithPipelineReadAhead(readAhead),
			transport.WithPipelineStoreOptions(loader.WithLocalOptions(mapCacheOptions(mapCache)...)))
	}
}
