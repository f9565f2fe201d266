package transport

import "github.com/meshfeed/meshfeed/batching"

// The demo backends of transport's tests plan with batching, as the binary's
// does (batching.RowsPlan).
func init() {
	testDemoPlan = func(rows int64, globalBatch, slices int, lastBatch string) (DemoPlan, error) {
		p, err := batching.RowsPlan(rows, globalBatch, slices, lastBatch)
		if err != nil {
			return nil, err
		}
		return p, nil
	}
}
