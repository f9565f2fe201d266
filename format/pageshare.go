package format

import (
	"sync"

	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/meshfeed/meshfeed/internal/bufpool"
)

// Compressed pages kept decompressed between pieces: by one reader for its
// next piece (edgePage, in the row group's Shared), and across the readers
// of the row group's rows (PageShare).

// edgePage is a page a piece decompressed whole and ended inside: the
// next piece of its row group starts in it. Page is its index in the
// column's pages; buf (pooled, or the PageShare's) what decompressing it
// gave.
type edgePage struct {
	page int
	buf  []byte
}

// takeEdge hands over the decompressed page of column col with index page,
// if the last piece kept it: the caller owns buf (edges.put when done).
func (e *Shared) takeEdge(col, page int) []byte {
	e.mu.Lock()
	defer e.mu.Unlock()
	p, ok := e.edges[col]
	if !ok || p.page != page {
		return nil
	}
	delete(e.edges, col)
	return p.buf
}

// keepEdge keeps buf, page page of column col decompressed, for the next
// piece (putting the one kept before back).
func (e *Shared) keepEdge(col, page int, buf []byte) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.edges == nil {
		e.edges = map[int]edgePage{}
	}
	if old, ok := e.edges[col]; ok {
		e.Pages.put(col, old.page, old.buf)
	}
	e.edges[col] = edgePage{page: page, buf: buf}
}

// PageShare holds the compressed pages of one row group that its readers
// keep decompressed for their next pieces, so that another reader whose
// rows are in the same page takes it from there instead of decompressing
// it again: a narrow column's page holds the rows of several readers (an
// int64 column of 65,536 rows is one page), and the readers of a stream's
// slices, or of a mixture's cursors, move through their rows in step, so
// the reader whose rows start in a page finds it kept by the one whose
// rows end there. A page is held while a reader keeps it, and goes back to
// the pool when the last lets it go: never longer than some reader would
// have kept its own copy. Keys are the decoder's column index and the
// page's index in the column chunk: one PageShare serves the readers of
// one row group of one Dataset (one decoder). The zero value is empty; it
// is safe for concurrent use. Pages are read only once shared.
type PageShare struct {
	mu    sync.Mutex
	pages map[[2]int]*sharedPage
}

type sharedPage struct {
	buf  []byte
	refs int
	mem  memory.Allocator // buf's, or nil: the buffer pool's (freePage)
}

// take returns page page of column col, decompressed, with a reference
// the caller gives back with put; nil when no reader keeps it (or s is
// nil).
func (s *PageShare) take(col, page int) []byte {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	sp := s.pages[[2]int{col, page}]
	if sp == nil {
		return nil
	}
	sp.refs++
	return sp.buf
}

// offer shares buf, page page of column col decompressed by the caller
// (from mem, or from the buffer pool where mem is nil), which keeps it for
// its next piece: it returns the buffer to keep, with a reference, which
// is buf, or the one another reader shared first (buf then goes back where
// it came from). With s nil it returns buf, which must then be the buffer
// pool's.
func (s *PageShare) offer(col, page int, buf []byte, mem memory.Allocator) []byte {
	if s == nil || len(buf) == 0 {
		return buf
	}
	k := [2]int{col, page}
	s.mu.Lock()
	defer s.mu.Unlock()
	if sp := s.pages[k]; sp != nil {
		sp.refs++
		freePage(buf, mem)
		return sp.buf
	}
	if s.pages == nil {
		s.pages = map[[2]int]*sharedPage{}
	}
	s.pages[k] = &sharedPage{buf: buf, refs: 1, mem: mem}
	return buf
}

// put gives back buf, page page of column col decompressed: a reference,
// where it is the page s shares (the last one frees it where it came
// from), else buf itself, the caller's own (from the buffer pool).
func (s *PageShare) put(col, page int, buf []byte) {
	if s != nil && len(buf) > 0 {
		k := [2]int{col, page}
		s.mu.Lock()
		sp := s.pages[k]
		shared := sp != nil && len(sp.buf) > 0 && &sp.buf[0] == &buf[0]
		if shared {
			if sp.refs--; sp.refs > 0 {
				s.mu.Unlock()
				return
			}
			delete(s.pages, k)
		}
		s.mu.Unlock()
		if shared {
			freePage(buf, sp.mem)
			return
		}
	}
	if cap(buf) > 0 {
		bufpool.Put(buf)
	}
}

// held returns the pages s holds (tests).
func (s *PageShare) held() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.pages)
}

// shared returns the page of the pages given with index i kept
// decompressed by another reader of the row group, with a reference
// (edges.put gives it back); nil: none keeps it.
func (ed edges) shared(i int) []byte {
	if ed.e == nil {
		return nil
	}
	b := ed.e.Pages.take(ed.col, ed.first+i)
	if b != nil {
		ed.stats.PagesShared.Add(1)
	}
	return b
}

// put gives back buf, page i of the pages given decompressed: taken from
// the piece before or another reader, or the caller's own.
func (ed edges) put(i int, buf []byte) {
	var s *PageShare // nil: buf is the caller's own
	if ed.e != nil {
		s = ed.e.Pages
	}
	s.put(ed.col, ed.first+i, buf)
}

// keep keeps buf, page i of the pages given decompressed by the caller
// (own: not taken from the piece before or another reader; from mem, or
// from the buffer pool where mem is nil), for the reader's next piece,
// sharing it with the row group's other readers.
func (ed edges) keep(i int, buf []byte, own bool, mem memory.Allocator) {
	if own {
		buf = ed.e.Pages.offer(ed.col, ed.first+i, buf, mem)
	}
	ed.e.keepEdge(ed.col, ed.first+i, buf)
}
