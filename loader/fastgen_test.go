package loader

import (
	"flag"
	"strconv"
	"testing"

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
)

// fastSeed returns the seed of a randomized test: -loader.seed (registered by
// the external test package of the same binary), MESHFEED_SEED, or the time.
func fastSeed(t *testing.T) uint64 {
	var flagValue uint64
	if f := flag.Lookup("loader.seed"); f != nil {
		flagValue, _ = strconv.ParseUint(f.Value.String(), 10, 64)
	}
	return testseed.Get(t, flagValue, "loader.seed")
}
