package transport

import (
	"fmt"
	"sync"
	"time"
)

// idleClock tells how long a stream has waited for its client to take a
// step (WithIdleTimeout), and closes the stream to new sends once its call
// has given up on it.
type idleClock struct {
	mu        sync.Mutex
	since     time.Time // when the pending send began; zero: none pending
	abandoned bool      // the call gave up on the stream: no send may start
}

// sending marks a send begun; it returns false, marking nothing, once the
// call has given up on the stream: then the send must not start, as the
// call may have ended (gRPC does not free a message sent on a stream that
// its call has ended, so the step would never be released).
func (c *idleClock) sending() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.abandoned {
		return false
	}
	c.since = time.Now()
	return true
}

// sent marks the pending send done.
func (c *idleClock) sent() {
	c.mu.Lock()
	c.since = time.Time{}
	c.mu.Unlock()
}

// abandon gives up on the stream when its pending send has waited longer
// than timeout at now; it returns how long the send has waited (0: none
// pending).
func (c *idleClock) abandon(now time.Time, timeout time.Duration) (time.Duration, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.since.IsZero() {
		return 0, false
	}
	w := now.Sub(c.since)
	if w <= timeout {
		return w, false
	}
	c.abandoned = true
	return w, true
}

// wait returns the stream's result from done, or ErrIdle once a send has
// waited longer than timeout (0: never); from then on no send starts.
func (c *idleClock) wait(done <-chan error, timeout time.Duration) error {
	if timeout <= 0 {
		return <-done
	}
	tick := time.NewTicker(min(max(timeout/8, 10*time.Millisecond), 30*time.Second))
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			return err
		case <-tick.C:
			if w, ok := c.abandon(time.Now(), timeout); ok {
				return fmt.Errorf("transport: %w: the client took no step for %v (idle timeout %v, --idle-timeout): the server ended the stream to free its slot and memory; reconnect to resume",
					ErrIdle, w.Round(time.Millisecond), timeout)
			}
		}
	}
}
