package transport

import (
	"context"
	"sync"
)

// budget bounds the bytes of records queued across all streams. acquire waits
// while the budget is spent; a request larger than the whole budget is
// admitted when nothing else is held, so that it cannot wait forever.
type budget struct {
	limit int64 // 0: unbounded

	mu      sync.Mutex
	used    int64
	changed chan struct{} // closed and replaced on every release
}

func newBudget(limit int64) *budget {
	return &budget{limit: limit, changed: make(chan struct{})}
}

// acquire takes n bytes, waiting until they fit or ctx is done.
func (b *budget) acquire(ctx context.Context, n int64) error {
	for {
		b.mu.Lock()
		if b.limit == 0 || b.used == 0 || b.used+n <= b.limit {
			b.used += n
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

// release returns n bytes and wakes the waiters.
func (b *budget) release(n int64) {
	b.mu.Lock()
	b.used -= n
	close(b.changed)
	b.changed = make(chan struct{})
	b.mu.Unlock()
}

// inUse returns the bytes held.
func (b *budget) inUse() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}
