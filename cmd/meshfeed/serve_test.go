package main

import "testing"

// TestGCSettings: the server tells the runtime its memory bound and
// collects at ServeGCPercent, unless GOMEMLIMIT or GOGC say otherwise; an
// unbounded budget sets no limit.
func TestGCSettings(t *testing.T) {
	env := func(kv map[string]string) func(string) string { return func(k string) string { return kv[k] } }
	const mib = 1 << 20
	for _, c := range []struct {
		name       string
		env        map[string]string
		budget     int64
		limit      int64
		percent    int
		maxStreams int
	}{
		{"defaults", nil, 256 * mib, (256 + 2*128 + 128) * mib, ServeGCPercent, 2},
		{"GOGC set", map[string]string{"GOGC": "100"}, 256 * mib, (256 + 2*128 + 128) * mib, -1, 2},
		{"GOMEMLIMIT set", map[string]string{"GOMEMLIMIT": "1GiB"}, 256 * mib, -1, ServeGCPercent, 2},
		{"unbounded budget", nil, 0, -1, ServeGCPercent, 2},
	} {
		limit, percent := gcSettings(env(c.env), c.budget, 128*mib, c.maxStreams)
		if limit != c.limit || percent != c.percent {
			t.Errorf("%s: limit %d, percent %d; want %d, %d", c.name, limit, percent, c.limit, c.percent)
		}
	}
	if ServeGCPercent <= 0 || ServeGCPercent >= 100 {
		t.Errorf("ServeGCPercent %d: want a target below the runtime's default of 100", ServeGCPercent)
	}
}
