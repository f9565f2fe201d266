package objstore

import "errors"

// Sentinel errors. Errors returned by this package wrap one of these (test with
// errors.Is) together with the URI, and the range or root, they concern.
var (
	// ErrNotFound: an object, or a glob with no match, does not exist; or
	// the version of it that was listed is gone (overwritten, truncated or
	// replaced since).
	ErrNotFound = errors.New("not found")
	// ErrUnavailable: storage kept failing until the retry budget ran out, or a
	// read stalled past its stall timeout.
	ErrUnavailable = errors.New("storage unavailable")
	// ErrOutsideRoot: a local path lies outside the store's allowed roots
	// (see [WithRoots]), lexically or because a symlink or ".." on the way
	// leads out of its root.
	ErrOutsideRoot = errors.New("outside the allowed roots")
	// ErrUnsupported: a URI scheme no store is registered for, or an
	// operation the store cannot do (mapping a remote object, mmap on a
	// platform without it).
	ErrUnsupported = errors.New("unsupported")
)
