package transport

import (
	"fmt"
	"sync/atomic"
	"time"
)

// idleClock tells how long a stream has waited for its client to take a
// step (WithIdleTimeout).
type idleClock struct {
	since atomic.Int64 // unix nanoseconds when the pending send began; 0: none pending
}

// sending marks a send begun; sent marks it done.
func (c *idleClock) sending() { c.since.Store(time.Now().UnixNano()) }
func (c *idleClock) sent()    { c.since.Store(0) }

// waited returns how long the pending send has waited (0: none pending).
func (c *idleClock) waited(now time.Time) time.Duration {
	t := c.since.Load()
	if t == 0 {
		return 0
	}
	return now.Sub(time.Unix(0, t))
}

// wait returns the stream's result from done, or ErrIdle once a send has
// waited longer than timeout (0: never).
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
		case now := <-tick.C:
			if w := c.waited(now); w > timeout {
				return fmt.Errorf("transport: %w: the client took no step for %v (idle timeout %v, --idle-timeout): the server ended the stream to free its slot and memory; reconnect to resume",
					ErrIdle, w.Round(time.Millisecond), timeout)
			}
		}
	}
}
