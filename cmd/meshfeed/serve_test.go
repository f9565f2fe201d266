package main

import (
	"context"
	"testing"
	"time"
)

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

// TestWatchParent: the server is told once its parent is gone (getppid
// changes), at once when it is gone at start, and never while it lives.
func TestWatchParent(t *testing.T) {
	for _, c := range []struct {
		name      string
		ppids     []int // getppid's answers, the last repeated
		wantGone  bool
		wantCalls int // getppid calls by the time gone is called (0: any)
	}{
		{"gone at start", []int{1}, true, 1},
		{"gone after three checks", []int{42, 42, 42, 7}, true, 4},
		{"alive", []int{42}, false, 0},
	} {
		calls := 0
		getppid := func() int {
			calls++
			return c.ppids[min(calls, len(c.ppids))-1]
		}
		// watchParent returns once it called gone, or when ctx ends.
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		gone := make(chan int, 1)
		watchParent(ctx, 42, getppid, time.Millisecond, func() { gone <- calls })
		select {
		case n := <-gone:
			if !c.wantGone {
				t.Errorf("%s: gone called after %d checks, want never", c.name, n)
			} else if c.wantCalls != 0 && n != c.wantCalls {
				t.Errorf("%s: gone called after %d checks, want %d", c.name, n, c.wantCalls)
			}
		default:
			if c.wantGone {
				t.Errorf("%s: watchParent returned without calling gone", c.name)
			}
		}
		cancel()
	}
}
