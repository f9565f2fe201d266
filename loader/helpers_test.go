package loader_test

import (
	"flag"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/float16"
)

var decodeSeed = flag.Uint64("loader.seed", 0, "seed for the decode tests' random data (0: MESHFEED_SEED, else time-based)")

// testSeed returns the seed for a randomized test and logs it, so a failure
// can be replayed with -loader.seed=N or MESHFEED_SEED=N.
func testSeed(t testing.TB) uint64 {
	t.Helper()
	seed := *decodeSeed
	if seed == 0 {
		if s, err := strconv.ParseUint(os.Getenv("MESHFEED_SEED"), 10, 64); err == nil {
			seed = s
		}
	}
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (replay with -loader.seed=%d)", seed, seed)
	return seed
}

func float16Of(f float32) float16.Num { return float16.New(f) }
