package transport

import (
	"fmt"
	"sync"
	"time"
)

// idleClock tells how long a stream has waited for its client to take a
// step (WithIdleTimeout), and closes the stream to new sends once its call
// has given up on it.
//
// A stream also waits for its client when gRPC has taken its steps but not
// written them (the client reads nothing, its connection's buffers are
// full): the steps hold their share of the memory budget, so the next step
// may wait for budget that only the client's reading returns, with no send
// pending. While such steps are held, waiting for the next step counts too.
type idleClock struct {
	mu        sync.Mutex
	since     time.Time // when the pending send began; zero: none pending
	held      int       // steps handed to gRPC and not yet written
	heldWait  time.Time // when the wait for the next step began with steps held; zero: none
	abandoned bool      // the call gave up on the stream: no send may start
}

// handed marks a step handed to gRPC, held until written (a zero-copy
// frame's release).
func (c *idleClock) handed() {
	c.mu.Lock()
	c.held++
	c.mu.Unlock()
}

// written marks a handed step written (or dropped) by gRPC; once none is
// held, waiting for the next step no longer counts.
func (c *idleClock) written() {
	c.mu.Lock()
	if c.held--; c.held <= 0 {
		c.held, c.heldWait = 0, time.Time{}
	}
	c.mu.Unlock()
}

// waitingNext marks the wait for the next step begun (counted while steps
// are held); it returns false once the call has given up on the stream.
func (c *idleClock) waitingNext() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.abandoned {
		return false
	}
	if c.held > 0 {
		c.heldWait = time.Now()
	}
	return true
}

// gotNext marks the wait for the next step over.
func (c *idleClock) gotNext() {
	c.mu.Lock()
	c.heldWait = time.Time{}
	c.mu.Unlock()
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

// abandon gives up on the stream when its pending send, or its wait for
// the next step with steps held, has waited longer than timeout at now; it
// returns how long it has waited (0: nothing pending).
func (c *idleClock) abandon(now time.Time, timeout time.Duration) (time.Duration, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	since := c.since
	if since.IsZero() || (!c.heldWait.IsZero() && c.heldWait.Before(since)) {
		since = c.heldWait
	}
	if since.IsZero() {
		return 0, false
	}
	w := now.Sub(since)
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
