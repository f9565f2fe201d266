package feed

import (
	"fmt"
	"runtime"
	"sort"
	"sync/atomic"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/meshfeed/meshfeed/batching"
	"github.com/meshfeed/meshfeed/loader"
)

// docChunk is the documents of one read of a concatenated slice, tokenized
// by its reader (concatRead): document first+i's tokens
// ids[offs[i]:offs[i+1]], viewed in list, which holds them.
type docChunk struct {
	first int64
	ids   []int32
	offs  []int32
	list  *array.List
}

// end returns the stream position past c's last document.
func (c *docChunk) end() int64 { return c.first + int64(len(c.offs)-1) }

// concatIDs is the schema of the records a concatenated slice's reader
// returns: the ids of each kept row's text.
var concatIDs = arrow.NewSchema([]arrow.Field{{Name: "ids", Type: arrow.ListOf(arrow.PrimitiveTypes.Int32), Nullable: true}}, nil)

// concatRead is the work a concatenated slice's reader does on each record
// it decodes (loader.WithReaderTransform), ahead of the steps that need
// it: take the segment's kept rows (or its rows of the row group), then
// tokenize the text column into a record of concatIDs. Read k is refs[k]
// for segs[k]; ready counts the reads done. It runs up to workers at once, each encoding on workers /
// (the number running) goroutines, as prepareRead does.
func (s *concatStream) concatRead(refs []loader.RowGroupRef, segs []batching.Segment, ready *atomic.Int32, workers int) loader.Transform {
	var running atomic.Int32
	return func(k int, ref loader.RowGroupRef, rec arrow.RecordBatch) (arrow.RecordBatch, error) {
		w := max(1, workers/int(running.Add(1)))
		defer running.Add(-1)
		defer ready.Add(1)
		want, seg := refs[k], segs[k]
		if sel := s.pl.selection(seg.RowGroup); sel != nil {
			var err error
			if rec, err = takeKept(rec, sel, seg, want, true, s.mem); err != nil {
				return nil, textErrorAt(s.pl.ds, ref, s.cp.col.name, err)
			}
			want = loader.RowGroupRef{} // rec now holds exactly the segment's rows
		}
		defer rec.Release()
		col := rec.Column(s.cp.text)
		if want.End > want.Start && rec.NumRows() != want.End-want.Start {
			col = array.NewSlice(col, want.Start, want.End)
			defer col.Release()
		}
		ids, err := TokenizeStrings(s.cp.tok, col, s.cp.col.addSpecial, w, s.mem)
		if err != nil {
			return nil, textErrorAt(s.pl.ds, ref, s.cp.col.name, err)
		}
		defer ids.Release()
		return array.NewRecordBatch(concatIDs, []arrow.Array{ids}, int64(ids.Len())), nil
	}
}

// readerWorkers returns the decode (and tokenize) goroutines of each of a
// concatenated stream's slices: an even share of the cores.
func (s *concatStream) readerWorkers() int {
	return max(runtime.GOMAXPROCS(0)/len(s.pl.cfg.slices), 1)
}

// chunk returns the held chunk with the document at stream position raw.
func (sc *concatSlice) chunk(raw int64) *docChunk {
	i := sort.Search(len(sc.chunks), func(i int) bool { return sc.chunks[i].end() > raw })
	return &sc.chunks[i]
}

// doc returns the tokens of run r's document.
func (sc *concatSlice) doc(r batching.DocRun) []int32 {
	c := sc.chunk(r.Raw)
	i := r.Raw - c.first
	return c.ids[c.offs[i]:c.offs[i+1]]
}

// docLen returns the tokens of the document at stream position raw.
func (sc *concatSlice) docLen(raw int64) int64 {
	c := sc.chunk(raw)
	i := raw - c.first
	return int64(c.offs[i+1] - c.offs[i])
}

// hold adds rec's documents (a record of concatIDs, which it takes over)
// after those held.
func (sc *concatSlice) hold(rec arrow.RecordBatch) error {
	defer rec.Release()
	list, ok := rec.Column(0).(*array.List)
	if !ok || rec.NumCols() != 1 {
		return fmt.Errorf("stream %d: reader returned %s, not the tokenized ids (internal error)", sc.d, rec.Schema())
	}
	list.Retain()
	n, off := list.Len(), list.Data().Offset()
	sc.chunks = append(sc.chunks, docChunk{first: sc.held, list: list,
		ids: list.ListValues().(*array.Int32).Int32Values(), offs: list.Offsets()[off : off+n+1]})
	sc.held += int64(n)
	return nil
}

// drop releases the chunks whose documents are all before stream position
// before.
func (sc *concatSlice) drop(before int64) {
	k := 0
	for k < len(sc.chunks) && sc.chunks[k].end() <= before {
		sc.chunks[k].list.Release()
		k++
	}
	if k > 0 {
		sc.chunks = append(sc.chunks[:0], sc.chunks[k:]...)
	}
}

// release releases every chunk held.
func (sc *concatSlice) release() {
	sc.drop(sc.held + 1)
}
