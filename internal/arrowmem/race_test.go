//go:build race

package arrowmem

// raceEnabled: the race detector makes sync.Pool drop a quarter of the
// items put in it, at random, so a test of reuse cannot count on one.
const raceEnabled = true
