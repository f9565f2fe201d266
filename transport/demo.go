package transport

import (
	"context"
	"fmt"
	"io"
	"slices"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// DemoBackend is a Backend over a synthetic in-memory dataset of NumRows rows,
// for tests, interoperability checks and `meshfeed serve --backend demo`. It
// follows the contract of docs/PROTOCOL.md without shuffling (seed and shuffle
// are accepted and ignored) and ignores the dataset URIs (which the server
// still checks against its roots).
//
// Row i of every epoch has the columns
//
//	id: int64 = i
//	x:  fixed_size_list<float32>[4] = [4i, 4i+1, 4i+2, 4i+3]
//
// and, with last_batch=pad, the boolean mask column (false for padding rows,
// whose id and x are 0).
type DemoBackend struct {
	// NumRows is N, the dataset's rows.
	NumRows int64
	// Mem allocates the records (nil: memory.DefaultAllocator).
	Mem memory.Allocator
}

var demoColumns = []arrow.Field{
	{Name: "id", Type: arrow.PrimitiveTypes.Int64},
	{Name: "x", Type: arrow.FixedSizeListOf(4, arrow.PrimitiveTypes.Float32)},
}

// demoPlan is a validated request over the demo dataset.
type demoPlan struct {
	req    *Request
	schema *arrow.Schema
	cols   []string // selected demo columns, in order
	steps  int64
	b      int64
}

func (d *DemoBackend) plan(req *Request) (*demoPlan, error) {
	var p problems
	n, B := d.NumRows, int64(req.GlobalBatchSize)
	var cols []string
	if len(req.Columns) == 0 {
		cols = []string{"id", "x"}
	}
	for _, c := range req.Columns {
		if c.Name != "id" && c.Name != "x" {
			p.add("column %q does not exist (the demo dataset has id, x)", c.Name)
		}
		if c.DType != "" || c.Length != 0 || c.Overflow != "" || len(c.Fill) > 0 || c.PackRatio != 0 {
			p.add("column %q: the demo backend does not shape columns", c.Name)
		}
		cols = append(cols, c.Name)
	}
	if err := p.err("transport: demo", ErrBadRequest); err != nil {
		return nil, err
	}
	var steps int64
	switch req.LastBatch {
	case LastBatchDrop:
		steps = n / B
	case LastBatchPad:
		steps = (n + B - 1) / B
	case LastBatchRaise:
		if n%B != 0 {
			return nil, fmt.Errorf("transport: demo: %w: last_batch=raise: N=%d rows is not a multiple of B=%d (remainder %d)", ErrFailedPrecondition, n, B, n%B)
		}
		steps = n / B
	default:
		return nil, fmt.Errorf("transport: demo: %w: last_batch %q", ErrBadRequest, req.LastBatch)
	}
	if steps == 0 {
		return nil, fmt.Errorf("transport: demo: %w: N=%d rows give no step of B=%d rows with last_batch=%s", ErrFailedPrecondition, n, B, req.LastBatch)
	}
	fields := make([]arrow.Field, 0, len(cols)+1)
	for _, c := range cols {
		i := slices.IndexFunc(demoColumns, func(f arrow.Field) bool { return f.Name == c })
		fields = append(fields, demoColumns[i])
	}
	if req.LastBatch == LastBatchPad {
		fields = append(fields, arrow.Field{Name: req.Mask(), Type: arrow.FixedWidthTypes.Boolean})
	}
	return &demoPlan{req: req, schema: arrow.NewSchema(fields, nil), cols: cols, steps: steps, b: int64(req.SliceRows())}, nil
}

// Info implements Backend.
func (d *DemoBackend) Info(_ context.Context, req *Request) (*PlanInfo, error) {
	pl, err := d.plan(req)
	if err != nil {
		return nil, err
	}
	info := &PlanInfo{Schema: pl.schema, NumRows: d.NumRows, StepsPerEpoch: pl.steps}
	total := pl.steps * int64(req.GlobalBatchSize)
	if total < d.NumRows {
		info.DroppedRows = d.NumRows - total
	} else {
		info.PaddedRows = total - d.NumRows
	}
	return info, nil
}

// Open implements Backend.
func (d *DemoBackend) Open(ctx context.Context, req *Request) (Stream, error) {
	return d.OpenWith(ctx, req, d.Mem)
}

// OpenWith implements AllocatingBackend: Open, with the records allocated
// from mem (nil: memory.DefaultAllocator).
func (d *DemoBackend) OpenWith(_ context.Context, req *Request, mem memory.Allocator) (Stream, error) {
	pl, err := d.plan(req)
	if err != nil {
		return nil, err
	}
	if int64(req.Start.Step) >= pl.steps {
		return nil, fmt.Errorf("transport: demo: %w: start step %d is past the %d steps of an epoch", ErrFailedPrecondition, req.Start.Step, pl.steps)
	}
	if mem == nil {
		mem = memory.DefaultAllocator
	}
	return &demoStream{d: d, pl: pl, mem: mem, epoch: req.Start.Epoch, step: int64(req.Start.Step)}, nil
}

// demoStream produces the steps of one request.
type demoStream struct {
	d      *DemoBackend
	pl     *demoPlan
	mem    memory.Allocator
	epoch  int
	step   int64
	closed bool
}

func (s *demoStream) Schema() *arrow.Schema { return s.pl.schema }

// streamRange returns the first row and the length of stream k of D streams
// over n rows: contiguous, lengths differing by at most one.
func streamRange(n, D, k int64) (start, length int64) {
	q, r := n/D, n%D
	return k*q + min(k, r), q + b2i(k < r)
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

func (s *demoStream) Next(ctx context.Context) (Step, error) {
	if err := ctx.Err(); err != nil {
		return Step{}, err
	}
	if s.closed {
		return Step{}, fmt.Errorf("transport: demo: Next after Close")
	}
	req := s.pl.req
	if s.step == s.pl.steps {
		s.epoch, s.step = s.epoch+1, 0
	}
	if req.Epochs > 0 && s.epoch >= req.Epochs {
		return Step{}, io.EOF
	}
	b := s.pl.b
	meta := StepMeta{Epoch: s.epoch, Step: int(s.step), Slices: slices.Clone(req.Slices), RealRows: make([]int, len(req.Slices))}
	ids := make([]int64, 0, b*int64(len(req.Slices)))
	valid := make([]bool, 0, cap(ids))
	for i, k := range req.Slices {
		start, length := streamRange(s.d.NumRows, int64(req.NumSlices), int64(k))
		for r := s.step * b; r < (s.step+1)*b; r++ {
			if r < length {
				ids = append(ids, start+r)
				valid = append(valid, true)
				meta.RealRows[i]++
			} else {
				ids = append(ids, 0)
				valid = append(valid, false)
			}
		}
	}
	s.step++

	cols := make([]arrow.Array, 0, len(s.pl.schema.Fields()))
	defer func() {
		for _, c := range cols {
			c.Release()
		}
	}()
	for _, name := range s.pl.cols {
		switch name {
		case "id":
			bld := array.NewInt64Builder(s.mem)
			bld.AppendValues(ids, nil)
			cols = append(cols, bld.NewArray())
			bld.Release()
		case "x":
			bld := array.NewFixedSizeListBuilder(s.mem, 4, arrow.PrimitiveTypes.Float32)
			vb := bld.ValueBuilder().(*array.Float32Builder)
			for j, id := range ids {
				bld.Append(true)
				for k := range int64(4) {
					v := float32(0)
					if valid[j] {
						v = float32(4*id + k)
					}
					vb.Append(v)
				}
			}
			cols = append(cols, bld.NewArray())
			bld.Release()
		}
	}
	if req.LastBatch == LastBatchPad {
		bld := array.NewBooleanBuilder(s.mem)
		bld.AppendValues(valid, nil)
		cols = append(cols, bld.NewArray())
		bld.Release()
	}
	return Step{Slices: []arrow.RecordBatch{array.NewRecordBatch(s.pl.schema, cols, int64(len(ids)))}, Meta: meta}, nil
}

func (s *demoStream) Close() error {
	s.closed = true
	return nil
}
