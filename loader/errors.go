package loader

import (
	"errors"

	"github.com/meshfeed/meshfeed/format"
	"github.com/meshfeed/meshfeed/manifest"
	"github.com/meshfeed/meshfeed/objstore"
)

// Sentinel errors. Errors returned by this package wrap one of these (test with
// errors.Is) together with the object, row group and column they concern, or
// a sentinel of package objstore (ErrUnavailable, ErrOutsideRoot, ...) for
// what the store found.
var (
	// ErrNotFound: an object, or a glob with no match, does not exist, or a
	// file changed under a mapping while it was decoded. It is
	// objstore.ErrNotFound itself, so that one errors.Is test covers what
	// the store and the loader find missing.
	ErrNotFound = objstore.ErrNotFound
	// ErrCorrupt: a file's bytes are not valid Parquet or Arrow IPC (bad magic,
	// truncated or undecodable footer, corrupt page).
	// It is format.ErrCorrupt.
	ErrCorrupt = format.ErrCorrupt
	// ErrUnsupported: a column type or encoding meshfeed does not decode.
	// It is format.ErrUnsupported.
	ErrUnsupported = format.ErrUnsupported
	// ErrSchemaMismatch: two files disagree on a projected column (its type,
	// or a later file lacks it).
	ErrSchemaMismatch = errors.New("schema mismatch")
	// ErrColumnNotFound: a requested column is not in the dataset (the first
	// file, whose schema the projection follows, lacks it).
	ErrColumnNotFound = errors.New("column not found")
	// ErrNull: a null in a numeric column that has no fill value.
	// It is format.ErrNull.
	ErrNull = format.ErrNull
	// ErrStale: a file planned from a manifest changed since the manifest
	// was written (its size, modification time or generation differ, or its
	// footer disagrees). It is manifest.ErrStale.
	ErrStale = manifest.ErrStale
	// ErrManifest: a manifest is refused: truncated, foreign, of another
	// version, a part, or (when named) not naming the request's files. It
	// is manifest.ErrInvalid.
	ErrManifest = manifest.ErrInvalid
)
