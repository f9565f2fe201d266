package main

import "testing"

// TestGCLimit: the server tells the runtime its memory bound, unless
// GOMEMLIMIT says otherwise; an unbounded budget sets no limit.
func TestGCLimit(t *testing.T) {
	env := func(kv map[string]string) func(string) string { return func(k string) string { return kv[k] } }
	const mib = 1 << 20
	for _, c := range []struct {
		name          string
		env           map[string]string
		budget, limit int64
	}{
		{"defaults", nil, 256 * mib, (256 + 2*128 + 128) * mib},
		{"GOGC set", map[string]string{"GOGC": "50"}, 256 * mib, (256 + 2*128 + 128) * mib},
		{"GOMEMLIMIT set", map[string]string{"GOMEMLIMIT": "1GiB"}, 256 * mib, -1},
		{"unbounded budget", nil, 0, -1},
	} {
		if limit := gcLimit(env(c.env), c.budget, 128*mib, 2); limit != c.limit {
			t.Errorf("%s: limit %d, want %d", c.name, limit, c.limit)
		}
	}
}
