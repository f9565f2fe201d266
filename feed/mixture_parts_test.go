package feed

import (
	"context"
	"errors"
	"io"
	"sync/atomic"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/meshfeed/meshfeed/internal/arrowmem"
	"github.com/meshfeed/meshfeed/internal/datagen"
	"github.com/meshfeed/meshfeed/transport"
)

// sliceRecords returns a step's slices as one record each (released by the
// caller), as a transport joins them: a mixture hands each slice as its
// parts, whose rows back to back are b rows per slice.
func sliceRecords(t *testing.T, step transport.Step) []arrow.RecordBatch {
	t.Helper()
	n := int64(len(step.Meta.Slices))
	if n == 0 || step.Rows()%n != 0 {
		t.Fatalf("step %d: %d rows in %d records for %d slices", step.Meta.Step, step.Rows(), len(step.Slices), n)
	}
	b := step.Rows() / n
	var out []arrow.RecordBatch
	var group []arrow.RecordBatch
	var at int64
	for _, r := range step.Slices {
		for lo := int64(0); lo < r.NumRows(); {
			take := min(r.NumRows()-lo, b-at)
			group = append(group, r.NewSlice(lo, lo+take))
			lo, at = lo+take, at+take
			if at < b {
				continue
			}
			cols := make([]arrow.Array, r.NumCols())
			for c := range cols {
				arrs := make([]arrow.Array, len(group))
				for j, g := range group {
					arrs[j] = g.Column(c)
				}
				col, err := array.Concatenate(arrs, memory.DefaultAllocator)
				if err != nil {
					t.Fatal(err)
				}
				cols[c] = col
			}
			out = append(out, array.NewRecordBatch(r.Schema(), cols, b))
			for _, c := range cols {
				c.Release()
			}
			for _, g := range group {
				g.Release()
			}
			group, at = group[:0], 0
		}
	}
	return out
}

// allocCounter counts the bytes allocated through it.
type allocCounter struct {
	memory.Allocator
	n atomic.Int64
}

func (a *allocCounter) Allocate(n int) []byte { a.n.Add(int64(n)); return a.Allocator.Allocate(n) }
func (a *allocCounter) Reallocate(n int, b []byte) []byte {
	a.n.Add(int64(max(n-len(b), 0)))
	return a.Allocator.Reallocate(n, b)
}

// TestMixtureCopies counts the bytes a mixture's stream allocates per step
// against one dataset of the same files (same rows, B and D): both decode
// the same rows, and a mixed step is copied once on its way out. Placed
// (mixture_place.go), each piece's pages are decoded or copied straight
// into the slices of their steps (format.Into), which travel as they are
// (one record per slice): the mixture allocates its slices where the
// single dataset allocates its decoded rows, and no more; with the pieces
// decoded first and copied into the slices after, it allocated one step's
// bytes more per step. As parts (withoutPlace: views of the decoded
// records, joined by the transport), it allocates no step's bytes more
// either (joined before the transport, it allocated one whole step more
// per step and the transport copied it again). Both opened as the
// shared-memory wire opens them (OpenWith); uncompressed and snappy
// sources.
func TestMixtureCopies(t *testing.T) {
	for _, codec := range []datagen.Compression{datagen.CompressionNone, datagen.CompressionSnappy} {
		t.Run(codec.String(), func(t *testing.T) { testMixtureCopies(t, codec) })
	}
}

func testMixtureCopies(t *testing.T, codec datagen.Compression) {
	var dirs []string
	for i := range 3 {
		s := datagen.DefaultSpec()
		s.Rows, s.Files, s.RowGroupRows, s.Features, s.Seed = 4096, 1, 2048, 16, uint64(i+1)
		s.Compression, s.Dictionary, s.PageBytes = codec, false, 16<<10 // pages of 256 rows' features, 2,048 of id's
		dirs = append(dirs, writeDataset(t, s))
	}
	const B, D, steps = 512, 4, 24
	single, mix := mixtureAndOne(dirs, B, D, steps)
	run := func(req *transport.Request, opts ...Option) (alloc, stepBytes int64, records int) {
		mem := &allocCounter{Allocator: memory.NewGoAllocator()}
		p, st := openPlaced(t, req, append([]Option{WithAllocator(mem)}, opts...)...)
		defer p.Close()
		defer st.Close()
		for n := 0; ; n++ {
			step, err := st.Next(context.Background())
			if errors.Is(err, io.EOF) {
				if n != steps {
					t.Fatalf("%d steps, want %d", n, steps)
				}
				return mem.n.Load(), stepBytes, records
			}
			if err != nil {
				t.Fatal(err)
			}
			records = max(records, len(step.Slices))
			for _, r := range sliceRecords(t, step) {
				stepBytes = max(stepBytes, arrowmem.RecordBytes(r)*D)
				r.Release()
			}
			step.Release()
		}
	}
	one, stepBytes, _ := run(single)
	for _, place := range []bool{true, false} {
		var opts []Option
		if !place {
			opts = append(opts, withoutPlace())
		}
		mixed, _, records := run(mix, opts...)
		extra := float64(mixed-one) / float64(steps*stepBytes)
		t.Logf("placed %v: bytes allocated per step: single dataset %d, mixture %d; a step holds %d: the mixture allocates %.3f steps more per step, at most %d records a step",
			place, one/steps, mixed/steps, stepBytes, extra, records)
		switch {
		case place && records != D:
			t.Errorf("placed: a step of %d records for %d slices: placed slices travel as one record each", records, D)
		case place && (extra < -0.25 || extra > 0.25):
			t.Errorf("placed: the mixture allocated %.2f steps' bytes per step more than the single dataset, want none (the pieces go straight into the slices)", extra)
		case !place && extra > 0.25:
			// Joined, the mixture allocated 1.1 steps more per step; as
			// parts, 0.1 (its 12 readers decode smaller pieces: more,
			// smaller allocations).
			t.Errorf("parts: the mixture allocated %.2f steps' bytes per step more than the single dataset: its slices are copied (joined) before the transport", extra)
		}
	}
}
