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
// loop that keeps batches) makes the pool grow by a region rather than stall,
// as long as the regions stay within the stream's share of the memory
// budget (share: the budget over the server's stream limit), the server's
// memory account has room for them, and the pool has fewer than
// maxShmRegions; past that, the stream waits for a release (backpressure),
// and ends with ErrIdle after the idle timeout.
//
// A slot is free, filling (taken by the server) or sent (its descriptor
// sent: the client holds it). A release is valid only for a sent slot; any
// other release, an acknowledgement of steps never sent, or a frame that is
// not JSON is a protocol error that ends the connection (err). Whatever the
// client sent, close releases every record held and unmaps every region.
type shmPool struct {
	mu        sync.Mutex
	changed   chan struct{} // signalled on every release and acknowledgement
	regs      []*shmMapping // nil at the arena's index
	free      [][2]int      // (region, slot)
	state     map[[2]int]slotState
	held      map[[2]int][]arrow.RecordBatch // records of steps sent by reference, until their release
	slotBytes int64                          // of every region's slots (the first step's size)
	perRegion int
	sent      int64
	acked     int64
	arena     *shmArena      // nil without one; set before the stream starts
	account   *MemoryAccount // the server's memory account: regions are charged there
	charged   int64          // bytes of regions charged to account
	share     int64          // the most bytes of regions charged past the first (0: no bound but the account's)
	err       error          // the client's protocol error, when it broke the protocol
}

// slotState is where a slot is in its life.
type slotState uint8

const (
	slotFilling slotState = iota + 1 // taken by the server
	slotSent                         // its descriptor was sent: the client holds it
)

// maxShmRegions bounds the slot regions of one stream (each is a file
// descriptor and a mapping), whatever the budget.
const maxShmRegions = 256

// readClient applies the client's frames (acknowledgements, releases) until
// the connection ends or the client breaks the protocol (then p.err says
// how; the caller ends the stream).
func (p *shmPool) readClient(w *shmConn) {
	for {
		raw, err := w.read()
		if err != nil {
			return
		}
		var f shmClientFrame
		if err := json.Unmarshal(raw, &f); err != nil {
			p.fail(fmt.Errorf("transport: shm: %w: a client frame is not JSON: %v", ErrProtocol, err))
			return
		}
		if f.Ack != 0 {
			if err := p.ack(f.Ack); err != nil {
				p.fail(err)
				return
			}
		}
		if f.Release != nil {
			if err := p.release(f.Region, *f.Release); err != nil {
				p.fail(err)
				return
			}
		}
	}
}

// fail records the client's protocol error.
func (p *shmPool) fail(err error) {
	p.mu.Lock()
	if p.err == nil {
		p.err = err
	}
	p.mu.Unlock()
	p.signal()
}

// protocolErr returns the client's protocol error, if any.
func (p *shmPool) protocolErr() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

func (p *shmPool) signal() {
	select {
	case p.changed <- struct{}{}:
	default:
	}
}

// ack counts n steps read by the client; more than were sent is an error.
func (p *shmPool) ack(n int) error {
	p.mu.Lock()
	if n < 0 || int64(n) > p.sent-p.acked {
		sent, acked := p.sent, p.acked
		p.mu.Unlock()
		return fmt.Errorf("transport: shm: %w: ack of %d steps, but %d were sent and %d acknowledged", ErrProtocol, n, sent, acked)
	}
	p.acked += int64(n)
	p.mu.Unlock()
	p.signal()
	return nil
}

// release returns a slot the client holds, and releases the records it
// held. A release of a slot the client does not hold (unknown, free, or not
// sent yet: a second release of the same step, or one ahead of its
// descriptor) changes nothing and is a protocol error.
func (p *shmPool) release(region, slot int) error {
	p.mu.Lock()
	k := [2]int{region, slot}
	if p.state[k] != slotSent {
		p.mu.Unlock()
		return fmt.Errorf("transport: shm: %w: release of region %d slot %d, which the client does not hold (released already, never sent, or unknown)", ErrProtocol, region, slot)
	}
	delete(p.state, k)
	p.free = append(p.free, k)
	recs := p.held[k]
	delete(p.held, k)
	p.mu.Unlock()
	Step{Slices: recs}.Release()
	p.signal()
	return nil
}

// markSent records that the step in (region, slot) goes to the client,
// keeping recs (its records sent by reference; nil when copied) until its
// release.
func (p *shmPool) markSent(region, slot int, recs []arrow.RecordBatch) {
	p.mu.Lock()
	defer p.mu.Unlock()
	k := [2]int{region, slot}
	p.state[k] = slotSent
	if recs != nil {
		if p.held == nil {
			p.held = map[[2]int][]arrow.RecordBatch{}
		}
		p.held[k] = recs
	}
}

// waitWindow waits until fewer than window steps are unread; it returns
// ctx's error when ctx ends first, or the client's protocol error.
func (p *shmPool) waitWindow(ctx context.Context, window int64) error {
	for {
		p.mu.Lock()
		ok, perr := p.sent-p.acked < window, p.err
		p.mu.Unlock()
		if perr != nil {
			return perr
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-p.changed:
		}
	}
}

// take returns a free slot for a step of need bytes. When none is free it
// creates a region (fresh: its descriptor must be sent first) if the pool
// has none yet, or has fewer than maxShmRegions and the memory account has
// room for it; else it waits for a release until ctx ends (ctx's error).
func (p *shmPool) take(ctx context.Context, need int64) (region, slot int, fresh bool, err error) {
	for {
		region, slot, fresh, wait, err := p.tryTake(need)
		if !wait {
			return region, slot, fresh, err
		}
		select {
		case <-ctx.Done():
			return 0, 0, false, ctx.Err()
		case <-p.changed:
		}
	}
}

// tryTake is take without waiting: wait is true when the caller must wait
// for a release.
func (p *shmPool) tryTake(need int64) (region, slot int, fresh, wait bool, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err != nil {
		return 0, 0, false, false, p.err
	}
	if p.state == nil {
		p.state = map[[2]int]slotState{}
	}
	if p.slotBytes > 0 && need > p.slotBytes {
		return 0, 0, false, false, fmt.Errorf("%d bytes, more than the %d of a slot (the first step's size)", need, p.slotBytes)
	}
	if len(p.free) == 0 {
		size := need
		if p.slotBytes > 0 {
			size = p.slotBytes
		}
		bytes := alignUp(size, int64(os.Getpagesize())) * int64(p.perRegion)
		slotRegions := len(p.regs)
		if p.arena != nil {
			slotRegions--
		}
		switch {
		case slotRegions == 0:
			// The first region is needed for any progress: it is charged
			// whether the account has room or not.
			p.account.force(bytes)
		case slotRegions >= maxShmRegions || (p.share > 0 && p.charged+bytes > p.share) || !p.account.TryReserve(bytes):
			return 0, 0, false, true, nil
		}
		m, err := newShmMapping(p.perRegion, size)
		if err != nil {
			p.account.Unreserve(bytes)
			return 0, 0, false, false, err
		}
		p.charged += bytes
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
	p.state[k] = slotFilling
	p.sent++
	return k[0], k[1], fresh, false, nil
}

// regions returns the slot regions the pool has mapped.
func (p *shmPool) regions() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, m := range p.regs {
		if m != nil {
			n++
		}
	}
	return n
}

// close releases the records still held, unmaps the slot regions and
// returns their bytes to the account (the arena is the stream's to close,
// after its records are gone). It may be called more than once.
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
	p.free = nil
	p.account.Unreserve(p.charged)
	p.charged = 0
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
// offset (a buffer joined from several records' pieces as one), and returns their [offset, length] in the region, per slice
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
			if b.pieces != nil {
				b.join(m.mem[at : at+n])
				out[k][i] = entry(at, n)
				at += alignUp(n, shmAlign)
				continue
			}
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

// join copies a joined buffer's pieces into dst, back to back (len(dst)
// is b.len()): bytes, or bits, an absent validity bitmap's as set bits.
func (b shmBuf) join(dst []byte) {
	if !b.bitmap {
		at := 0
		for _, p := range b.pieces {
			at += copy(dst[at:], p.b)
		}
		return
	}
	dst[len(dst)-1] = 0 // the bits past the last row are zero
	at := 0
	for _, p := range b.pieces {
		if p.b == nil {
			bitutil.SetBitsTo(dst, int64(at), int64(p.valid), true)
			at += p.valid
			continue
		}
		bitutil.CopyBitmap(p.b, p.bitOff, p.bits, dst, at)
		at += p.bits
	}
}

func (m *shmMapping) close() {
	if m == nil {
		return
	}
	_ = unix.Munmap(m.mem)
	_ = unix.Close(m.fd)
}
