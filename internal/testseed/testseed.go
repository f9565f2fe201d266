package testseed

import (
	"os"
	"strconv"
	"testing"
	"time"
)

// Get returns flagValue when it is not 0, else $MESHFEED_SEED (a value that
// does not parse fails the test), else the clock, and logs the seed with how
// to replay it. flagName is the flag that set flagValue ("" when the package
// has none).
func Get(t testing.TB, flagValue uint64, flagName string) uint64 {
	t.Helper()
	seed := flagValue
	if seed == 0 {
		if env := os.Getenv("MESHFEED_SEED"); env != "" {
			v, err := strconv.ParseUint(env, 10, 64)
			if err != nil {
				t.Fatalf("MESHFEED_SEED=%q: %v", env, err)
			}
			seed = v
		}
	}
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	if flagName != "" {
		t.Logf("seed %d (replay with -%s=%d or MESHFEED_SEED=%d)", seed, flagName, seed, seed)
	} else {
		t.Logf("seed %d (replay with MESHFEED_SEED=%d)", seed, seed)
	}
	return seed
}
