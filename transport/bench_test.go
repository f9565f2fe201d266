package transport

import (
	"context"
	"fmt"
	"io"
	"sync/atomic"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/apache/arrow-go/v18/arrow/memory"
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

func (s *repeatStream) Next(ctx context.Context) (arrow.RecordBatch, StepMeta, error) {
	if err := ctx.Err(); err != nil {
		return nil, StepMeta{}, err
	}
	if s.left == 0 {
		return nil, StepMeta{}, io.EOF
	}
	s.left--
	s.step++
	s.b.rec.Retain()
	return s.b.rec, StepMeta{Step: s.step - 1, Slices: []int{0}, RealRows: []int{int(s.b.rec.NumRows())}}, nil
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
// b.N steps per run, over loopback TCP and a Unix socket.
func BenchmarkDoGet(b *testing.B) {
	for _, size := range []int{1 << 20, 8 << 20} {
		rec := buildRecord(size)
		for _, kind := range []netKind{viaTCP, viaUnix} {
			for _, zstd := range []bool{false, true} {
				name := fmt.Sprintf("%s/%dMiB", kind, size>>20)
				if zstd {
					name += "/zstd"
				}
				b.Run(name, func(b *testing.B) {
					be := &repeatBackend{rec: rec}
					ts := startServer(b, kind, be, []Option{WithZstd(zstd)})
					be.steps.Store(int64(b.N))
					b.SetBytes(recordBytes(rec))
					b.ReportAllocs()
					b.ResetTimer()
					_, n, err := countAll(context.Background(), ts.client, ticket(b, baseRequest()))
					b.StopTimer()
					if err != nil || n != b.N {
						b.Fatalf("DoGet = %d steps, %v; want %d", n, err, b.N)
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
