package transport

// The same-host wire: steps through shared memory instead of gRPC.
//
// A client on the same host connects to a Unix socket (ServeShm), sends one
// hello frame with the ticket, and receives the stream's schema, then one
// shared-memory region (a memfd passed with SCM_RIGHTS), then one small
// descriptor frame per step naming the slot of the region that holds the
// step's buffers, each 64-byte aligned. The client maps the region once and
// views the buffers in place; it sends a release frame for a slot once every
// array made from it is gone, and the server reuses the slot only then.
// docs/PROTOCOL.md specifies the frames.
//
// The server side is this file alone: it shares the Flight server's
// configuration (roots, limits, memory budget, metrics, status codes) and its
// producer (produce), and differs only in how a step's buffers leave.

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/apache/arrow-go/v18/arrow/flight"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
)

// ShmVersion is the version of the shared-memory protocol this server
// speaks; it also serves hellos of version 1 (no arena: every step is copied
// into its slot), and refuses any other.
const ShmVersion = 2

// Shared-memory defaults and bounds.
const (
	// DefaultShmSlots is the steps in flight when the hello names none: a
	// step being filled, steps queued for the client, steps the client holds.
	DefaultShmSlots = 4
	// MaxShmSlots bounds the slots one client may ask for.
	MaxShmSlots = 64
	// shmAlign is the alignment of every buffer in the region: XLA's CPU
	// client aliases host memory aligned to 64 bytes instead of copying it.
	shmAlign = 64
	// maxShmFrame bounds a frame a client sends (the hello holds a ticket).
	maxShmFrame = MaxTicketBytes + 4096
	// shmHelloTimeout bounds the wait for a client's hello.
	shmHelloTimeout = 10 * time.Second
)

// shmHello is the first frame of a client.
type shmHello struct {
	Version int             `json:"version"`
	Ticket  json.RawMessage `json:"ticket"`
	Slots   int             `json:"slots,omitempty"`
}

// shmClientFrame is every later frame of a client: a slot released (with
// its region), or steps read (ack).
type shmClientFrame struct {
	Release *int `json:"release,omitempty"`
	Region  int  `json:"region,omitempty"`
	Ack     int  `json:"ack,omitempty"`
}

// shmRegion describes a region, sent with its descriptor before the first
// step that uses it.
type shmRegion struct {
	Index     int   `json:"index"`
	Bytes     int64 `json:"bytes"`
	Slots     int   `json:"slots"`
	SlotBytes int64 `json:"slot_bytes"`
	// Arena marks the stream's arena (version 2): no slots; steps' buffers
	// that the backend decoded or gathered there are sent by reference.
	Arena bool `json:"arena,omitempty"`
}

// shmStep is one step's descriptor: its metadata, its slot, and for each of
// its slices (in slice order, Rows rows each) the slice's buffers as
// [offset, length] in the slot's region, or [offset, length, region] in the
// arena region named (version 2), in the Arrow IPC body order of the schema
// (depth first, a validity bitmap before each array's buffers; [0, 0] is an
// absent validity bitmap: no nulls). Releasing the slot releases the step's
// arena buffers too.
type shmStep struct {
	StepMeta
	Region  int         `json:"region"`
	Slot    int         `json:"slot"`
	Rows    int64       `json:"rows"` // rows of each slice
	Buffers [][][]int64 `json:"buffers"`
}

// shmError ends a stream: the status code's name, the message, and a
// machine-readable reason where the client can act on it.
type shmError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	// Reason is "SHM_INELIGIBLE" when the stream's columns cannot travel
	// through shared memory (the client reads it over Flight instead).
	Reason string `json:"reason,omitempty"`
}

// errShmIneligible marks a stream whose schema shared memory cannot carry.
var errShmIneligible = errors.New("not shared-memory eligible")

// shmFrame is a frame the server sends: exactly one field is set.
type shmFrame struct {
	Schema []byte     `json:"schema,omitempty"` // the IPC-serialized schema (pyarrow.ipc.read_schema)
	Region *shmRegion `json:"region,omitempty"` // comes with the region's file descriptor
	Step   *shmStep   `json:"step,omitempty"`
	End    bool       `json:"end,omitempty"`
	Error  *shmError  `json:"error,omitempty"`
}

// ListenShm binds the Unix socket of the shared-memory wire: addr is
// "unix:///path/to.sock" (or the bare path). A stale socket file that nobody
// listens on is removed first; the socket is readable by its owner alone.
func ListenShm(addr string) (*net.UnixListener, error) {
	path := strings.TrimPrefix(addr, "unix://")
	if path == "" || !filepath.IsAbs(path) {
		return nil, fmt.Errorf("transport: %w: shared-memory address %q: want unix:///absolute/path.sock", ErrConfig, addr)
	}
	removeStaleSocket(path)
	lis, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("transport: listen %s: %w", addr, err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		lis.Close()
		return nil, fmt.Errorf("transport: listen %s: %w", addr, err)
	}
	return lis, nil
}

// ServeShm serves the shared-memory wire on lis, a Unix socket listener,
// until Shutdown. Each connection is one stream.
func (s *Server) ServeShm(lis *net.UnixListener) error {
	s.mu.Lock()
	if s.shmClosed {
		s.mu.Unlock()
		lis.Close()
		return nil
	}
	s.shmLis = append(s.shmLis, lis)
	s.mu.Unlock()
	s.log.Info("serving shared memory", "addr", lis.Addr().String())
	for {
		conn, err := lis.AcceptUnix()
		if err != nil {
			s.mu.Lock()
			closed := s.shmClosed
			s.mu.Unlock()
			if closed {
				return nil
			}
			return fmt.Errorf("transport: shm accept: %w", err)
		}
		s.shmWG.Add(1)
		go func() {
			defer s.shmWG.Done()
			s.serveShmConn(conn)
		}()
	}
}

// shutdownShm closes the shared-memory listeners and ends their streams.
func (s *Server) shutdownShm() {
	s.mu.Lock()
	s.shmClosed = true
	lis := s.shmLis
	s.shmLis = nil
	conns := make([]*net.UnixConn, 0, len(s.shmConns))
	for c := range s.shmConns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, l := range lis {
		l.Close()
	}
	for _, c := range conns {
		c.Close()
	}
	s.shmWG.Wait()
}

// serveShmConn runs one shared-memory stream and closes conn.
func (s *Server) serveShmConn(conn *net.UnixConn) {
	s.mu.Lock()
	if s.shmClosed {
		s.mu.Unlock()
		conn.Close()
		return
	}
	if s.shmConns == nil {
		s.shmConns = map[*net.UnixConn]struct{}{}
	}
	s.shmConns[conn] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.shmConns, conn)
		s.mu.Unlock()
		conn.Close()
	}()
	w := newShmConn(conn)
	if err := s.shmStream(w); err != nil {
		code := codeOf(s.cfg.rules, s.codes, err)
		s.metrics.countError(code)
		s.log.Debug("shm stream ended", "code", code.String(), "err", err)
		e := &shmError{Code: codeName(code), Message: capMessage(err.Error(), MaxStatusMessage)}
		if errors.Is(err, errShmIneligible) {
			e.Reason = "SHM_INELIGIBLE"
		}
		_ = w.send(shmFrame{Error: e}, nil)
	}
}

// shmStream runs the stream of one connection: hello, schema, steps.
// readShmHello reads and checks a client's hello: its request (decoded and
// checked against the roots, as a ticket) and its slots.
func (s *Server) readShmHello(w *shmConn) (*Request, *shmHello, error) {
	_ = w.conn.SetReadDeadline(time.Now().Add(shmHelloTimeout))
	raw, err := w.read()
	if err != nil {
		return nil, nil, fmt.Errorf("transport: shm: %w: read hello: %v", ErrBadRequest, err)
	}
	_ = w.conn.SetReadDeadline(time.Time{})
	var hello shmHello
	if err := json.Unmarshal(raw, &hello); err != nil {
		return nil, nil, fmt.Errorf("transport: shm: %w: hello: %v", ErrBadRequest, err)
	}
	if hello.Version < 1 || hello.Version > ShmVersion {
		return nil, nil, fmt.Errorf("transport: shm: %w: hello version %d, this server speaks 1..%d", ErrBadRequest, hello.Version, ShmVersion)
	}
	slots := hello.Slots
	if slots == 0 {
		slots = DefaultShmSlots
	}
	if slots < 2 || slots > MaxShmSlots {
		return nil, nil, fmt.Errorf("transport: shm: %w: slots %d: want 2..%d (0: %d)", ErrBadRequest, hello.Slots, MaxShmSlots, DefaultShmSlots)
	}
	hello.Slots = slots
	req, err := s.request(hello.Ticket)
	return req, &hello, err
}

// shmStream serves one shared-memory connection: its hello, the stream's
// arena and schema, then its steps until the end, an error, or the client's
// departure.
//
// Length: the set-up is one sequence whose deferred clean-ups (admission,
// arena, pool, producer) must unwind in the reverse order; split up, the
// order would be spread over several functions.
func (s *Server) shmStream(w *shmConn) error {
	req, hello, err := s.readShmHello(w)
	if err != nil {
		return err
	}
	slots := hello.Slots
	leave, err := s.admitStream()
	if err != nil {
		return err
	}
	defer leave()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The arena (version 2, a backend that allocates from it): the stream
	// decodes and gathers there. It is closed after the pool, which holds
	// the records of steps the client has not released.
	pool := &shmPool{changed: make(chan struct{}, 1), perRegion: slots, account: &MemoryAccount{b: s.budget}, share: s.cfg.budget / int64(s.cfg.maxStreams)}
	ab, ok := s.backend.(AllocatingBackend)
	if ok && hello.Version >= 2 && s.cfg.shmArena > 0 {
		if pool.arena, err = newShmArena(s.cfg.shmArena, s.cfg.mem, &s.metrics.shmSpills); err != nil {
			return err
		}
		pool.regs = append(pool.regs, nil) // region 0 is the arena
	}
	defer pool.arena.close()
	var st Stream
	if pool.arena != nil {
		st, err = ab.OpenWith(ctx, req, pool.arena)
	} else {
		st, err = s.backend.Open(ctx, req)
	}
	if err != nil {
		return fmt.Errorf("open stream: %w", err)
	}
	schema := st.Schema()
	if err := shmEligible(schema); err != nil {
		st.Close()
		return err
	}
	sb := flight.SerializeSchema(schema, s.cfg.mem)
	if err := w.send(shmFrame{Schema: sb}, nil); err != nil {
		st.Close()
		return fmt.Errorf("transport: shm: send schema: %w", err)
	}
	if a := pool.arena; a != nil {
		f := &shmRegion{Index: 0, Bytes: int64(a.size), Arena: true}
		if err := w.send(shmFrame{Region: f}, unix.UnixRights(a.fd)); err != nil {
			st.Close()
			return fmt.Errorf("transport: shm: send the arena: %w", err)
		}
	}

	// The client's frames: releases and acknowledgements, then EOF when it
	// goes away, which ends the stream.
	go func() {
		defer cancel()
		pool.readClient(w)
	}()

	items, stop := s.startProducer(ctx, cancel, st, false)
	defer func() {
		_ = stop()
		pool.close()
	}()
	for {
		var it item
		var ok bool
		select {
		case <-ctx.Done():
			// The client went away (nobody to tell), or broke the protocol.
			return pool.protocolErr()
		case it, ok = <-items:
		}
		if !ok {
			return errors.New("transport: producer stopped without a reason")
		}
		if it.err != nil {
			if errors.Is(it.err, io.EOF) {
				return w.send(shmFrame{End: true}, nil)
			}
			return fmt.Errorf("transport: step: %w", it.err)
		}
		if done, err := s.shmSend(ctx, w, pool, slots, it); done || err != nil {
			return err
		}
	}
}

// shmSend writes one step into a slot of the pool (adding a region when none
// is free) and sends its descriptor, once the client's window allows; it
// drops the item. done is true when the client went away.
func (s *Server) shmSend(ctx context.Context, w *shmConn, pool *shmPool, slots int, it item) (done bool, err error) {
	layouts, b, err := shmItemLayout(&it)
	if err != nil {
		s.drop(it)
		return true, err
	}
	// At most `slots` steps sent and not yet read by the client, and no
	// more slots than the pool may map: waits for the client, for at most
	// the idle timeout.
	wctx, wcancel := ctx, context.CancelFunc(func() {})
	if s.cfg.idle > 0 {
		wctx, wcancel = context.WithTimeout(ctx, s.cfg.idle)
	}
	defer wcancel()
	waitErr := func(err error) (bool, error) {
		s.drop(it)
		if perr := pool.protocolErr(); perr != nil {
			return true, perr
		}
		if ctx.Err() != nil {
			return true, nil // the client went away
		}
		if errors.Is(err, context.DeadlineExceeded) {
			return true, fmt.Errorf("transport: shm: %w: the client read or released no step for %v (idle timeout, --idle-timeout; %d regions mapped): the server ended the stream to free its slot and memory",
				ErrIdle, s.cfg.idle, pool.regions())
		}
		return true, err
	}
	if err := pool.waitWindow(wctx, int64(slots)); err != nil {
		return waitErr(err)
	}
	region, slot, fresh, err := pool.take(wctx, shmBytes(layouts))
	if err != nil {
		if ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrProtocol) {
			return waitErr(err)
		}
		s.drop(it)
		return true, fmt.Errorf("transport: shm: epoch %d step %d: %w", it.meta.Epoch, it.meta.Step, err)
	}
	pool.mu.Lock()
	reg := pool.regs[region]
	pool.mu.Unlock()
	bufs, inPlace := reg.fill(slot, layouts, pool.arena)
	desc := &shmStep{StepMeta: it.meta, Region: region, Slot: slot, Rows: b, Buffers: bufs}
	rows, size := it.rows(), it.size
	if inPlace > 0 {
		// Buffers sent by reference: the records stay until the client
		// releases the slot.
		pool.markSent(region, slot, it.slices)
		s.unqueue(it)
	} else {
		pool.markSent(region, slot, nil)
		s.drop(it) // the bytes are in the region now
	}
	s.metrics.shmInPlace.Add(inPlace)
	if fresh {
		f := &shmRegion{Index: region, Bytes: int64(slots) * reg.slotBytes, Slots: slots, SlotBytes: reg.slotBytes}
		if err := w.send(shmFrame{Region: f}, unix.UnixRights(reg.fd)); err != nil {
			return true, nil
		}
	}
	if err := w.send(shmFrame{Step: desc}, nil); err != nil {
		return true, nil // the client went away
	}
	s.metrics.steps.Add(1)
	s.metrics.rows.Add(rows)
	s.metrics.bytes.Add(size)
	return false, nil
}

// codeName is a status code's canonical name, as gRPC's documentation and
// pyarrow's FlightError messages spell it: "INVALID_ARGUMENT".
func codeName(c codes.Code) string {
	var b strings.Builder
	for i, r := range c.String() {
		if i > 0 && unicode.IsUpper(r) {
			b.WriteByte('_')
		}
		b.WriteRune(unicode.ToUpper(r))
	}
	return b.String()
}

// shmConn frames a connection: a 4-byte little-endian length, then JSON.
// Its reads go through a buffer: a client's frames that arrive together
// (the Python client writes a step's ack and its releases in one write)
// cost one read system call, not two per frame.
type shmConn struct {
	conn *net.UnixConn
	r    *bufio.Reader
	mu   sync.Mutex
	hdr  [4]byte
	body []byte // read's frame, reused: a frame is decoded before the next read
	out  []byte // send's frame, reused (under mu)
}

func newShmConn(conn *net.UnixConn) *shmConn {
	return &shmConn{conn: conn, r: bufio.NewReaderSize(conn, 4096)}
}

func (c *shmConn) send(f shmFrame, oob []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	msg := append(c.out[:0], 0, 0, 0, 0)
	if f.Step != nil && f.Schema == nil && f.Region == nil && !f.End && f.Error == nil {
		// A step's descriptor, every step: written by hand into the
		// reused buffer (json.Marshal's reflection allocated per entry).
		msg = appendShmStep(msg, f.Step)
	} else {
		b, err := json.Marshal(f)
		if err != nil {
			return err
		}
		msg = append(msg, b...)
	}
	c.out = msg
	binary.LittleEndian.PutUint32(msg, uint32(len(msg)-4))
	var err error
	if oob == nil {
		_, err = c.conn.Write(msg)
		return err
	}
	// The descriptor travels with the frame's first bytes.
	n, _, err := c.conn.WriteMsgUnix(msg, oob, nil)
	if err == nil && n < len(msg) {
		_, err = c.conn.Write(msg[n:])
	}
	return err
}

// appendShmStep appends the JSON of shmFrame{Step: s} to dst, exactly as
// json.Marshal writes it (TestAppendShmStepMatchesMarshal).
func appendShmStep(dst []byte, s *shmStep) []byte {
	dst = append(dst, `{"step":{"epoch":`...)
	dst = strconv.AppendInt(dst, int64(s.Epoch), 10)
	dst = append(dst, `,"step":`...)
	dst = strconv.AppendInt(dst, int64(s.Step), 10)
	dst = append(dst, `,"slices":`...)
	dst = appendInts(dst, s.Slices)
	dst = append(dst, `,"real_rows":`...)
	dst = appendInts(dst, s.RealRows)
	dst = append(dst, `,"region":`...)
	dst = strconv.AppendInt(dst, int64(s.Region), 10)
	dst = append(dst, `,"slot":`...)
	dst = strconv.AppendInt(dst, int64(s.Slot), 10)
	dst = append(dst, `,"rows":`...)
	dst = strconv.AppendInt(dst, s.Rows, 10)
	dst = append(dst, `,"buffers":`...)
	if s.Buffers == nil {
		dst = append(dst, "null"...)
	} else {
		dst = append(dst, '[')
		for k, slice := range s.Buffers {
			if k > 0 {
				dst = append(dst, ',')
			}
			if slice == nil {
				dst = append(dst, "null"...)
				continue
			}
			dst = append(dst, '[')
			for i, e := range slice {
				if i > 0 {
					dst = append(dst, ',')
				}
				dst = appendInts(dst, e)
			}
			dst = append(dst, ']')
		}
		dst = append(dst, ']')
	}
	return append(dst, "}}"...)
}

// appendInts appends v as a JSON array of numbers (null when v is nil), as
// encoding/json writes it.
func appendInts[T int | int64](dst []byte, v []T) []byte {
	if v == nil {
		return append(dst, "null"...)
	}
	dst = append(dst, '[')
	for i, x := range v {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = strconv.AppendInt(dst, int64(x), 10)
	}
	return append(dst, ']')
}

// read returns the next frame's bytes, valid until the next read (the
// callers decode each frame before reading another).
func (c *shmConn) read() ([]byte, error) {
	if _, err := io.ReadFull(c.r, c.hdr[:]); err != nil {
		return nil, err
	}
	n := binary.LittleEndian.Uint32(c.hdr[:])
	if n > maxShmFrame {
		return nil, fmt.Errorf("frame of %d bytes is over the limit of %d", n, maxShmFrame)
	}
	if uint32(cap(c.body)) < n {
		c.body = make([]byte, n)
	}
	b := c.body[:n]
	if _, err := io.ReadFull(c.r, b); err != nil {
		return nil, err
	}
	return b, nil
}
