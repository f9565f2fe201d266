// Package testseed gives randomized tests their seed: a package's -PKG.seed
// flag, else $MESHFEED_SEED, else the clock, logged so that a failure can be
// replayed. It owns nothing else.
package testseed
