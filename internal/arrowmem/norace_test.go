//go:build !race

package arrowmem

const raceEnabled = false
