package transport

import (
	"context"
	"sync"
)

// budget is the server's memory account (MemoryAccount): the bytes of
// records queued across all streams (acquire, release) and what streams
// reserve for their life (reserve, unreserve) count against one limit.
// A step waits while the account is spent, unless no step is queued at all
// (so that a step larger than what reservations leave cannot wait forever);
// a reservation waits while the account is spent, unless no other is held.
// So the bytes held stay within the limit plus one step plus one
// reservation, and nothing waits on itself.
type budget struct {
	limit int64 // 0: unbounded

	mu       sync.Mutex
	used     int64         // queued steps
	reserved int64         // streams' reservations
	changed  chan struct{} // closed and replaced on every release
}

func newBudget(limit int64) *budget {
	return &budget{limit: limit, changed: make(chan struct{})}
}

// acquire takes n bytes of queued steps, waiting until they fit (or no
// other step is queued) or ctx is done.
func (b *budget) acquire(ctx context.Context, n int64) error { return b.take(ctx, n, &b.used) }

// release returns n bytes and wakes the waiters.
func (b *budget) release(n int64) {
	b.mu.Lock()
	b.used -= n
	b.wake()
	b.mu.Unlock()
}

// wake wakes every waiter; b.mu is held.
func (b *budget) wake() {
	close(b.changed)
	b.changed = make(chan struct{})
}

// reserve takes n bytes for a stream's life, waiting until they fit (or no
// other reservation is held) or ctx is done.
func (b *budget) reserve(ctx context.Context, n int64) error { return b.take(ctx, n, &b.reserved) }

// take adds n to *into (b.used or b.reserved) once the budget has room for
// it, or once *into is 0 (so that the first of each kind never waits, and
// no one waits on itself), or returns ctx's error.
func (b *budget) take(ctx context.Context, n int64, into *int64) error {
	for {
		b.mu.Lock()
		if b.limit == 0 || *into == 0 || b.reserved+b.used+n <= b.limit {
			*into += n
			b.mu.Unlock()
			return nil
		}
		ch := b.changed
		b.mu.Unlock()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ch:
		}
	}
}

// tryReserve takes n bytes if they fit now.
func (b *budget) tryReserve(n int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.limit == 0 || b.reserved+b.used+n <= b.limit {
		b.reserved += n
		return true
	}
	return false
}

// unreserve returns n reserved bytes and wakes the waiters.
func (b *budget) unreserve(n int64) {
	b.mu.Lock()
	b.reserved -= n
	b.wake()
	b.mu.Unlock()
}

// inUse returns the bytes held: queued steps and reservations.
func (b *budget) inUse() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used + b.reserved
}
