package transport

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/flight"
)

// Connections the server accepts get the configured send buffer (on
// Linux, the kernel keeps twice the requested size, capped at
// net.core.wmem_max), over TCP and Unix sockets; 0 leaves the system's.

func sndbuf(t *testing.T, c net.Conn) int {
	t.Helper()
	sc, ok := c.(syscall.Conn)
	if !ok {
		t.Fatalf("%T has no SyscallConn", c)
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var v int
	var serr error
	if err := rc.Control(func(fd uintptr) { v, serr = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_SNDBUF) }); err != nil {
		t.Fatal(err)
	}
	if serr != nil {
		t.Fatal(serr)
	}
	return v
}

// readWmemMax returns net.core.wmem_max, the cap on SO_SNDBUF requests.
func readWmemMax(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("/proc/sys/net/core/wmem_max")
	if err != nil {
		t.Fatal(err)
	}
	v, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestSendBufferListener(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("SO_SNDBUF sizes are checked against Linux's rule")
	}
	wmemMax := readWmemMax(t)
	const want = 4 << 20
	for _, network := range []string{"tcp", "unix"} {
		t.Run(network, func(t *testing.T) {
			addr := "127.0.0.1:0"
			if network == "unix" {
				addr = filepath.Join(t.TempDir(), "s.sock")
			}
			for _, size := range []int{want, 0} {
				raw, err := net.Listen(network, addr)
				if err != nil {
					t.Fatal(err)
				}
				lis := withSendBuffer(raw, size)
				c, err := net.Dial(network, raw.Addr().String())
				if err != nil {
					t.Fatal(err)
				}
				s, err := lis.Accept()
				if err != nil {
					t.Fatal(err)
				}
				got := sndbuf(t, s)
				s.Close()
				c.Close()
				lis.Close()
				if size > 0 {
					if exp := 2 * min(size, wmemMax); got != exp {
						t.Errorf("SO_SNDBUF %d, want %d (2 x min(%d, wmem_max %d))", got, exp, size, wmemMax)
					}
				} else if got == 2*min(want, wmemMax) && 2*min(want, wmemMax) > 1<<20 {
					t.Errorf("SO_SNDBUF %d with size 0: the listener changed it", got)
				}
			}
		})
	}
	if err := NewConfig(WithSendBuffer(-1)).Validate(); err == nil {
		t.Errorf("a negative send buffer was accepted")
	}
}

// acceptedSendBuffers returns SO_SNDBUF of every socket of this process
// accepted on (not listening at) local TCP port port.
func acceptedSendBuffers(t *testing.T, port int) []int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	var got []int
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if l, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name())); err != nil || !strings.HasPrefix(l, "socket:") {
			continue
		}
		sa, err := syscall.Getsockname(fd)
		if err != nil {
			continue
		}
		in4, ok := sa.(*syscall.SockaddrInet4)
		if !ok || in4.Port != port {
			continue
		}
		if acc, err := syscall.GetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_ACCEPTCONN); err != nil || acc != 0 {
			continue // the listener
		}
		v, err := syscall.GetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_SNDBUF)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, v)
	}
	return got
}

func TestServerSetsSendBuffer(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc/self/fd")
	}
	const size = 3<<20 + 4096 // an odd size, which autotuning does not pick
	exact := 2 * min(size, readWmemMax(t))
	for _, tc := range []struct {
		opt  []Option
		want func(int) bool
		what string
	}{
		{[]Option{WithSendBuffer(size)}, func(v int) bool { return v == exact }, fmt.Sprintf("%d (2 x min(size, wmem_max))", exact)},
		{[]Option{WithSendBuffer(0)}, func(v int) bool { return v != exact }, "the system's"},
	} {
		ts := startServer(t, viaTCP, &DemoBackend{NumRows: 10}, tc.opt)
		if _, err := ts.client.GetFlightInfo(context.Background(), &flight.FlightDescriptor{Type: flight.DescriptorCMD, Cmd: []byte("{}")}); err == nil {
			t.Log("GetFlightInfo answered") // any call: the connection is now accepted
		}
		_, p, err := net.SplitHostPort(ts.target)
		if err != nil {
			t.Fatal(err)
		}
		port, _ := strconv.Atoi(p)
		bufs := acceptedSendBuffers(t, port)
		if len(bufs) == 0 {
			t.Fatalf("no accepted connection on port %d", port)
		}
		for _, v := range bufs {
			if !tc.want(v) {
				t.Errorf("accepted connection SO_SNDBUF %d, want %s", v, tc.what)
			}
		}
	}
}
