package loader

import (
	"cmp"
	"runtime/debug"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meshfeed/meshfeed/objstore"
)

// HeldChunks keeps column chunks one reader fetched for the readers that
// read the same row groups next, so that their bytes come from storage
// once: a filter's plan reads the filter column of the row groups the
// footers leave undecided (WithReaderKeep), and the stream that delivers
// that column reads those row groups right after (WithReaderHeld). Bytes
// are kept per file identity (objstore.Object.CacheKey) and row group, as
// the file's byte ranges: a fetch, a page walk or a page read of a reader
// with the same HeldChunks that falls inside a held range is served from
// it, whatever the reader's dataset projects.
//
// What is held, and for how long, is bounded three ways: at most maxBytes
// in all (an earlier plan's row groups dropped to make room for a later
// plan's, the oldest first; a plan's own later row groups not kept once
// its earlier ones fill it), each row
// group's bytes reserved in the caller's memory account while held (a keep
// that does not fit now is not kept), and at most ttl after they were kept.
// A row group is dropped sooner when the readers that claimed it (Claim:
// the stream's slices that read it) are all done with it, when Drop says
// no reader will want it (the filter keeps none of its rows), or on Shed
// (memory wanted elsewhere) and Close. Dropping never fails a reader: it
// fetches from storage what is no longer held.
//
// It is safe for concurrent use. Held bytes are Go memory (never pooled):
// a range dropped while a reader decodes from it stays valid until that
// reader lets go of it.
type HeldChunks struct {
	max     int64
	ttl     time.Duration
	account func() Account // nil, or returns nil: no account

	mu     sync.Mutex
	held   int64
	groups map[heldKey]*heldGroup
	timer  *time.Timer
	closed bool

	// Kept is the bytes kept, Served the bytes readers took from them
	// instead of storage, Dropped the bytes dropped by the bound, expiry,
	// Shed or Close (not by the claiming readers being done, nor by Drop).
	Kept, Served, Dropped atomic.Int64
}

// Account is a memory account held bytes are reserved in (the server's
// --memory-budget: transport.MemoryAccount).
type Account interface {
	TryReserve(n int64) bool
	Unreserve(n int64)
}

type heldKey struct {
	obj string // objstore.Object.CacheKey
	rg  int
}

// heldGroup is the bytes held of one row group: ranges sorted by offset,
// disjoint.
type heldGroup struct {
	ranges   []heldRange
	bytes    int64
	reserved int64 // of bytes, taken from the account
	acct     Account
	claims   int  // readers that claimed it and are not done
	claimed  bool // Claim was called: the last done drops it
	expires  time.Time
	keeper   *Keeper // the reader that kept it (one plan)
}

type heldRange struct {
	off  int64
	data []byte
}

// DefaultHeldBytes is the bound of a Pipeline's HeldChunks.
const DefaultHeldBytes = 64 << 20

// DefaultHeldTTL is how long a Pipeline's HeldChunks keeps a row group's
// bytes at most.
const DefaultHeldTTL = time.Minute

// NewHeldChunks returns a HeldChunks of at most maxBytes, each row group
// held at most ttl, reserved in the account account returns (account nil,
// or returning nil: none). nil when maxBytes or ttl is not positive: a nil
// HeldChunks keeps nothing.
func NewHeldChunks(maxBytes int64, ttl time.Duration, account func() Account) *HeldChunks {
	if maxBytes <= 0 || ttl <= 0 {
		return nil
	}
	return &HeldChunks{max: maxBytes, ttl: ttl, account: account, groups: map[heldKey]*heldGroup{}}
}

// Keeper is what one plan keeps in a HeldChunks: the columns (projected
// names) of the row groups its readers read whole (WithReaderKeep). Row
// groups one Keeper kept are not dropped to make room for more of its own.
type Keeper struct {
	h    *HeldChunks
	cols map[string]bool
}

// NewKeeper returns a Keeper of the columns cols; nil (keeps nothing) when
// h is nil or cols empty.
func (h *HeldChunks) NewKeeper(cols ...string) *Keeper {
	if h == nil || len(cols) == 0 {
		return nil
	}
	k := &Keeper{h: h, cols: map[string]bool{}}
	for _, c := range cols {
		k.cols[c] = true
	}
	return k
}

// WithReaderKeep makes the reader keep with k the fetched bytes of k's
// columns of each row group it reads whole, for the readers that read
// those row groups next (WithReaderHeld). k nil: nothing.
func WithReaderKeep(k *Keeper) ReaderOption {
	return func(r *RowGroupReader) { r.keep = k }
}

// WithReaderHeld makes the reader take from h the bytes h holds of its row
// groups instead of fetching them, and tell h when it is done with each
// row group (the last piece of it decoded, or the reader closed), so that
// h drops the row groups a stream claimed once every claiming reader is
// done.
func WithReaderHeld(h *HeldChunks) ReaderOption {
	return func(r *RowGroupReader) { r.held = h }
}

// Held returns the bytes held now.
func (h *HeldChunks) Held() int64 {
	if h == nil {
		return 0
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.held
}

// HeldRowGroup reports whether h holds bytes of row group rg of obj.
func (h *HeldChunks) HeldRowGroup(obj objstore.Object, rg int) bool {
	if h == nil {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.groups[heldKey{obj.CacheKey(), rg}] != nil
}

// keep copies b, the bytes of obj at off (in row group rg), into h, unless
// they are held already or do not fit (the bound, the account). It reports
// false when copying b faulted (a mapped file truncated): nothing is kept.
func (h *HeldChunks) keep(k *Keeper, obj objstore.Object, rg int, off int64, b []byte) bool {
	if h == nil || len(b) == 0 || int64(len(b)) > h.max {
		return true
	}
	key := heldKey{obj.CacheKey(), rg}
	n := int64(len(b))
	h.mu.Lock()
	if h.closed || h.covered(key, off, n) {
		h.mu.Unlock()
		return true
	}
	h.mu.Unlock()
	data, ok := copyFaulting(b)
	if !ok {
		return false
	}
	var acct Account
	if h.account != nil {
		acct = h.account()
	}
	if acct != nil && !acct.TryReserve(n) {
		return true
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	g := h.groups[key]
	if h.closed || h.covered(key, off, n) || (g != nil && g.acct != acct) {
		if acct != nil {
			acct.Unreserve(n)
		}
		return true
	}
	h.makeRoom(n, k)
	if h.held+n > h.max {
		if acct != nil {
			acct.Unreserve(n)
		}
		return true
	}
	if g == nil {
		g = &heldGroup{acct: acct, expires: time.Now().Add(h.ttl), keeper: k}
		h.groups[key] = g
		h.arm()
	}
	g.ranges = append(g.ranges, heldRange{off: off, data: data})
	slices.SortFunc(g.ranges, func(a, b heldRange) int { return cmp.Compare(a.off, b.off) })
	g.bytes += n
	if acct != nil {
		g.reserved += n
	}
	h.held += n
	h.Kept.Add(n)
	return true
}

// copyFaulting copies b into Go memory; ok false when b is a mapping whose
// file was truncated (the copy faults).
func copyFaulting(b []byte) (out []byte, ok bool) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if recover() != nil {
			out, ok = nil, false
		}
	}()
	return append([]byte(nil), b...), true
}

// covered reports whether the group key holds [off, off+n); h.mu held.
func (h *HeldChunks) covered(key heldKey, off, n int64) bool {
	_, ok := h.groups[key].find(off, n)
	return ok
}

// find returns the held bytes [off, off+n) of g, if one range holds them.
func (g *heldGroup) find(off, n int64) ([]byte, bool) {
	if g == nil {
		return nil, false
	}
	i := sort.Search(len(g.ranges), func(i int) bool { return g.ranges[i].off+int64(len(g.ranges[i].data)) > off })
	if i < len(g.ranges) {
		r := g.ranges[i]
		if off >= r.off && off+n <= r.off+int64(len(r.data)) {
			return r.data[off-r.off : off-r.off+n], true
		}
	}
	return nil, false
}

// makeRoom drops the row groups other readers than k kept (earlier plans),
// those that expire first first, until n more bytes fit the bound or none
// is left: a plan's own first row groups (those its stream reads first,
// in plan order) are not displaced by its later ones; h.mu held.
func (h *HeldChunks) makeRoom(n int64, k *Keeper) {
	for h.held+n > h.max {
		var oldest heldKey
		var og *heldGroup
		for key, g := range h.groups {
			if g.keeper != k && (og == nil || g.expires.Before(og.expires)) {
				oldest, og = key, g
			}
		}
		if og == nil {
			return
		}
		h.drop(oldest, true)
	}
}

// drop removes row group key and returns its reservation; h.mu held.
// early counts its bytes in Dropped.
func (h *HeldChunks) drop(key heldKey, early bool) {
	g := h.groups[key]
	if g == nil {
		return
	}
	delete(h.groups, key)
	h.held -= g.bytes
	if g.acct != nil {
		g.acct.Unreserve(g.reserved)
	}
	if early {
		h.Dropped.Add(g.bytes)
	}
}

// arm starts the timer that drops expired row groups, if not running;
// h.mu held.
func (h *HeldChunks) arm() {
	if h.timer == nil && len(h.groups) > 0 {
		var next time.Time
		for _, g := range h.groups {
			if next.IsZero() || g.expires.Before(next) {
				next = g.expires
			}
		}
		h.timer = time.AfterFunc(max(time.Until(next), 0), h.expire)
	}
}

// expire drops the row groups whose time is up.
func (h *HeldChunks) expire() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.timer = nil
	now := time.Now()
	for k, g := range h.groups {
		if !now.Before(g.expires) {
			h.drop(k, true)
		}
	}
	if !h.closed {
		h.arm()
	}
}

// bytes returns the held bytes [off, off+n) of row group rg of obj, if
// held, counting them as served when served is true (not for a page walk,
// which reads a few headers of them).
func (h *HeldChunks) bytes(obj objstore.Object, rg int, off, n int64, served bool) ([]byte, bool) {
	if h == nil || n <= 0 {
		return nil, false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	b, ok := h.groups[heldKey{obj.CacheKey(), rg}].find(off, n)
	if ok && served {
		h.Served.Add(n)
	}
	return b, ok
}

// Claim records that n more readers (WithReaderHeld) will read row group
// rg of obj: its bytes are dropped once they are all done with it (or
// sooner: see HeldChunks). Nothing when h holds none of it.
func (h *HeldChunks) Claim(obj objstore.Object, rg, n int) {
	if h == nil || n <= 0 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if g := h.groups[heldKey{obj.CacheKey(), rg}]; g != nil {
		g.claims += n
		g.claimed = true
	}
}

// done records that one reader is done with row group rg of obj; after
// the last that claimed it, its bytes are dropped.
func (h *HeldChunks) done(obj objstore.Object, rg int) {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	key := heldKey{obj.CacheKey(), rg}
	g := h.groups[key]
	if g == nil || !g.claimed || g.claims <= 0 {
		return
	}
	if g.claims--; g.claims == 0 {
		h.drop(key, false)
	}
}

// Drop drops what h holds of row group rg of obj (no reader will read it:
// the filter keeps none of its rows).
func (h *HeldChunks) Drop(obj objstore.Object, rg int) {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.drop(heldKey{obj.CacheKey(), rg}, false)
}

// Shed drops everything held (the memory account is wanted for something
// else); readers fetch from storage what they would have taken.
func (h *HeldChunks) Shed() {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for k := range h.groups {
		h.drop(k, true)
	}
}

// Close drops everything held and keeps nothing more.
func (h *HeldChunks) Close() {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	for k := range h.groups {
		h.drop(k, true)
	}
	if h.timer != nil {
		h.timer.Stop()
		h.timer = nil
	}
}
