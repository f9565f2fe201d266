package transport

import (
	"context"
	"flag"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/meshfeed/meshfeed/internal/testseed"
)

var piecesSeed = flag.Uint64("pieces.seed", 0, "seed of the randomized shared-memory pieces tests (0: $MESHFEED_SEED or the clock)")

// piecesSchema has a column of each layout a joined slice must get right:
// int64 values with a validity bitmap in some records only, bit-packed
// booleans, and a fixed-size list with validity at both levels.
var piecesSchema = arrow.NewSchema([]arrow.Field{
	{Name: "a", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
	{Name: "f", Type: arrow.FixedWidthTypes.Boolean},
	{Name: "v", Type: arrow.FixedSizeListOf(3, arrow.PrimitiveTypes.Int32), Nullable: true},
}, nil)

// randomPiece returns a record of n rows of piecesSchema that is a view at
// a random row offset of a larger one (bit offsets not on byte
// boundaries), with nulls or without.
func randomPiece(rng *rand.Rand, mem memory.Allocator, n int) arrow.RecordBatch {
	lead := rng.IntN(13)
	nulls := rng.IntN(2) == 0
	ab := array.NewInt64Builder(mem)
	fb := array.NewBooleanBuilder(mem)
	vb := array.NewFixedSizeListBuilder(mem, 3, arrow.PrimitiveTypes.Int32)
	defer ab.Release()
	defer fb.Release()
	defer vb.Release()
	child := vb.ValueBuilder().(*array.Int32Builder)
	for range lead + n {
		if nulls && rng.IntN(3) == 0 {
			ab.AppendNull()
		} else {
			ab.Append(rng.Int64())
		}
		fb.Append(rng.IntN(2) == 0)
		if nulls && rng.IntN(4) == 0 {
			vb.AppendNull() // appends the list's child slots itself
		} else {
			vb.Append(true)
			child.AppendValues([]int32{rng.Int32(), rng.Int32(), rng.Int32()}, nil)
		}
	}
	cols := []arrow.Array{ab.NewArray(), fb.NewArray(), vb.NewArray()}
	rec := array.NewRecordBatch(piecesSchema, cols, int64(lead+n))
	for _, c := range cols {
		c.Release()
	}
	defer rec.Release()
	return rec.NewSlice(int64(lead), int64(lead+n))
}

// shmArray rebuilds an array of type dt and n rows from a slice's buffers
// in IPC order, as the Python client does (shm.py _array).
func shmArray(dt arrow.DataType, n int, next func() *memory.Buffer) arrow.ArrayData {
	validity, nulls := next(), -1
	if validity == nil {
		nulls = 0
	}
	if t, ok := dt.(*arrow.FixedSizeListType); ok {
		child := shmArray(t.Elem(), n*int(t.Len()), next)
		defer child.Release()
		return array.NewData(dt, n, []*memory.Buffer{validity}, []arrow.ArrayData{child}, nulls, 0)
	}
	return array.NewData(dt, n, []*memory.Buffer{validity, next()}, nil, nulls, 0)
}

// TestShmJoinedSlices: a step handed as records that do not match its
// slices (several per slice, of random sizes, some straddling two slices,
// each a view at an odd row offset, with validity bitmaps in some records
// only) is laid out in the slot as one record per slice: each slice read
// back from the slot equals its rows concatenated by arrow, values, bits and
// nulls.
func TestShmJoinedSlices(t *testing.T) {
	seed := testseed.Get(t, *piecesSeed, "pieces.seed")
	rng := rand.New(rand.NewPCG(seed, 2))
	mem := checkedMem(t)
	for round := range 40 {
		n, b := 1+rng.IntN(4), 1+rng.IntN(70)
		var recs []arrow.RecordBatch
		for left := n * b; left > 0; {
			k := min(left, 1+rng.IntN(2*b))
			recs = append(recs, randomPiece(rng, mem, k))
			left -= k
		}
		want := make([]arrow.Array, 3)
		for c := range want {
			var arrs []arrow.Array
			for _, r := range recs {
				arrs = append(arrs, r.Column(c))
			}
			var err error
			if want[c], err = array.Concatenate(arrs, mem); err != nil {
				t.Fatal(err)
			}
		}
		// The budget's bytes (slicesBytes, without layouts) are the
		// records' layouts' bytes.
		var laid int64
		for _, r := range recs {
			bufs, err := shmSliceLayout(r)
			if err != nil {
				t.Fatal(err)
			}
			for _, b := range bufs {
				laid += b.len()
			}
		}
		if got := slicesBytes(recs); got != laid {
			t.Fatalf("seed %d round %d: slicesBytes %d, the layouts' bytes %d", seed, round, got, laid)
		}
		meta := StepMeta{Step: round, Slices: make([]int, n)}
		it := item{slices: recs, meta: meta}
		layouts, rows, err := shmItemLayout(&it)
		if err != nil {
			t.Fatal(err)
		}
		if rows != int64(b) || len(layouts) != n {
			t.Fatalf("round %d: %d slices of %d rows, want %d of %d", round, len(layouts), rows, n, b)
		}
		m, err := newShmMapping(1, shmBytes(layouts))
		if err != nil {
			t.Fatal(err)
		}
		for i := range m.mem {
			m.mem[i] = 0xa5 // a slot holds an earlier step's bytes
		}
		out, inPlace := m.fill(0, layouts, nil)
		if inPlace != 0 {
			t.Fatalf("%d bytes in place without an arena", inPlace)
		}
		for k, bufs := range out {
			i := 0
			next := func() *memory.Buffer {
				e := bufs[i]
				i++
				if e[1] == 0 {
					return nil
				}
				return memory.NewBufferBytes(m.mem[e[0] : e[0]+e[1]])
			}
			for c, f := range piecesSchema.Fields() {
				d := shmArray(f.Type, b, next)
				got := array.MakeFromData(d)
				exp := array.NewSlice(want[c], int64(k*b), int64((k+1)*b))
				if !array.Equal(got, exp) {
					t.Fatalf("seed %d round %d (%d slices of %d rows, %d records) slice %d column %s:\n got %v\nwant %v",
						seed, round, n, b, len(recs), k, f.Name, got, exp)
				}
				got.Release()
				exp.Release()
				d.Release()
			}
		}
		Step{Slices: it.slices}.Release()
		for _, c := range want {
			c.Release()
		}
		m.close()
	}
}

// pieces hands each step of its backend as records of random sizes (views
// of the step's records, cut with no regard for its slices), as package
// feed hands a mixture's parts.
type pieces struct {
	Backend
	seed uint64
}

func (p pieces) Open(ctx context.Context, req *Request) (Stream, error) {
	st, err := p.Backend.Open(ctx, req)
	return piecesStream{st, p.seed}, err
}

func (p pieces) OpenWith(ctx context.Context, req *Request, mem memory.Allocator) (Stream, error) {
	st, err := p.Backend.(AllocatingBackend).OpenWith(ctx, req, mem)
	return piecesStream{st, p.seed}, err
}

type piecesStream struct {
	Stream
	seed uint64
}

func (s piecesStream) Next(ctx context.Context) (Step, error) {
	st, err := s.Stream.Next(ctx)
	if err != nil {
		return st, err
	}
	rng := rand.New(rand.NewPCG(s.seed, uint64(st.Meta.Epoch<<20+st.Meta.Step)))
	var out []arrow.RecordBatch
	for _, rec := range st.Slices {
		for lo := int64(0); lo < rec.NumRows(); {
			hi := min(rec.NumRows(), lo+1+rng.Int64N(17))
			out = append(out, rec.NewSlice(lo, hi))
			lo = hi
		}
	}
	st.Release()
	st.Slices = out
	return st, nil
}

// countingMem counts the bytes allocated through it.
type countingMem struct {
	memory.Allocator
	n atomic.Int64
}

func (m *countingMem) Allocate(size int) []byte {
	m.n.Add(int64(size))
	return m.Allocator.Allocate(size)
}

func (m *countingMem) Reallocate(size int, b []byte) []byte {
	m.n.Add(int64(max(size-len(b), 0)))
	return m.Allocator.Reallocate(size, b)
}

// TestShmPieces: steps handed as many records per slice (cut at random
// rows, straddling slices; the pad mask's bits start mid-byte) arrive in
// shared memory exactly as over Flight, with the arena (version 2) and
// without it (version 1, and a server with --shm-arena 0), each slice
// joined in the slot: without an arena the server allocates no step's
// bytes to join them (the one copy is the slot's).
func TestShmPieces(t *testing.T) {
	seed := testseed.Get(t, *piecesSeed, "pieces.seed")
	for _, tc := range []struct {
		name    string
		version int
		arena   int64
	}{{"arena", ShmVersion, DefaultShmArena}, {"version1", 1, DefaultShmArena}, {"no-arena", ShmVersion, 0}} {
		t.Run(tc.name, func(t *testing.T) {
			srvMem := &countingMem{Allocator: checkedMem(t)}
			ts, path := startShm(t, pieces{&DemoBackend{NumRows: 1000, Mem: checkedMem(t)}, seed},
				WithShmArena(tc.arena), WithAllocator(srvMem))
			req := baseRequest()
			req.GlobalBatchSize, req.NumSlices, req.Slices, req.LastBatch, req.Epochs = 90, 3, []int{0, 1, 2}, LastBatchPad, 1
			want := flightSteps(t, ts, req)
			raw, _ := req.Encode()
			before := srvMem.n.Load()
			c := dialShm(t, path, shmHello{Version: tc.version, Ticket: raw})
			var got []step
			var stepBytes int64
			c.each(nil, func(st *shmStep) {
				if len(st.Buffers) != 3 || st.Rows != 30 {
					t.Fatalf("step %d: %d slices of %d rows, want 3 of 30", st.Step, len(st.Buffers), st.Rows)
				}
				for _, bufs := range st.Buffers {
					for _, b := range bufs {
						stepBytes += b[1]
					}
				}
				got = append(got, c.demoStep(st))
				c.ack()
				c.release(st)
			})
			sameSteps(t, got, want)
			// Without an arena, the server's allocator gives the stream its
			// schema message and no step's bytes. (With one, it is the
			// arena's fallback: the backend's small buffers come from it.)
			if n, step := srvMem.n.Load()-before, stepBytes/int64(len(got)); tc.name != "arena" && n >= step {
				t.Errorf("the server allocated %d bytes for %d steps of %d bytes: the slices were joined outside the slot", n, len(got), step)
			}
		})
	}
}

// BenchmarkShmFill measures the shared-memory wire's copy of one step into
// its slot (layout and fill, no arena): B=8192 rows of id int64, label
// int32 and features[64] float32 (268 bytes a row), D=4, handed as one
// record per slice ("slices") or as three parts per slice, as a mixture of
// three sources hands them ("parts", joined in the slot). Joining there is
// the same copy: the two should cost the same per byte.
func BenchmarkShmFill(b *testing.B) {
	const B, D = 8192, 4
	sch := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "label", Type: arrow.PrimitiveTypes.Int32},
		{Name: "features", Type: arrow.FixedSizeListOfNonNullable(64, arrow.PrimitiveTypes.Float32)},
	}, nil)
	mem := memory.NewGoAllocator()
	ib, lb := array.NewInt64Builder(mem), array.NewInt32Builder(mem)
	fb := array.NewFixedSizeListBuilderWithField(mem, 64, arrow.Field{Name: "item", Type: arrow.PrimitiveTypes.Float32})
	vb := fb.ValueBuilder().(*array.Float32Builder)
	for r := range B {
		ib.Append(int64(r))
		lb.Append(int32(r))
		fb.Append(true)
		for k := range 64 {
			vb.Append(float32(r + k))
		}
	}
	cols := []arrow.Array{ib.NewArray(), lb.NewArray(), fb.NewArray()}
	rec := array.NewRecordBatch(sch, cols, B)
	defer rec.Release()
	cut := map[string][]int64{"slices": {B / D}, "parts": {683, 683, 682}}
	for _, name := range []string{"slices", "parts", "slices-again", "parts-again"} {
		sizes := cut[strings.TrimSuffix(name, "-again")]
		b.Run(name, func(b *testing.B) {
			var m *shmMapping
			b.SetBytes(B * 268)
			for i := 0; i < b.N; i++ {
				var recs []arrow.RecordBatch
				for lo := int64(0); lo < B; {
					for _, n := range sizes {
						recs = append(recs, rec.NewSlice(lo, lo+n))
						lo += n
					}
				}
				it := item{slices: recs, meta: StepMeta{Slices: []int{0, 1, 2, 3}}}
				layouts, _, err := shmItemLayout(&it)
				if err != nil {
					b.Fatal(err)
				}
				if m == nil {
					if m, err = newShmMapping(1, shmBytes(layouts)); err != nil {
						b.Fatal(err)
					}
					defer m.close()
				}
				m.fill(0, layouts, nil)
				Step{Slices: it.slices}.Release()
			}
		})
	}
}
