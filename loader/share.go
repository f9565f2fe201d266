package loader

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/meshfeed/meshfeed/format"
)

// FetchShare lets the readers of one consumer (a feed stream's slices) fetch
// the pages of a row group that several of them read pieces of once: where
// two slices' edges fall inside the same row group (one ends in it, the next
// starts in it), the pages both need are read from storage by the first and
// served to the second from memory. It holds, per shared row group and
// column, one contiguous range of fetched bytes, grown as readers ask for
// pages next to it, until every reader that reads the row group is done
// with it (RowGroupReader's last piece of it, or Close); at most maxBytes in
// all (beyond that, fetches are the reader's own, as without a share). It is
// safe for concurrent use. Fetches of a shared row group are serialized.
type FetchShare struct {
	mu      sync.Mutex
	max     int64
	held    int64
	claims  map[[2]int]int // readers not yet done, per shared row group (file, index)
	entries map[shareKey]*shareEntry

	// Saved is the storage bytes that were served from the share instead of
	// read again.
	Saved atomic.Int64
}

type shareKey struct {
	file, rg int
	col      string
}

// shareEntry is one contiguous range of a column chunk's fetched bytes:
// data holds the bytes [off, off+len(data)). It is Go memory, not pooled:
// a range replaced or dropped is freed once no Fetched still serves it.
type shareEntry struct {
	off  int64
	data []byte
}

// NewFetchShare returns a share of the row groups (file, index) that
// readers[k] readers will read pieces of, those with two or more, holding at
// most maxBytes; nil when none is read by two.
func NewFetchShare(readers map[[2]int]int, maxBytes int64) *FetchShare {
	s := &FetchShare{max: maxBytes, claims: map[[2]int]int{}, entries: map[shareKey]*shareEntry{}}
	for k, n := range readers {
		if n >= 2 {
			s.claims[k] = n
		}
	}
	if len(s.claims) == 0 || maxBytes <= 0 {
		return nil
	}
	return s
}

// WithReaderFetchShare makes the reader fetch the pages of its pieces of the
// row groups s shares through s, and tell s when it is done with each.
func WithReaderFetchShare(s *FetchShare) ReaderOption {
	return func(r *RowGroupReader) { r.share = s }
}

// Held returns the bytes the share holds now.
func (s *FetchShare) Held() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.held
}

// shares reports whether s shares row group rg of file fi.
func (s *FetchShare) shares(fi, rg int) bool {
	if s == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.claims[[2]int{fi, rg}] > 0
}

// done records that one reader is done with row group rg of file fi; after
// the last, its bytes are dropped.
func (s *FetchShare) done(fi, rg int) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	k := [2]int{fi, rg}
	if s.claims[k] <= 0 {
		return
	}
	if s.claims[k]--; s.claims[k] > 0 {
		return
	}
	delete(s.claims, k)
	for key, e := range s.entries {
		if key.file == fi && key.rg == rg {
			s.held -= int64(len(e.data))
			delete(s.entries, key)
		}
	}
}

// fetch returns the span of chunk c of row group rg of file fi from the
// share, reading from storage only the bytes it does not hold (and growing
// its range to hold them); ok false when rg is not shared or the range would
// not fit the share's bound (the caller fetches it as usual).
//
// Length: the hit, the growth of a range (two gaps at most) and the
// accounting, in one critical section.
func (s *FetchShare) fetch(ctx context.Context, ds *Dataset, fi, rg int, c format.Chunk, stats *ReadStats) (sp span, ok bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.claims[[2]int{fi, rg}] <= 0 || c.Length <= 0 {
		return span{}, false, nil
	}
	key := shareKey{fi, rg, c.Column}
	e := s.entries[key]
	lo, hi := c.Offset, c.Offset+c.Length
	if e != nil && lo >= e.off && hi <= e.off+int64(len(e.data)) {
		s.Saved.Add(c.Length)
		return span{off: lo, n: c.Length, data: e.data[lo-e.off : hi-e.off], borrowed: true}, true, nil
	}
	var old int64
	if e != nil && lo <= e.off+int64(len(e.data)) && hi >= e.off {
		// Overlapping or adjacent: one range holding both.
		old = int64(len(e.data))
		lo, hi = min(lo, e.off), max(hi, e.off+old)
	} else if e != nil {
		s.held -= int64(len(e.data)) // disjoint: replaced
		delete(s.entries, key)
		e = nil
	}
	if s.held-old+(hi-lo) > s.max {
		return span{}, false, nil
	}
	buf := make([]byte, hi-lo)
	obj := ds.Files[fi].Object
	read := func(a, b int64) error {
		if a >= b {
			return nil
		}
		stats.Fetches.Add(1)
		stats.FetchedBytes.Add(b - a)
		return ds.store.ReadAt(ctx, obj, buf[a-lo:b-lo], a)
	}
	if e != nil {
		copy(buf[e.off-lo:], e.data)
		if ov := min(c.Offset+c.Length, e.off+old) - max(c.Offset, e.off); ov > 0 {
			s.Saved.Add(ov)
		}
		err = read(lo, e.off)
		if err == nil {
			err = read(e.off+old, hi)
		}
	} else {
		err = read(lo, hi)
	}
	if err != nil {
		return span{}, false, fmt.Errorf("loader: %s row group %d: %w", obj.URI, rg, err)
	}
	s.entries[key] = &shareEntry{off: lo, data: buf}
	s.held += (hi - lo) - old
	return span{off: c.Offset, n: c.Length, data: buf[c.Offset-lo : c.Offset+c.Length-lo], borrowed: true}, true, nil
}
