package objstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// RetryPolicy is the retry budget, backoff and stall timeout of a remote
// store's reads (the S3 and HTTPS stores take one: WithS3Retry,
// WithHTTPSRetry; GCS has its own options with the same meaning:
// WithRetryBudget, WithRetryBackoff, WithStallTimeout). Zero or negative
// fields mean the defaults.
type RetryPolicy struct {
	// StallTimeout aborts and retries an attempt when neither response
	// headers nor body bytes arrived for this long. Default
	// DefaultStallTimeout.
	StallTimeout time.Duration
	// MaxAttempts: a ReadAt fails with ErrUnavailable after this many
	// consecutive requests that received no bytes. Default
	// DefaultRetryAttempts.
	MaxAttempts int
	// MaxDuration: a ReadAt fails with ErrUnavailable when a retry would
	// start more than this long after it began (a transfer that keeps making
	// progress is never cut off). Default DefaultRetryDuration.
	MaxDuration time.Duration
	// InitialWait is about the first wait between retries, doubling up to
	// MaxWait, jittered. Defaults DefaultRetryInitialWait and
	// DefaultRetryMaxWait.
	InitialWait, MaxWait time.Duration
}

// config returns the policy as a retryConfig with the defaults filled in.
func (p RetryPolicy) config() retryConfig {
	c := retryConfig{stallTimeout: p.StallTimeout, maxAttempts: p.MaxAttempts, maxDuration: p.MaxDuration,
		initialWait: p.InitialWait, maxWait: p.MaxWait}
	c.setDefaults()
	return c
}

// contentRange parses a Content-Range header "bytes FIRST-LAST/TOTAL"
// (TOTAL may be "*", returned as -1).
func contentRange(h string) (first, last, total int64, ok bool) {
	rest, found := strings.CutPrefix(h, "bytes ")
	if !found {
		return 0, 0, 0, false
	}
	rng, tot, found := strings.Cut(rest, "/")
	if !found {
		return 0, 0, 0, false
	}
	a, b, found := strings.Cut(rng, "-")
	if !found {
		return 0, 0, 0, false
	}
	var err1, err2, err3 error
	first, err1 = strconv.ParseInt(a, 10, 64)
	last, err2 = strconv.ParseInt(b, 10, 64)
	total = -1
	if tot != "*" {
		total, err3 = strconv.ParseInt(tot, 10, 64)
	}
	if err1 != nil || err2 != nil || err3 != nil || first < 0 || last < first || (total >= 0 && last >= total) {
		return 0, 0, 0, false
	}
	return first, last, total, true
}

// errChanged is returned by a ranged attempt whose response is of another
// version of the object than the one the read is pinned to.
type errChanged struct{ was, now string }

func (e errChanged) Error() string {
	if e.now == "" {
		return fmt.Sprintf("the object changed since it was listed (it was %s)", e.was)
	}
	return fmt.Sprintf("the object changed since it was listed (it was %s, now %s)", e.was, e.now)
}

// changedErr is the error of a read whose object was replaced after it was
// listed: ErrNotFound, as for a GCS generation that no longer exists.
func changedErr(what string, e errChanged) error {
	return fmt.Errorf("objstore: %s: %w: %s; the dataset was rewritten during the epoch: restart the job on the new data: %w",
		what, ErrNotFound, e.Error(), errObjectChanged)
}

// errObjectChanged is wrapped, beside ErrNotFound, by the error of a read
// whose object was replaced after it was listed.
var errObjectChanged = errors.New("object replaced after it was listed")

// errNoRange is returned by a ranged attempt whose answer is not the range
// asked for: the whole object (the server ignored Range), another range, or
// an encoded body.
var errNoRange = errors.New("the server did not send the byte range asked for")

// rangedBody reads the body of one ranged response into p (the bytes wanted
// at off): first and total come from its Content-Range. It returns how many
// bytes it placed, and errPastEnd when the object ends before the range.
func rangedBody(body io.Reader, p []byte, off, first, total int64) (int, error) {
	if first != off {
		return 0, fmt.Errorf("the server sent a range starting at byte %d, not %d: %w", first, off, errNoRange)
	}
	n, err := io.ReadFull(body, p)
	if err == io.EOF || err == io.ErrUnexpectedEOF {
		if total >= 0 && off+int64(len(p)) > total {
			return n, errPastEnd{size: total}
		}
		return n, fmt.Errorf("body ended after %d of %d bytes: %w", n, len(p), err)
	}
	return n, err
}

// metaCall runs one metadata request (a HEAD, a listing page) under the
// store's retry budget and stall timeout, as reads are: call is tried again
// (with backoff, within the budget) while final returns nil for its error.
// what names the call in errors ("stat s3://b/k"). Nothing is counted in the
// store's Stats.
func metaCall(ctx context.Context, cfg *retryConfig, what string, call func(ctx context.Context) error, final func(error) error) error {
	var one [1]byte
	t := newReadTracker(cfg, new(Stats))
	defer t.stop()
	return t.read(ctx, what, one[:], 0, func(ctx context.Context, _ []byte, _ int64) (int, error) {
		if err := call(ctx); err != nil {
			return 0, err
		}
		return 1, nil
	}, final)
}
