package objstore

import (
	"context"
	"sync/atomic"
)

// CountingStore is a Store that counts the requests made through it (List,
// Stat, ReadAt; a listing of many pages counts once) and otherwise is the
// store it wraps, as Match sees it (a rooted store's escaping entries
// included). Planners count their requests with it.
type CountingStore struct {
	Store
	n atomic.Int64
}

// NewCountingStore wraps s.
func NewCountingStore(s Store) *CountingStore { return &CountingStore{Store: s} }

// Requests is the number of requests made so far.
func (s *CountingStore) Requests() int64 { return s.n.Load() }

// List implements Store.
func (s *CountingStore) List(ctx context.Context, prefix string) ([]Object, error) {
	s.n.Add(1)
	return s.Store.List(ctx, prefix)
}

// Stat implements Store.
func (s *CountingStore) Stat(ctx context.Context, uri string) (Object, error) {
	s.n.Add(1)
	return s.Store.Stat(ctx, uri)
}

// ReadAt implements Store.
func (s *CountingStore) ReadAt(ctx context.Context, obj Object, p []byte, off int64) error {
	s.n.Add(1)
	return s.Store.ReadAt(ctx, obj, p, off)
}

// listEscapes lists as the wrapped store does for Match (escapeLister).
func (s *CountingStore) listEscapes(ctx context.Context, prefix string) ([]Object, []escapedEntry, error) {
	s.n.Add(1)
	return listFor(ctx, s.Store, prefix)
}
