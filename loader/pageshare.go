package loader

import (
	"sync"

	"github.com/meshfeed/meshfeed/format"
)

// pageShares hands the readers of each row group of a Dataset one
// format.PageShare, through which they share the compressed pages they
// keep decompressed between pieces: made with the first reader's entry of
// the row group (rgEntry), dropped with the last. The readers of a
// stream's slices, or of a mixture's cursors, read neighbouring rows of a
// row group at the same time: the page a narrow column's rows of both
// are in is then decompressed once.
type pageShares struct {
	mu sync.Mutex
	m  map[[2]int]*sharedRG
}

type sharedRG struct {
	s     *format.PageShare
	users int
}

// acquire returns row group k's (file, index) share, counting the caller
// as one of its users until release.
func (p *pageShares) acquire(k [2]int) *format.PageShare {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.m == nil {
		p.m = map[[2]int]*sharedRG{}
	}
	sr := p.m[k]
	if sr == nil {
		sr = &sharedRG{s: &format.PageShare{}}
		p.m[k] = sr
	}
	sr.users++
	return sr.s
}

// release ends a user's use of row group k's share (its pages given back
// before, format.Shared.Release); the last drops it.
func (p *pageShares) release(k [2]int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if sr := p.m[k]; sr != nil {
		if sr.users--; sr.users <= 0 {
			delete(p.m, k)
		}
	}
}

// live returns the row groups with a share (tests).
func (p *pageShares) live() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.m)
}
