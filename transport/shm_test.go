package transport

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"math"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"golang.org/x/sys/unix"
)

// shmClient is a minimal client of the shared-memory wire, written from
// docs/PROTOCOL.md: frames are read with recvmsg so that the region's
// descriptor is not lost.
type shmClient struct {
	t    testing.TB
	conn *net.UnixConn
	buf  bytes.Buffer
	fds  []int
	mems map[int][]byte // region index -> mapping (the arena's too)
	mem  []byte         // the mapping of the step being decoded
}

// bytes returns the bytes of a descriptor's buffer entry: [offset, length]
// in the step's slot region, or [offset, length, region] in another.
func (c *shmClient) bytes(b []int64) []byte {
	m := c.mem
	if len(b) == 3 {
		m = c.mems[int(b[2])]
	}
	return m[b[0] : b[0]+b[1]]
}

// slotRegions counts the slot regions mapped (the arena aside).
func (c *shmClient) slotRegions(arena bool) int {
	if arena {
		return len(c.mems) - 1
	}
	return len(c.mems)
}

func dialShm(t testing.TB, path string, hello any) *shmClient {
	t.Helper()
	conn, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	c := &shmClient{t: t, conn: conn}
	t.Cleanup(c.close)
	c.write(hello)
	return c
}

func (c *shmClient) write(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		c.t.Fatal(err)
	}
	msg := binary.LittleEndian.AppendUint32(nil, uint32(len(b)))
	if _, err := c.conn.Write(append(msg, b...)); err != nil {
		c.t.Fatalf("write: %v", err)
	}
}

// fill reads until the buffer holds n bytes, keeping any descriptors.
func (c *shmClient) fill(n int) error {
	p := make([]byte, 1<<16)
	oob := make([]byte, unix.CmsgSpace(4*4))
	for c.buf.Len() < n {
		k, oobn, _, _, err := c.conn.ReadMsgUnix(p, oob)
		if oobn > 0 {
			msgs, perr := unix.ParseSocketControlMessage(oob[:oobn])
			if perr != nil {
				c.t.Fatalf("control message: %v", perr)
			}
			for _, m := range msgs {
				fds, err := unix.ParseUnixRights(&m)
				if err == nil {
					c.fds = append(c.fds, fds...)
				}
			}
		}
		if err != nil {
			return err
		}
		c.buf.Write(p[:k])
		if k == 0 && oobn == 0 {
			return net.ErrClosed
		}
	}
	return nil
}

func (c *shmClient) frame() (shmFrame, error) {
	if err := c.fill(4); err != nil {
		return shmFrame{}, err
	}
	n := int(binary.LittleEndian.Uint32(c.buf.Next(4)))
	if err := c.fill(n); err != nil {
		return shmFrame{}, err
	}
	var f shmFrame
	if err := json.Unmarshal(c.buf.Next(n), &f); err != nil {
		c.t.Fatalf("frame: %v", err)
	}
	if f.Region != nil {
		if len(c.fds) != 1 {
			c.t.Fatalf("region frame came with %d descriptors, want 1", len(c.fds))
		}
		mem, err := unix.Mmap(c.fds[0], 0, int(f.Region.Bytes), unix.PROT_READ, unix.MAP_SHARED)
		if err != nil {
			c.t.Fatal(err)
		}
		unix.Close(c.fds[0])
		c.fds = c.fds[:0]
		if c.mems == nil {
			c.mems = map[int][]byte{}
		}
		c.mems[f.Region.Index] = mem
	}
	if f.Step != nil {
		c.mem = c.mems[f.Step.Region]
		if c.mem == nil {
			c.t.Fatalf("step %d in region %d, which was never sent", f.Step.Step, f.Step.Region)
		}
	}
	return f, nil
}

// each reads frames until the end frame, failing the test on a broken
// connection or an error frame, and hands every region frame to onRegion
// (nil: ignored) and every step frame to onStep (c.mem is then its region).
func (c *shmClient) each(onRegion func(*shmRegion), onStep func(*shmStep)) {
	c.t.Helper()
	for steps := 0; ; {
		f, err := c.frame()
		if err != nil || f.Error != nil {
			c.t.Fatalf("after %d steps: %v %+v", steps, err, f.Error)
		}
		switch {
		case f.End:
			return
		case f.Region != nil:
			if onRegion != nil {
				onRegion(f.Region)
			}
		case f.Step != nil:
			steps++
			onStep(f.Step)
		}
	}
}

// flightSteps reads req's steps over Flight: what the shared-memory wire
// must deliver.
func flightSteps(t *testing.T, ts *testServer, req *Request) []step {
	t.Helper()
	_, want, err := readAll(t, context.Background(), ts.client, ticket(t, req))
	if err != nil {
		t.Fatal(err)
	}
	return want
}

// sameSteps fails the test unless the shared-memory wire delivered exactly
// Flight's steps (ids, x and mask).
func sameSteps(t *testing.T, got, want []step) {
	t.Helper()
	if len(got) != len(want) || len(got) == 0 {
		t.Fatalf("shm delivered %d steps, Flight %d", len(got), len(want))
	}
	for i := range want {
		if !slices.Equal(got[i].ids, want[i].ids) || !slices.Equal(got[i].x, want[i].x) || !slices.Equal(got[i].mask, want[i].mask) {
			t.Fatalf("step %d: shm %+v, Flight %+v", i, got[i], want[i])
		}
	}
}

// release tells the server a slot is free again, and ack that a step was
// read. Both are best effort: after the last step the server may already
// have closed the connection.
func (c *shmClient) release(s *shmStep) {
	c.send(map[string]int{"release": s.Slot, "region": s.Region})
}
func (c *shmClient) ack() { c.send(map[string]int{"ack": 1}) }

func (c *shmClient) send(v any) {
	b, _ := json.Marshal(v)
	_, _ = c.conn.Write(append(binary.LittleEndian.AppendUint32(nil, uint32(len(b))), b...))
}

func (c *shmClient) close() {
	c.conn.Close()
	for _, m := range c.mems {
		unix.Munmap(m)
	}
	c.mems, c.mem = nil, nil
	for _, fd := range c.fds {
		unix.Close(fd)
	}
	c.fds = nil
}

// demoStep decodes a demo step (id int64, x fixed_size_list<float32>[4],
// valid) from the region: its slices' rows, in slice order.
func (c *shmClient) demoStep(s *shmStep) step {
	out := step{meta: map[string]any{"epoch": float64(s.Epoch), "step": float64(s.Step)}}
	if len(s.Buffers) != len(s.Slices) {
		c.t.Fatalf("step %d: buffers of %d slices, want %d", s.Step, len(s.Buffers), len(s.Slices))
	}
	for _, bufs := range s.Buffers {
		// IPC order: id validity, id values, x validity, x child validity, x values, [mask validity, mask bits].
		for i, b := range bufs {
			if b[0]%shmAlign != 0 {
				c.t.Errorf("buffer %d at offset %d is not %d-byte aligned", i, b[0], shmAlign)
			}
		}
		id := c.bytes(bufs[1])
		for r := range s.Rows {
			out.ids = append(out.ids, int64(binary.LittleEndian.Uint64(id[8*r:])))
		}
		x := c.bytes(bufs[4])
		for r := range s.Rows {
			var v [4]float32
			for k := range 4 {
				v[k] = math.Float32frombits(binary.LittleEndian.Uint32(x[16*r+4*int64(k):]))
			}
			out.x = append(out.x, v)
		}
		if len(bufs) > 5 {
			bits := c.bytes(bufs[6])
			for r := range s.Rows {
				out.mask = append(out.mask, bits[r/8]&(1<<(r%8)) != 0)
			}
		}
	}
	return out
}

// startShm runs a server over backend (and opts) with its shared-memory wire on a
// socket in a temporary directory, and returns the socket's path.
func startShm(t *testing.T, backend Backend, opts ...Option) (*testServer, string) {
	t.Helper()
	ts := startServer(t, viaBufconn, backend, opts)
	path := filepath.Join(t.TempDir(), "shm.sock")
	lis, err := ListenShm("unix://" + path)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- ts.srv.ServeShm(lis) }()
	t.Cleanup(func() {
		ts.stop(t)
		if err := <-done; err != nil {
			t.Errorf("ServeShm: %v", err)
		}
	})
	return ts, path
}

// TestShmSteps: the shared-memory wire delivers exactly the steps Flight
// delivers for the same ticket, every buffer 64-byte aligned, padding and
// mask included; the stream ends with an end frame.
func TestShmSteps(t *testing.T) {
	mem := checkedMem(t)
	be := &DemoBackend{NumRows: 1003, Mem: mem}
	ts, path := startShm(t, be)
	req := baseRequest()
	req.LastBatch = LastBatchPad
	req.Epochs = 2
	_, want, err := readAll(t, context.Background(), ts.client, ticket(t, req))
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := req.Encode()
	c := dialShm(t, path, shmHello{Version: ShmVersion, Ticket: raw, Slots: 3})
	f, err := c.frame()
	if err != nil || len(f.Schema) == 0 {
		t.Fatalf("first frame = %+v, %v; want the schema", f, err)
	}
	var got []step
	held := map[[2]int]bool{}
	for {
		f, err := c.frame()
		if err != nil {
			t.Fatalf("after %d steps: %v", len(got), err)
		}
		if f.Error != nil {
			t.Fatalf("error frame: %+v", f.Error)
		}
		if f.End {
			break
		}
		if f.Region != nil {
			if f.Region.Arena {
				if f.Region.Index != 0 || f.Region.Slots != 0 {
					t.Errorf("arena %+v: want region 0, without slots", f.Region)
				}
				continue
			}
			if f.Region.Slots != 3 || f.Region.SlotBytes%int64(os.Getpagesize()) != 0 {
				t.Errorf("region %+v: want 3 page-aligned slots", f.Region)
			}
			continue
		}
		if f.Step == nil {
			t.Fatalf("frame %+v has no step", f)
		}
		if held[[2]int{f.Step.Region, f.Step.Slot}] {
			t.Fatalf("step %d reuses slot %d, which the client has not released", len(got), f.Step.Slot)
		}
		got = append(got, c.demoStep(f.Step))
		c.ack()
		c.release(f.Step)
	}
	if len(got) != len(want) {
		t.Fatalf("shm delivered %d steps, Flight %d", len(got), len(want))
	}
	for i := range want {
		if !slices.Equal(got[i].ids, want[i].ids) || !slices.Equal(got[i].x, want[i].x) || !slices.Equal(got[i].mask, want[i].mask) {
			t.Fatalf("step %d: shm %+v, Flight %+v", i, got[i], want[i])
		}
	}
}

// TestShmBackpressure: a client that reads (acknowledges) nothing gets as
// many steps as its window and no more; the producer stops within the
// prefetch queue; closing the connection ends the stream and closes the
// backend's stream.
func TestShmBackpressure(t *testing.T) {
	mem := checkedMem(t)
	tb := &tracking{Backend: &DemoBackend{NumRows: 100000, Mem: mem}}
	ts, path := startShm(t, tb)
	req := baseRequest()
	req.Epochs = 0
	raw, _ := req.Encode()
	c := dialShm(t, path, shmHello{Version: ShmVersion, Ticket: raw, Slots: 2})
	steps := 0
	for steps < 2 {
		f, err := c.frame()
		if err != nil {
			t.Fatal(err)
		}
		if f.Step != nil {
			steps++
		}
	}
	waitFor(t, "the producer to fill its queue", func() bool { return tb.nexts.Load() >= 2 })
	time.Sleep(50 * time.Millisecond)
	// 2 in the slots, the prefetch queue, one waiting for a slot, one
	// waiting for room in the queue.
	if n, most := tb.nexts.Load(), int64(2+DefaultPrefetch+2); n > most {
		t.Errorf("backend produced %d steps for a client holding 2 slots, want at most %d", n, most)
	}
	_ = c.conn.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	if f, err := c.frame(); err == nil && f.Step != nil {
		t.Errorf("a third step arrived before any release: %+v", f.Step.StepMeta)
	}
	c.close()
	waitFor(t, "the stream to close", func() bool { return tb.closed.Load() == 1 })
	waitFor(t, "no stream active", func() bool { return ts.srv.Metrics().StreamsActive == 0 })
}

// TestShmErrors: a bad hello or ticket ends the connection with an error
// frame carrying the status code's name and a message that says what to do.
func TestShmErrors(t *testing.T) {
	_, path := startShm(t, &DemoBackend{NumRows: 100})
	good, _ := baseRequest().Encode()
	outside := baseRequest()
	outside.Datasets = []string{"/etc/*.parquet"}
	bad, _ := outside.Encode()
	for _, tc := range []struct {
		name  string
		hello any
		code  string
		msg   string
	}{
		{"version", shmHello{Version: 9, Ticket: good}, "INVALID_ARGUMENT", "hello version 9"},
		{"slots", shmHello{Version: ShmVersion, Ticket: good, Slots: 1}, "INVALID_ARGUMENT", "slots 1"},
		{"ticket", shmHello{Version: ShmVersion, Ticket: json.RawMessage(`{"version":1}`)}, "INVALID_ARGUMENT", "datasets is empty"},
		{"roots", shmHello{Version: ShmVersion, Ticket: bad}, "PERMISSION_DENIED", "/etc"},
		{"not json", "hello", "INVALID_ARGUMENT", "hello"},
	} {
		c := dialShm(t, path, tc.hello)
		f, err := c.frame()
		if err != nil || f.Error == nil {
			t.Errorf("%s: frame = %+v, %v; want an error frame", tc.name, f, err)
			continue
		}
		if f.Error.Code != tc.code || !strings.Contains(f.Error.Message, tc.msg) {
			t.Errorf("%s: error %+v, want code %s and %q", tc.name, f.Error, tc.code, tc.msg)
		}
	}
}

// halves hands each step of its backend as two slices (views of its record),
// as package feed does for a client of several slices.
type halves struct{ Backend }

func (b halves) Open(ctx context.Context, req *Request) (Stream, error) {
	st, err := b.Backend.Open(ctx, req)
	return halvesStream{st}, err
}

type halvesStream struct{ Stream }

func (s halvesStream) Next(ctx context.Context) (Step, error) {
	st, err := s.Stream.Next(ctx)
	if err != nil {
		return st, err
	}
	rec := st.Slices[0]
	n := rec.NumRows() / 2
	st.Slices = []arrow.RecordBatch{rec.NewSlice(0, n), rec.NewSlice(n, rec.NumRows())}
	rec.Release()
	return st, nil
}

// TestShmSlices: steps of several slices (joined virtually by the server)
// arrive in shared memory exactly as over Flight.
func TestShmSlices(t *testing.T) {
	ts, path := startShm(t, halves{&DemoBackend{NumRows: 1000}})
	req := baseRequest()
	// Slices of 30 rows: the second slice's mask bits start mid-byte, and
	// its ids at 240 bytes, not 64-aligned in a contiguous layout.
	req.GlobalBatchSize, req.NumSlices, req.Slices, req.LastBatch, req.Epochs = 60, 2, []int{0, 1}, LastBatchPad, 1
	want := flightSteps(t, ts, req)
	raw, _ := req.Encode()
	c := dialShm(t, path, shmHello{Version: ShmVersion, Ticket: raw})
	var got []step
	c.each(nil, func(st *shmStep) {
		got = append(got, c.demoStep(st))
		c.ack()
		c.release(st)
	})
	sameSteps(t, got, want)
}

// TestShmHeldSteps: a client that reads every step but releases none (a
// loop that keeps its batches) is not stalled: the server adds regions, and
// no slot is handed out twice.
func TestShmHeldSteps(t *testing.T) {
	_, path := startShm(t, &DemoBackend{NumRows: 1000})
	req := baseRequest()
	req.GlobalBatchSize, req.NumSlices, req.Slices, req.Epochs = 40, 1, []int{0}, 1
	raw, _ := req.Encode()
	c := dialShm(t, path, shmHello{Version: ShmVersion, Ticket: raw, Slots: 2})
	seen := map[[2]int]bool{}
	var held []*shmStep
	c.each(nil, func(st *shmStep) {
		k := [2]int{st.Region, st.Slot}
		if seen[k] {
			t.Fatalf("slot %v handed out twice while held", k)
		}
		seen[k] = true
		held = append(held, st)
		c.ack()
	})
	// Decoded only now: a slot overwritten while held would show.
	var ids []int64
	for _, st := range held {
		c.mem = c.mems[st.Region]
		ids = append(ids, c.demoStep(st).ids...)
	}
	if len(seen) != 25 || c.slotRegions(true) != 13 {
		t.Errorf("%d steps in %d regions, want 25 steps in 13 regions of 2 slots", len(seen), c.slotRegions(true))
	}
	for i, id := range ids {
		if id != int64(i) {
			t.Fatalf("row %d has id %d: a held slot was overwritten", i, id)
		}
	}
}
