package loader_test

import (
	"flag"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/float16"

	"github.com/meshfeed/meshfeed/internal/fastgen"
	"github.com/meshfeed/meshfeed/internal/testseed"
)

var decodeSeed = flag.Uint64("loader.seed", 0, "seed for the decode tests' random data (0: MESHFEED_SEED, else time-based)")

// testSeed returns the seed for a randomized test and logs it, so a failure
// can be replayed with -loader.seed=N or MESHFEED_SEED=N.
func testSeed(t testing.TB) uint64 { return testseed.Get(t, *decodeSeed, "loader.seed") }

func float16Of(f float32) float16.Num { return float16.New(f) }

// The mixed test record and its writer (internal/fastgen).
var (
	testRecord   = fastgen.MixedRecord
	writeParquet = fastgen.WriteParquet
)
