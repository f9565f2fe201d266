package transport

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"google.golang.org/grpc"
)

// repeatBackend streams one prebuilt record, steps times: it measures the
// transport alone, not the building of records.
type repeatBackend struct {
	rec   arrow.RecordBatch
	steps atomic.Int64
}

func (b *repeatBackend) Info(context.Context, *Request) (*PlanInfo, error) {
	return &PlanInfo{Schema: b.rec.Schema()}, nil
}

func (b *repeatBackend) Open(context.Context, *Request) (Stream, error) {
	return &repeatStream{b: b, left: b.steps.Load()}, nil
}

type repeatStream struct {
	b    *repeatBackend
	left int64
	step int
}

func (s *repeatStream) Schema() *arrow.Schema { return s.b.rec.Schema() }

func (s *repeatStream) Next(ctx context.Context) (Step, error) {
	if err := ctx.Err(); err != nil {
		return Step{}, err
	}
	if s.left == 0 {
		return Step{}, io.EOF
	}
	s.left--
	s.step++
	s.b.rec.Retain()
	return Step{Slices: []arrow.RecordBatch{s.b.rec}, Meta: StepMeta{Step: s.step - 1, Slices: []int{0}, RealRows: []int{int(s.b.rec.NumRows())}}}, nil
}

func (s *repeatStream) Close() error { return nil }

// buildRecord builds a record of about size bytes: int64 ids and
// fixed_size_list<float32>[1024] rows (4 KiB each).
func buildRecord(size int) arrow.RecordBatch {
	rows := size / (4096 + 8)
	mem := memory.DefaultAllocator
	ids := array.NewInt64Builder(mem)
	defer ids.Release()
	x := array.NewFixedSizeListBuilder(mem, 1024, arrow.PrimitiveTypes.Float32)
	defer x.Release()
	vb := x.ValueBuilder().(*array.Float32Builder)
	vals := make([]float32, 1024)
	for r := range rows {
		ids.Append(int64(r))
		x.Append(true)
		for k := range vals {
			vals[k] = float32(r*1024 + k)
		}
		vb.AppendValues(vals, nil)
	}
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "x", Type: arrow.FixedSizeListOf(1024, arrow.PrimitiveTypes.Float32)},
	}, nil)
	a, bx := ids.NewArray(), x.NewArray()
	defer a.Release()
	defer bx.Release()
	return array.NewRecordBatch(schema, []arrow.Array{a, bx}, int64(rows))
}

// BenchmarkDoGet streams prebuilt steps to a Go Flight client: one DoGet of
// b.N steps per run, over loopback TCP and a Unix socket, through the stock
// arrow-go writer and the zero-copy path (zstd always takes the stock path).
//
//	go test ./transport -run '^$' -bench 'DoGet/.*/8MiB' -benchtime 200x -count 5
func BenchmarkDoGet(b *testing.B) {
	for _, size := range []int{1 << 20, 8 << 20} {
		rec := buildRecord(size)
		for _, kind := range []netKind{viaTCP, viaUnix} {
			for _, path := range []string{"stock", "zerocopy", "zstd"} {
				b.Run(fmt.Sprintf("%s/%dMiB/%s", kind, size>>20, path), func(b *testing.B) {
					forceStockWriter.Store(path == "stock")
					defer forceStockWriter.Store(false)
					be := &repeatBackend{rec: rec}
					ts := startServer(b, kind, be, []Option{WithZstd(path == "zstd")},
						grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(MaxRecvMessageSize)))
					be.steps.Store(int64(b.N))
					b.SetBytes(recordBytes(rec))
					b.ReportAllocs()
					before := zeroCopyFrames.Load()
					b.ResetTimer()
					_, n, err := countAll(context.Background(), ts.client, ticket(b, baseRequest()))
					b.StopTimer()
					if err != nil || n != b.N {
						b.Fatalf("DoGet = %d steps, %v; want %d", n, err, b.N)
					}
					if zc := zeroCopyFrames.Load() - before; (zc == int64(n)) != (path == "zerocopy") {
						b.Fatalf("%d of %d steps sent zero-copy on the %s path", zc, n, path)
					}
				})
			}
		}
		rec.Release()
	}
}

// countAll reads a DoGet stream and counts its steps without decoding them
// further.
func countAll(ctx context.Context, c flight.Client, tkt *flight.Ticket) (*arrow.Schema, int, error) {
	stream, err := c.DoGet(ctx, tkt)
	if err != nil {
		return nil, 0, err
	}
	rdr, err := flight.NewRecordReader(stream)
	if err != nil {
		return nil, 0, err
	}
	defer rdr.Release()
	n := 0
	for rdr.Next() {
		n++
	}
	return rdr.Schema(), n, rdr.Err()
}

// BenchmarkDoGetPyarrow streams b.N prebuilt 8 MiB steps to a pyarrow.flight
// client in another process (benchmarks/flight_pyarrow_bench.py, run by
// $MESHFEED_PYTHON, default ../.venv/bin/python). It reports the client's
// GB/s (timed by the client from do_get to the end) and the server process's
// CPU cores busy over that time. The client checks the values of the first
// and last steps.
//
//	go test ./transport -run '^$' -bench DoGetPyarrow -benchtime 200x -count 5
func BenchmarkDoGetPyarrow(b *testing.B) {
	python := os.Getenv("MESHFEED_PYTHON")
	if python == "" {
		python = filepath.Join("..", ".venv", "bin", "python")
	}
	if _, err := os.Stat(python); err != nil {
		b.Fatalf("python with pyarrow not found (%v): set MESHFEED_PYTHON", err)
	}
	rec := buildRecord(8 << 20)
	defer rec.Release()
	for _, kind := range []netKind{viaTCP, viaUnix} {
		for _, path := range []string{"stock", "zerocopy"} {
			b.Run(fmt.Sprintf("%s/8MiB/%s", kind, path), func(b *testing.B) {
				forceStockWriter.Store(path == "stock")
				defer forceStockWriter.Store(false)
				be := &repeatBackend{rec: rec}
				ts := startServer(b, kind, be, nil)
				be.steps.Store(int64(b.N))
				tkt, err := baseRequest().Encode()
				if err != nil {
					b.Fatal(err)
				}
				loc := "grpc+tcp://" + ts.target
				if kind == viaUnix {
					loc = strings.Replace(ts.target, "unix://", "grpc+unix://", 1)
				}
				args := []string{filepath.Join("..", "benchmarks", "flight_pyarrow_bench.py"),
					"--location", loc, "--ticket", string(tkt), "--max-msg", strconv.Itoa(DefaultMaxMessageSize), "--check-rows"}
				for _, kv := range strings.Fields(os.Getenv("MESHFEED_FLIGHT_OPTIONS")) {
					args = append(args, "--option", kv)
				}
				cmd := exec.Command(python, args...)
				cmd.Stderr = os.Stderr
				cpu0 := processCPU(b)
				b.ResetTimer()
				out, err := cmd.Output()
				b.StopTimer()
				cpu := processCPU(b) - cpu0
				if err != nil {
					b.Fatalf("%s: %v", cmd, err)
				}
				var res struct {
					Steps     int     `json:"steps"`
					Bytes     float64 `json:"bytes"`
					Seconds   float64 `json:"seconds"`
					GBPerS    float64 `json:"gb_per_s"`
					ClientCPU float64 `json:"client_cpu_s"`
				}
				if err := json.Unmarshal(out, &res); err != nil || res.Steps != b.N {
					b.Fatalf("client printed %q (%v); want %d steps", out, err, b.N)
				}
				b.ReportMetric(res.GBPerS, "GB/s")
				b.ReportMetric(cpu.Seconds()/res.Seconds, "server-cores")
				b.ReportMetric(res.ClientCPU/res.Seconds, "client-cores")
				b.ReportMetric(cpu.Seconds()/(res.Bytes/1e9), "server-cpu-s/GB")
			})
		}
	}
}

// processCPU returns the user and system CPU time of this process.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
