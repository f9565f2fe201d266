package objstoretest

import (
	"context"
	"sync"

	"github.com/meshfeed/meshfeed/objstore"
)

// RangeReads is a store in front of Store that records the byte range of
// every ReadAt, per object URI. It is not an objstore.Mapper, whatever
// Store is: every byte is read, so tests can count which bytes were.
type RangeReads struct {
	objstore.Store
	mu    sync.Mutex
	reads map[string][][2]int64 // per URI: [off, end)
}

// ReadAt records [off, off+len(p)) of obj and reads it from Store.
func (s *RangeReads) ReadAt(ctx context.Context, obj objstore.Object, p []byte, off int64) error {
	s.mu.Lock()
	if s.reads == nil {
		s.reads = map[string][][2]int64{}
	}
	s.reads[obj.URI] = append(s.reads[obj.URI], [2]int64{off, off + int64(len(p))})
	s.mu.Unlock()
	return s.Store.ReadAt(ctx, obj, p, off)
}

// Within returns the bytes read of uri that lie inside [lo, hi), each read
// counted (a byte read twice counts twice).
func (s *RangeReads) Within(uri string, lo, hi int64) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var n int64
	for _, r := range s.reads[uri] {
		if a, b := max(r[0], lo), min(r[1], hi); a < b {
			n += b - a
		}
	}
	return n
}

// Reset forgets the ranges recorded so far.
func (s *RangeReads) Reset() {
	s.mu.Lock()
	s.reads = nil
	s.mu.Unlock()
}
