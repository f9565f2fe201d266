package transport

// The shared-memory wire's regions: the memfd mappings of one stream, their
// slots, and the client's window of unread steps (see shm.go).

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sync"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/bitutil"
	"golang.org/x/sys/unix"
)

// shmPool is one stream's regions and their free slots. Steps in flight
// (sent, not yet read by the client) are bounded by the window the client
// asked for; slots are returned only when the client has dropped every array
// made from them. A client that holds steps beyond its window (a training
// loop that keeps batches) makes the pool grow by a region rather than stall:
// its memory follows what the client holds, as Flight's does.
type shmPool struct {
	mu        sync.Mutex
	changed   chan struct{} // signalled on every release and acknowledgement
	regs      []*shmMapping // nil at the arena's index
	free      [][2]int      // (region, slot)
	inUse     map[[2]int]bool
	held      map[[2]int][]arrow.RecordBatch // records of steps sent by reference, until their release
	slotBytes int64                          // of every region's slots (the first step's size)
	perRegion int
	sent      int64
	acked     int64
	arena     *shmArena // nil without one; set before the stream starts
}

// readClient applies the client's frames (acknowledgements, releases) until
// the connection ends.
func (p *shmPool) readClient(w *shmConn) {
	for {
		raw, err := w.read()
		if err != nil {
			return
		}
		var f shmClientFrame
		if json.Unmarshal(raw, &f) != nil {
			continue
		}
		if f.Ack > 0 {
			p.ack(f.Ack)
		}
		if f.Release != nil {
			p.release(f.Region, *f.Release)
		}
	}
}

func (p *shmPool) signal() {
	select {
	case p.changed <- struct{}{}:
	default:
	}
}

func (p *shmPool) ack(n int) {
	p.mu.Lock()
	p.acked += int64(n)
	p.mu.Unlock()
	p.signal()
}

// release returns a slot, and releases the records it held; an unknown or
// free slot is ignored.
func (p *shmPool) release(region, slot int) {
	p.mu.Lock()
	k := [2]int{region, slot}
	var recs []arrow.RecordBatch
	if p.inUse[k] {
		delete(p.inUse, k)
		p.free = append(p.free, k)
		recs = p.held[k]
		delete(p.held, k)
	}
	p.mu.Unlock()
	Step{Slices: recs}.Release()
	p.signal()
}

// hold keeps the records of the step in (region, slot) until its release.
func (p *shmPool) hold(region, slot int, recs []arrow.RecordBatch) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.held == nil {
		p.held = map[[2]int][]arrow.RecordBatch{}
	}
	p.held[[2]int{region, slot}] = recs
}

// waitWindow waits until fewer than window steps are unread; false when ctx
// ended first.
func (p *shmPool) waitWindow(ctx context.Context, window int64) bool {
	for {
		p.mu.Lock()
		ok := p.sent-p.acked < window
		p.mu.Unlock()
		if ok {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-p.changed:
		}
	}
}

// take returns a free slot for a step of need bytes, creating a region when
// none is free (fresh: its descriptor must be sent first).
func (p *shmPool) take(need int64) (region, slot int, fresh bool, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.inUse == nil {
		p.inUse = map[[2]int]bool{}
	}
	if p.slotBytes > 0 && need > p.slotBytes {
		return 0, 0, false, fmt.Errorf("%d bytes, more than the %d of a slot (the first step's size)", need, p.slotBytes)
	}
	if len(p.free) == 0 {
		size := need
		if p.slotBytes > 0 {
			size = p.slotBytes
		}
		m, err := newShmMapping(p.perRegion, size)
		if err != nil {
			return 0, 0, false, err
		}
		p.slotBytes = m.slotBytes
		r := len(p.regs)
		p.regs = append(p.regs, m)
		for k := p.perRegion - 1; k >= 0; k-- {
			p.free = append(p.free, [2]int{r, k})
		}
		fresh = true
	}
	k := p.free[len(p.free)-1]
	p.free = p.free[:len(p.free)-1]
	p.inUse[k] = true
	p.sent++
	return k[0], k[1], fresh, nil
}

// close releases the records still held and unmaps the slot regions (the
// arena is the stream's to close, after its records are gone).
func (p *shmPool) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for k, recs := range p.held {
		Step{Slices: recs}.Release()
		delete(p.held, k)
	}
	for _, m := range p.regs {
		m.close()
	}
	p.regs = nil
}

// shmMapping is the server's mapping of a stream's region.
type shmMapping struct {
	fd        int
	mem       []byte
	slotBytes int64
}

// newShmMapping creates a region of slots slots of at least need bytes each,
// in an anonymous memfd: it has no name in any file system, so nothing is
// left behind when both sides have closed it.
func newShmMapping(slots int, need int64) (*shmMapping, error) {
	slotBytes := alignUp(need, int64(os.Getpagesize()))
	fd, err := unix.MemfdCreate("meshfeed-shm", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("transport: shm: %w: memfd_create: %v", ErrUnavailable, err)
	}
	size := slotBytes * int64(slots)
	if err := unix.Ftruncate(fd, size); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("transport: shm: %w: size the region to %d bytes: %v", ErrUnavailable, size, err)
	}
	mem, err := unix.Mmap(fd, 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("transport: shm: %w: map the region (%d bytes): %v", ErrUnavailable, size, err)
	}
	return &shmMapping{fd: fd, mem: mem, slotBytes: slotBytes}, nil
}

// fill copies each slice's buffers into slot, each at a 64-byte aligned
// offset, and returns their [offset, length] in the region, per slice
// ([0, 0] for an absent validity bitmap). Every slice's rows start aligned,
// so that each device's rows can be aliased, whatever b. A buffer that
// already lies in arena at a 64-byte aligned address is not copied: its
// entry is [offset, length, 0] in the arena (region 0), and inPlace counts
// its bytes. Its room in the slot stays reserved, so that any later step
// fits a slot whatever the arena holds.
func (m *shmMapping) fill(slot int, slices [][]shmBuf, arena *shmArena) (out [][][]int64, inPlace int64) {
	// Every entry is a window of one backing array: three allocations per
	// step, not one per buffer.
	total := 0
	for _, bufs := range slices {
		total += len(bufs)
	}
	flat := make([]int64, 3*total)
	entry := func(v ...int64) []int64 {
		e := flat[:len(v):len(v)]
		copy(e, v)
		flat = flat[3:]
		return e
	}
	out = make([][][]int64, len(slices))
	rows := make([][]int64, total)
	at := int64(slot) * m.slotBytes
	for k, bufs := range slices {
		out[k], rows = rows[:len(bufs):len(bufs)], rows[len(bufs):]
		for i, b := range bufs {
			n := b.len()
			if b.b == nil {
				out[k][i] = entry(0, 0)
				continue
			}
			if arena != nil && b.bits == 0 {
				if off, ok := arena.offset(b.b); ok && off%shmAlign == 0 {
					out[k][i] = entry(off, n, 0)
					inPlace += n
					at += alignUp(n, shmAlign)
					continue
				}
			}
			if b.bits > 0 {
				bitutil.CopyBitmap(b.b, b.bitOff, b.bits, m.mem[at:at+n], 0)
			} else {
				copy(m.mem[at:at+n], b.b)
			}
			out[k][i] = entry(at, n)
			at += alignUp(n, shmAlign)
		}
	}
	return out, inPlace
}

func (m *shmMapping) close() {
	if m == nil {
		return
	}
	_ = unix.Munmap(m.mem)
	_ = unix.Close(m.fd)
}
