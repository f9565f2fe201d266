package manifest

import (
	"bytes"
	"context"
	"fmt"

	"github.com/meshfeed/meshfeed/objstore"
)

// MaxBytes is the largest manifest Read accepts (2 GiB): more is refused
// before anything is allocated.
const MaxBytes = 2 << 30

// Read reads the manifest at uri from store: one Stat and one read. A
// missing manifest wraps objstore.ErrNotFound; one that is not a manifest
// wraps ErrInvalid.
func Read(ctx context.Context, store objstore.Store, uri string) (*Manifest, error) {
	obj, err := store.Stat(ctx, uri)
	if err != nil {
		return nil, fmt.Errorf("manifest: %w", err)
	}
	return ReadObject(ctx, store, obj)
}

// ReadObject reads the manifest obj (already stat'ed): one read.
func ReadObject(ctx context.Context, store objstore.Store, obj objstore.Object) (*Manifest, error) {
	if obj.Size > MaxBytes {
		return nil, fmt.Errorf("manifest: %s: %d bytes, more than the %d a manifest may hold: %w", obj.URI, obj.Size, MaxBytes, ErrInvalid)
	}
	data := make([]byte, obj.Size)
	if err := store.ReadAt(ctx, obj, data, 0); err != nil {
		return nil, fmt.Errorf("manifest: reading %s: %w", obj.URI, err)
	}
	return Decode(data, obj.URI)
}

// Write stores m at uri through c: nothing is visible at uri until the
// whole manifest is written (objstore.Creator's Close commits it).
func Write(ctx context.Context, c objstore.Creator, uri string, m *Manifest) error {
	var buf bytes.Buffer
	if err := Encode(&buf, m, uri); err != nil {
		return err
	}
	// A write that fails cancels wctx before Close, so that Close abandons
	// the object instead of committing part of it.
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w, err := c.Create(wctx, uri)
	if err != nil {
		return fmt.Errorf("manifest: creating %s: %w", uri, err)
	}
	if _, err := w.Write(buf.Bytes()); err != nil {
		cancel()
		_ = w.Close()
		return fmt.Errorf("manifest: writing %s: %w", uri, err)
	}
	if err := w.Close(); err != nil {
		return fmt.Errorf("manifest: writing %s: %w", uri, err)
	}
	return nil
}
