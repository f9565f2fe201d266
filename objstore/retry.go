package objstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults of the retry options of the HTTP stores (GCSStore).
const (
	// DefaultStallTimeout: see WithStallTimeout.
	DefaultStallTimeout = 30 * time.Second
	// DefaultRetryAttempts: see WithRetryBudget.
	DefaultRetryAttempts = 10
	// DefaultRetryDuration: see WithRetryBudget.
	DefaultRetryDuration = 2 * time.Minute
	// DefaultRetryInitialWait: see WithRetryBackoff.
	DefaultRetryInitialWait = 100 * time.Millisecond
	// DefaultRetryMaxWait: see WithRetryBackoff.
	DefaultRetryMaxWait = 10 * time.Second
)

// Retries of ranged reads over HTTP, for every HTTP-based store (GCSStore
// today). A store uses them in three steps: its config holds a retryConfig
// (its options set the fields; setDefaults fills the rest), its HTTP client
// sends through a trackingTransport, and its ReadAt makes a readTracker and
// calls its read method with one ranged request (the part of p still
// missing) and a classifier of the errors that retrying cannot help.
//
// Why a transport: the storage client's HTTP reader reopens a broken body by
// itself, inside one Read call, with no backoff and no limit: a connection
// that dies at byte 0 on every reopen loops until the context ends, and a
// stalled body blocks until then too. trackingTransport sees every request
// of a ReadAt (the store's own attempts and the client's reopens alike) and
// every byte of their bodies, and applies one budget to all of them:
//
//   - each request after the first of a ReadAt is a retry; it waits a
//     jittered exponential backoff unless bytes arrived since the previous
//     request, in which case it resumes at once;
//   - after maxAttempts consecutive requests without progress, or when the
//     next request would start after the read's time budget, the transport
//     refuses to send it and the ReadAt fails with ErrUnavailable;
//   - a watchdog cancels the current attempt when neither response headers
//     nor body bytes arrived for stallTimeout.

// errRetryBudget is what trackingTransport returns instead of sending a
// request once a read's retry budget is spent.
var errRetryBudget = errors.New("retry budget exhausted")

// errStalled is the cancellation cause of an attempt the watchdog aborted.
var errStalled = errors.New("read stalled")

type trackerKey struct{}

// retryConfig is the retry budget, backoff and stall timeout of an HTTP
// store's reads (see WithRetryBudget, WithRetryBackoff, WithStallTimeout).
type retryConfig struct {
	stallTimeout time.Duration
	maxAttempts  int
	maxDuration  time.Duration
	initialWait  time.Duration
	maxWait      time.Duration
}

// setDefaults replaces zero or negative fields by the package defaults.
func (c *retryConfig) setDefaults() {
	if c.stallTimeout <= 0 {
		c.stallTimeout = DefaultStallTimeout
	}
	if c.maxAttempts <= 0 {
		c.maxAttempts = DefaultRetryAttempts
	}
	if c.maxDuration <= 0 {
		c.maxDuration = DefaultRetryDuration
	}
	if c.initialWait <= 0 {
		c.initialWait = DefaultRetryInitialWait
	}
	if c.maxWait <= 0 {
		c.maxWait = DefaultRetryMaxWait
	}
	c.maxWait = max(c.maxWait, c.initialWait)
}

// readTracker follows one ReadAt across all its HTTP requests.
type readTracker struct {
	cfg      *retryConfig
	stats    *StoreStats
	start    time.Time
	deadline time.Time

	progress atomic.Int64 // body bytes received from successful responses

	mu           sync.Mutex
	requests     int   // requests sent so far
	lastProgress int64 // progress when the previous request was sent
	failures     int   // consecutive requests that made no progress
	stalls       int
	lastFailure  string
	cancel       context.CancelCauseFunc // of the current attempt
	timer        *time.Timer
	done         bool
	gaveUp       bool
}

func newReadTracker(cfg *retryConfig, stats *StoreStats) *readTracker {
	now := time.Now()
	return &readTracker{cfg: cfg, stats: stats, start: now, deadline: now.Add(cfg.maxDuration)}
}

// read fills p with the bytes at off by attempts of once, a ranged request
// of the bytes still missing that returns how many it placed, under the
// tracker's budget; a read that breaks off resumes at the first missing
// byte. final classifies a failed attempt's error: non-nil ends the read
// with that error (past the end, not found, permission: retrying cannot
// help), nil lets the budget decide. what names the read in errors
// ("read gs://b/o [0, 10)"). It counts a successful read in the stats.
func (t *readTracker) read(ctx context.Context, what string, p []byte, off int64,
	once func(ctx context.Context, p []byte, off int64) (int, error), final func(error) error) error {
	done := 0
	for {
		before := t.requestCount()
		actx, cancel := t.attempt(ctx)
		n, err := once(actx, p[done:], off+int64(done))
		stalled := errors.Is(context.Cause(actx), errStalled)
		cancel(nil)
		t.endAttempt()
		done += n
		if err == nil {
			t.stats.Reads.Add(1)
			t.stats.BytesRead.Add(int64(len(p)))
			return nil
		}
		switch {
		case ctx.Err() != nil:
			return fmt.Errorf("objstore: %s: %w", what, context.Cause(ctx))
		case errors.Is(err, errRetryBudget):
			return t.unavailable(what, err)
		}
		if ferr := final(err); ferr != nil {
			return ferr
		}
		if !stalled && t.requestCount() == before {
			// Failed before sending anything: retrying cannot help.
			return fmt.Errorf("objstore: %s: %w", what, err)
		}
	}
}

// attempt returns a context for one attempt of the read; its requests are
// tracked and the watchdog cancels it when it stalls.
func (t *readTracker) attempt(ctx context.Context) (context.Context, context.CancelCauseFunc) {
	actx, cancel := context.WithCancelCause(context.WithValue(ctx, trackerKey{}, t))
	t.mu.Lock()
	t.cancel = cancel
	t.mu.Unlock()
	return actx, cancel
}

// requestCount returns how many requests were sent so far.
func (t *readTracker) requestCount() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.requests
}

// beforeRequest accounts for a request about to be sent, waits out the
// backoff when it is a retry, refuses it when the budget is spent, and arms
// the stall watchdog.
func (t *readTracker) beforeRequest(ctx context.Context) error {
	t.mu.Lock()
	t.stopTimerLocked()
	p := t.progress.Load()
	var wait time.Duration
	if t.requests > 0 {
		if p > t.lastProgress {
			t.failures = 0 // the last request broke off after progress: resume now
		} else {
			t.failures++
			if t.failures >= t.cfg.maxAttempts {
				t.gaveUp = true
				t.mu.Unlock()
				return errRetryBudget
			}
			wait = t.cfg.backoff(t.failures)
		}
		if time.Now().Add(wait).After(t.deadline) {
			t.gaveUp = true
			t.mu.Unlock()
			return errRetryBudget
		}
		t.stats.Retries.Add(1)
		if p > 0 {
			t.stats.Resumes.Add(1)
		}
	}
	t.requests++
	t.lastProgress = p
	t.mu.Unlock()

	if wait > 0 {
		timer := time.NewTimer(wait)
		select {
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
			return context.Cause(ctx)
		}
	}

	t.mu.Lock()
	defer t.mu.Unlock()
	t.armTimerLocked()
	return nil
}

func (t *readTracker) armTimerLocked() {
	if t.done || t.cfg.stallTimeout <= 0 {
		return
	}
	if t.timer == nil {
		t.timer = time.AfterFunc(t.cfg.stallTimeout, t.onStall)
		return
	}
	t.timer.Reset(t.cfg.stallTimeout)
}

func (t *readTracker) stopTimerLocked() {
	if t.timer != nil {
		t.timer.Stop()
	}
}

func (t *readTracker) onStall() {
	t.mu.Lock()
	if t.done {
		t.mu.Unlock()
		return
	}
	t.stalls++
	t.lastFailure = fmt.Sprintf("no progress for %v", t.cfg.stallTimeout)
	cancel := t.cancel
	t.mu.Unlock()
	if cancel != nil {
		cancel(errStalled)
	}
}

// onProgress records n body bytes and pushes the watchdog back.
func (t *readTracker) onProgress(n int) {
	t.progress.Add(int64(n))
	t.mu.Lock()
	if t.timer != nil && !t.done {
		t.timer.Reset(t.cfg.stallTimeout)
	}
	t.mu.Unlock()
}

func (t *readTracker) onFailure(what string) {
	t.mu.Lock()
	t.lastFailure = what
	t.mu.Unlock()
}

// endAttempt disarms the watchdog between attempts.
func (t *readTracker) endAttempt() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.stopTimerLocked()
}

// stop disarms the watchdog; the read is over.
func (t *readTracker) stop() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.done = true
	t.stopTimerLocked()
}

// unavailable is the error of a read that ran out of budget.
func (t *readTracker) unavailable(what string, lastErr error) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	last := t.lastFailure
	if last == "" && lastErr != nil {
		last = lastErr.Error()
	}
	return fmt.Errorf("objstore: %s: %w: gave up after %d requests in %v (%d stalled; budget %d attempts without progress, %v); last failure: %s",
		what, ErrUnavailable, t.requests, time.Since(t.start).Round(time.Millisecond), t.stalls,
		t.cfg.maxAttempts, t.cfg.maxDuration, last)
}

// trackingTransport applies a readTracker found in a request's context.
type trackingTransport struct {
	base http.RoundTripper
}

func (tt *trackingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	t, _ := req.Context().Value(trackerKey{}).(*readTracker)
	if t == nil {
		return tt.base.RoundTrip(req)
	}
	if err := t.beforeRequest(req.Context()); err != nil {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, err
	}
	resp, err := tt.base.RoundTrip(req)
	if err != nil {
		t.onFailure(err.Error())
		return nil, err
	}
	if resp.StatusCode/100 != 2 {
		t.onFailure(resp.Status)
		return resp, nil
	}
	t.onProgress(0) // headers arrived: the watchdog now times the body
	resp.Body = &trackedBody{ReadCloser: resp.Body, t: t}
	return resp, nil
}

func (tt *trackingTransport) CloseIdleConnections() {
	if c, ok := tt.base.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

type trackedBody struct {
	io.ReadCloser
	t *readTracker
}

func (b *trackedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 {
		b.t.onProgress(n)
	}
	if err != nil && err != io.EOF {
		b.t.onFailure(err.Error())
	}
	return n, err
}

// backoff returns the wait before the retry that follows the given number of
// consecutive failures: exponential from initialWait, capped at maxWait,
// with the upper half jittered.
func (c *retryConfig) backoff(failures int) time.Duration {
	d := c.initialWait
	for i := 1; i < failures && d < c.maxWait; i++ {
		d *= 2
	}
	d = min(d, c.maxWait)
	if d <= 1 {
		return d
	}
	return d/2 + rand.N(d/2)
}
