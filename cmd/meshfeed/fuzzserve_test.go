package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/meshfeed/meshfeed/internal/datagen"
	"github.com/meshfeed/meshfeed/internal/testseed"
	"github.com/meshfeed/meshfeed/transport"
)

var (
	fuzzSeed    = flag.Uint64("meshfeed.seed", 0, "seed of TestServeFuzzTickets (0: $MESHFEED_SEED or the clock)")
	fuzzTickets = flag.Int("meshfeed.tickets", 600, "tickets TestServeFuzzTickets sends")
)

// goMemLimit is the fuzzed server's GOMEMLIMIT: its memory budget plus the
// 128 MiB serve's gcLimit adds for the program.
const goMemLimit = "384MiB"

// asBinary is the environment variable under which the test binary runs
// as the meshfeed binary (the server TestServeFuzzTickets starts), with
// asRlimit its address-space limit in bytes.
const (
	asBinary = "MESHFEED_TEST_AS_BINARY"
	asRlimit = "MESHFEED_TEST_RLIMIT_AS"
)

func TestMain(m *testing.M) {
	if os.Getenv(asBinary) == "1" {
		if v := os.Getenv(asRlimit); v != "" {
			n, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				fmt.Fprintf(os.Stderr, "%s=%q: %v\n", asRlimit, v, err)
				os.Exit(2)
			}
			if err := syscall.Setrlimit(syscall.RLIMIT_AS, &syscall.Rlimit{Cur: n, Max: n}); err != nil {
				fmt.Fprintf(os.Stderr, "setrlimit: %v\n", err)
				os.Exit(2)
			}
		}
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// fuzzServer is a `meshfeed serve` subprocess.
type fuzzServer struct {
	cmd    *exec.Cmd
	addr   string
	exited chan error
	client flight.Client
}

// startFuzzServer starts this test binary as `meshfeed serve` over root,
// under an address-space limit and GOMEMLIMIT, and connects a client.
func startFuzzServer(t *testing.T, root string, limitAS int64, args ...string) *fuzzServer {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, append([]string{"serve", "--allow", root, "--addr", "127.0.0.1:0", "--log-level", "error"}, args...)...)
	cmd.Env = append(os.Environ(), asBinary+"=1", asRlimit+"="+strconv.FormatInt(limitAS, 10), "GOMEMLIMIT="+goMemLimit)
	cmd.Stderr = io.Discard
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	fs := &fuzzServer{cmd: cmd, exited: make(chan error, 1)}
	lines := bufio.NewScanner(out)
	for lines.Scan() {
		if a, ok := strings.CutPrefix(lines.Text(), "meshfeed: listening on "); ok {
			fs.addr = a
			break
		}
	}
	go func() {
		for lines.Scan() {
		}
		fs.exited <- cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-fs.exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
		}
	})
	if fs.addr == "" {
		t.Fatalf("meshfeed serve printed no address")
	}
	conn, err := grpc.NewClient(fs.addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(transport.DefaultMaxMessageSize)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	fs.client = flight.NewClientFromConn(conn, nil)
	return fs
}

// alive fails the test when the server has exited.
func (fs *fuzzServer) alive(t *testing.T, after string) {
	t.Helper()
	select {
	case err := <-fs.exited:
		t.Fatalf("after %s: meshfeed serve exited: %v", after, err)
	default:
	}
}

// vmHWM returns the server's peak resident set, from /proc.
func (fs *fuzzServer) vmHWM() string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", fs.cmd.Process.Pid))
	if err != nil {
		return "?"
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return "?"
}

// readSums reads a DoGet of ticket, hashing each step, for at most steps
// steps (0: all).
func readSums(ctx context.Context, c flight.Client, ticket []byte, steps int) ([]string, error) {
	stream, err := c.DoGet(ctx, &flight.Ticket{Ticket: ticket})
	if err != nil {
		return nil, err
	}
	rdr, err := flight.NewRecordReader(stream)
	if err != nil {
		return nil, err
	}
	defer rdr.Release()
	var sums []string
	for rdr.Next() {
		h := sha256.New()
		h.Write(rdr.LatestAppMetadata())
		w := ipc.NewWriter(h, ipc.WithSchema(rdr.Schema()))
		if err := w.Write(rdr.RecordBatch()); err != nil {
			return nil, err
		}
		w.Close()
		sums = append(sums, hex.EncodeToString(h.Sum(nil)))
		if steps > 0 && len(sums) >= steps {
			return sums, nil
		}
	}
	if err := rdr.Err(); err != nil && !errors.Is(err, io.EOF) {
		return sums, err
	}
	return sums, nil
}

// hostileInts are the sizes a mutated ticket draws from.
var hostileInts = []int64{-1, 0, 1, 2, 3, 7, 8, 1000, 4000, 1 << 16, 1<<16 + 1, 1 << 20, 1 << 26, 1<<31 - 1, 1 << 31, 1 << 40, 1 << 62, 1<<63 - 1}

// mutateTicket returns a random mutation of base (a ticket as a JSON
// object): sizes set to hostile values, fields removed or retyped, columns
// with hostile shaping, or the JSON itself corrupted.
func mutateTicket(r *rand.Rand, base map[string]any, n int) []byte {
	tk := map[string]any{}
	for k, v := range base {
		tk[k] = v
	}
	num := func() any {
		if r.IntN(4) == 0 {
			return r.Int64N(1 << 20)
		}
		return hostileInts[r.IntN(len(hostileInts))]
	}
	for range 1 + r.IntN(3) {
		switch r.IntN(12) {
		case 0:
			tk["global_batch_size"] = num()
		case 1:
			v := num()
			tk["num_slices"] = v
			if r.IntN(2) == 0 {
				tk["global_batch_size"] = v
			}
		case 2:
			k := 1 + r.IntN(n)
			s := make([]int, k)
			for i := range s {
				s[i] = i
			}
			tk["slices"] = s
			tk["num_slices"], tk["global_batch_size"] = k, k*(1+r.IntN(4))
		case 3:
			col := map[string]any{"name": "tokens", "length": num()}
			if r.IntN(2) == 0 {
				col["pack_ratio"] = []any{1.5, 2, 1e9, 1e300, 0.5}[r.IntN(5)]
			}
			if r.IntN(3) == 0 {
				col["overflow"] = "truncate"
			}
			tk["columns"] = []any{col}
			tk["last_batch"] = "drop"
		case 4:
			tk["shuffle"] = map[string]any{"enabled": true, "window": num()}
		case 5:
			tk["elastic"] = map[string]any{"from_slices": num(), "epoch": 0, "step": r.IntN(3)}
		case 6:
			tk["start"] = map[string]any{"epoch": num(), "step": num()}
			delete(tk, "epochs")
		case 7:
			tk["epochs"] = num()
		case 8:
			tk["last_batch"] = []string{"pad", "drop", "raise", "wrap", ""}[r.IntN(5)]
		case 9:
			tk["columns"] = []any{map[string]any{"name": []string{"id", "label", "features", "tokens", "nope"}[r.IntN(5)],
				"dtype": []string{"int8", "bfloat16", "float32", "int3", ""}[r.IntN(5)], "fill": []any{0, "nan", 1e308, "x"}[r.IntN(4)]}}
		case 10:
			tk["datasets"] = []string{[]string{"/", "/etc/passwd", "*", "[", "\x00", "gs://", "../x"}[r.IntN(7)]}
		case 11:
			delete(tk, []string{"version", "datasets", "slices", "last_batch", "num_slices"}[r.IntN(5)])
		}
	}
	b, _ := json.Marshal(tk)
	switch r.IntN(10) {
	case 0: // truncated
		b = b[:r.IntN(len(b))]
	case 1: // a byte flipped
		b[r.IntN(len(b))] ^= byte(1 + r.IntN(255))
	}
	return b
}

// TestServeFuzzTickets starts the real `meshfeed serve` (this test binary
// as the binary) under an address-space limit and GOMEMLIMIT, and sends it
// random and mutated tickets (seeded; -meshfeed.seed or MESHFEED_SEED
// replays a run, -meshfeed.tickets sets how many): after each, GetFlightInfo
// and DoGet answer with a gRPC status (never a dropped connection, Internal
// or Unknown), the server then serves a good request exactly as before, and
// it is alive at the end, its peak RSS logged.
func TestServeFuzzTickets(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a server subprocess")
	}
	seed := testseed.Get(t, *fuzzSeed, "meshfeed.seed")
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	spec := datagen.DefaultSpec()
	spec.Rows, spec.Files, spec.RowGroupRows, spec.Features = 300, 3, 40, 4
	spec.Tokens, spec.TokensMin, spec.TokensMax = true, 1, 6
	root := t.TempDir()
	dir := filepath.Join(root, "ds")
	if _, err := datagen.Write(context.Background(), datagen.LocalCreator{}, dir, spec); err != nil {
		t.Fatal(err)
	}
	const (
		limitAS = 6 << 30
		budget  = 256 << 20
		// rssSlack is what the server holds beyond its memory budget: the
		// runtime, code and caches (128 MiB, as serve's gcLimit counts),
		// and the garbage collector's lag behind GOMEMLIMIT.
		rssSlack = 256 << 20
	)
	fs := startFuzzServer(t, root, limitAS, "--memory-budget", strconv.Itoa(budget), "--read-ahead", strconv.Itoa(32<<20),
		"--idle-timeout", "2s", "--max-streams", "8")

	base := map[string]any{
		"version": 1, "datasets": []string{dir + "/*.parquet"}, "global_batch_size": 8, "num_slices": 2,
		"slices": []int{0, 1}, "last_batch": "pad", "epochs": 1, "seed": 3,
	}
	good, _ := json.Marshal(base)
	ctx := context.Background()
	want, err := readSums(ctx, fs.client, good, 0)
	if err != nil || len(want) == 0 {
		t.Fatalf("good request: %d steps, %v", len(want), err)
	}
	deadline := time.Now().Add(40 * time.Second)
	codesSeen := map[codes.Code]int{}
	sent := 0
	for i := 0; i < *fuzzTickets && time.Now().Before(deadline); i++ {
		tk := mutateTicket(r, base, 64)
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		var err error
		if r.IntN(2) == 0 {
			_, err = fs.client.GetFlightInfo(cctx, &flight.FlightDescriptor{Type: flight.DescriptorCMD, Cmd: tk})
		} else {
			_, err = readSums(cctx, fs.client, tk, 3)
		}
		cancel()
		sent++
		code := status.Code(err)
		codesSeen[code]++
		switch {
		case code == codes.Internal || code == codes.Unknown || (code == codes.Unavailable && !strings.Contains(err.Error(), "idle")):
			fs.alive(t, fmt.Sprintf("ticket %d %s", i, tk))
			t.Fatalf("ticket %d %s: %v (want a documented status, not a dropped connection or an internal error)", i, tk, err)
		case code == codes.DeadlineExceeded:
			t.Logf("ticket %d %s: deadline exceeded", i, tk)
		}
		fs.alive(t, fmt.Sprintf("ticket %d %s", i, tk))
		got, err := readSums(ctx, fs.client, good, 0)
		if err != nil || strings.Join(got, ",") != strings.Join(want, ",") {
			t.Fatalf("after ticket %d %s: good request = %d steps, %v; want the %d steps of the first run", i, tk, len(got), err, len(want))
		}
	}
	fs.alive(t, "the last ticket")
	hwm := fs.vmHWM()
	t.Logf("%d tickets, codes %v; server peak RSS (VmHWM) %s, memory budget %d bytes, GOMEMLIMIT %s, address-space limit %d bytes",
		sent, codesSeen, hwm, budget, goMemLimit, int64(limitAS))
	if kb, err := strconv.ParseInt(strings.TrimSuffix(hwm, " kB"), 10, 64); err == nil && kb<<10 > budget+rssSlack {
		t.Errorf("server peak RSS %s, over the memory budget (%d bytes) plus %d bytes", hwm, budget, rssSlack)
	}
}
