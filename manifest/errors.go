package manifest

import "errors"

// Sentinel errors. Errors of this package wrap one of these with the
// manifest's URI and what is wrong.
var (
	// ErrInvalid: the object is not a manifest this version reads: not
	// Parquet, truncated, written by something else, of another version, or
	// inconsistent (an index out of range).
	ErrInvalid = errors.New("invalid manifest")
	// ErrStale: a file changed since its manifest entry (or a fact) was
	// made: its identity (size, modification time, generation, ETag)
	// differs.
	ErrStale = errors.New("file changed since the manifest was written")
	// ErrMerge: parts that cannot be merged (a shard missing or repeated,
	// parts of different builds, one file with two identities).
	ErrMerge = errors.New("manifest parts do not merge")
)
