package objstore

import (
	"sync"
	"sync/atomic"
)

// DefaultDropBatch is the default of [WithDropBatch]: the bytes of window
// pages a [LocalStore] holds back before it gives them back in one
// system call.
const DefaultDropBatch = 8 << 20

// dropRunsMax bounds the runs given back in one call (far under IOV_MAX).
const dropRunsMax = 64

// dropQueue holds the pages windows gave back ([Window.Drop]) until
// batch bytes of them are pending, then gives them back together: one
// process_madvise(2) call for every run of every window, where each Drop
// was a madvise(2) call of its own. Giving pages back removes them from
// the page tables, and the kernel flushes the TLB of every CPU the
// process runs on once per call (an interprocessor interrupt, a VM exit
// on a virtual machine); a mixture's readers drop their pieces' pages a
// megabyte at a time, so a call's flush was much of its cost
// (BENCHMARKS.md). The queue holds at most batch bytes more in the
// process's page tables (as file-backed, clean, shared pages).
//
// Where the kernel refuses process_madvise on the process itself (Linux
// before 6.13, or a seccomp filter), or batch is 0, each Drop gives its
// pages back at once, as before.
type dropQueue struct {
	batch int64

	mu      sync.Mutex
	runs    []dropRun
	pending int64 // bytes of runs
	// calls counts the system calls that gave pages back (tests).
	calls atomic.Int64
}

// dropRun is m[lo:hi] of window w, whole pages.
type dropRun struct {
	w      *Window
	lo, hi int64
}

// noBatchDrops is set once the kernel refused process_madvise for this
// process: every queue then gives each Drop back at once.
var noBatchDrops atomic.Bool

// add queues m[lo:hi] of w, or gives it back at once (no queue, batch 0,
// or no process_madvise); a run that meets one of w's queued runs joins
// it.
func (q *dropQueue) add(w *Window, lo, hi int64) {
	if q == nil || q.batch <= 0 || noBatchDrops.Load() {
		q.drop(w, lo, hi)
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	joined := false
	for i := range q.runs {
		r := &q.runs[i]
		if r.w == w && r.lo <= hi && lo <= r.hi {
			q.pending -= r.hi - r.lo
			r.lo, r.hi = min(r.lo, lo), max(r.hi, hi)
			q.pending += r.hi - r.lo
			joined = true
			break
		}
	}
	if !joined {
		q.runs = append(q.runs, dropRun{w, lo, hi})
		q.pending += hi - lo
	}
	if q.pending >= q.batch || len(q.runs) >= dropRunsMax {
		q.flushLocked()
	}
}

// drop gives m[lo:hi] of w back in a call of its own.
func (q *dropQueue) drop(w *Window, lo, hi int64) {
	if q != nil {
		q.calls.Add(1)
	}
	if madviseDrop(w.m[lo:hi]) == nil {
		w.stats.BytesDropped.Add(hi - lo)
	}
}

// flushLocked gives every queued run back: in one call, or one call each
// where the kernel refuses the batch.
func (q *dropQueue) flushLocked() {
	if len(q.runs) == 0 {
		return
	}
	bufs := make([][]byte, len(q.runs))
	for i, r := range q.runs {
		bufs[i] = r.w.m[r.lo:r.hi]
	}
	q.calls.Add(1)
	done, err := madviseDropAll(bufs)
	if err == errDropsUnbatched {
		noBatchDrops.Store(true)
	}
	if err == nil && done == q.pending {
		for _, r := range q.runs {
			r.w.stats.BytesDropped.Add(r.hi - r.lo)
		}
	} else {
		for _, r := range q.runs {
			q.drop(r.w, r.lo, r.hi) // a page given back twice is harmless
		}
	}
	clear(q.runs)
	q.runs, q.pending = q.runs[:0], 0
}

// forget removes w's queued runs: Release calls it before it unmaps w, so
// that no later call gives back a range the process may have mapped
// again for something else.
func (q *dropQueue) forget(w *Window) {
	if q == nil {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	runs := q.runs[:0]
	for _, r := range q.runs {
		if r.w == w {
			q.pending -= r.hi - r.lo
		} else {
			runs = append(runs, r)
		}
	}
	clear(q.runs[len(runs):])
	q.runs = runs
}

// queued returns the bytes queued (tests).
func (q *dropQueue) queued() int64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.pending
}
