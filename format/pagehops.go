package format

import (
	"context"
	"sync"

	"github.com/meshfeed/meshfeed/internal/bufpool"
)

// hopsAhead bounds the page headers a walk reads ahead at once.
const hopsAhead = 16

// hopReads reads the windows of a page header walk without an offset index
// (locatePages). Pages larger than the window are reached one header at a
// time, each read waiting for the one before (its header says where the
// next page starts): on a store with latency, one round trip per page.
// Where the last two pages walked were of one size (a writer's pages of
// fixed-width values are), the headers of the next pages are most likely
// at that stride: predict reads the windows at the next hopsAhead such
// offsets at once, and read serves the walk from them where it does land
// there (a prediction that misses costs hopWindow bytes, never a wrong
// page: the walk parses every header it is given at its own position).
type hopReads struct {
	src      Source
	stats    *Stats
	chunkOff int64
	chunkLen int64
	ahead    map[int64][]byte // windows read ahead, by chunk position (pooled)
}

// read fills win with the chunk's bytes from chunk position pos: from a
// window read ahead there when it holds them, else from the source.
func (h *hopReads) read(ctx context.Context, win []byte, pos int64) error {
	if b, ok := h.ahead[pos]; ok {
		delete(h.ahead, pos)
		defer bufpool.Put(b)
		if len(b) >= len(win) {
			copy(win, b)
			return nil
		}
	}
	if err := h.src.ReadAt(ctx, win, h.chunkOff+pos); err != nil {
		return err
	}
	countRead(h.stats, h.src, h.chunkOff+pos, int64(len(win)))
	return nil
}

// predict reads, at once, the windows of hopWindow bytes at chunk
// positions pos + k*size (k from 0, up to hopsAhead of them inside the
// chunk), unless windows are still ahead. A read that fails is dropped: the
// walk reads that window itself and reports the error.
func (h *hopReads) predict(ctx context.Context, pos, size int64) {
	if len(h.ahead) > 0 || size <= 0 {
		return
	}
	type got struct {
		at int64
		b  []byte
	}
	var wg sync.WaitGroup
	out := make(chan got, hopsAhead)
	for k := int64(0); k < hopsAhead && pos+k*size < h.chunkLen; k++ {
		at := pos + k*size
		wg.Add(1)
		go func() {
			defer wg.Done()
			b := bufpool.Get(min(hopWindow, h.chunkLen-at))
			if err := h.src.ReadAt(ctx, b, h.chunkOff+at); err != nil {
				bufpool.Put(b)
				return
			}
			countRead(h.stats, h.src, h.chunkOff+at, int64(len(b)))
			out <- got{at, b}
		}()
	}
	wg.Wait()
	close(out)
	if h.ahead == nil {
		h.ahead = map[int64][]byte{}
	}
	for g := range out {
		h.ahead[g.at] = g.b
	}
}

// release returns the windows read ahead and not used.
func (h *hopReads) release() {
	for at, b := range h.ahead {
		bufpool.Put(b)
		delete(h.ahead, at)
	}
}
