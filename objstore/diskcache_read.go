package objstore

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
)

// block is one block a read touches that the cache did not serve: a flight
// this read leads (fetches), or one it waits for.
type block struct {
	idx  int64
	name string
	f    *flight
	lead bool
}

// span returns block idx's byte range in the object.
func (r *cachedRead) span(idx int64) (off, n int64) {
	bs := r.c.cfg.blockSize
	off = idx * bs
	return off, min(bs, r.obj.Size-off)
}

// put copies into p the part of the block at boff (holding data) that the
// read wants.
func (r *cachedRead) put(boff int64, data []byte) {
	lo := max(r.off, boff)
	hi := min(r.off+int64(len(r.p)), boff+int64(len(data)))
	copy(r.p[lo-r.off:hi-r.off], data[lo-boff:hi-boff])
}

// wanted returns how many bytes of the block at boff (n bytes) the read wants.
func (r *cachedRead) wanted(boff, n int64) int64 {
	return min(r.off+int64(len(r.p)), boff+n) - max(r.off, boff)
}

// run serves the read: hits from disk first, then the blocks it leads
// fetched, then the blocks other reads were fetching. A read leads every
// flight it starts before it waits for any other, so two reads waiting for
// each other's blocks cannot deadlock.
func (r *cachedRead) run(ctx context.Context) error {
	bs := r.c.cfg.blockSize
	first, last := r.off/bs, (r.off+int64(len(r.p))-1)/bs
	var lead, wait []block
	for idx := first; idx <= last; idx++ {
		b, hit := r.lookup(idx)
		switch {
		case hit:
		case b.lead:
			lead = append(lead, b)
		default:
			wait = append(wait, b)
		}
	}
	err := r.fetch(ctx, lead)
	for _, b := range wait {
		if err != nil {
			break
		}
		err = r.await(ctx, b)
	}
	return err
}

// lookup serves block idx from the cache if it holds a good entry (hit), or
// returns the flight that fetches it: a new one that this read leads, or
// another read's.
func (r *cachedRead) lookup(idx int64) (block, bool) {
	boff, n := r.span(idx)
	name := entryName(r.key, boff, n)
	for {
		f, lead, cached := r.c.begin(name)
		if !cached {
			return block{idx: idx, name: name, f: f, lead: lead}, false
		}
		if r.readEntry(name, boff, n) {
			return block{}, true
		}
		// Gone or corrupt, now dropped from the index: look again.
	}
}

// readEntry reads the entry of the block at boff (n bytes) into p. It
// reports false, after dropping the entry, when the file is gone, fails its
// check or cannot be read.
func (r *cachedRead) readEntry(name string, boff, n int64) bool {
	lo := max(r.off, boff)
	hi := min(r.off+int64(len(r.p)), boff+n)
	var dst []byte
	if lo == boff && hi == boff+n {
		dst = r.p[boff-r.off : boff-r.off+n] // the whole block: straight into p
	}
	data, err := readCacheEntry(r.c.path(name), r.key, boff, n, dst)
	if err != nil {
		corrupt := errors.Is(err, errEntryCorrupt)
		if corrupt {
			r.s.stats.CacheCorrupt.Add(1)
		}
		// Corrupt entries are removed; a file gone, or a disk that fails
		// to read, leaves the read to go around the cache.
		r.c.drop(name, corrupt)
		return false
	}
	if dst == nil {
		r.put(boff, data)
		putScratch(data)
	}
	r.c.touch(name)
	r.s.stats.CacheHits.Add(1)
	r.s.stats.CacheBytesSaved.Add(hi - lo)
	return true
}

// fetch fetches the blocks this read leads from the store, consecutive
// blocks together (up to the fetch size), up to the fetch concurrency at
// once, hands each to the reads waiting for it, copies it into p and writes
// it to the cache. Every flight in lead is settled, also on error.
func (r *cachedRead) fetch(ctx context.Context, lead []block) error {
	if len(lead) == 0 {
		return nil
	}
	per := max(r.c.cfg.fetchSize/r.c.cfg.blockSize, 1)
	var runs [][]block
	for i, b := range lead {
		if i > 0 && b.idx == lead[i-1].idx+1 && int64(len(runs[len(runs)-1])) < per {
			runs[len(runs)-1] = append(runs[len(runs)-1], b)
			continue
		}
		runs = append(runs, []block{b})
	}
	errs := make([]error, len(runs))
	sem := make(chan struct{}, r.c.cfg.fetchConc)
	var wg sync.WaitGroup
	for i, run := range runs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			errs[i] = r.fetchRun(ctx, run)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// fetchRun fetches consecutive blocks in one ranged read.
func (r *cachedRead) fetchRun(ctx context.Context, run []block) error {
	start, _ := r.span(run[0].idx)
	lastOff, lastN := r.span(run[len(run)-1].idx)
	buf := make([]byte, lastOff+lastN-start) // shared with waiting reads: not pooled
	if err := r.s.inner.ReadAt(ctx, r.obj, buf, start); err != nil {
		for _, b := range run {
			b.f.err = err
			close(b.f.done)
			r.c.settle(b.name, b.f, 0)
		}
		return err
	}
	r.s.stats.CacheMisses.Add(int64(len(run)))
	for _, b := range run {
		boff, n := r.span(b.idx)
		b.f.data = buf[boff-start : boff-start+n : boff-start+n]
		close(b.f.done)
	}
	for _, b := range run {
		boff, _ := r.span(b.idx)
		r.put(boff, b.f.data)
		size, err := writeCacheEntry(r.c.path(b.name), r.key, boff, b.f.data)
		if err != nil {
			r.s.stats.CacheWriteErrors.Add(1)
			size = 0
		}
		r.s.stats.CacheEvictions.Add(r.c.settle(b.name, b.f, size))
	}
	return nil
}

// await copies a block another read is fetching, once fetched. When that
// read failed for a reason of its own (its context ended) and this one's
// context is live, it looks again: a hit, a fetch it leads, or another wait.
func (r *cachedRead) await(ctx context.Context, b block) error {
	for {
		select {
		case <-b.f.done:
		case <-ctx.Done():
			return fmt.Errorf("objstore: read %s: %w", r.obj.URI, context.Cause(ctx))
		}
		boff, n := r.span(b.idx)
		if b.f.err == nil {
			r.put(boff, b.f.data)
			r.s.stats.CacheHits.Add(1)
			r.s.stats.CacheBytesSaved.Add(r.wanted(boff, n))
			return nil
		}
		if !isContextErr(b.f.err) || ctx.Err() != nil {
			return b.f.err
		}
		nb, hit := r.lookup(b.idx)
		switch {
		case hit:
			return nil
		case nb.lead:
			return r.fetch(ctx, []block{nb})
		}
		b = nb
	}
}

func isContextErr(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// begin returns cached when the cache indexes the entry name; else the
// flight fetching it, a new one (lead) when none was.
func (c *DiskCache) begin(name string) (f *flight, lead, cached bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.index[name]; ok {
		return nil, false, true
	}
	if f := c.flights[name]; f != nil {
		return f, false, false
	}
	f = &flight{done: make(chan struct{})}
	c.flights[name] = f
	return f, true, false
}

// settle ends flight f of entry name: when size > 0 the entry file is in
// place and is indexed, evicting the least recently used entries beyond the
// cache's size. It returns how many were evicted.
func (c *DiskCache) settle(name string, f *flight, size int64) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.flights[name] == f {
		delete(c.flights, name)
	}
	if size <= 0 {
		return 0
	}
	if e, ok := c.index[name]; ok { // another process's entry, replaced
		c.used -= e.Value.(*cacheEntry).size
		c.lru.Remove(e)
	}
	c.index[name] = c.lru.PushFront(&cacheEntry{name: name, size: size})
	c.used += size
	return c.evictLocked(c.index[name])
}

// evictLocked removes least recently used entries (never keep) until the
// cache holds at most its size, and returns how many it removed.
func (c *DiskCache) evictLocked(keep *list.Element) int64 {
	var n int64
	for c.used > c.max {
		e := c.lru.Back()
		if e == nil || e == keep {
			break
		}
		ent := e.Value.(*cacheEntry)
		c.lru.Remove(e)
		delete(c.index, ent.name)
		c.used -= ent.size
		_ = os.Remove(c.path(ent.name)) // already gone is fine
		n++
	}
	return n
}

// touch marks entry name as just used.
func (c *DiskCache) touch(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.index[name]; ok {
		c.lru.MoveToFront(e)
	}
}

// drop forgets entry name, removing its file when remove is set.
func (c *DiskCache) drop(name string, remove bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.index[name]; ok {
		c.used -= e.Value.(*cacheEntry).size
		c.lru.Remove(e)
		delete(c.index, name)
	}
	if remove {
		_ = os.Remove(c.path(name))
	}
}
