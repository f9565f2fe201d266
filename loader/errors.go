package loader

import "errors"

// Sentinel errors. Errors returned by this package wrap one of these (test with
// errors.Is) together with the object, row group and column they concern.
var (
	// ErrNotFound: an object, or a glob with no match, does not exist.
	ErrNotFound = errors.New("not found")
	// ErrCorrupt: a file's bytes are not valid Parquet or Arrow IPC (bad magic,
	// truncated or undecodable footer, corrupt page).
	ErrCorrupt = errors.New("corrupt file")
	// ErrUnsupported: a column type or encoding meshfeed does not decode.
	ErrUnsupported = errors.New("unsupported")
	// ErrSchemaMismatch: two files disagree on a projected column (its type,
	// or a later file lacks it).
	ErrSchemaMismatch = errors.New("schema mismatch")
	// ErrColumnNotFound: a requested column is not in the dataset (the first
	// file, whose schema the projection follows, lacks it).
	ErrColumnNotFound = errors.New("column not found")
	// ErrNull: a null in a numeric column that has no fill value.
	ErrNull = errors.New("null value")
	// ErrUnavailable: storage kept failing until the retry budget ran out, or a
	// read stalled past its stall timeout.
	ErrUnavailable = errors.New("storage unavailable")
)

// ErrOutsideRoot: a local path lies outside the store's allowed roots
// (see [WithRoots]), lexically or because a symlink or ".." on the way leads
// out of its root.
var ErrOutsideRoot = errors.New("outside the allowed roots")
