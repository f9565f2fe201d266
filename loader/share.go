package loader

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/meshfeed/meshfeed/format"
)

// FetchShare lets the readers of one consumer (a feed stream's slices) fetch
// the pages of a row group that several of them read pieces of once (where
// the pages are read: on a mapped local file each reader's pieces are parts
// of its mapping of the row group, and the page cache serves every reader): where
// two slices' edges fall inside the same row group (one ends in it, the next
// starts in it), the pages both need are read from storage by the first and
// served to the second from memory. It holds, per shared row group and
// column, the ranges of fetched bytes readers asked for (one range where
// they overlap or touch), until every reader that reads the row group is done
// with it (RowGroupReader's last piece of it, or Close); at most maxBytes in
// all (beyond that, fetches are the reader's own, as without a share). It is
// safe for concurrent use; fetches of one shared column chunk wait for each
// other (the second is then served from the first's bytes).
type FetchShare struct {
	rgs map[[2]int]bool // the row groups shared: fixed at creation, read without the lock

	mu      sync.Mutex
	max     int64
	held    int64
	claims  map[[2]int]int             // readers not yet done, per shared row group (file, index)
	entries map[shareKey][]*shareEntry // per column chunk: sorted, disjoint, not adjacent
	locks   map[shareKey]*sync.Mutex   // one fetch at a time per column chunk

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
	s := &FetchShare{rgs: map[[2]int]bool{}, max: maxBytes, claims: map[[2]int]int{}, entries: map[shareKey][]*shareEntry{}, locks: map[shareKey]*sync.Mutex{}}
	for k, n := range readers {
		if n >= 2 {
			s.claims[k], s.rgs[k] = n, true
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
	return s != nil && s.rgs[[2]int{fi, rg}]
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
	for key, es := range s.entries {
		if key.file == fi && key.rg == rg {
			for _, e := range es {
				s.held -= int64(len(e.data))
			}
			delete(s.entries, key)
		}
	}
	for key := range s.locks {
		if key.file == fi && key.rg == rg {
			delete(s.locks, key) // a fetch holding it finds the claims gone
		}
	}
}

// fetch returns the span of chunk c of row group rg of file fi from the
// share, reading from storage only the bytes it does not hold (and growing
// its range to hold them); ok false when rg is not shared (any more) or the
// range would not fit the share's bound (the caller fetches it as usual).
func (s *FetchShare) fetch(ctx context.Context, ds *Dataset, fi, rg int, c format.Chunk, stats *ReadStats) (span, bool, error) {
	key := shareKey{fi, rg, c.Column}
	s.mu.Lock()
	if s.claims[[2]int{fi, rg}] <= 0 || c.Length <= 0 {
		s.mu.Unlock()
		return span{}, false, nil
	}
	lock := s.locks[key]
	if lock == nil {
		lock = &sync.Mutex{}
		s.locks[key] = lock
	}
	s.mu.Unlock()
	lock.Lock()
	defer lock.Unlock()
	return s.fetchLocked(ctx, ds, key, c, stats)
}

// fetchLocked is fetch under the chunk's lock: the hit, or the range
// asked for merged with the ranges it overlaps or touches, only the gaps
// between them read (outside s.mu).
//
// Length: the hit, the merge, the read of the gaps, and the entry
// installed, in order.
func (s *FetchShare) fetchLocked(ctx context.Context, ds *Dataset, key shareKey, c format.Chunk, stats *ReadStats) (span, bool, error) {
	lo, hi := c.Offset, c.Offset+c.Length
	s.mu.Lock()
	if s.claims[[2]int{key.file, key.rg}] <= 0 {
		s.mu.Unlock()
		return span{}, false, nil
	}
	var merged, kept []*shareEntry
	ulo, uhi := lo, hi
	for _, e := range s.entries[key] {
		end := e.off + int64(len(e.data))
		if lo >= e.off && hi <= end {
			s.mu.Unlock()
			s.Saved.Add(c.Length)
			return span{off: lo, n: c.Length, data: e.data[lo-e.off : hi-e.off], borrowed: true}, true, nil
		}
		if e.off <= hi && end >= lo {
			merged = append(merged, e)
			ulo, uhi = min(ulo, e.off), max(uhi, end)
		} else {
			kept = append(kept, e)
		}
	}
	grow := uhi - ulo
	for _, e := range merged {
		grow -= int64(len(e.data))
	}
	if s.held+grow > s.max {
		s.mu.Unlock()
		return span{}, false, nil
	}
	s.held += grow // taken now: the bound holds while reading
	s.mu.Unlock()

	buf := make([]byte, uhi-ulo)
	obj := ds.Files[key.file].Object
	read := func(a, b int64) error {
		if a >= b {
			return nil
		}
		stats.Fetches.Add(1)
		stats.FetchedBytes.Add(b - a)
		return ds.store.ReadAt(ctx, obj, buf[a-ulo:b-ulo], a)
	}
	var err error
	at := ulo
	for _, e := range merged { // sorted by offset: the gaps between them read
		copy(buf[e.off-ulo:], e.data)
		if ov := min(hi, e.off+int64(len(e.data))) - max(lo, e.off); ov > 0 {
			s.Saved.Add(ov)
		}
		if err == nil {
			err = read(at, e.off)
		}
		at = e.off + int64(len(e.data))
	}
	if err == nil {
		err = read(at, uhi)
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	sp := span{off: lo, n: c.Length, data: buf[lo-ulo : hi-ulo], borrowed: true}
	if err != nil || s.claims[[2]int{key.file, key.rg}] <= 0 {
		// Failed (the ranges before stay), or every reader is done (done
		// dropped them and their bytes): nothing is installed, so what was
		// taken for it is given back.
		s.held -= grow
		if err != nil {
			return span{}, false, fmt.Errorf("loader: %s row group %d: %w", obj.URI, key.rg, err)
		}
		return sp, true, nil
	}
	es := append(kept, &shareEntry{off: ulo, data: buf})
	slices.SortFunc(es, func(a, b *shareEntry) int { return cmp.Compare(a.off, b.off) })
	s.entries[key] = es
	return sp, true, nil
}
