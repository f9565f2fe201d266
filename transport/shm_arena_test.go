package transport

import (
	"flag"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/meshfeed/meshfeed/internal/testseed"
)

var arenaSeed = flag.Uint64("transport.seed", 0, "seed of the randomized arena test (0: $MESHFEED_SEED or the clock)")

// TestShmArenaAllocator: random allocations, reallocations and frees
// against a model: every arena allocation is 64-byte aligned, inside the
// arena and disjoint from every other live one; Allocate clears what it
// returns, Reallocate keeps the bytes; small requests and requests that find
// no room go to the fallback; once everything is freed the arena is one free
// span again and the fallback holds nothing.
func TestShmArenaAllocator(t *testing.T) {
	seed := testseed.Get(t, *arenaSeed, "transport.seed")
	rng := rand.New(rand.NewPCG(seed, 1))
	fb := checkedMem(t)
	var spills atomic.Int64
	a, err := newShmArena(4<<20, fb, &spills)
	if err != nil {
		t.Fatal(err)
	}
	defer a.close()
	type alloc struct {
		b    []byte
		fill byte
	}
	var live []alloc
	check := func(b []byte, want byte, what string) {
		t.Helper()
		if i := slices.IndexFunc(b, func(v byte) bool { return v != want }); i >= 0 {
			t.Fatalf("%s: byte %d of %d is %d, want %d", what, i, len(b), b[i], want)
		}
	}
	var served, spilled int
	for op := range 2500 {
		switch k := rng.IntN(10); {
		case k < 5 || len(live) == 0:
			size := rng.IntN(300 << 10)
			var b []byte
			if rng.IntN(2) == 0 {
				b = a.Allocate(size)
				check(b, 0, "Allocate")
			} else {
				b = a.AllocateUninitialized(size)
			}
			if len(b) != size {
				t.Fatalf("op %d: %d bytes for %d", op, len(b), size)
			}
			if off, ok := a.offset(b); ok {
				served++
				if off%shmAlign != 0 || off+int64(size) > int64(a.size) {
					t.Fatalf("op %d: %d bytes at offset %d of an arena of %d", op, size, off, a.size)
				}
				if size < shmArenaMin {
					t.Fatalf("op %d: %d bytes (under %d) served by the arena", op, size, shmArenaMin)
				}
			} else if size >= shmArenaMin {
				spilled++
			}
			f := byte(rng.IntN(255) + 1)
			for i := range b {
				b[i] = f
			}
			live = append(live, alloc{b, f})
		case k < 7:
			i := rng.IntN(len(live))
			size := rng.IntN(300 << 10)
			old := live[i]
			nb := a.Reallocate(size, old.b)
			check(nb[:min(len(old.b), size)], old.fill, "Reallocate")
			for j := range nb {
				nb[j] = old.fill
			}
			live[i].b = nb
		default:
			i := rng.IntN(len(live))
			a.Free(live[i].b)
			live = slices.Delete(live, i, i+1)
		}
		// Every live buffer still holds its own fill: none overlaps another.
		if op%100 == 0 {
			for _, l := range live {
				check(l.b, l.fill, "live buffer")
			}
		}
	}
	if served == 0 || spilled == 0 || spills.Load() < int64(spilled) {
		t.Errorf("%d allocations served by the arena, %d spilled for want of room (%d counted): want both, all counted", served, spilled, spills.Load())
	}
	for _, l := range live {
		check(l.b, l.fill, "live buffer")
		a.Free(l.b)
	}
	if a.liveBytes() != 0 || len(a.free) != 1 || a.free[0] != (arenaSpan{0, int64(a.size)}) {
		t.Errorf("after freeing everything: %d bytes live, free spans %v; want one span of %d", a.liveBytes(), a.free, a.size)
	}
}

// TestShmArenaOutlivesClose: an arena closed while a record still views it
// stays mapped until that record's buffer is freed, then goes.
func TestShmArenaOutlivesClose(t *testing.T) {
	a, err := newShmArena(1<<20, checkedMem(t), new(atomic.Int64))
	if err != nil {
		t.Fatal(err)
	}
	b := a.Allocate(64 << 10)
	a.close()
	if !a.mapped() {
		t.Fatal("the arena was unmapped while a buffer of it was live")
	}
	b[0] = 1 // still writable
	if c := a.Allocate(64 << 10); func() bool { _, ok := a.offset(c); return ok }() {
		t.Error("a closed arena served an allocation")
	} else {
		a.Free(c)
	}
	a.Free(b)
	if a.mapped() {
		t.Error("the arena stayed mapped after its last buffer was freed")
	}
}

// bigDemo is a demo dataset whose steps' buffers are large enough for the
// arena (B=8,192 rows: 64 KiB of ids, 128 KiB of x per step).
func bigDemo(t *testing.T, steps int64) (*DemoBackend, *Request) {
	be := &DemoBackend{NumRows: 8192 * steps, Mem: checkedMem(t)}
	req := baseRequest()
	req.GlobalBatchSize, req.NumSlices, req.Slices, req.Epochs = 8192, 1, []int{0}, 1
	return be, req
}

// TestShmInPlace: steps that the backend allocated in the arena travel by
// reference (no copy into the slot: every id and x buffer names the arena,
// and the in-place counter holds all their bytes), and arrive exactly as over
// Flight. A step the client keeps unreleased while 100 later steps stream
// keeps its values: the server holds its records until the release, so the
// arena does not reuse their bytes.
func TestShmInPlace(t *testing.T) {
	be, req := bigDemo(t, 103)
	ts, path := startShm(t, be)
	want := flightSteps(t, ts, req)
	raw, _ := req.Encode()
	c := dialShm(t, path, shmHello{Version: ShmVersion, Ticket: raw, Slots: 4})
	var got []step
	var kept *shmStep
	var keptStep step
	var refBytes int64
	arena := false
	c.each(func(r *shmRegion) { arena = arena || r.Arena }, func(st *shmStep) {
		bufs := st.Buffers[0]
		for _, i := range []int{1, 4} { // id values, x values
			if len(bufs[i]) != 3 || bufs[i][2] != 0 || bufs[i][0]%shmAlign != 0 {
				t.Fatalf("step %d buffer %d = %v: want [offset, length, 0] in the arena, aligned", st.Step, i, bufs[i])
			}
			refBytes += bufs[i][1]
		}
		s := c.demoStep(st)
		got = append(got, s)
		c.ack()
		if st.Step == 1 {
			kept, keptStep = st, s
			return // held: not released
		}
		c.release(st)
	})
	if !arena {
		t.Fatal("no arena region was sent")
	}
	sameSteps(t, got, want)
	// Read again after 101 later steps streamed through the arena.
	c.mem = c.mems[kept.Region]
	again := c.demoStep(kept)
	if !slices.Equal(again.ids, keptStep.ids) || !slices.Equal(again.x, keptStep.x) {
		t.Fatal("a held step's arena bytes changed while later steps streamed")
	}
	if n := ts.srv.Metrics().ShmInPlaceBytes; n != refBytes || n == 0 {
		t.Errorf("in-place bytes %d, want the %d the descriptors referenced", n, refBytes)
	}
	if n := ts.srv.Metrics().ShmArenaSpills; n != 0 {
		t.Errorf("%d arena spills in a stream whose every step went by reference", n)
	}
	c.release(kept)
}

// TestShmVersion1Copies: a version-1 client gets no arena: every buffer is
// [offset, length] in its slot, as before version 2.
func TestShmVersion1Copies(t *testing.T) {
	be, req := bigDemo(t, 4)
	ts, path := startShm(t, be)
	raw, _ := req.Encode()
	c := dialShm(t, path, shmHello{Version: 1, Ticket: raw})
	steps := 0
	c.each(func(r *shmRegion) {
		if r.Arena {
			t.Fatal("a version-1 client was sent an arena")
		}
	}, func(st *shmStep) {
		for _, b := range st.Buffers[0] {
			if len(b) != 2 {
				t.Fatalf("step %d: buffer %v, want [offset, length]", st.Step, b)
			}
		}
		if ids := c.demoStep(st).ids; ids[0] != int64(8192*steps) {
			t.Fatalf("step %d starts at id %d", steps, ids[0])
		}
		steps++
		c.ack()
		c.release(st)
	})
	if steps != 4 || ts.srv.Metrics().ShmInPlaceBytes != 0 {
		t.Errorf("%d steps, %d bytes in place; want 4 steps, all copied", steps, ts.srv.Metrics().ShmInPlaceBytes)
	}
}

// TestShmArenaFull: an arena too small for the stream's buffers costs
// copies, not errors: every step arrives, right.
func TestShmArenaFull(t *testing.T) {
	be, req := bigDemo(t, 20)
	ts, path := startShm(t, be, WithShmArena(256<<10))
	want := flightSteps(t, ts, req)
	raw, _ := req.Encode()
	c := dialShm(t, path, shmHello{Version: ShmVersion, Ticket: raw, Slots: 2})
	var got []step
	copied := 0
	c.each(nil, func(st *shmStep) {
		for _, b := range st.Buffers[0] {
			if len(b) == 2 && b[1] > 0 {
				copied++
			}
		}
		got = append(got, c.demoStep(st))
		c.ack()
		c.release(st)
	})
	if copied == 0 {
		t.Fatalf("%d steps, no buffer copied: want some copied", len(got))
	}
	if ts.srv.Metrics().ShmArenaSpills == 0 {
		t.Error("a full arena counted no spill")
	}
	sameSteps(t, got, want)
}

// shmMappings counts this process's mappings of meshfeed's memfds.
func shmMappings(t *testing.T) int {
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), "memfd:meshfeed-shm")
}

// TestShmClientGoneReclaims: a client that goes away holding steps (none
// released) leaves nothing behind: the server releases the records it held,
// the backend's allocator is empty (checked at cleanup), and no mapping of a
// region or the arena remains.
func TestShmClientGoneReclaims(t *testing.T) {
	be, req := bigDemo(t, 50)
	req.Epochs = 0
	ts, path := startShm(t, be)
	before := shmMappings(t)
	raw, _ := req.Encode()
	c := dialShm(t, path, shmHello{Version: ShmVersion, Ticket: raw, Slots: 2})
	for steps := 0; steps < 6; {
		f, err := c.frame()
		if err != nil || f.Error != nil {
			t.Fatalf("after %d steps: %v %+v", steps, err, f.Error)
		}
		if f.Step != nil {
			steps++
			c.ack()
		}
	}
	if shmMappings(t) <= before {
		t.Fatal("no region mapped while streaming")
	}
	c.close()
	waitFor(t, "no stream active", func() bool { return ts.srv.Metrics().StreamsActive == 0 })
	waitFor(t, "the regions and the arena unmapped", func() bool { return shmMappings(t) == before })
}

// dirtyMem is an allocator whose AllocateUninitialized returns dirty bytes,
// as a pool that recycles buffers does.
type dirtyMem struct{ memory.Allocator }

func (d dirtyMem) AllocateUninitialized(size int) []byte {
	b := d.Allocate(size)
	for i := range b {
		b[i] = 0xAA
	}
	return b
}

// TestShmArenaAllocateClears: Allocate returns cleared bytes whether the
// arena or the fallback serves it, also when the fallback recycles dirty
// memory (AllocateUninitialized is for callers that overwrite it whole).
func TestShmArenaAllocateClears(t *testing.T) {
	a, err := newShmArena(256<<10, dirtyMem{memory.NewGoAllocator()}, new(atomic.Int64))
	if err != nil {
		t.Fatal(err)
	}
	defer a.close()
	big := a.AllocateUninitialized(200 << 10) // in the arena, then dirtied and freed
	for i := range big {
		big[i] = 0xBB
	}
	a.Free(big)
	for _, size := range []int{100, shmArenaMin, 200 << 10, 300 << 10} { // fallback, arena, arena, fallback (no room)
		b := a.Allocate(size)
		if i := slices.IndexFunc(b, func(v byte) bool { return v != 0 }); i >= 0 {
			t.Errorf("Allocate(%d): byte %d is %#x, want 0", size, i, b[i])
		}
		a.Free(b)
	}
	if u := a.AllocateUninitialized(100); u[0] != 0xAA {
		t.Errorf("AllocateUninitialized of the fallback: %#x, want its own bytes", u[0])
	}
}
