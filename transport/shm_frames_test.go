package transport

import (
	"encoding/binary"
	"encoding/json"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// frameSeed is the seed of a randomized frame test: MESHFEED_SEED or the
// clock, printed so that a failure can be rerun.
func frameSeed(t *testing.T) uint64 {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("MESHFEED_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("MESHFEED_SEED=%q: %v", s, err)
		}
		seed = v
	}
	t.Logf("seed %d (MESHFEED_SEED=%d reruns it)", seed, seed)
	return seed
}

func randomShmStep(r *rand.Rand) *shmStep {
	ints := func(n int) []int {
		if n < 0 {
			return nil
		}
		v := make([]int, n)
		for i := range v {
			v[i] = r.IntN(1<<20) - 3
		}
		return v
	}
	s := &shmStep{StepMeta: StepMeta{Epoch: r.IntN(100), Step: r.IntN(1 << 30), Slices: ints(r.IntN(9) - 1),
		RealRows: ints(r.IntN(9) - 1)}, Region: r.IntN(300), Slot: r.IntN(64), Rows: r.Int64N(1 << 40)}
	if r.IntN(8) == 0 {
		return s // no buffers: null
	}
	s.Buffers = make([][][]int64, r.IntN(9))
	for k := range s.Buffers {
		if r.IntN(10) == 0 {
			continue // a nil slice list
		}
		s.Buffers[k] = make([][]int64, r.IntN(8))
		for i := range s.Buffers[k] {
			e := make([]int64, 2+r.IntN(2))
			for j := range e {
				e[j] = r.Int64N(1<<50) - 1
			}
			s.Buffers[k][i] = e
		}
	}
	return s
}

// TestAppendShmStepMatchesMarshal: the hand-written step descriptor is
// byte for byte what json.Marshal writes for the same frame.
func TestAppendShmStepMatchesMarshal(t *testing.T) {
	r := rand.New(rand.NewPCG(frameSeed(t), 1))
	for i := 0; i < 2000; i++ {
		s := randomShmStep(r)
		want, err := json.Marshal(shmFrame{Step: s})
		if err != nil {
			t.Fatal(err)
		}
		if got := appendShmStep([]byte("xy"), s); string(got[2:]) != string(want) || string(got[:2]) != "xy" {
			t.Fatalf("descriptor %d:\n got %s\nwant %s", i, got[2:], want)
		}
	}
}

func shmConnPair(t *testing.T) (*shmConn, *net.UnixConn) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	conn := func(fd int) *net.UnixConn {
		f := os.NewFile(uintptr(fd), "shm-test")
		defer f.Close()
		c, err := net.FileConn(f)
		if err != nil {
			t.Fatal(err)
		}
		return c.(*net.UnixConn)
	}
	a, b := conn(fds[0]), conn(fds[1])
	t.Cleanup(func() { a.Close(); b.Close() })
	return newShmConn(a), b
}

// TestShmConnStepSendAllocs: sending a step's descriptor allocates nothing
// once the connection's buffer has grown (json.Marshal allocated per entry
// of the buffers list, every step), and the peer reads the same frame.
func TestShmConnStepSendAllocs(t *testing.T) {
	w, peer := shmConnPair(t)
	s := randomShmStep(rand.New(rand.NewPCG(7, 7)))
	s.Buffers = [][][]int64{{{0, 0}, {1 << 20, 2000}}, {{0, 0}, {3 << 20, 2000, 0}}}
	want, _ := json.Marshal(shmFrame{Step: s})
	done := make(chan []byte)
	go func() {
		var all []byte
		buf := make([]byte, 1<<16)
		for len(all) < 102*(4+len(want)) {
			n, err := peer.Read(buf)
			if err != nil {
				break
			}
			all = append(all, buf[:n]...)
		}
		done <- all
	}()
	if err := w.send(shmFrame{Step: s}, nil); err != nil {
		t.Fatal(err)
	}
	allocs := testing.AllocsPerRun(100, func() {
		if err := w.send(shmFrame{Step: s}, nil); err != nil {
			t.Fatal(err)
		}
	})
	all := <-done
	if allocs > 0 {
		t.Errorf("a step's descriptor cost %v allocations to send, want 0", allocs)
	}
	if n := binary.LittleEndian.Uint32(all); int(n) != len(want) || string(all[4:4+n]) != string(want) {
		t.Fatalf("peer read %q, want %q", all[4:4+n], want)
	}
}

// TestShmConnReadsBuffered: a client's frames written together (an ack
// riding in a release's frame, then more releases) are read from one read
// of the socket: after the first frame the rest are buffered already, and
// reading them allocates nothing.
func TestShmConnReadsBuffered(t *testing.T) {
	r, peer := shmConnPair(t)
	var batch []byte
	frames := []string{`{"release": 3, "region": 1, "ack": 1}`, `{"release": 4, "region": 1}`, `{"ack": 1}`}
	for _, f := range frames {
		batch = binary.LittleEndian.AppendUint32(batch, uint32(len(f)))
		batch = append(batch, f...)
	}
	if _, err := peer.Write(batch); err != nil {
		t.Fatal(err)
	}
	for i, want := range frames {
		got, err := r.read()
		if err != nil || string(got) != want {
			t.Fatalf("frame %d: %q, %v; want %q", i, got, err, want)
		}
		if i == 0 && r.r.Buffered() != len(batch)-4-len(want) {
			t.Fatalf("after the first frame %d bytes buffered, want the other frames' %d: one read per frame",
				r.r.Buffered(), len(batch)-4-len(want))
		}
		var f shmClientFrame
		if err := json.Unmarshal(got, &f); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 4; i++ { // 12 frames: one read, AllocsPerRun's warm-up and 8 runs
		if _, err := peer.Write(batch); err != nil {
			t.Fatal(err)
		}
	}
	r.read() // the buffer is sized by the first
	allocs := testing.AllocsPerRun(8, func() {
		if _, err := r.read(); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 0 {
		t.Errorf("reading a client frame cost %v allocations, want 0", allocs)
	}
}
