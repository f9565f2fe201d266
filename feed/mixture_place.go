package feed

import (
	"fmt"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/meshfeed/meshfeed/batching"
	"github.com/meshfeed/meshfeed/format"
	"github.com/meshfeed/meshfeed/internal/arrowmem"
	"github.com/meshfeed/meshfeed/loader"
)

// Slices placed as their rows are decoded (DESIGN.md, "Mixtures", "Slices
// placed"). A mixture's slice holds three sources' rows back to back, so
// it is copied once on its way out. Where every column is fixed-width and
// nothing reshapes the rows, each cursor's reader gives the format, before
// it decodes a piece, the places of the piece's rows in the slices of the
// steps that take them (format.Into), where their pages are decoded
// straight into; what the format did not place it copies there right
// after, and it hands the cursor records without columns that only count
// the rows. The step's slice is then one record of buffers the transport
// sends as they are, each byte written once, as the single dataset's (the
// transport copied the parts from pieces decoded dozens of steps before;
// a copy right after decoding cost as much).

// placer holds the placed slices of one mixture stream.
type placer struct {
	mix   *batching.Mixture
	mem   memory.Allocator
	b     int64
	in    *arrow.Schema // the sources' columns, in order (mixturePlan.in)
	out   *arrow.Schema // the slices' (mixturePlan.schema)
	outF  []arrow.Field // out's fields (Schema.Fields copies them)
	width []int         // bytes per row of each column of in
	elem  []int         // bytes per element of each column of in (a fixed-size list's child's)
	ds    []int         // the stream's slices (mixturePlan.slices): k's d of the mesh
	at    []int         // where each column of a slice starts in it (newStep)
	size  []int         // each column's bytes
	whole int           // a slice's bytes, columns and padding
	src   bool          // out has the source column
	mask  bool          // out has the mask (every row real)
	empty *arrow.Schema // of the records the cursors count rows with
	tbl   *stepTable

	mu    sync.Mutex
	steps map[int]*placedStep
	cols  []arrow.Array // record's scratch, copied by each record made
}

// placedStep is a step's slices of the stream as the readers fill them:
// one allocation (whole), slice k at k times placer.whole in it.
type placedStep struct {
	whole  *memory.Buffer
	slices []placedSlice
	made   int // records made of its slices (record)
	// The buffers of every array of the step's slices: a primitive's
	// (no validity, whole) and a fixed-size list's (no validity); its
	// arrays share them, as arrow's slices of an array do.
	vals, list []*memory.Buffer
}

// placedSlice is slice k of a step as the readers fill it: the bytes of
// each column of in, then the source column's and the mask's (views of
// the step's allocation).
type placedSlice struct {
	cols  [][]byte
	at    int          // where the slice starts in the step's allocation
	order []int32      // the step's source order on the slice (Mixture.Order)
	rows  atomic.Int64 // rows written
}

// newPlacer returns a placer for the stream of mp from step start, or nil
// where the slices cannot be placed: packing, padding, a source that
// filters, tokenizes, shuffles or reshapes its rows, a column that is not
// fixed-width (primitive, or a fixed-size list of one), no read-ahead
// budget (pieces not cut on the steps ahead), or more than one decode
// worker per reader (the parts path keeps the cores a reader may use).
//
// A placed cursor's reader reads pieces cut on the steps' ends
// (stepPieces), each spanning the same number of steps whatever the
// source's weight, so the slices its rows are placed in lie at most a few
// pieces' steps ahead; a cursor whose source no step ahead takes from
// starts no reader until one does (startReader).
func newPlacer(mp *mixturePlan, mem memory.Allocator, walk *batching.Walker, workers int, off bool) *placer {
	if off || workers != 1 || mp.packer != nil || mp.mix.PaddedRows() != 0 {
		return nil
	}
	for _, s := range mp.srcs {
		if s.shaper != nil || s.window != 0 || s.sels != nil || len(s.toks) > 0 || s.cutIn.NumFields() != mp.in.NumFields() {
			return nil
		}
		if perRow, _ := s.ds.StreamedRowBytes(); perRow <= 0 {
			return nil // not cut on the steps ahead (stepPieces)
		}
	}
	p := &placer{mix: mp.mix, mem: mem, b: int64(mp.mix.SliceRows()), in: mp.in, out: mp.schema,
		outF: mp.schema.Fields(), empty: arrow.NewSchema(nil, nil), steps: map[int]*placedStep{},
		tbl: newStepTable(walk, mp.mix.Steps()), ds: mp.slices}
	for _, f := range mp.in.Fields() {
		w, e := placedWidth(f.Type), placedElem(f.Type)
		if w == 0 || sliceAlign%e != 0 {
			return nil // a column's values start on an element at sliceAlign (column)
		}
		p.width, p.elem = append(p.width, w), append(p.elem, e)
	}
	extra := mp.schema.Fields()[mp.in.NumFields():]
	if len(extra) > 0 && extra[0].Type.ID() == arrow.INT32 {
		p.src, extra = true, extra[1:]
	}
	if len(extra) > 0 && extra[0].Type.ID() == arrow.BOOL {
		p.mask, extra = true, extra[1:]
	}
	if len(extra) > 0 {
		return nil
	}
	for _, w := range p.width {
		p.size = append(p.size, int(p.b)*w)
	}
	if p.src {
		p.size = append(p.size, int(p.b)*4)
	}
	if p.mask {
		p.size = append(p.size, int(p.b+7)/8)
	}
	for _, n := range p.size {
		p.at = append(p.at, p.whole)
		p.whole += alignSlice(n)
	}
	return p
}

// placedWidth returns the bytes per row of a column of type t laid out as
// one values buffer (a primitive of whole bytes, or a fixed-size list of
// one), else 0.
func placedWidth(t arrow.DataType) int {
	if l, ok := t.(*arrow.FixedSizeListType); ok {
		if _, nested := l.Elem().(*arrow.FixedSizeListType); nested {
			return 0
		}
		return placedWidth(l.Elem()) * int(l.Len())
	}
	switch t.ID() {
	case arrow.INT8, arrow.UINT8, arrow.INT16, arrow.UINT16, arrow.INT32, arrow.UINT32, arrow.INT64, arrow.UINT64,
		arrow.FLOAT16, arrow.FLOAT32, arrow.FLOAT64, arrow.DATE32, arrow.DATE64, arrow.TIME32, arrow.TIME64,
		arrow.TIMESTAMP, arrow.DURATION:
		return t.(arrow.FixedWidthDataType).BitWidth() / 8
	}
	return 0
}

// placedElem returns the bytes per element of a column of type t that
// placedWidth takes: its own, or a fixed-size list's child's.
func placedElem(t arrow.DataType) int {
	if l, ok := t.(*arrow.FixedSizeListType); ok {
		return placedWidth(l.Elem())
	}
	return placedWidth(t)
}

// placedValues returns the bytes of column d's values, row 0 first (w
// bytes a row). Columns of a mixture carry no nulls (format refuses them
// or fills them); one with nulls is an internal error here.
func placedValues(d arrow.ArrayData, w int) ([]byte, error) {
	if d.NullN() > 0 {
		return nil, fmt.Errorf("%d nulls in a column of fixed-width values (internal error)", d.NullN())
	}
	off, n := d.Offset(), d.Len()
	if l, ok := d.DataType().(*arrow.FixedSizeListType); ok {
		child := d.Children()[0]
		if child.NullN() > 0 {
			return nil, fmt.Errorf("%d null elements in a fixed-size list column (internal error)", child.NullN())
		}
		ew := w / int(l.Len())
		start := (child.Offset() + off*int(l.Len())) * ew
		return child.Buffers()[1].Bytes()[start : start+n*w], nil
	}
	return d.Buffers()[1].Bytes()[off*w : (off+n)*w], nil
}

// newStep makes the stream's slices of step st for targets: one allocation
// for all of them, each slice's columns laid out alike (by newPlacer,
// sliceAlign apart), each slice's order of the sources, and its source
// column written from the step's counts in that order. One allocation a
// step (its slices are sent and released together): the shared-memory
// wire sends every column by reference from its arena, where a column of
// its own would be a few KiB (id, label, source), under the arena's
// minimum, allocated outside it and copied into the step's slot.
func (p *placer) newStep(st int, counts []int64) *placedStep {
	ps := &placedStep{slices: make([]placedSlice, len(p.ds))}
	// Every byte a column views is written before the step is sent
	// (record checks that every row was placed); the padding between
	// columns is never read.
	ps.whole = arrowmem.NewOverwriteBuffer(p.mem, len(p.ds)*p.whole)
	ps.vals, ps.list = []*memory.Buffer{nil, ps.whole}, []*memory.Buffer{nil}
	all := ps.whole.Bytes()
	cols := make([][]byte, len(p.ds)*len(p.size))
	for k, d := range p.ds {
		sl := &ps.slices[k]
		sl.at, sl.order = k*p.whole, p.mix.Order(st, d)
		sl.cols, cols = cols[:len(p.size):len(p.size)], cols[len(p.size):]
		for j, n := range p.size {
			sl.cols[j] = all[sl.at+p.at[j] : sl.at+p.at[j]+n : sl.at+p.at[j]+n]
		}
		if p.src {
			vals := arrow.Int32Traits.CastFromBytes(sl.cols[len(p.width)])
			at := 0
			for _, i := range sl.order {
				for r := int64(0); r < counts[i]; r++ {
					vals[at] = i
					at++
				}
			}
		}
		if p.mask {
			bits := sl.cols[len(sl.cols)-1]
			for j := range bits {
				bits[j] = 0xff
			}
		}
	}
	return ps
}

// sliceAlign is the alignment of each column in a placed step's
// allocation: the shared-memory wire's (a buffer sent by reference starts
// on it) and XLA's.
const sliceAlign = 64

func alignSlice(n int) int { return (n + sliceAlign - 1) / sliceAlign * sliceAlign }

// target is a run of a piece's rows that one slice takes: rows [at,
// at+m) of the piece go to rows [o, o+m) of sl.
type target struct {
	sl       *placedSlice
	at, o, m int64
}

// targets returns where n rows of source i's sequence on slice k (the
// request's) from position pos on go, in order; past is set where some
// lie past the last step (no step's: they go nowhere). It looks the
// steps up in the table once and finds their slices under one lock, for
// the piece's dozens of steps.
func (p *placer) targets(i, k int, pos, n int64) (ts []target, past bool, err error) {
	ns := p.mix.Sources()
	runs, counts, past, err := p.tbl.runs(i, pos, n)
	if err != nil {
		return nil, false, err
	}
	ts = make([]target, 0, len(runs))
	p.mu.Lock()
	for j, r := range runs {
		c := counts[j*ns : (j+1)*ns : (j+1)*ns]
		ps := p.steps[r.st]
		if ps == nil {
			ps = p.newStep(r.st, c)
			p.steps[r.st] = ps
		}
		sl := &ps.slices[k]
		var block int64
		for _, s := range sl.order {
			if int(s) == i {
				break
			}
			block += c[s]
		}
		ts = append(ts, target{sl: sl, at: r.at, o: block + pos + r.at - r.cum, m: r.m})
	}
	p.mu.Unlock()
	return ts, past, nil
}

// into returns the destinations of a piece's rows whose targets are ts
// (n rows, every one a step's): each target's rows of each column in its
// slice.
func (p *placer) into(ts []target, n int64) *format.Into {
	in := &format.Into{Bounds: make([]int64, 0, len(ts)+1), Cols: make([][][]byte, len(p.width)), Placed: make([]bool, len(p.width))}
	for _, t := range ts {
		in.Bounds = append(in.Bounds, t.at)
	}
	in.Bounds = append(in.Bounds, n)
	for c, w := range p.width {
		dst := make([][]byte, len(ts))
		for j, t := range ts {
			dst[j] = t.sl.cols[c][int(t.o)*w : int(t.o+t.m)*w]
		}
		in.Cols[c] = dst
	}
	return in
}

// fill copies rec's columns (those of in that placed, when set, did not
// place: the record holds the others, in order) into the targets ts of
// its rows, then counts the targets' rows as placed.
func (p *placer) fill(ts []target, rec arrow.RecordBatch, placed []bool) error {
	vals := make([][]byte, len(p.width))
	r := 0
	for c, w := range p.width {
		if placed != nil && placed[c] {
			continue
		}
		if r >= int(rec.NumCols()) {
			return fmt.Errorf("column %q neither placed nor decoded (internal error)", p.in.Field(c).Name)
		}
		v, err := placedValues(rec.Column(r).Data(), w)
		if err != nil {
			return fmt.Errorf("column %q: %w", p.in.Field(c).Name, err)
		}
		vals[c] = v
		r++
	}
	for _, t := range ts {
		for c, w := range p.width {
			if vals[c] != nil {
				copy(t.sl.cols[c][int(t.o)*w:int(t.o+t.m)*w], vals[c][int(t.at)*w:int(t.at+t.m)*w])
			}
		}
	}
	for _, t := range ts {
		t.sl.rows.Add(t.m)
	}
	return nil
}

// record returns slice k of step st as one record of views of the
// step's allocation, once the cursors have taken its rows (so every
// reader has placed them); the step is forgotten once each of its slices
// is a record. The stream's Next calls it, one call at a time (cols).
func (p *placer) record(st, k int) (arrow.RecordBatch, error) {
	p.mu.Lock()
	ps := p.steps[st]
	var got int64
	if ps != nil {
		got = ps.slices[k].rows.Load()
	}
	if got != p.b {
		p.mu.Unlock()
		return nil, fmt.Errorf("%d of the slice's %d rows placed (internal error)", got, p.b)
	}
	ps.made++
	last := ps.made == len(ps.slices)
	if last {
		delete(p.steps, st)
	}
	p.mu.Unlock()
	// No reader writes the slice now, nor changes what its arrays view.
	sl := &ps.slices[k]
	cols := p.cols[:0]
	for c, f := range p.outF {
		cols = append(cols, p.column(f.Type, ps, sl.at+p.at[c], c))
	}
	rec := array.NewRecordBatch(p.out, cols, p.b) // copies cols
	for j, a := range cols {
		a.Release()
		cols[j] = nil
	}
	p.cols = cols
	if last {
		ps.whole.Release() // the records hold it
	}
	return rec, nil
}

// column returns a column of type t of a slice of step ps whose values
// start at byte at of its allocation (column c of the slice; bit at*8 for
// the mask).
func (p *placer) column(t arrow.DataType, ps *placedStep, at, c int) arrow.Array {
	var d arrow.ArrayData
	switch l := t.(type) {
	case *arrow.FixedSizeListType:
		child := array.NewData(l.Elem(), int(p.b)*int(l.Len()), ps.vals, nil, 0, at/p.elem[c])
		d = array.NewData(t, int(p.b), ps.list, []arrow.ArrayData{child}, 0, 0)
		child.Release()
	case *arrow.BooleanType:
		d = array.NewData(t, int(p.b), ps.vals, nil, 0, at*8)
	default:
		d = array.NewData(t, int(p.b), ps.vals, nil, 0, at*8/t.(arrow.FixedWidthDataType).BitWidth())
	}
	a := array.MakeFromData(d)
	d.Release()
	return a
}

// release frees the steps not sent (the stream closed).
func (p *placer) release() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for st, ps := range p.steps {
		ps.whole.Release()
		delete(p.steps, st)
	}
}

// placeRead returns the into (loader.WithReaderInto) and the transform
// of a placed cursor's reader, which reads the pieces segs (whose rows
// start at position start of the cursor's sequence; refs their refs).
// Before a piece decodes, into gives the format the piece's rows' places
// in the slices that take them, where its fixed-width columns' pages are
// decoded straight into; the transform then copies the columns the format
// did not place (format.Into.Placed), or every column where into gave no
// places (rows past the mixture's end), and returns a record without
// columns of as many rows, which the cursor holds like the rows
// themselves and its steps skip (slicePlaced).
func (s *mixStream) placeRead(mc *mixCursor, segs []batching.Segment, refs []loader.RowGroupRef, start int64) (func(loader.RowGroupRef) *format.Into, loader.Transform) {
	pos := make([]int64, len(segs))
	for j, g := range segs {
		pos[j], start = start, start+g.Len()
	}
	i, k := mc.src.idx, mc.k
	// where returns the position in the cursor's sequence of ref's first
	// row (its rows lie in segs j, ... back to back: one row group's
	// pieces, read in order) and its rows.
	where := func(ref loader.RowGroupRef) (int64, int64, error) {
		lo, hi := ref.Start, ref.End
		if lo == 0 && hi == 0 {
			hi = ref.Rows
		}
		same := func(j int) bool { return refs[j].File == ref.File && refs[j].Index == ref.Index }
		j := 0
		for j < len(segs) && !(same(j) && segs[j].Start <= lo && lo < segs[j].End) {
			j++
		}
		end := int64(-1)
		if j < len(segs) {
			end = segs[j].End
			for q := j + 1; end < hi && q < len(segs) && same(q) && segs[q].Start == end; q++ {
				end = segs[q].End
			}
		}
		if end < hi {
			return 0, 0, fmt.Errorf("%s: rows [%d, %d) of file %d row group %d are not the reader's pieces' (internal error)", mc.src.name, lo, hi, ref.File, ref.Index)
		}
		return pos[j] + lo - segs[j].Start, hi - lo, nil
	}
	type placing struct {
		ts   []target
		into *format.Into
	}
	var mu sync.Mutex
	pending := map[loader.RowGroupRef]placing{} // pieces given places, not yet transformed
	into := func(ref loader.RowGroupRef) *format.Into {
		at, n, err := where(ref)
		if err != nil {
			return nil // the transform reports it
		}
		ts, past, err := s.place.targets(i, k, at, n)
		if err != nil || past {
			return nil
		}
		in := s.place.into(ts, n)
		mu.Lock()
		pending[ref] = placing{ts, in}
		mu.Unlock()
		return in
	}
	xform := func(_ int, ref loader.RowGroupRef, rec arrow.RecordBatch) (arrow.RecordBatch, error) {
		defer rec.Release()
		mu.Lock()
		pl, ok := pending[ref]
		delete(pending, ref)
		mu.Unlock()
		at, n, err := where(ref)
		if err != nil {
			return nil, err
		}
		if rec.NumRows() != n {
			return nil, fmt.Errorf("%s: a record of %d rows for rows [%d, %d) (internal error)", mc.src.name, rec.NumRows(), ref.Start, ref.Start+n)
		}
		ts, placed := pl.ts, []bool(nil)
		if ok {
			placed = pl.into.Placed
		} else if ts, _, err = s.place.targets(i, k, at, n); err != nil {
			return nil, fmt.Errorf("%s: placing rows [%d, %d) of file %d row group %d: %w", mc.src.name, ref.Start, ref.Start+n, ref.File, ref.Index, err)
		}
		if err := s.place.fill(ts, rec, placed); err != nil {
			return nil, fmt.Errorf("%s: placing rows [%d, %d) of file %d row group %d: %w", mc.src.name, ref.Start, ref.Start+n, ref.File, ref.Index, err)
		}
		return array.NewRecordBatch(s.place.empty, nil, n), nil
	}
	return into, xform
}

// stepTable is where each source's positions fall among the steps: C_i(s)
// for the steps from the stream's (or the last trimmed) on, extended as
// readers place rows further ahead. It is safe for concurrent use.
type stepTable struct {
	mu    sync.Mutex
	w     *batching.Walker // at step base + len(cum)/n - 1
	n     int              // sources
	steps int              // the mixture's
	base  int
	cum   []int64 // [j*n + i]: C_i(base + j)
	cnt   []int64 // scratch for the walker
	many  int     // the last runs' length, the next ones' capacity
}

func newStepTable(walk *batching.Walker, steps int) *stepTable {
	w := walk.Clone()
	n := len(w.Cum())
	return &stepTable{w: w, n: n, steps: steps, base: w.Step(), cum: append([]int64(nil), w.Cum()...), cnt: make([]int64, n)}
}

// stepRun is a run of a piece's rows that one step takes: rows [at,
// at+m) of the piece, in step st, where source i's count before it is
// cum (C_i(st)).
type stepRun struct {
	st    int
	cum   int64
	at, m int64
}

// runs returns the steps that take the n positions of source i's
// sequence (on every slice alike) from pos on, in order, each with the
// rows it takes, and every source's count in each (counts[j*n_src+s] for
// runs[j]); past where some lie past the mixture's last step (the runs
// end there).
func (t *stepTable) runs(i int, pos, n int64) (runs []stepRun, counts []int64, past bool, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	ns := t.n
	// The table extended past the run's last position, or to the
	// mixture's end.
	last := len(t.cum)/ns - 1 // steps known: base .. base+last-1
	for t.cum[last*ns+i] < pos+n && t.base+last < t.steps {
		if err := t.w.Next(t.cnt); err != nil {
			return nil, nil, false, err
		}
		t.cum = append(t.cum, t.w.Cum()...)
		last++
	}
	// The first j with C_i(base+j+1) > pos.
	j := sort.Search(last, func(j int) bool { return t.cum[(j+1)*ns+i] > pos })
	if j < last && t.cum[j*ns+i] > pos {
		return nil, nil, false, fmt.Errorf("position %d of source %d is before step %d, where the table starts (internal error)", pos, i, t.base)
	}
	runs, counts = make([]stepRun, 0, t.many+1), make([]int64, 0, (t.many+1)*ns)
	defer func() { t.many = len(runs) }()
	for at := int64(0); at < n; j++ {
		if j >= last {
			return runs, counts, true, nil
		}
		lo, hi := t.cum[j*ns+i], t.cum[(j+1)*ns+i]
		if hi <= pos+at {
			continue // a step that takes none of source i
		}
		m := min(n-at, hi-(pos+at))
		runs = append(runs, stepRun{st: t.base + j, cum: lo, at: at, m: m})
		for s := range ns {
			counts = append(counts, t.cum[(j+1)*ns+s]-t.cum[j*ns+s])
		}
		at += m
	}
	return runs, counts, false, nil
}

// trim forgets the steps before st (sent: no reader places rows there).
func (t *stepTable) trim(st int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if drop := st - t.base; drop >= 1024 && drop < len(t.cum)/t.n {
		t.cum = append(t.cum[:0], t.cum[drop*t.n:]...)
		t.base = st
	}
}
