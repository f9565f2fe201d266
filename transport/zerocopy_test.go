package transport

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/meshfeed/meshfeed/internal/testseed"
)

var zeroCopySeed = flag.Uint64("zerocopy.seed", 0, "seed of TestFrameBytesRandomSlices (0: from MESHFEED_SEED or the clock)")

// sendCapture marshals every FlightData the stock writer sends, at once
// (the stock writer reuses its body buffer between messages).
type sendCapture struct{ msgs [][]byte }

func (c *sendCapture) Send(fd *flight.FlightData) error {
	b, err := proto.Marshal(fd)
	c.msgs = append(c.msgs, b)
	return err
}

// stockBytes returns the protobuf bytes of the FlightData message that
// arrow-go's flight.Writer sends for rec with appMeta.
func stockBytes(t *testing.T, mem memory.Allocator, rec arrow.RecordBatch, appMeta []byte) []byte {
	t.Helper()
	var c sendCapture
	w := flight.NewRecordWriter(&c, ipc.WithSchema(rec.Schema()), ipc.WithAllocator(mem))
	if err := w.WriteWithAppMetadata(rec, appMeta); err != nil {
		t.Fatalf("stock WriteWithAppMetadata: %v", err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if len(c.msgs) != 2 {
		t.Fatalf("stock writer sent %d messages, want schema + record", len(c.msgs))
	}
	return c.msgs[1]
}

// frameBytes encodes rec as a frame and returns its bytes; release must have
// run once the frame is freed.
func frameBytes(t *testing.T, mem memory.Allocator, rec arrow.RecordBatch, appMeta []byte) []byte {
	t.Helper()
	payload, err := recordPayload(rec, []ipc.Option{ipc.WithAllocator(mem)})
	if err != nil {
		t.Fatalf("recordPayload: %v", err)
	}
	var released atomic.Int32
	f, err := newFrame(payload, appMeta, func() { released.Add(1) })
	if err != nil {
		t.Fatalf("newFrame: %v", err)
	}
	got := f.bufs.Materialize()
	if f.size != len(got) {
		t.Errorf("frame size %d, want %d", f.size, len(got))
	}
	f.free()
	if n := released.Load(); n != 1 {
		t.Errorf("release ran %d times after free, want 1", n)
	}
	return got
}

// compareFrame checks that the frame of rec is byte for byte the stock
// writer's message.
func compareFrame(t *testing.T, mem memory.Allocator, name string, rec arrow.RecordBatch) {
	t.Helper()
	for _, appMeta := range [][]byte{nil, []byte(`{"epoch":0,"step":3,"slices":[2,3],"real_rows":[128,128]}`)} {
		want := stockBytes(t, mem, rec, appMeta)
		got := frameBytes(t, mem, rec, appMeta)
		if !bytes.Equal(got, want) {
			i := 0
			for i < len(got) && i < len(want) && got[i] == want[i] {
				i++
			}
			t.Errorf("%s (app_metadata %q): frame = %d bytes, stock = %d bytes, first difference at byte %d", name, appMeta, len(got), len(want), i)
			continue
		}
		// The stock bytes decode as the FlightData they claim to be.
		var fd flight.FlightData
		if err := proto.Unmarshal(got, &fd); err != nil {
			t.Errorf("%s: frame does not decode as FlightData: %v", name, err)
		} else if !bytes.Equal(fd.AppMetadata, appMeta) {
			t.Errorf("%s: app_metadata = %q, want %q", name, fd.AppMetadata, appMeta)
		}
	}
}

// mixedRecord builds n rows of many column types, with nulls, from rng.
func mixedRecord(mem memory.Allocator, rng *rand.Rand, n int) arrow.RecordBatch {
	structType := arrow.StructOf(
		arrow.Field{Name: "a", Type: arrow.PrimitiveTypes.Int32, Nullable: true},
		arrow.Field{Name: "b", Type: arrow.BinaryTypes.String, Nullable: true})
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "i64", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
		{Name: "f16", Type: arrow.PrimitiveTypes.Uint16},
		{Name: "fsl", Type: arrow.FixedSizeListOf(8, arrow.PrimitiveTypes.Float32), Nullable: true},
		{Name: "list", Type: arrow.ListOf(arrow.PrimitiveTypes.Int32), Nullable: true},
		{Name: "str", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "bool", Type: arrow.FixedWidthTypes.Boolean, Nullable: true},
		{Name: "struct", Type: structType, Nullable: true},
	}, nil)
	b := array.NewRecordBuilder(mem, schema)
	defer b.Release()
	i64 := b.Field(0).(*array.Int64Builder)
	u16 := b.Field(1).(*array.Uint16Builder)
	fsl := b.Field(2).(*array.FixedSizeListBuilder)
	fslv := fsl.ValueBuilder().(*array.Float32Builder)
	lst := b.Field(3).(*array.ListBuilder)
	lstv := lst.ValueBuilder().(*array.Int32Builder)
	str := b.Field(4).(*array.StringBuilder)
	bl := b.Field(5).(*array.BooleanBuilder)
	st := b.Field(6).(*array.StructBuilder)
	sa := st.FieldBuilder(0).(*array.Int32Builder)
	sb := st.FieldBuilder(1).(*array.StringBuilder)
	null := func() bool { return rng.IntN(7) == 0 }
	for r := range n {
		if null() {
			i64.AppendNull()
		} else {
			i64.Append(rng.Int64())
		}
		u16.Append(uint16(r))
		if null() {
			fsl.AppendNull() // appends the 8 value slots itself
		} else {
			fsl.Append(true)
			for range 8 {
				fslv.Append(rng.Float32())
			}
		}
		if null() {
			lst.AppendNull()
		} else {
			lst.Append(true)
			for range rng.IntN(5) {
				lstv.Append(rng.Int32())
			}
		}
		if null() {
			str.AppendNull()
		} else {
			str.Append(strconv.Itoa(rng.IntN(1 << 20)))
		}
		if null() {
			bl.AppendNull()
		} else {
			bl.Append(rng.IntN(2) == 0)
		}
		if null() {
			st.AppendNull()
			sa.AppendNull()
			sb.AppendNull()
		} else {
			st.Append(true)
			sa.Append(int32(r))
			sb.Append(fmt.Sprint(r))
		}
	}
	return b.NewRecordBatch()
}

// rawRecord wraps one uint8 column over exactly data (no builder padding):
// a body buffer whose length is not a multiple of 8.
func rawRecord(data []byte) arrow.RecordBatch {
	schema := arrow.NewSchema([]arrow.Field{{Name: "u8", Type: arrow.PrimitiveTypes.Uint8}}, nil)
	d := array.NewData(arrow.PrimitiveTypes.Uint8, len(data), []*memory.Buffer{nil, memory.NewBufferBytes(data)}, nil, 0, 0)
	defer d.Release()
	col := array.MakeFromData(d)
	defer col.Release()
	return array.NewRecordBatch(schema, []arrow.Array{col}, int64(len(data)))
}

// TestFrameBytes checks that the zero-copy encoding of a record is exactly
// proto.Marshal of the FlightData arrow-go's stock writer sends.
func TestFrameBytes(t *testing.T) {
	mem := checkedMem(t)
	rng := rand.New(rand.NewPCG(1, 2))
	mixed := mixedRecord(mem, rng, 9000) // large enough that several buffers are borrowed
	defer mixed.Release()
	small := mixedRecord(mem, rng, 13)
	defer small.Release()
	odd := make([]byte, 40001)
	for i := range odd {
		odd[i] = byte(i * 7)
	}
	cases := []struct {
		name string
		rec  arrow.RecordBatch
	}{
		{"mixed 9000 rows", mixed},
		{"mixed 13 rows", small},
		{"zero rows", mixed.NewSlice(0, 0)},
		{"sliced at 3..8000", mixed.NewSlice(3, 8000)},
		{"sliced at 4097..9000", mixed.NewSlice(4097, 9000)},
		{"sliced one row", mixed.NewSlice(8999, 9000)},
		{"odd 5-byte buffer", rawRecord([]byte{1, 2, 3, 4, 5})},
		{"odd 40001-byte buffer", rawRecord(odd)},
		{"bench record 1 MiB", buildRecord(1 << 20)},
	}
	for _, c := range cases {
		compareFrame(t, mem, c.name, c.rec)
		c.rec.Release()
	}
	for i := range mixed.NumCols() {
		one := array.NewRecordBatch(arrow.NewSchema([]arrow.Field{mixed.Schema().Field(int(i))}, nil), []arrow.Array{mixed.Column(int(i))}, mixed.NumRows())
		compareFrame(t, mem, "column "+mixed.ColumnName(int(i)), one)
		one.Release()
	}
}

// testSeed returns the seed of a randomized test: -zerocopy.seed, else
// MESHFEED_SEED, else the clock. It is logged so that a failure replays.
func testSeed(t *testing.T) uint64 { return testseed.Get(t, *zeroCopySeed, "zerocopy.seed") }

// TestFrameBytesRandomSlices compares frames and stock messages over random
// slices of random records.
func TestFrameBytesRandomSlices(t *testing.T) {
	seed := testSeed(t)
	rng := rand.New(rand.NewPCG(seed, 0))
	mem := checkedMem(t)
	for i := range 20 {
		rec := mixedRecord(mem, rng, 1+rng.IntN(10000))
		lo := rng.Int64N(rec.NumRows())
		hi := lo + rng.Int64N(rec.NumRows()-lo+1)
		sl := rec.NewSlice(lo, hi)
		compareFrame(t, mem, fmt.Sprintf("record %d (%d rows) slice [%d, %d)", i, rec.NumRows(), lo, hi), sl)
		sl.Release()
		rec.Release()
	}
}

// TestFrameZeroCopy checks that a frame hands gRPC the record's own large
// buffers (no copy), and that the record is released only when both the
// sender and gRPC have freed them, in either order.
func TestFrameZeroCopy(t *testing.T) {
	codec, err := newFlightCodec()
	if err != nil {
		t.Fatal(err)
	}
	for _, grpcLast := range []bool{true, false} {
		t.Run(fmt.Sprintf("grpc frees last=%v", grpcLast), func(t *testing.T) {
			mem := checkedMem(t)
			// 8192 rows: 64 KiB of ids and 128 KiB of x, both above
			// zeroCopyMinBuffer.
			st, err := (&DemoBackend{NumRows: 8192, Mem: mem}).Open(context.Background(), bigRequest(8192, 1))
			if err != nil {
				t.Fatal(err)
			}
			step, err := st.Next(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			rec := step.Slices[0]
			ids := rec.Column(0).Data().Buffers()[1].Bytes()
			vals := rec.Column(1).Data().Children()[0].Buffers()[1].Bytes()

			size := len(ids) + len(vals)
			payload, err := recordPayload(rec, []ipc.Option{ipc.WithAllocator(mem)})
			if err != nil {
				t.Fatal(err)
			}
			rec.Release() // from here on the payload alone holds the buffers
			var released atomic.Int32
			f, err := newFrame(payload, []byte("{}"), func() { released.Add(1) })
			if err != nil {
				t.Fatal(err)
			}
			found := map[string]bool{}
			for _, b := range f.bufs {
				switch unsafe.SliceData(b.ReadOnlyData()) {
				case unsafe.SliceData(ids):
					found["id"] = true
				case unsafe.SliceData(vals):
					found["x"] = true
				}
			}
			if !found["id"] || !found["x"] {
				t.Fatalf("frame borrows %v of the record's buffers, want id and x (a copy crept in)", found)
			}
			sent, err := codec.Marshal(f)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(sent.Materialize(), f.bufs.Materialize()) {
				t.Fatal("codec.Marshal(frame) differs from the frame's bytes")
			}
			first, second := f.free, sent.Free
			if !grpcLast {
				first, second = sent.Free, f.free
			}
			first()
			if released.Load() != 0 || mem.CurrentAlloc() < size {
				t.Fatalf("payload released (release ran %d times, %d bytes held) while a holder still had the buffers", released.Load(), mem.CurrentAlloc())
			}
			second()
			if released.Load() != 1 || mem.CurrentAlloc() != 0 {
				t.Fatalf("after both frees: release ran %d times, %d bytes held; want 1 and 0", released.Load(), mem.CurrentAlloc())
			}
		})
	}
}

// TestFlightCodecDelegates checks that other messages go through gRPC's
// proto codec unchanged.
func TestFlightCodecDelegates(t *testing.T) {
	codec, err := newFlightCodec()
	if err != nil {
		t.Fatal(err)
	}
	if codec.Name() != "proto" {
		t.Errorf("Name() = %q, want %q", codec.Name(), "proto")
	}
	in := &flight.Ticket{Ticket: bytes.Repeat([]byte("t"), 5000)}
	out, err := codec.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Free()
	want, _ := proto.Marshal(in)
	if !bytes.Equal(out.Materialize(), want) {
		t.Errorf("Marshal(Ticket) differs from proto.Marshal")
	}
	var back flight.Ticket
	if err := codec.Unmarshal(out, &back); err != nil || !bytes.Equal(back.Ticket, in.Ticket) {
		t.Errorf("Unmarshal(Marshal(Ticket)) = %d bytes, %v; want %d bytes", len(back.Ticket), err, len(in.Ticket))
	}
}

// bigRequest asks the demo backend for steps of B rows of one slice:
// 8 bytes of id and 16 of x per row, so each column buffer is borrowed.
func bigRequest(B int, epochs int) *Request {
	return &Request{
		Version:         Version,
		Datasets:        []string{"/data/demo/*.parquet"},
		GlobalBatchSize: B,
		NumSlices:       1,
		Slices:          []int{0},
		LastBatch:       LastBatchDrop,
		Epochs:          epochs,
	}
}

// TestZeroCopyDoGet reads large steps through the zero-copy path with a Go
// client and checks every value against the demo contract (row i: id=i,
// x=[4i..4i+3]), and that every record is freed afterwards.
func TestZeroCopyDoGet(t *testing.T) {
	const B, steps = 8192, 3
	for _, kind := range allKinds {
		t.Run(string(kind), func(t *testing.T) {
			mem := checkedMem(t)
			tb := &tracking{Backend: &DemoBackend{NumRows: B * steps, Mem: mem}}
			ts := startServer(t, kind, tb, []Option{WithAllocator(mem)})
			before := zeroCopyFrames.Load()
			_, got, err := readAll(t, context.Background(), ts.client, ticket(t, bigRequest(B, 1)))
			if err != nil {
				t.Fatal(err)
			}
			if n := zeroCopyFrames.Load() - before; n != steps {
				t.Errorf("%d steps sent zero-copy, want %d", n, steps)
			}
			if len(got) != steps {
				t.Fatalf("got %d steps, want %d", len(got), steps)
			}
			for s, st := range got {
				if st.meta["step"] != float64(s) || st.meta["epoch"] != float64(0) {
					t.Errorf("step %d: app_metadata %v", s, st.meta)
				}
				if len(st.ids) != B || len(st.x) != B {
					t.Fatalf("step %d: %d ids, %d x, want %d", s, len(st.ids), len(st.x), B)
				}
				for r := range B {
					i := int64(s*B + r)
					want := [4]float32{float32(4 * i), float32(4*i + 1), float32(4*i + 2), float32(4*i + 3)}
					if st.ids[r] != i || st.x[r] != want {
						t.Fatalf("step %d row %d: id %d x %v, want %d %v", s, r, st.ids[r], st.x[r], i, want)
					}
				}
			}
			waitFor(t, "records freed", func() bool { return mem.CurrentAlloc() == 0 })
			waitFor(t, "budget released", func() bool { return ts.srv.Metrics().BudgetInUse == 0 })
		})
	}
}

// TestZeroCopyCancel cancels a client that stopped reading while gRPC holds
// steps it has not written yet: those records are freed when gRPC drops
// them, and no goroutine is left.
func TestZeroCopyCancel(t *testing.T) {
	for _, kind := range allKinds {
		t.Run(string(kind), func(t *testing.T) {
			mem := checkedMem(t)
			tb := &tracking{Backend: &DemoBackend{NumRows: 1 << 20, Mem: mem}}
			ts := startServer(t, kind, tb, []Option{WithAllocator(mem), WithPrefetch(4)})
			if _, err := ts.client.GetFlightInfo(context.Background(), cmdDescriptor(t, bigRequest(1<<15, 0))); err != nil {
				t.Fatal(err)
			}
			base := runtimeGoroutines()
			ctx, cancel := context.WithCancel(context.Background())
			stream, err := ts.client.DoGet(ctx, ticket(t, bigRequest(1<<15, 0))) // 768 KiB steps, unbounded
			if err != nil {
				t.Fatal(err)
			}
			for range 3 {
				if _, err := stream.Recv(); err != nil {
					t.Fatal(err)
				}
			}
			// Let the server fill the flow-control windows and its queue.
			waitFor(t, "server blocked on the client", func() bool { return tb.nexts.Load() >= 8 })
			if mem.CurrentAlloc() == 0 {
				t.Fatal("no record held while the stream is blocked")
			}
			cancel()
			waitFor(t, "stream closed", func() bool { return tb.closed.Load() == 1 })
			waitFor(t, "records freed", func() bool { return mem.CurrentAlloc() == 0 })
			waitFor(t, "budget released", func() bool { return ts.srv.Metrics().BudgetInUse == 0 })
			checkGoroutines(t, base, 0)
		})
	}
}

// TestZeroCopyTooLarge sends a step over the max message size: the stream
// fails with ResourceExhausted and the record is freed.
func TestZeroCopyTooLarge(t *testing.T) {
	mem := checkedMem(t)
	tb := &tracking{Backend: &DemoBackend{NumRows: 1 << 17, Mem: mem}}
	ts := startServer(t, viaUnix, tb, []Option{WithAllocator(mem), WithMaxMessageSize(1 << 20)})
	_, got, err := readAll(t, context.Background(), ts.client, ticket(t, bigRequest(1<<16, 1))) // 1.5 MiB steps
	if status.Code(err) != codes.ResourceExhausted || len(got) != 0 {
		t.Fatalf("DoGet of a 1.5 MiB step with a 1 MiB limit = %d steps, %v; want 0 steps, ResourceExhausted", len(got), err)
	}
	waitFor(t, "records freed", func() bool { return mem.CurrentAlloc() == 0 })
}

// TestStockWriterForZstd checks that zstd streams take the stock path and
// still decode.
func TestStockWriterForZstd(t *testing.T) {
	mem := checkedMem(t)
	tb := &tracking{Backend: &DemoBackend{NumRows: 4096 * 2, Mem: mem}}
	ts := startServer(t, viaBufconn, tb, []Option{WithAllocator(mem), WithZstd(true)})
	before := zeroCopyFrames.Load()
	_, got, err := readAll(t, context.Background(), ts.client, ticket(t, bigRequest(4096, 1)))
	if err != nil || len(got) != 2 {
		t.Fatalf("DoGet = %d steps, %v; want 2", len(got), err)
	}
	if got[1].ids[5] != 4096+5 {
		t.Errorf("step 1 row 5 id = %d, want %d", got[1].ids[5], 4096+5)
	}
	if n := zeroCopyFrames.Load() - before; n != 0 {
		t.Errorf("%d zstd steps sent zero-copy, want 0", n)
	}
	waitFor(t, "records freed", func() bool { return mem.CurrentAlloc() == 0 })
}

// TestSchemaHasDictionary is a table test of the dictionary check.
func TestSchemaHasDictionary(t *testing.T) {
	dict := &arrow.DictionaryType{IndexType: arrow.PrimitiveTypes.Int32, ValueType: arrow.BinaryTypes.String}
	cases := []struct {
		name string
		dt   arrow.DataType
		want bool
	}{
		{"int64", arrow.PrimitiveTypes.Int64, false},
		{"fixed_size_list", arrow.FixedSizeListOf(4, arrow.PrimitiveTypes.Float32), false},
		{"dictionary", dict, true},
		{"list<dictionary>", arrow.ListOf(dict), true},
		{"struct{dictionary}", arrow.StructOf(arrow.Field{Name: "d", Type: dict}), true},
		{"map<string,dictionary>", arrow.MapOf(arrow.BinaryTypes.String, dict), true},
	}
	for _, c := range cases {
		s := arrow.NewSchema([]arrow.Field{{Name: "c", Type: c.dt}}, nil)
		if got := schemaHasDictionary(s); got != c.want {
			t.Errorf("schemaHasDictionary(%q) = %v, want %v", c.name, got, c.want)
		}
	}
}

// TestFrameDroppedUnfreed: a frame whose message gRPC drops without freeing
// it (its stream ended while SendMsg queued it) is released once it is
// garbage, exactly once; a frame freed normally is not released again then.
func TestFrameDroppedUnfreed(t *testing.T) {
	codec, err := newFlightCodec()
	if err != nil {
		t.Fatal(err)
	}
	for _, dropped := range []bool{true, false} {
		t.Run(fmt.Sprintf("dropped=%v", dropped), func(t *testing.T) {
			mem := checkedMem(t)
			st, err := (&DemoBackend{NumRows: 8192, Mem: mem}).Open(context.Background(), bigRequest(8192, 1))
			if err != nil {
				t.Fatal(err)
			}
			step, err := st.Next(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			payload, err := recordPayload(step.Slices[0], []ipc.Option{ipc.WithAllocator(mem)})
			if err != nil {
				t.Fatal(err)
			}
			step.Release()
			var released atomic.Int32
			f, err := newFrame(payload, []byte("{}"), func() { released.Add(1) })
			if err != nil {
				t.Fatal(err)
			}
			sent, err := codec.Marshal(f) // gRPC's reference
			if err != nil {
				t.Fatal(err)
			}
			f.free() // the sender's
			if !dropped {
				sent.Free()
			}
			f, sent = nil, nil
			waitFor(t, "the frame released", func() bool {
				runtime.GC()
				return released.Load() == 1 && mem.CurrentAlloc() == 0
			})
			for range 3 {
				runtime.GC()
				time.Sleep(10 * time.Millisecond)
			}
			if n := released.Load(); n != 1 {
				t.Errorf("release ran %d times, want once", n)
			}
		})
	}
}
