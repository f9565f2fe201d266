package format

import (
	"errors"
	"fmt"
)

// Sentinel errors. Errors returned by this package wrap one of these (test
// with errors.Is) together with the object, row group and column they
// concern, or an error of the caller's Source, passed on as it is.
var (
	// ErrCorrupt: a file's bytes are not valid Parquet or Arrow IPC (bad magic,
	// truncated or undecodable footer, corrupt page).
	ErrCorrupt = errors.New("corrupt file")
	// ErrUnsupported: a column type or encoding meshfeed does not decode.
	ErrUnsupported = errors.New("unsupported")
	// ErrNull: a null in a numeric column that has no fill value.
	ErrNull = errors.New("null value")
)

// faultErr returns the error for a recovered panic that is a memory fault
// (under debug.SetPanicOnFault, a mapped page of a file truncated while it
// was read), wrapping missing (Options.Missing), or nil for any other panic.
func faultErr(uri string, rg int, r any, missing error) error {
	if _, ok := r.(interface{ Addr() uintptr }); !ok {
		return nil
	}
	if missing == nil {
		missing = ErrCorrupt
	}
	return fmt.Errorf("format: %s row group %d: memory fault reading the mapped file (%v): %w; it was truncated or rewritten in place while being read: replace files by renaming new ones into place",
		uri, rg, r, missing)
}
