package format

import (
	"flag"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/float16"

	"github.com/meshfeed/meshfeed/internal/fastgen"
	"github.com/meshfeed/meshfeed/internal/testseed"
)

// The test columns' generators (internal/fastgen), under the names the
// tests use.
const fastListSize = fastgen.ListSize

var (
	genID         = fastgen.GenID
	genLabel      = fastgen.GenLabel
	genFeat       = fastgen.GenFeat
	genMaybe      = fastgen.GenMaybe
	genTok        = fastgen.GenTok
	genTokLen     = fastgen.GenTokLen
	genPixel      = fastgen.GenPixel
	genETokLen    = fastgen.GenETokLen
	fastRecord    = fastgen.Record
	writeFastFile = fastgen.WriteFile
	checkColumn   = fastgen.CheckColumn
	plainChunks   = fastgen.PlainChunks
	vlistLen      = fastgen.VlistLen
	vlistRecord   = fastgen.VlistRecord
	checkVlist    = fastgen.CheckVlist
	testRecord    = fastgen.MixedRecord
	writeParquet  = fastgen.WriteParquet
)

var formatSeed = flag.Uint64("format.seed", 0, "seed for the decode tests' random data (0: MESHFEED_SEED, else time-based)")

// fastSeed returns the seed of a randomized test: -format.seed,
// MESHFEED_SEED, or the time.
func fastSeed(t *testing.T) uint64 { return testseed.Get(t, *formatSeed, "format.seed") }

// testSeed is fastSeed for a testing.TB.
func testSeed(t testing.TB) uint64 { return testseed.Get(t, *formatSeed, "format.seed") }

func float16Of(f float32) float16.Num { return float16.New(f) }
