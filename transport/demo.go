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
//
// Its plan (steps per epoch, rows per slice, the streams, dropped and padded
// rows) is package batching's, the one the pipeline follows, passed in as
// Plan: transport does no plan arithmetic of its own and does not import
// batching.
type DemoBackend struct {
	// NumRows is N, the dataset's rows.
	NumRows int64
	// Mem allocates the records (nil: memory.DefaultAllocator).
	Mem memory.Allocator
	// Plan returns the plan of a request over rows rows in one row group,
	// in file order: batching.RowsPlan, as `meshfeed serve --backend demo`
	// passes it. Required (transport's own tests set testDemoPlan).
	Plan func(rows int64, globalBatch, slices int, lastBatch string) (DemoPlan, error)
}

// DemoPlan is what the demo backend asks of a plan; *batching.Plan
// implements it.
type DemoPlan interface {
	// StepsPerEpoch is the number of steps of every epoch.
	StepsPerEpoch() int
	// SliceRows is b = B/D, the rows of one slice.
	SliceRows() int
	// StreamStart is the first row of stream d in the epoch's rows.
	StreamStart(d int) int64
	// SliceReal is how many rows of slice d of step are real (the rest is
	// padding).
	SliceReal(step, d int) int
	// DroppedRows and PaddedRows are the rows per epoch not delivered
	// (drop) and added (pad).
	DroppedRows() int64
	PaddedRows() int64
}

// testDemoPlan is the Plan of DemoBackends that have none; set by
// transport's own tests (which cannot import the package that passes
// batching.RowsPlan in production).
var testDemoPlan func(rows int64, globalBatch, slices int, lastBatch string) (DemoPlan, error)

var demoColumns = []arrow.Field{
	{Name: "id", Type: arrow.PrimitiveTypes.Int64},
	{Name: "x", Type: arrow.FixedSizeListOf(4, arrow.PrimitiveTypes.Float32)},
}

// demoPlan is a validated request over the demo dataset.
type demoPlan struct {
	req    *Request
	schema *arrow.Schema
	cols   []string // selected demo columns, in order
	plan   DemoPlan
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
	planner := d.Plan
	if planner == nil {
		planner = testDemoPlan
	}
	if planner == nil {
		return nil, fmt.Errorf("transport: demo: %w: DemoBackend.Plan is nil (pass batching.RowsPlan)", ErrConfig)
	}
	plan, err := planner(n, int(B), req.NumSlices, string(req.LastBatch))
	if err != nil {
		return nil, fmt.Errorf("transport: demo: %w: %w", ErrFailedPrecondition, err)
	}
	fields := make([]arrow.Field, 0, len(cols)+1)
	for _, c := range cols {
		i := slices.IndexFunc(demoColumns, func(f arrow.Field) bool { return f.Name == c })
		fields = append(fields, demoColumns[i])
	}
	if req.LastBatch == LastBatchPad {
		fields = append(fields, arrow.Field{Name: req.Mask(), Type: arrow.FixedWidthTypes.Boolean})
	}
	return &demoPlan{req: req, schema: arrow.NewSchema(fields, nil), cols: cols, plan: plan,
		steps: int64(plan.StepsPerEpoch()), b: int64(plan.SliceRows())}, nil
}

// Info implements Backend.
func (d *DemoBackend) Info(_ context.Context, req *Request) (*PlanInfo, error) {
	pl, err := d.plan(req)
	if err != nil {
		return nil, err
	}
	return &PlanInfo{Schema: pl.schema, NumRows: d.NumRows, StepsPerEpoch: pl.steps,
		DroppedRows: pl.plan.DroppedRows(), PaddedRows: pl.plan.PaddedRows()}, nil
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
		start, real := s.pl.plan.StreamStart(k), int64(s.pl.plan.SliceReal(int(s.step), k))
		for r := range b {
			if r < real {
				ids = append(ids, start+s.step*b+r)
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
